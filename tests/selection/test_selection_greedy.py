"""Greedy: fast (rank-1 / lazy) and reference pick identical items; DiSF Algorithm 1 batching."""

import numpy as np
import pytest
import torch

from curation.selection import select
from curation.selection.budget import allocate_budget
from curation.selection.config import parse_selection_config
from curation.selection.greedy import select_greedy
from curation.selection.objectives import Objective, derive_seed, disf
from curation.selection.synthetic import clustered_unit_vectors


@pytest.fixture(scope="module")
def data():
    emb, quality, _ = clustered_unit_vectors(240, 24, n_clusters=6, duplicate_fraction=0.0, seed=5)
    return emb, quality


@pytest.mark.parametrize(
    "cfg",
    [
        {"diversity": "pws", "lam": 0.0},
        {"diversity": "pws", "lam": 0.5},
        {"diversity": "fl", "lam": 0.0, "fl_reference_size": 64},
        {"diversity": "fl", "lam": 0.3, "standardize": False},
        {"diversity": "fl_sum", "lam": 0.5},
        {"diversity": "disf_block", "lam": 0.0, "batch_size": 100},  # lazy heap
        {"diversity": "disf_block", "lam": 0.4, "batch_size": 100},  # eager rank-1 with quality
        {"diversity": "disf", "lam": 0.4, "batch_size": 100},  # closed-form Gram, per-set standardisation
        {"diversity": "pws", "lam": 0.2, "first_pick": "argmax", "standardize": False},
    ],
)
def test_fast_equals_reference(data, cfg):
    emb, q = data
    kw = dict(quality=q, embeddings=emb, budget=30, seed=11)
    fast = select("greedy", config={**cfg, "impl": "fast"}, **kw)
    ref = select("greedy", config={**cfg, "impl": "reference"}, **kw)
    np.testing.assert_array_equal(fast.indices, ref.indices)


def test_greedy_disf_follows_algorithm_1(data):
    emb, q = data
    sel = select("greedy", quality=q, embeddings=emb, budget=24, config={"diversity": "disf", "lam": 0.0, "batch_size": 100}, seed=0)
    # contiguous batches [0,100), [100,200), [200,240) with budgets proportional to their sizes
    counts = [int(((sel.indices >= a) & (sel.indices < a + 100)).sum()) for a in (0, 100, 200)]
    assert counts == allocate_budget(24, [100, 100, 40]) == [10, 10, 4]
    assert list(sel.history["batch"]) == [0, 1, 2]
    # a different seed changes the random first pick and hence the selection
    other = select("greedy", quality=q, embeddings=emb, budget=24, config={"diversity": "disf", "lam": 0.0, "batch_size": 100}, seed=1)
    assert not np.array_equal(sel.indices, other.indices)


def test_greedy_disf_picks_are_brute_force_argmins(data):
    # DiSF Eq. 7: after the random first pick, each pick minimises ||C||_F of the selection
    emb, q = data
    obj = Objective(torch.tensor(emb, dtype=torch.float64), torch.tensor(q), diversity="disf", lam=0.0)
    cfg = parse_selection_config("greedy", {"diversity": "disf", "lam": 0.0, "batch_size": 240})
    ids, _, _ = select_greedy(obj, 4, cfg, seed=0)
    first = int(np.random.default_rng(derive_seed(0, 20)).integers(240))  # the seeded first pick
    chosen = [first]
    for _ in range(3):
        rest = [i for i in range(240) if i not in chosen]
        chosen.append(rest[int(np.argmax([disf(emb, q, chosen + [r]) for r in rest]))])
    np.testing.assert_array_equal(ids, np.sort(chosen))


def test_greedy_lam_one_is_topk_quality(data):
    emb, q = data
    sel = select("greedy", quality=q, embeddings=emb, budget=20, config={"lam": 1.0, "first_pick": "argmax"}, seed=0)
    np.testing.assert_array_equal(sel.indices, np.sort(np.argsort(-q)[:20]))


