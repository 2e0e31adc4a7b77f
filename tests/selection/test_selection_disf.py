"""DiSF as the paper (seeds/001 Eq. 3-5) and the official code define it, on real MiniLM embeddings.

The oracle is the official algorithm (``impl=official``: ``hunger_select`` /
``cal_corre`` of MediaBrain-SJTU/DiSF re-implemented line for line); the closed-form
``impl=fast`` must pick the same items from the same first pick.
"""

import numpy as np
import pytest
import torch

from curation.selection import select
from curation.selection.config import parse_selection_config
from curation.selection.diagnostics import dominance_scores
from curation.selection.greedy import disf_offdiag_all
from curation.selection.objectives import Objective, disf


def _views(minilm_views, dim):
    head, tail = minilm_views
    return head if dim == 384 else np.concatenate([head, tail], 1)  # 768-d: two real views, concatenated


def test_disf_standardises_over_the_set_itself(minilm_views):
    # DiSF Eq. 3-4: mu / sigma of U itself (official eps = 1e-8), C = Z^T Z / (|U| - 1)
    emb = _views(minilm_views, 384).astype(np.float64)
    idx = np.arange(0, 60, 3)
    x = emb[idx]
    z = (x - x.mean(0)) / np.sqrt(x.var(0, ddof=1) + 1e-8)
    c = z.T @ z / (len(idx) - 1)
    assert disf(emb, None, idx) == pytest.approx(-np.linalg.norm(c, "fro"), rel=1e-9)
    # trace(C) = number of non-constant dimensions (the packaged MiniLM has 3 constant
    # ones; the official eps sends them to z = 0), so minimising ||C||_F spreads the
    # spectrum: sum (lambda - mean)^2 = ||C||_F^2 - tr(C)^2 / d (Lemma 1 with tr(C) = d)
    live = int((x.var(0, ddof=1) > 1e-12).sum())
    assert np.trace(c) == pytest.approx(live, rel=1e-5)
    eig = np.linalg.eigvalsh(c)
    assert ((eig - eig.mean()) ** 2).sum() == pytest.approx(disf(emb, None, idx) ** 2 - live**2 / 384, rel=1e-6)
    # a pure function of the set: the rest of the block does not change its value
    assert disf(emb[:60], None, idx) == pytest.approx(disf(emb, None, idx), rel=1e-12)


def test_closed_form_matches_direct_recomputation(minilm_views):
    x = torch.tensor(_views(minilm_views, 768), dtype=torch.float64)
    picks = [5, 40, 77, 120]
    off = disf_offdiag_all(x, picks)
    for j in (0, 9, 127):
        f = x[picks + [j]]
        f = (f - f.mean(0)) / torch.sqrt(f.var(0) + 1e-8)
        c = f.T @ f / (len(f) - 1)
        assert float(off[j]) == pytest.approx(float((c * c).sum() - (torch.diagonal(c) ** 2).sum()), rel=1e-9)


@pytest.mark.parametrize(("dim", "batch", "budget"), [(384, 64, 12), (768, 128, 8)])
def test_fast_picks_what_the_official_algorithm_picks(minilm_views, dim, batch, budget):
    emb = _views(minilm_views, dim)
    q = np.zeros(len(emb))
    cfg = {"diversity": "disf", "lam": 0.0, "batch_size": batch}
    for seed in (0, 1):
        official = select("greedy", quality=q, embeddings=emb, budget=budget, config={**cfg, "impl": "official"}, seed=seed)
        fast = select("greedy", quality=q, embeddings=emb, budget=budget, config={**cfg, "impl": "fast"}, seed=seed)
        np.testing.assert_array_equal(fast.indices, official.indices)


@pytest.mark.parametrize(("dim", "pairs_per_dim", "budget"), [(384, 0.0, 24), (768, 0.01, 16)])
def test_moment_form_picks_what_the_official_algorithm_picks(minilm_views, monkeypatch, dim, pairs_per_dim, budget):
    # the d x d moment form (_DisfMoments) from the second pick on (pairs_per_dim = 0), or after a
    # switch from the pair rows at |U| = 4 (0.01 * 768 pair rows), must keep the official picks;
    # with 24 of 64 / 16 of 128 kept per batch it is scored at 20 and 12 consecutive picks
    from curation.selection import greedy

    monkeypatch.setattr(greedy, "_PAIRS_PER_DIM", pairs_per_dim)
    assert greedy._moments_from(dim) == (1 if pairs_per_dim == 0 else 4)
    emb = _views(minilm_views, dim)
    q = np.zeros(len(emb))
    cfg = {"diversity": "disf", "lam": 0.0, "batch_size": 64 if dim == 384 else 128}
    for seed in (0, 1):
        official = select("greedy", quality=q, embeddings=emb, budget=budget, config={**cfg, "impl": "official"}, seed=seed)
        fast = select("greedy", quality=q, embeddings=emb, budget=budget, config={**cfg, "impl": "fast"}, seed=seed)
        np.testing.assert_array_equal(fast.indices, official.indices)


