"""DVRL (Yoon et al. 2020, as DATAMASK App. A.8 runs it): the estimator, the REINFORCE loop and select_dvrl.

Every test calls DVRL itself (no module fixture), on a handful of synthetic items, so that a mutation
runner charges each call to the test that checks it. Expected values come from hand derivations:

* n orthonormal items: every set of S of them has PWS -||sum u||^2 / (2 S^2) = -1/(2 S), the same for all
  sets of one size, so a term standardised against random sets of that size is exactly 0;
* quality 2^i and lam = 1: the raw reward is the mean quality of the chosen set, so
  round(reward * selected) is the bitmask of the chosen items, which makes the training draws visible;
* keep ratio 1 - 1e-9: the output bias logit(1 - 1e-9) ~ 20.7 saturates the sigmoid, the clamp holds p at
  1 - 1e-6 and every item of a batch is drawn (a miss has probability 1e-6 per item).
"""

import logging
import math
import time

import numpy as np
import pytest
import torch

from curation.selection.config import DvrlConfig
from curation.selection.dvrl import DataValueEstimator, _top, predict, select_dvrl, train_dvrl
from curation.selection.objectives import Objective

ALL_IN = 1 - 1e-9  # a keep ratio that draws every item of a batch (see the module doc)
COLUMNS = ["step", "reward", "baseline", "mean_probability", "selected", "wall_time_s"]


def _cfg(**kw) -> DvrlConfig:
    return DvrlConfig(**{"iterations": 5, "batch_size": 8, "hidden_dim": 8, "history_every": 1, **kw})


def _bitmask_objective(n: int = 16, d: int = 4, seed: int = 0) -> Objective:
    """Quality 2^i, reward = raw mean quality (lam = 1): reward * selected encodes the chosen set."""
    emb = torch.from_numpy(np.random.default_rng(seed).normal(size=(n, d)))
    return Objective(emb, 2.0 ** torch.arange(n, dtype=torch.float64), lam=1.0, standardize=False)


def _chosen_sets(history) -> list[frozenset]:
    sets = []
    for reward, selected in zip(history["reward"], history["selected"]):
        mask = round(reward * selected)
        items = frozenset(i for i in range(mask.bit_length()) if mask >> i & 1)
        assert len(items) == selected  # the decoding is exact only if the bits add up
        sets.append(items)
    return sets


def _orthonormal_objective(n: int = 8, *, lam: float, standardize: bool) -> Objective:
    """n orthonormal items of equal quality: every set of S items has PWS -1/(2 S) and quality 1."""
    return Objective(torch.eye(n, dtype=torch.float64), torch.ones(n, dtype=torch.float64), diversity="pws",
                     lam=lam, standardize=standardize, seed=0)


# --- the estimator ---


def test_the_estimator_is_three_linear_layers_with_relu_between_them():
    # DVRL's data value estimator: Linear(d, h) - ReLU - Linear(h, h) - ReLU - Linear(h, 1), then a sigmoid
    net = DataValueEstimator(5, 7).net
    assert [type(m) for m in net] == [torch.nn.Linear, torch.nn.ReLU, torch.nn.Linear, torch.nn.ReLU,
                                      torch.nn.Linear]
    assert [(m.in_features, m.out_features) for m in net if isinstance(m, torch.nn.Linear)] == [(5, 7), (7, 7),
                                                                                              (7, 1)]


def test_the_estimator_maps_one_embedding_to_a_scalar_and_sets_of_embeddings_to_a_matrix():
    model = DataValueEstimator(3, 4)
    one = model(torch.randn(3)).detach()
    assert one.shape == () and 0 < float(one) < 1
    assert model(torch.randn(2, 5, 3)).shape == (2, 5)
    assert model(torch.randn(2, 1, 3)).shape == (2, 1)  # a set of one item is still a set


def test_top_breaks_ties_by_the_lower_index():
    # 20 equal scores: an unstable sort (CPU torch from 17 items on) returns them in another order
    scores = torch.cat([torch.zeros(20), torch.tensor([1.0])])
    assert _top(scores, 11).tolist() == [20] + list(range(10))


# --- train_dvrl ---