def test_allocate_budget_is_exact_and_proportional():
    assert allocate_budget(10, [3, 3, 4]) == [3, 3, 4]
    assert allocate_budget(7, [1024, 1024, 100]) == [4, 3, 0]  # remainders .337 .337 .326
    for budget in range(0, 50):
        parts = allocate_budget(budget, [17, 5, 30, 1])
        assert sum(parts) == budget and all(0 <= p <= s for p, s in zip(parts, [17, 5, 30, 1]))


@pytest.mark.parametrize("diversity", ["pws", "fl", "fl_sum", "disf_block", "disf"])
def test_fast_equals_reference_on_small_random_problems(diversity):
    # small blocks make every constant of the rank-1 updates matter: the 1/(N - 1) of disf_block at N = 14, the
    # 1/(k + 1) of the set means at k = 1..4, raw (unstandardised) terms so lam trades them off as Eq. 12 says;
    # a zero embedding (a unit row of zeros) among the candidates; quality on three scales, so that neither term
    # always dominates; the first pick random or by argmax
    for seed in range(24):
        rng = np.random.default_rng(seed)
        emb = rng.normal(size=(14, 4 if seed % 5 else 1))  # one dimension: ||z||^4 near 0 for some items
        emb[3] = 0.0
        q = rng.uniform(0, [0.1, 1.0, 10.0][seed % 3], 14)
        cfg = {"diversity": diversity, "lam": [0.2, 0.5, 0.8][seed % 4 % 3], "standardize": False, "batch_size": 14,
               "fl_reference_size": 9, "first_pick": "random" if diversity == "disf" else ["random", "argmax"][seed % 2]}
        kw = dict(quality=q, embeddings=emb, budget=5, seed=seed)
        fast = select("greedy", config={**cfg, "impl": "fast"}, **kw)
        ref = select("greedy", config={**cfg, "impl": "reference"}, **kw)
        np.testing.assert_array_equal(fast.indices, ref.indices, err_msg=f"seed {seed}")
        # 3 of a block of 4 (the random first pick is often the argmax: it must not be taken twice),
        # and one item of a block of 2, where the block term's 1/(N - 1) is 1
        for n, budget in ((4, 3), (2, 1)):
            if diversity == "disf" and budget < 2:
                continue  # disf needs sets of 2
            small = dict(quality=q[:n], embeddings=emb[:n] + 1.0, budget=budget, seed=seed)
            picks = [select("greedy", config={**cfg, "batch_size": n, "impl": impl}, **small).indices
                     for impl in ("fast", "reference")]
            np.testing.assert_array_equal(picks[0], picks[1], err_msg=f"seed {seed}, block of {n}")
            assert len(set(picks[0].tolist())) == budget


def test_disf_block_with_lam_one_is_top_k_quality_and_lazy_counts_its_refreshes(data):
    emb, q = data
    top = select("greedy", quality=q, embeddings=emb, budget=12, seed=0,
                 config={"diversity": "disf_block", "lam": 1.0, "standardize": False, "batch_size": 240,
                         "first_pick": "argmax"})
    np.testing.assert_array_equal(np.sort(top.indices), np.sort(np.argsort(-q)[:12]))
    # lam = 0: the lazy heap refreshes at least one candidate per pick after the first, at most every untaken one
    lazy = select("greedy", quality=q, embeddings=emb, budget=12, seed=0,
                  config={"diversity": "disf_block", "lam": 0.0, "batch_size": 240})
    assert 11 <= lazy.info["evaluations"] <= sum(240 - k for k in range(1, 12))


def test_reference_counts_every_candidate_set_it_evaluates(data):
    # the first pick is random (no evaluation), then pick k evaluates the c - k untaken candidates
    emb, q = data
    sel = select("greedy", quality=q, embeddings=emb, budget=6, seed=1,
                 config={"diversity": "pws", "lam": 0.5, "batch_size": 240, "impl": "reference"})
    assert sel.info["evaluations"] == sum(240 - k for k in range(1, 6))