def test_crossover_keeps_the_pair_rows_for_small_selections():
    from curation.selection.greedy import _moments_from

    # m (m + 1) / 2 pair rows against 2 d: |U| = 32 at d = 256, 39 at 384, 55 at 768 (measured ~32 / ~38 / ~55)
    assert [_moments_from(d) for d in (256, 384, 768)] == [32, 39, 55]


@pytest.mark.parametrize("pairs_per_dim", [2.0, 0.0])  # default crossover / the moment form from pick 2
def test_fast_equals_reference_with_quality(minilm_views, monkeypatch, pairs_per_dim):
    from curation.selection import greedy

    monkeypatch.setattr(greedy, "_PAIRS_PER_DIM", pairs_per_dim)
    emb = _views(minilm_views, 384)
    q = np.linspace(0.0, 15.0, len(emb))[np.random.default_rng(0).permutation(len(emb))]
    cfg = {"diversity": "disf", "lam": 0.3, "batch_size": 64}
    kw = dict(quality=q, embeddings=emb, budget=10, seed=3)
    fast = select("greedy", config={**cfg, "impl": "fast"}, **kw)
    ref = select("greedy", config={**cfg, "impl": "reference"}, **kw)
    np.testing.assert_array_equal(fast.indices, ref.indices)


def test_greedy_disf_spreads_the_spectrum_more_than_random(minilm_views):
    # DiSF Sec. 2.3: the dominance score (top-k eigenvalue share) of the greedy selection is lower
    emb = _views(minilm_views, 384)
    sel = select("greedy", quality=np.zeros(len(emb)), embeddings=emb, budget=16, config={"diversity": "disf", "lam": 0.0, "batch_size": 128}, seed=0)
    rng = np.random.default_rng(0)
    rand = [dominance_scores(emb[rng.choice(len(emb), 16, replace=False)], (5,))[5] for _ in range(10)]
    assert dominance_scores(emb[sel.indices], (5,))[5] < min(rand)
    obj = Objective(torch.tensor(emb, dtype=torch.float64), torch.zeros(len(emb)), diversity="disf", lam=0.0)
    rand_disf = [float(obj.disf(torch.tensor(rng.choice(len(emb), 16, replace=False)).unsqueeze(0))[0]) for _ in range(10)]
    assert disf(emb, None, sel.indices) > max(rand_disf)


def test_official_is_refused_outside_pure_disf():
    with pytest.raises(ValueError, match="impl"):
        parse_selection_config("greedy", {"impl": "official", "diversity": "pws", "lam": 0.0})
    with pytest.raises(ValueError, match="impl"):
        parse_selection_config("greedy", {"impl": "official", "diversity": "disf", "lam": 0.5})
    with pytest.raises(ValueError, match="first_pick"):
        parse_selection_config("greedy", {"diversity": "disf", "first_pick": "argmax"})


@pytest.mark.parametrize("dim", [384, 768])
def test_float32_screen_error_is_far_inside_its_bound(minilm_views, dim):
    # _fast_disf re-scores in float64 every candidate within _SCREEN_REL of the best;
    # that is exact only if the incremental float32 screen's error stays below the bound,
    # with margin, and its float64 re-score equals the from-scratch closed form
    from curation.selection.greedy import _SCREEN_REL, _disf_terms, _DisfScreen

    x32 = torch.tensor(_views(minilm_views, dim))
    x = x32.double()
    screen = _DisfScreen(x32, 16)
    picks = []
    for j in [3, 50, 97, *range(0, 120, 8)][:15]:
        if j in picks:
            continue
        picks.append(j)
        screen.add(j)
        if len(picks) not in (1, 3, 14):
            continue
        f64, d64 = _disf_terms(x, x[picks])
        f32, d32 = screen.scores()
        cand = torch.ones(len(x), dtype=torch.bool)
        cand[picks] = False  # a pick is never its own candidate (a duplicate row has zero variance)
        rel = (f32 - f64).abs()[cand] / f64[cand]
        assert float(rel.max()) < _SCREEN_REL / 10
        assert float((d32 - d64).abs()[cand].max()) < 1e-3 + screen.diag2_slack
        fe, de = screen.exact(torch.nonzero(cand).squeeze(1))
        assert torch.allclose(fe, f64[cand], rtol=1e-10) and torch.allclose(de, d64[cand], rtol=1e-12)
        off = disf_offdiag_all(x, picks)
        assert torch.allclose(f64 - d64, off, rtol=1e-12)