def test_the_output_bias_starts_at_the_logit_of_the_keep_ratio():
    # no iteration: the model is the initial one, its output bias is logit(0.2) = log(0.2 / 0.8) = log(1/4)
    model, history = train_dvrl(_bitmask_objective(), torch.arange(16), 0.2, _cfg(iterations=0), seed=0)
    assert float(model.net[-1].bias.detach()) == pytest.approx(math.log(0.25), abs=1e-6)
    assert history.empty


def test_history_records_every_history_every_steps_and_the_last_one():
    # 7 iterations, a row every 3: steps 3, 6 and the last, 7; every item of the batch of 4 is drawn
    t0 = time.perf_counter()
    _, history = train_dvrl(_bitmask_objective(), torch.arange(16), ALL_IN,
                            _cfg(iterations=7, batch_size=4, history_every=3), seed=0)
    elapsed = time.perf_counter() - t0
    assert list(history.columns) == COLUMNS
    assert history["step"].tolist() == [3, 6, 7]
    assert history["selected"].tolist() == [4, 4, 4]
    np.testing.assert_allclose(history["mean_probability"], 1 - 1e-6, rtol=0, atol=1e-7)  # the clamp
    wall = history["wall_time_s"].to_numpy()
    assert np.all(wall >= 0) and np.all(np.diff(wall) >= 0) and wall[-1] <= elapsed  # seconds since the start


def test_progress_is_called_after_every_iteration():
    calls = []
    train_dvrl(_bitmask_objective(), torch.arange(16), ALL_IN, _cfg(iterations=4),
               seed=0, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_progress_counts_iterations_that_draw_fewer_than_two_items():
    # keep ratio 1e-3, batch 2: almost every draw selects < 2 items, so only the rate penalty steps; those
    # iterations are iterations all the same (a progress bar must reach its total)
    calls = []
    _, history = train_dvrl(_bitmask_objective(), torch.arange(16), 1e-3, _cfg(iterations=6, batch_size=2),
                            seed=0, progress=lambda done, total: calls.append((done, total)))
    assert history.empty  # no reward was computed
    assert calls == [(i, 6) for i in range(1, 7)]


def test_rate_only_iterations_go_on_training():
    # the same rate-only regime: six Adam steps on the rate penalty move the parameters further than one
    obj, ids = _bitmask_objective(), torch.arange(16)
    one, _ = train_dvrl(obj, ids, 1e-3, _cfg(iterations=1, batch_size=2), seed=0)
    six, _ = train_dvrl(obj, ids, 1e-3, _cfg(iterations=6, batch_size=2), seed=0)
    assert not torch.equal(one.net[0].weight, six.net[0].weight)


def test_select_dvrl_passes_progress_to_training():
    calls = []
    select_dvrl(_bitmask_objective(), 4, _cfg(iterations=3), seed=0, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 3), (2, 3), (3, 3)]


def test_the_baseline_is_dvrls_moving_average_of_the_rewards():
    # b <- (T-1)/T b + r/T with T = 4, started at the first reward (so the first advantage is 0); rows are
    # recorded every iteration that computed a reward, and only those update the baseline
    _, history = train_dvrl(_bitmask_objective(), torch.arange(16), 0.5, _cfg(iterations=8, baseline_window=4),
                            seed=0)
    r, b = history["reward"].to_numpy(), history["baseline"].to_numpy()
    assert len(r) >= 5 and len(set(r)) > 1
    expected = [r[0]]
    for reward in r[1:]:
        expected.append(0.75 * expected[-1] + 0.25 * reward)
    np.testing.assert_allclose(b, expected, rtol=1e-12)


def test_training_draws_at_most_batch_size_items_and_only_from_train_ids():
    obj, train_ids = _bitmask_objective(), torch.tensor([1, 3, 4, 8, 9, 12, 14, 15])
    _, history = train_dvrl(obj, train_ids, ALL_IN, _cfg(iterations=6, batch_size=3), seed=0)
    sets = _chosen_sets(history)
    assert [len(s) for s in sets] == [3] * 6
    assert set().union(*sets) <= set(train_ids.tolist())
    # a batch larger than the training items is capped at them: every draw is all 8
    _, history = train_dvrl(obj, train_ids, ALL_IN, _cfg(iterations=2, batch_size=50), seed=0)
    assert _chosen_sets(history) == [frozenset(train_ids.tolist())] * 2


def test_a_draw_of_two_items_is_rewarded():
    # two items are the smallest set with a set objective: batch 2, both drawn, a reward row each iteration
    _, history = train_dvrl(_bitmask_objective(), torch.arange(16), ALL_IN, _cfg(iterations=3, batch_size=2),
                            seed=0)
    assert history["step"].tolist() == [1, 2, 3] and history["selected"].tolist() == [2, 2, 2]