def test_select_greedy_batches_history_info_and_progress():
    # 10 items in batches of 4 (4, 4, 2): a budget of 7 is allocated 3, 3, 1 (largest remainders, ties to the
    # earlier batch: allocate_budget); each greedy batch has a history row, progress is called per batch
    from curation.selection.config import GreedyConfig
    from curation.selection.greedy import select_greedy

    rng = np.random.default_rng(0)
    emb, q = torch.tensor(rng.normal(size=(10, 3))), torch.tensor(rng.uniform(size=10))
    obj = Objective(emb, q, diversity="pws", lam=0.5)
    calls = []
    cfg = GreedyConfig(diversity="pws", lam=0.5, batch_size=4, impl="reference")
    ids, history, info = select_greedy(obj, 7, cfg, seed=3, progress=lambda i, n: calls.append((i, n)))
    budgets = allocate_budget(7, [4, 4, 2])
    assert len(ids) == 7 and np.array_equal(ids, np.sort(ids)) and ids.dtype == np.int64
    for b, (lo, hi) in zip(budgets, ((0, 4), (4, 8), (8, 10))):
        assert ((ids >= lo) & (ids < hi)).sum() == b  # every batch gives its own share, from its own items
    assert list(history.columns) == ["batch", "candidates", "budget", "evaluations", "wall_time_s"]
    assert history["batch"].tolist() == [0, 1, 2] and history["candidates"].tolist() == [4, 4, 2]
    assert history["budget"].tolist() == budgets
    # the reference evaluates c - k candidates at pick k after a random first pick
    assert history["evaluations"].tolist() == [sum(c - k for k in range(1, b)) for c, b in zip([4, 4, 2], budgets)]
    # seconds since the call started, growing per batch (a few milliseconds here)
    assert (history["wall_time_s"].diff().dropna() >= 0).all() and history["wall_time_s"].between(0, 60).all()
    assert info == {"batch_size": 4, "n_batches": 3, "evaluations": int(history["evaluations"].sum()),
                    "impl": "reference"}
    assert calls == [(1, 3), (2, 3), (3, 3)]
    # the same call again is the same selection (seed 3); seed defaults to 0
    assert np.array_equal(select_greedy(obj, 7, cfg, seed=3)[0], ids)
    assert np.array_equal(select_greedy(obj, 7, cfg)[0], select_greedy(obj, 7, cfg, seed=0)[0])
    # a batch whose share is all of it is taken whole; one with no share is skipped (no row)
    # 9 of 10 in batches of 5: shares 5 and 4, so batch 0 is taken whole and only batch 1 runs greedy
    whole_ids, whole_history, _ = select_greedy(obj, 9, GreedyConfig(diversity="pws", lam=0.5, batch_size=5), seed=0)
    assert np.array_equal(whole_ids[:5], np.arange(5)) and len(whole_ids) == 9
    assert whole_history["batch"].tolist() == [1]
    # 1 of 10 in batches of 4, 4, 2: shares 1, 0, 0 (a share of 0 can only follow the others: allocate_budget
    # breaks ties towards earlier batches and the last batch is the smallest)
    one_ids, one_history, one_info = select_greedy(obj, 1, cfg, seed=0)
    assert len(one_ids) == 1 and one_ids[0] < 4 and one_history["batch"].tolist() == [0]
    tail = select_greedy(obj, 3, GreedyConfig(diversity="pws", lam=0.5, batch_size=4, impl="reference"), seed=0)
    assert tail[1]["budget"].tolist() == allocate_budget(3, [4, 4, 2]) == [1, 1, 1] and len(tail[0]) == 3
    # DiSF's default batch is 1,024 items (DiSF Algorithm 1); other diversities take the block
    assert select_greedy(obj, 3, GreedyConfig(diversity="disf", lam=0.0))[2]["batch_size"] == 1024
    assert select_greedy(obj, 3, GreedyConfig(diversity="pws", lam=0.5))[2]["batch_size"] == 10


def _batch(emb, q, budget, **objective):
    # one greedy batch over the whole block (positions = ids), as select_greedy builds it
    from curation.selection.greedy import _Batch

    obj = Objective(torch.tensor(emb, dtype=torch.float64), torch.tensor(q, dtype=torch.float64), **objective)
    return obj, _Batch(obj, np.arange(len(emb), dtype=np.int64), budget)