@pytest.mark.parametrize("dim", [384, 768])
def test_moment_form_equals_the_pair_form(minilm_views, dim):
    # _DisfMoments (d x d moments of U) against the from-scratch Gram closed form: float32 screen
    # inside its bound with margin, float64 re-score equal, for |U| from 1 to 60
    from curation.selection.greedy import _SCREEN_REL, _disf_terms, _DisfMoments

    x32 = torch.tensor(_views(minilm_views, dim))
    x = x32.double()
    moments = _DisfMoments(x32)
    picks = [int(j) for j in np.random.default_rng(dim).permutation(len(x))[:60]]
    for i, j in enumerate(picks):
        moments.add(j)
        if i + 1 not in (1, 2, 7, 40, 60):
            continue
        f64, d64 = _disf_terms(x, x[picks[: i + 1]])
        f32, d32 = moments.scores()
        cand = torch.ones(len(x), dtype=torch.bool)
        cand[picks[: i + 1]] = False
        assert float(((f32 - f64).abs()[cand] / f64[cand]).max()) < _SCREEN_REL / 10
        assert float((d32 - d64).abs()[cand].max()) < 1e-3 + moments.diag2_slack
        fe, de = moments.exact(torch.nonzero(cand).squeeze(1))
        assert torch.allclose(fe, f64[cand], rtol=1e-10) and torch.allclose(de, d64[cand], rtol=1e-12)


def test_hutchinson_estimate_is_unbiased_for_the_squared_norm(minilm_views):
    # DataMask's disf_estimator=hutchinson: the mean of the estimates of -||C(U)||_F^2 over
    # independent probe draws equals the exact value (within 4 standard errors), on real embeddings
    emb = torch.tensor(_views(minilm_views, 384), dtype=torch.float64)
    idx = torch.stack([torch.arange(0, 80, 2), torch.arange(1, 121, 3)])  # two sets of 40
    exact = Objective(emb, torch.zeros(len(emb)), diversity="disf").disf(idx).square() * -1
    obj = Objective(emb, torch.zeros(len(emb)), diversity="disf", disf_probes=32)
    draws = []
    for i in range(60):
        obj.disf_probe_seed = i
        draws.append(obj.disf(idx))
    draws = torch.stack(draws)  # (60, 2)
    se = draws.std(0) / np.sqrt(len(draws))
    assert torch.all((draws.mean(0) - exact).abs() < 4 * se)
    assert torch.all(se < 0.02 * exact.abs())  # and the estimate is informative at 32 probes
    # the same probe seed gives the same estimate (a resumed DataMask run redraws the same probes)
    obj.disf_probe_seed = 3
    torch.testing.assert_close(obj.disf(idx), draws[3])


def test_datamask_with_hutchinson_steps_reports_the_exact_objective(minilm_views):
    emb = _views(minilm_views, 384)
    cfg = {"diversity": "disf", "lam": 0.0, "steps": 6, "group_size": 8, "batch_ratio": 0.5, "history_every": 3,
           "disf_estimator": "hutchinson", "disf_probes": 4}
    sel = select("datamask", quality=np.zeros(len(emb)), embeddings=emb, budget=20, config=cfg, seed=0)
    last = sel.history.iloc[-1]
    assert last["mask"] == "returned"
    assert last["diversity"] == pytest.approx(disf(emb, None, sel.indices), rel=1e-5)  # exact -||C||_F
    with pytest.raises(ValueError, match="disf_estimator"):
        parse_selection_config("datamask", {"disf_estimator": "sketch"})


def test_datamask_hutchinson_resumes_to_the_uninterrupted_selection(minilm_views, tmp_path):
    # probes are seeded per step (and per size for the term statistics), so a run resumed from a
    # checkpoint draws the probes the uninterrupted run drew
    emb = _views(minilm_views, 384)
    q = np.linspace(0.0, 15.0, len(emb))
    cfg = {"diversity": "disf", "lam": 0.5, "standardize": True, "scale_samples": 8, "steps": 10, "group_size": 8,
           "batch_ratio": 0.5, "disf_estimator": "hutchinson", "disf_probes": 4}
    plain = select("datamask", quality=q, embeddings=emb, budget=20, config=cfg, seed=1)
    ckpt = {**cfg, "checkpoint_every": 4, "checkpoint_dir": str(tmp_path)}
    select("datamask", quality=q, embeddings=emb, budget=20, config=ckpt, seed=1)
    (tmp_path / "block_00000.done.pt").unlink()  # as if killed after the step-8 checkpoint
    resumed = select("datamask", quality=q, embeddings=emb, budget=20, config={**ckpt, "resume": True}, seed=1)
    assert resumed.info["blocks"][0]["resumed_from_step"] == 8
    np.testing.assert_array_equal(resumed.indices, plain.indices)
    for key in ("logit_min", "logit_max", "final_entropy"):  # the same logits, not only the same picks
        assert resumed.info["blocks"][0][key] == plain.info["blocks"][0][key]