def test_the_seed_picks_the_batches():
    obj, ids = _bitmask_objective(), torch.arange(16)
    runs = [_chosen_sets(train_dvrl(obj, ids, ALL_IN, _cfg(iterations=4, batch_size=4), seed=s)[1])
            for s in (0, 0, 1)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_training_and_selection_leave_the_global_torch_rng_alone_and_repeat_under_a_seed():
    # the Bernoulli draws, batches and random subsets use seeded generators of their own: a run neither
    # reads nor advances the global RNG, so two runs with the same seed agree whatever its state
    obj = _bitmask_objective()
    runs = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        state = torch.get_rng_state()
        indices, history, info = select_dvrl(obj, 5, _cfg(iterations=6, unseen_fraction=0.5), seed=3)
        assert torch.equal(torch.get_rng_state(), state)
        runs.append((indices.tolist(), history.drop(columns="wall_time_s").to_dict("list"), info))
    assert runs[0] == runs[1]


def test_saturated_probabilities_are_clamped_so_the_update_stays_finite():
    # features of norm ~1e4 push the logits far past +-17, where float32's sigmoid is exactly 0 or 1:
    # log(0) = -inf, and 0 * -inf = nan in the log-probability unless p is clamped into (0, 1)
    emb = 1e4 * torch.from_numpy(np.random.default_rng(0).normal(size=(40, 8)))
    obj = Objective(emb, torch.rand(40, dtype=torch.float64, generator=torch.Generator().manual_seed(0)),
                    lam=1.0, standardize=False)
    model, history = train_dvrl(obj, torch.arange(40), 0.5, _cfg(iterations=5, batch_size=40), seed=0)
    p = model(obj.embeddings.float()).detach()
    assert int((p == 0).sum()) >= 2 and int((p == 1).sum()) >= 2  # both ends of the sigmoid are hit
    assert len(history) == 5 and np.isfinite(history[["reward", "baseline", "mean_probability"]].to_numpy()).all()
    assert all(bool(torch.isfinite(w).all()) for w in model.parameters())


def test_a_reward_equal_for_every_set_of_a_size_standardises_to_zero():
    # orthonormal items of equal quality: quality 1 and PWS -1/(2 S) for every set of S items, so against
    # random sets of the same size both terms have std 0 (scale 1) and the standardised reward is 0
    _, history = train_dvrl(_orthonormal_objective(lam=0.5, standardize=True), torch.arange(8), 0.5,
                            _cfg(iterations=8), seed=0)
    assert len(history) >= 4 and len(set(history["selected"])) > 1
    np.testing.assert_allclose(history["reward"], 0.0, atol=1e-12)


def test_the_raw_pws_reward_of_orthonormal_items_is_minus_one_over_twice_the_set_size():
    _, history = train_dvrl(_orthonormal_objective(lam=0.0, standardize=False), torch.arange(8), 0.5,
                            _cfg(iterations=8), seed=0)
    np.testing.assert_allclose(history["reward"], -1 / (2 * history["selected"]), rtol=1e-12)


@pytest.mark.parametrize("seed", range(12))
def test_the_policy_gradient_moves_a_shared_probability_towards_the_drawn_fraction_if_the_reward_beat_the_baseline(
        seed):
    # 40 items with one embedding share one logit z, so mean_i log P(s_i) = f log p + (1 - f) log(1 - p),
    # f the drawn fraction, and its derivative in z is f - p. With no rate penalty the loss is
    # -(r - b) * that, the first step has r = b (zero gradient, Adam does not move) and the second moves
    # z, hence p, in the direction of (r - b) (f - p) (Adam's first real step is -lr sign(gradient)).
    emb = torch.ones(40, 3, dtype=torch.float64)
    quality = torch.rand(40, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    obj = Objective(emb, quality, lam=1.0, standardize=False)
    model, history = train_dvrl(obj, torch.arange(40), 0.5,
                                _cfg(iterations=2, batch_size=40, rate_penalty=0.0, baseline_window=3), seed=seed)
    assert history["step"].tolist() == [1, 2]
    p0 = history["mean_probability"].to_numpy()
    assert p0[0] == p0[1]  # the first step did not move
    advantage = history["reward"].iloc[1] - history["baseline"].iloc[0]
    f = history["selected"].iloc[1] / 40
    p1 = float(predict(model, obj.embeddings)[0])
    assert np.sign(p1 - p0[1]) == np.sign(advantage * (f - p0[1])) != 0


# --- select_dvrl ---


def test_select_dvrl_returns_exactly_the_budget_of_sorted_unique_ids():
    indices, _, info = select_dvrl(_bitmask_objective(), 5, _cfg(iterations=3), seed=0)
    assert indices.dtype == np.int64 and len(np.unique(indices)) == 5 and np.all(np.diff(indices) > 0)
    assert info["seen"] == 16 and info["unseen"] == 0 and info["device"] == "cpu"


def test_select_dvrls_default_seed_is_zero():
    obj, cfg = _bitmask_objective(), _cfg(iterations=4)
    default = select_dvrl(obj, 5, cfg)[1]["reward"].tolist()
    zero, one = (select_dvrl(obj, 5, cfg, seed=s)[1]["reward"].tolist() for s in (0, 1))
    assert default == zero and default != one  # seed 1 draws other batches, so the check can fail


def test_training_sees_only_the_seen_items_and_the_seed_picks_them():
    # 16 items, unseen_fraction 0.5: 8 seen. Keep ratio 15/16 and batch 8 draw (nearly) all of them each
    # iteration, so the items rewarded over 10 iterations are exactly the seen half
    obj = _bitmask_objective()
    seen = []
    for seed in (0, 1, 2):
        _, history, info = select_dvrl(obj, 15, _cfg(iterations=10, unseen_fraction=0.5), seed=seed)
        assert (info["seen"], info["unseen"]) == (8, 8)
        seen.append(frozenset().union(*_chosen_sets(history)))
        assert len(seen[-1]) == 8
    assert len(set(seen)) == 3


@pytest.mark.parametrize(
    "lam, standardize, expected",
    [(0.0, False, lambda k: -1 / (2 * k)),  # raw PWS of any k orthonormal items
     (0.5, True, lambda k: 0.0)],  # standardised against random k-sets, all equally good
)
def test_before_and_after_are_the_objective_of_k_item_sets(lam, standardize, expected):
    # 8 orthonormal items, budget 4, half unseen: each part of 4 is scored on sets of k = 2
    _, _, info = select_dvrl(_orthonormal_objective(lam=lam, standardize=standardize), 4,
                             _cfg(iterations=2, unseen_fraction=0.5), seed=0)
    for key in ("seen_before", "seen_after", "unseen_before", "unseen_after"):
        assert info[key] == pytest.approx(expected(2), abs=1e-12), key


@pytest.mark.parametrize(
    "n, budget, unseen_fraction, keys",
    [
        # k = round(1/8 * 8) = 1: a single item is a subset to score
        (8, 1, 0.0, {"seen_before", "seen_after"}),
        # 4 seen, 6 unseen, keep ratio 0.1: k = round(0.4) = 0 seen (skipped), round(0.6) = 1 unseen (scored)
        (10, 1, 0.6, {"unseen_before", "unseen_after"}),
        # 8 seen, 2 unseen, keep ratio 0.9: k = 7 of 8 seen; round(1.8) = 2 = all unseen (random = top: skipped)
        (10, 9, 0.2, {"seen_before", "seen_after"}),
    ],
)
def test_before_and_after_are_reported_for_the_parts_with_1_le_k_lt_part_size(n, budget, unseen_fraction, keys):
    obj = _orthonormal_objective(n, lam=0.0, standardize=False)
    _, _, info = select_dvrl(obj, budget, _cfg(iterations=1, unseen_fraction=unseen_fraction), seed=0)
    assert {k for k in info if k.endswith(("_before", "_after"))} == keys


def test_the_log_line_reports_the_before_and_after_values(caplog):
    caplog.set_level(logging.INFO, logger="curation.selection.dvrl")
    _, _, info = select_dvrl(_orthonormal_objective(lam=0.0, standardize=False), 4,
                             _cfg(iterations=1, unseen_fraction=0.5), seed=0)
    scores = {k: info[k] for k in ("seen_before", "seen_after", "unseen_before", "unseen_after")}
    assert [r.getMessage() for r in caplog.records if r.name == "curation.selection.dvrl"] == [f"dvrl: {scores}"]