def test_lazy_disf_block_heap_trace_by_hand():
    # four points on the axes, block-standardised (population std sqrt(1/2)): z = (+-sqrt 2, 0), (0, +-sqrt 2),
    # so ||z||^4 = 4 for all and z_x . z_y = -2 (opposite), 0 (orthogonal). lam = 0: the lazy heap of
    # Delta_x = 2 g_x + ||z_x||^4, g_x = sum_{u in U} (z_x . z_u)^2, entries (Delta, position).
    # first = 1. Pick 1: pop 0 (stale: g_0 = 4, push 12), pop 1 (taken), pop 2 (stale: g_2 = 0, push 4),
    # pop 2 (fresh) -> 2, two refreshes. Pick 2: pop 3 (stale: g_3 = 0 + 4, push 12), pop 0 (stale: + (z_0 . z_2)^2
    # = 0, push 12), pop 0 (fresh; ties 12 = 12 go to the lower position) -> 0, two more refreshes.
    from curation.selection.greedy import _fast_disf_block

    emb = [[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]
    obj, batch = _batch(emb, [0.0] * 4, 3, diversity="disf_block", lam=0.0)
    _fast_disf_block(batch, 1)
    assert batch.picks == [1, 2, 0]
    assert batch.evaluations == 4
    # the from-scratch objective agrees: -||Z_U^T Z_U||_F / (N - 1) of {1, 0} = -4/3, of {1, 2} = -2 sqrt(2)/3
    vals = obj.disf_block(torch.tensor([[1, 0], [1, 2], [1, 3]]))
    np.testing.assert_allclose(vals.numpy(), [-4 / 3, -2 * np.sqrt(2) / 3, -2 * np.sqrt(2) / 3], rtol=1e-12)


def test_eager_disf_block_with_quality_starts_from_an_empty_set():
    # d = 1, values (0, 0, 1, -1): population std sqrt(1/2), z = (0, 0, sqrt 2, -sqrt 2), N - 1 = 3.
    # lam = 0.5 (raw terms): joint(U) = 0.5 mean q(U) - 0.5 ||Z_U^T Z_U||_F / 3. From first = 0 (z = 0):
    # {0, 1}: 0 - 0 = 0; {0, 2}: 0.5 * 0.5 - 0.5 * 2 / 3 = -1/12; {0, 3}: -1/3 -> item 1
    # (||C||_F^2 starts at 0: a running value of 1 would flatten the penalty to sqrt(1 + 4) - 1 and take 2)
    from curation.selection.greedy import _fast_disf_block

    emb, q = [[0.0], [0.0], [1.0], [-1.0]], [0.0, 0.0, 1.0, 0.0]
    obj, batch = _batch(emb, q, 2, diversity="disf_block", lam=0.5)
    _fast_disf_block(batch, 0)
    assert batch.picks == [0, 1]
    sets = torch.tensor([[0, 1], [0, 2], [0, 3]])
    joint = obj.combine(obj.terms(sets), 2, 4)
    np.testing.assert_allclose(joint.numpy(), [0.0, -1 / 12, -1 / 3], atol=1e-12)


def test_disf_official_and_fast_break_ties_to_the_lowest_position_from_position_0():
    # a set standardised over itself has z = 0 in a dimension where all its rows agree. Sets of 2: z = +-1/sqrt(2)
    # where the rows differ, so sum_{k != l} C_kl^2 = 2 if they differ in both coordinates, 0 if they share one.
    # From item 0 (first=None: position 0) = (0, 0): items 2, 3 and 5 (identical rows) share the first coordinate
    # and tie at exactly 0, items 1 and 4 score 2 -> item 2, the lowest of the tie. Then U = {0, 2} keeps the first
    # coordinate constant with items 3 and 5 (criterion 0 again, tie -> 3), while items 1 and 4 make it vary and
    # correlate with the second ((0, 0, 1) vs (0, 3, 2) and (0, 0, 2) vs (0, 3, 1): r = +-1/sqrt(28), criterion 1/14).
    from curation.selection.greedy import _fast_disf, _official_disf, _reference, disf_offdiag_all

    emb = [[0.0, 0.0], [1.0, 2.0], [0.0, 3.0], [0.0, 3.0], [2.0, 1.0], [0.0, 3.0]]
    np.testing.assert_allclose(disf_offdiag_all(torch.tensor(emb), [0])[1:].numpy(), [2, 0, 0, 2, 0], atol=1e-6)
    off = disf_offdiag_all(torch.tensor(emb), [0, 2])[[1, 3, 4, 5]].numpy()
    np.testing.assert_allclose(off[[1, 3]], 0.0, atol=1e-6)
    np.testing.assert_allclose(off[[0, 2]], 1 / 14, rtol=1e-6)
    for impl in (_official_disf, _fast_disf):
        _, batch = _batch(emb, [0.0] * 6, 3, diversity="disf", lam=0.0)
        impl(batch, None)
        assert batch.picks == [0, 2, 3], impl.__name__
        assert batch.evaluations == 5 + 4, impl.__name__  # every untaken candidate once per pick
    # the float32 screen of the fast form re-scores exactly the tied candidates in float64: {2, 3, 5}, then {3, 5}
    assert batch.rescored == 3 + 2
    # with lam = 0.5 and no quality the ranking is by ||C||_F: sets of 2 have ||C||_F = number of differing
    # coordinates (1 for items 2, 3, 5; 2 for items 1, 4), then 1 for items 3, 5 against ~1.44: the same ties,
    # the same picks (the reference evaluates every set from scratch) and the same re-scores
    for impl in (_reference, _fast_disf):
        _, batch = _batch(emb, [0.0] * 6, 3, diversity="disf", lam=0.5)
        impl(batch, 0)
        assert batch.picks == [0, 2, 3], impl.__name__
    assert batch.rescored == 3 + 2


def test_official_disf_refuses_to_pick_when_no_candidate_is_below_its_sentinel():
    # the official loop keeps the first candidate strictly below 10^4 (criterion / 10^4); a NaN feature in the
    # first pick makes every candidate set's criterion NaN, so none is below: it raises instead of taking one
    from curation.selection.greedy import _official_disf

    emb = [[float("nan"), 0.0], [1.0, 2.0], [0.0, 3.0], [2.0, 1.0]]
    _, batch = _batch(emb, [0.0] * 4, 2, diversity="disf", lam=0.0)
    with pytest.raises(RuntimeError, match=r"^official DiSF criterion above its 10000 sentinel; cannot pick$"):
        _official_disf(batch, 0)
    assert batch.picks == [0]


def _offdiag_brute_force(x):
    # sum_{k != l} C_kl^2 of the rows x, standardised over themselves (unbiased variance, official eps), float64
    z = (x - x.mean(0)) / np.sqrt(x.var(0, ddof=1) + 1e-8)
    c = z.T @ z / (len(x) - 1)
    return float((c * c).sum() - (np.diagonal(c) ** 2).sum())


def test_fast_disf_picks_the_brute_force_argmin_with_a_feature_constant_over_part_of_the_block():
    # a 0/1 feature keeps C_kk = 0 while the selection agrees on it: candidates that keep it constant and
    # candidates that make it vary differ by ~1 in ||C||_F^2 and in sum_k C_kk^2 but not in the official
    # criterion (the off-diagonal sum), which alone decides; oracle: the float64 brute-force argmin, pick for pick
    # (not the float32 official loop: sets of 2 tie up to the eps terms, below float32 resolution)
    from curation.selection.greedy import _fast_disf

    for seed in range(60):
        rng = np.random.default_rng(seed)
        emb = rng.normal(size=(10, 3))
        emb[:, 0] = (rng.uniform(size=10) < 0.3) * 1.0
        budget, first = int(rng.integers(3, 6)), int(rng.integers(10))
        _, batch = _batch(emb, [0.0] * 10, budget, diversity="disf", lam=0.0)
        _fast_disf(batch, first)
        chosen = [first]
        while len(chosen) < budget:
            rest = [j for j in range(10) if j not in chosen]
            chosen.append(rest[int(np.argmin([_offdiag_brute_force(emb[chosen + [j]]) for j in rest]))])
        assert batch.picks == chosen, f"seed {seed}"


def test_fast_disf_with_quality_on_tiny_features_equals_reference():
    # features of scale 1e-4: per-set variances ~1e-8, comparable to the official eps, so C_kk = v / (v + eps)
    # and ||C||_F^2 fall well below 1 and differ between candidates; the from-scratch reference is the oracle
    from curation.selection.greedy import _fast_disf, _reference

    for seed in range(4):
        rng = np.random.default_rng(seed)
        emb, q = rng.normal(size=(10, 2)) * 1e-4, rng.uniform(size=10)
        budget, first = int(rng.integers(3, 6)), int(rng.integers(10))
        picks = []
        for impl in (_reference, _fast_disf):
            _, batch = _batch(emb, q, budget, diversity="disf", lam=0.5)
            impl(batch, first)
            picks.append(batch.picks)
        assert picks[0] == picks[1], f"seed {seed}"


def test_fast_disf_with_lam_one_is_top_quality_after_the_first_pick():
    # lam = 1: the disf weight is 0, so after the (random) first pick the greedy takes the best quality, ties to
    # the lower position (positions 3 and 6 share the third-best quality; budget 4 keeps only 3)
    from curation.selection.greedy import _fast_disf

    emb = np.random.default_rng(0).normal(size=(8, 3))
    q = [0.1, 0.9, 0.2, 0.5, 0.8, 0.0, 0.5, 0.3]
    _, batch = _batch(emb, q, 4, diversity="disf", lam=1.0)
    _fast_disf(batch, 5)
    assert batch.picks == [5, 1, 4, 3]


def test_small_variance_splits_the_dimensions_between_the_sum_and_the_bound():
    # every dimension is either summed exactly (eps / alpha_k > 1e-4: a constant one, alpha = eps, or ratio 0.1)
    # or bounded by (eps / alpha_k)^2 (ratios 1e-8, exactly 1e-4 on the threshold, 2e-8), never both
    from curation.selection.greedy import _small_variance
    from curation.selection.objectives import DISF_EPS

    # ratio 1e-3 (index 5) is summed exactly, not also bounded: the slack once masked on the squared ratio
    # (ratio.square_()[ratio <= 1e-4], i.e. ratio <= 1e-2) and counted it in both
    alpha = torch.tensor([DISF_EPS, 1.0, 1e-4, 0.5, 1e-7, DISF_EPS / 1e-3], dtype=torch.float64)
    assert float(DISF_EPS / alpha[2]) == 1e-4
    small, slack = _small_variance(alpha)
    assert small.tolist() == [0, 4, 5]
    assert slack == pytest.approx(1e-16 + 1e-8 + 4e-16, rel=1e-12)


def test_moments_from_is_the_smallest_size_with_twice_d_pair_rows():
    # the smallest m with m (m + 1) / 2 >= 2 d, by search; d = 3, 5, 14, 18 make 2 d itself triangular
    from curation.selection.greedy import _moments_from

    for d in range(1, 200):
        assert _moments_from(d) == next(m for m in range(1, 100) if m * (m + 1) / 2 >= 2 * d), d
    assert [_moments_from(d) for d in (3, 5, 14, 18)] == [3, 4, 7, 8]


def test_greedy_batch_weighs_block_scaled_disf_by_its_own_population():
    # disf_scale="block" (raw terms): the disf term of a set of S drawn from c items is weighed (S - 1) / (c - 1);
    # a greedy batch draws from its c candidates, not from the whole block
    from curation.selection.greedy import _Batch

    rng = np.random.default_rng(0)
    obj = Objective(torch.tensor(rng.normal(size=(30, 3))), torch.tensor(rng.uniform(size=30)), diversity="disf",
                    lam=0.4, disf_scale="block")
    batch = _Batch(obj, np.arange(10, 20, dtype=np.int64), 4)
    assert batch.w_q == 0.4 and batch.w_d == pytest.approx(0.6 * 3 / 9, rel=1e-12)
