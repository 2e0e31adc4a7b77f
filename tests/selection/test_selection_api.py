"""select(): the contract for every method, errors, SemDeDup, DVRL and diagnostics."""

import numpy as np
import pandas as pd
import pytest
import torch

from curation.selection import Selection, diagnose, dominance_scores, select
from curation.selection.objectives import disf, facility_location, pairwise_similarity
from curation.selection.synthetic import clustered_unit_vectors

FAST = {
    "datamask": {"steps": 20, "group_size": 8, "batch_ratio": 0.3},
    "greedy": {},
    "topk_quality": {},
    "random": {},
    "semdedup": {"n_clusters": 8},
    "dvrl": {"iterations": 20, "batch_size": 100},
}


@pytest.fixture(scope="module")
def data():
    emb, quality, labels = clustered_unit_vectors(300, 16, n_clusters=6, seed=2)
    return emb, quality, labels


@pytest.mark.parametrize("method", sorted(FAST))
@pytest.mark.parametrize("budget", [1, 37, 299])
def test_exact_budget_unique_sorted_ids(data, method, budget):
    emb, q, _ = data
    sel = select(method, quality=q, embeddings=emb, budget=budget, config=FAST[method], seed=0)
    assert isinstance(sel, Selection) and isinstance(sel.history, pd.DataFrame)
    assert sel.indices.dtype == np.int64 and len(sel.indices) == budget
    assert len(np.unique(sel.indices)) == budget and np.all(np.diff(sel.indices) > 0)
    assert sel.indices.min() >= 0 and sel.indices.max() < len(q)
    assert sel.info["method"] == method and sel.info["budget"] == budget


@pytest.mark.parametrize("method", sorted(FAST))
def test_read_only_inputs_select_the_same_items_without_a_warning(data, method):
    """A memory-mapped or Arrow-backed column is read-only: torch warned of "undefined behavior" for it."""
    import warnings

    emb, q, _ = data
    frozen = [np.array(emb, dtype=np.float32), np.array(q)]
    for a in frozen:
        a.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = select(method, quality=frozen[1], embeddings=frozen[0], budget=40, config=FAST[method], seed=5)
    want = select(method, quality=q, embeddings=np.array(emb, dtype=np.float32), budget=40, config=FAST[method],
                  seed=5)
    np.testing.assert_array_equal(got.indices, want.indices)
    # torch warns once per process, so the check above can miss it: the tensors never share a read-only buffer
    from curation.selection.api import _tensor

    for a, dtype in ((frozen[0], torch.float32), (frozen[1], torch.float64), (frozen[1], torch.float32)):
        t = _tensor(a, dtype)
        assert t.data_ptr() != a.ctypes.data and np.array_equal(t.numpy(), a.astype(t.numpy().dtype))


@pytest.mark.parametrize("method", sorted(FAST))
def test_deterministic_under_a_seed(data, method):
    emb, q, _ = data
    a = select(method, quality=q, embeddings=emb, budget=40, config=FAST[method], seed=5)
    b = select(method, quality=q, embeddings=torch.tensor(emb), budget=40, config=FAST[method], seed=5)
    np.testing.assert_array_equal(a.indices, b.indices)


def test_seed_matters_for_random_methods(data):
    emb, q, _ = data
    for method in ("random", "datamask", "greedy"):
        a = select(method, quality=q, embeddings=emb, budget=40, config=FAST[method], seed=0)
        b = select(method, quality=q, embeddings=emb, budget=40, config=FAST[method], seed=1)
        assert not np.array_equal(a.indices, b.indices), method


def test_topk_quality_is_the_top_k(data):
    emb, q, _ = data
    sel = select("topk_quality", quality=q, embeddings=emb, budget=25)
    np.testing.assert_array_equal(sel.indices, np.sort(np.argsort(-q)[:25]))


def test_min_quality_prunes_in_place_for_every_method(data):
    emb, q, _ = data
    for method in FAST:
        sel = select(method, quality=q, embeddings=emb, budget=30, config={**FAST[method], "min_quality": 6.0})
        assert (q[sel.indices] >= 6.0).all(), method
        assert sel.info["dropped_min_quality"] == int((q < 6.0).sum())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"budget": 300}, "budget"),
        ({"budget": 400}, "budget"),
        ({"budget": 0}, "budget"),
        ({"budget": -3}, "budget"),
        ({"budget": 2.0}, "budget"),
        ({"config": {"lam": 1.2}}, r"^lam: must"),
        ({"config": {"lam": -0.5}}, r"^lam: must"),
        ({"config": {"group_size": 1}}, r"^group_size: "),
        ({"config": {"min_quality": 100.0}}, "'min_quality'"),
        ({"nan_embeddings": True}, "NaN or inf"),
        ({"inf_embeddings": True}, "NaN or inf"),
        ({"nan_quality": True}, "NaN or inf"),
        ({"short_quality": True}, "300"),
        ({"flat_embeddings": True}, "2-D"),
    ],
)
def test_errors(data, kwargs, match):
    kwargs = dict(kwargs)  # popped below: leave the parameter itself intact for a re-run in the same process
    emb, q, _ = data
    emb, q = emb.copy(), q.copy()
    if kwargs.pop("nan_embeddings", False):
        emb[3, 2] = np.nan
    if kwargs.pop("inf_embeddings", False):
        emb[0, 0] = np.inf
    if kwargs.pop("nan_quality", False):
        q[7] = np.nan
    if kwargs.pop("short_quality", False):
        q = q[:-1]
    if kwargs.pop("flat_embeddings", False):
        emb = emb[:, 0]
    args = {"quality": q, "embeddings": emb, "budget": 10, "config": {"steps": 1}, **kwargs}
    with pytest.raises(ValueError, match=match):
        select("datamask", **args)


def test_semdedup_auto_eps_removes_the_near_duplicates_first(data):
    emb, q, _ = data
    sel = select("semdedup", quality=q, embeddings=emb, budget=150, config={"n_clusters": 6}, seed=0)
    kept = emb[sel.indices]
    sims = kept @ kept.T
    np.fill_diagonal(sims, -1)
    assert sims.max() < 0.999  # the synthetic near-duplicates (cos ~ 0.9998) are gone
    assert 0 < sel.info["eps_effective"] < 1 and sel.info["trimmed"] == 0 and sel.info["topped_up"] == 0


@pytest.mark.parametrize("eps, adjust, field", [(0.5, "similarity", "topped_up"), (0.0, "quality", "trimmed")])
def test_semdedup_fixed_eps_hits_budget_and_counts_adjustment(data, eps, adjust, field):
    emb, q, _ = data
    sel = select("semdedup", quality=q, embeddings=emb, budget=100, config={"n_clusters": 6, "eps": eps, "adjust": adjust})
    assert len(sel.indices) == 100
    assert sel.info[field] == abs(sel.info["survivors_at_eps"] - 100) > 0


@pytest.mark.parametrize("keep", ["hard", "easy", "random", "quality"])
def test_semdedup_keep_rules(data, keep):
    emb, q, _ = data
    sel = select("semdedup", quality=q, embeddings=emb, budget=120, config={"n_clusters": 6, "keep": keep})
    assert len(sel.indices) == 120


def _pairs_around_two_centroids():
    """Two clusters (around e0 and e3 in R^4) of 4 near-duplicate pairs each, built by hand.

    Pair p of a cluster with axis a sits at angle theta_p from a, in the direction phi_p = p * 90 deg of the
    (e1, e2) plane; its two members are theta_p (the "near" one) and theta_p + 0.02 rad (the "far" one) from
    the axis, so they are cos(0.02) = 0.9998 similar. By symmetry each cluster's centroid is its axis. Members
    of different pairs (phi 90 deg or more apart) are at most cos(0.3) cos(0.4) = 0.88 similar, those of
    different clusters at most sin(0.62)^2 = 0.34, so one item per pair survives a budget of 8: `hard`
    keeps the far member (farthest from the centroid first), `easy` the near one, `quality` the better-rated
    one (near for even p, far for odd p).
    """
    rows, near, far, q = [], [], [], []
    for axis in (0, 3):
        for p, theta in enumerate((0.3, 0.4, 0.5, 0.6)):
            phi = p * np.pi / 2
            for member, t in (("near", theta), ("far", theta + 0.02)):
                v = np.zeros(4)
                v[axis], v[1], v[2] = np.cos(t), np.sin(t) * np.cos(phi), np.sin(t) * np.sin(phi)
                (near if member == "near" else far).append(len(rows))
                q.append(1.0 if (member == "near") == (p % 2 == 0) else 0.0)
                rows.append(v)
    return np.array(rows), np.array(q), np.array(near), np.array(far)


@pytest.mark.parametrize("keep", ["hard", "easy", "quality"])
def test_semdedup_keep_rule_picks_the_member_of_each_pair_by_hand(keep):
    emb, q, near, far = _pairs_around_two_centroids()
    # the construction: one pair per near/far index, at cos 0.9998; any two items of different pairs far less
    sims = emb @ emb.T
    assert np.allclose(sims[near, far], np.cos(0.02))
    other = sims.copy()
    other[near, far] = other[far, near] = -1
    np.fill_diagonal(other, -1)
    assert other.max() < 0.9
    sel = select("semdedup", quality=q, embeddings=emb, budget=8, config={"n_clusters": 2, "keep": keep}, seed=0)
    expected = {"hard": far, "easy": near,
                "quality": np.where(np.arange(8) % 4 % 2 == 0, near, far)}[keep]
    assert sel.indices.tolist() == sorted(expected.tolist())
    assert sel.info["eps_effective"] > 0.1  # the kept items are less than 0.9 similar to anything before them


def test_semdedup_is_cosine_based_scaled_rows_and_a_zero_row():
    """Scaling rows by positive factors changes no cosine, so not the selection; a zero row (no direction)
    is similar to nothing and is kept as unique (found by mutation testing: x * |x| for x / |x| survived)."""
    emb, q, near, far = _pairs_around_two_centroids()
    scales = np.linspace(0.05, 20.0, len(emb))[::-1]
    sel = select("semdedup", quality=q, embeddings=emb * scales[:, None], budget=8,
                 config={"n_clusters": 2, "keep": "hard"}, seed=0)
    assert sel.indices.tolist() == sorted(far.tolist())
    with_zero = np.vstack([emb, np.zeros(4)])
    sel = select("semdedup", quality=np.append(q, 0.0), embeddings=with_zero, budget=9,
                 config={"n_clusters": 2, "keep": "hard"}, seed=0)
    assert sel.indices.tolist() == sorted([*far.tolist(), len(emb)])


@pytest.mark.parametrize(("budget", "adjust", "expected", "info"), [
    # eps = 0.01: the 8 far members survive (M < 0.88; the near ones are 0.9998 similar to them), q of the far
    # members (indices 1, 3, ..., 15) is 0 for even pairs, 1 for odd. Trimming by quality drops the two
    # worst-ranked by (-q, index): 9 and 13; topping up by quality adds the near members of q 1 with the
    # lowest index: 0 and 4. Trimming by similarity drops the two largest M: pair 0's far members (1 and 9),
    # M = cos(0.32) cos(0.4) = 0.874 (pair 1's is cos(0.42) cos(0.5) = 0.801, pair 2's 0.716, pair 3 first).
    (6, "quality", [1, 3, 5, 7, 11, 15], {"trimmed": 2, "topped_up": 0}),
    (10, "quality", [0, 1, 3, 4, 5, 7, 9, 11, 13, 15], {"trimmed": 0, "topped_up": 2}),
    (6, "similarity", [3, 5, 7, 11, 13, 15], {"trimmed": 2, "topped_up": 0}),
])
def test_semdedup_fixed_eps_trims_and_tops_up_by_hand(budget, adjust, expected, info):
    emb, q, _, _ = _pairs_around_two_centroids()
    sel = select("semdedup", quality=q, embeddings=emb, budget=budget,
                 config={"n_clusters": 2, "keep": "hard", "eps": 0.01, "adjust": adjust}, seed=0)
    assert sel.indices.tolist() == expected
    assert {k: sel.info[k] for k in ("trimmed", "topped_up", "survivors_at_eps", "eps_effective", "dropped",
                                     "n_clusters", "tie_broken")} == {
        **info, "survivors_at_eps": 8, "eps_effective": 0.01, "dropped": 16 - budget, "n_clusters": 2,
        "tie_broken": 0}


def test_semdedup_ties_and_the_threshold_itself_by_hand():
    emb, q, _, _ = _pairs_around_two_centroids()
    # budget 1: the two items first in their cluster (far members of pair 3: 7 and 15) tie at M = -inf; the
    # higher quality wins (15), the other counts as tie-broken, and there is no finite eps
    q = q.copy()
    q[15] = 2.0
    sel = select("semdedup", quality=q, embeddings=emb, budget=1, config={"n_clusters": 2, "keep": "hard"}, seed=0)
    assert sel.indices.tolist() == [15]
    assert (sel.info["tie_broken"], sel.info["eps_effective"], sel.info["survivors_at_eps"]) == (1, None, 1)
    # FAIR keeps M <= 1 - eps: with eps = 1, a zero row (last by `easy`, M = 0 exactly: it is similar to
    # nothing) survives next to the two first items of the clusters
    with_zero = np.vstack([emb, np.zeros(4)])
    sel = select("semdedup", quality=np.append(q, 0.0), embeddings=with_zero, budget=3,
                 config={"n_clusters": 2, "keep": "easy", "eps": 1.0}, seed=0)
    assert sel.info["survivors_at_eps"] == 3 and sel.info["trimmed"] == sel.info["topped_up"] == 0
    assert 16 in sel.indices.tolist()


def test_semdedup_max_earlier_similarity_by_hand_counts_only_earlier_items_of_the_same_cluster():
    from curation.selection.semdedup import max_earlier_similarity

    e = np.eye(3)
    # items 0 and 1 are identical but in different clusters; 2 and 3 share cluster 2 at cos 0.6
    unit = np.array([e[0], e[0], e[1], 0.6 * e[1] + 0.8 * e[2]])
    labels = np.array([0, 1, 2, 2])
    m = max_earlier_similarity(unit, labels, order_key=np.array([0.0, 1.0, 2.0, 3.0]))
    assert m.tolist() == pytest.approx([-np.inf, -np.inf, -np.inf, 0.6])
    # the order decides which of 2 and 3 comes first: reversed, 2 gets the 0.6
    m = max_earlier_similarity(unit, labels, order_key=np.array([0.0, 1.0, 3.0, 2.0]))
    assert m.tolist() == pytest.approx([-np.inf, -np.inf, 0.6, -np.inf])


def test_semdedup_random_keep_is_seeded(data):
    emb, q, _ = data
    runs = [select("semdedup", quality=q, embeddings=emb, budget=60, config={"n_clusters": 6, "keep": "random"},
                   seed=s).indices.tolist() for s in (3, 3, 4)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_dvrl_seen_unseen_evaluation(data):
    emb, q, _ = data
    sel = select("dvrl", quality=q, embeddings=emb, budget=30, config={"iterations": 30, "batch_size": 100, "unseen_fraction": 0.5})
    assert sel.info["seen"] == 150 and sel.info["unseen"] == 150
    for key in ("seen_before", "seen_after", "unseen_before", "unseen_after"):
        assert np.isfinite(sel.info[key]), key
    assert {"reward", "baseline", "mean_probability"} <= set(sel.history.columns)


def test_dvrl_reward_rises_towards_the_known_best_subset():
    """REINFORCE on a case with a known optimum: quality 1 for the 50 items of one cluster, 0 for the 150 of
    another, reward = the chosen items' mean quality (lam = 1), budget 50. The best subset is the first
    cluster (reward 1); a Bernoulli draw at the keep ratio 0.25 scores ~0.25 whatever the items. Training
    must move the reward from there to near 1 and rank the good cluster on top (a flipped policy-gradient
    sign drives both to 0)."""
    rng = np.random.default_rng(0)
    good = np.arange(200) < 50
    centers = np.eye(8)[:2]
    emb = centers[np.where(good, 0, 1)] + 0.3 * rng.normal(size=(200, 8))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    sel = select("dvrl", quality=good.astype(float), embeddings=emb, budget=50, seed=0,
                 config={"lam": 1.0, "iterations": 200, "batch_size": 50, "lr": 0.03, "rate_penalty": 1.0,
                         "hidden_dim": 32, "history_every": 10})
    reward = sel.history["reward"].to_numpy()
    assert len(reward) == 20
    assert reward[:3].mean() < 0.5 and reward[-3:].mean() > 0.8
    assert good[sel.indices].mean() >= 0.9  # the top 50 by predicted p are (nearly) the best subset
    assert sel.info["seen_after"] - sel.info["seen_before"] > 0.5  # top-ratio vs random subset, mean quality


def test_diagnostics(data):
    emb, q, labels = data
    sel = select("random", quality=q, embeddings=emb, budget=50, seed=0)
    lengths = np.arange(300) + 100
    sources = np.where(labels % 2 == 0, "web", "books")
    d = diagnose(emb, q, sel.indices, lengths=lengths, sources=sources, fl_reference_size=300)
    assert d["quality_mean"] == pytest.approx(q[sel.indices].mean())
    assert d["pairwise_similarity"] == pytest.approx(pairwise_similarity(emb, q, sel.indices))
    assert d["facility_location"] == pytest.approx(facility_location(emb, q, sel.indices, reference_size=300))
    assert d["disf"] == pytest.approx(disf(emb, q, sel.indices))
    assert d["mean_length"] == pytest.approx(lengths[sel.indices].mean())
    assert d["source_frac/web"] + d["source_frac/books"] == pytest.approx(1.0)
    assert d["source_frac/web"] == pytest.approx(np.mean(sources[sel.indices] == "web"))
    assert 0 < d["dominance_top1"] < d["dominance_top10"] <= 1
    # The reference subsets of the same size: top-k is the best possible mean quality, and both
    # are scored by the same objectives as the selection.
    top = np.sort(np.argsort(-q, kind="stable")[:50])
    assert d["topk/quality_mean"] == pytest.approx(np.sort(q)[-50:].mean())
    assert d["topk/pairwise_similarity"] == pytest.approx(pairwise_similarity(emb, q, top))
    assert d["topk/quality_mean"] >= d["quality_mean"] and d["topk/quality_mean"] > d["random/quality_mean"]
    assert set(d) >= {f"{ref}/{name}" for ref in ("random", "topk")
                      for name in ("quality_mean", "pairwise_similarity", "facility_location", "disf")}


def _official_dominance(feat, ks):
    """DiSF's official ``Visual&verify/dominance_score.py`` (``cal_egin``) re-expressed in torch float64:
    centre, divide by sqrt(1e-8 + unbiased var), C = Z^T Z / (n - 1), general eig, top-k share."""
    import torch

    f = torch.as_tensor(np.asarray(feat), dtype=torch.float64)
    f = f - f.mean(dim=0, keepdim=True)
    f = f / torch.sqrt(1e-8 + f.var(dim=0, keepdim=True))
    corre = (f.t() @ f / (f.shape[0] - 1)).numpy()
    eig = np.sort(np.linalg.eig(corre)[0].real)[::-1]  # np.linalg.eig, as the official code (not eigvalsh)
    return {k: float(np.sum(eig[:k]) / np.sum(eig)) for k in ks}


def test_dominance_score_is_the_official_correlation_form():
    # DiSF Sec. 2.3 / Fig. 3: the official code standardises every dimension (correlation matrix)
    rng = np.random.default_rng(0)
    ks = (1, 2, 5, 10, 20)
    # random sets, with dimensions on very different scales (a covariance share would be dominated
    # by the 100x dimension; the official, standardised one is not)
    x = rng.normal(size=(300, 24)) @ rng.normal(size=(24, 24)) * np.geomspace(0.01, 100.0, 24)
    ours = dominance_scores(x, ks)
    assert ours == pytest.approx(_official_dominance(x, ks), rel=1e-9, abs=1e-12)
    # rescaling any dimension changes nothing (standardised; up to eps), a covariance share would move
    scaled = x * rng.uniform(0.1, 1000.0, size=24)  # variances stay >> the official eps 1e-8
    assert dominance_scores(scaled, ks) == pytest.approx(ours, rel=1e-6)
    cov_eig = np.sort(np.linalg.eigvalsh(np.cov(scaled.T)))[::-1]
    assert abs(cov_eig[0] / cov_eig.sum() - ours[1]) > 0.1
    # selected sets: a greedy DiSF selection and top-k quality of clustered data, fewer rows than
    # dimensions included (rank-deficient C), and a constant dimension (official eps sends it to 0)
    emb = rng.normal(size=(400, 32)) + 3.0 * rng.normal(size=(8, 32))[rng.integers(0, 8, 400)]
    emb[:, 5] = 1.0
    emb[:, 7] *= 50.0
    q = rng.uniform(0, 15, 400)
    for idx in (select("greedy", quality=q, embeddings=emb, budget=40,
                       config={"diversity": "disf", "lam": 0.0, "batch_size": 200}, seed=0).indices,
                np.argsort(-q)[:20], np.argsort(-q)[:120]):
        assert dominance_scores(emb[idx], ks) == pytest.approx(_official_dominance(emb[idx], ks), rel=1e-7, abs=1e-10)
    assert 9 not in dominance_scores(rng.normal(size=(50, 4)), (1, 9))

def test_semdedup_kmeans_settings_reach_the_clustering():
    # 300 unclustered points, 8 clusters: k-means has to iterate, and restarts find other partitions, so
    # SemDeDup's kept half depends on both settings (1 iteration or 5 restarts vs the defaults 100 / 1)
    rng = np.random.default_rng(0)
    emb, q = rng.normal(size=(300, 8)), rng.uniform(size=300)

    def kept(**kw):
        return select("semdedup", quality=q, embeddings=emb, budget=150, seed=0,
                      config={"n_clusters": 8, "keep": "hard", **kw}).indices

    default = kept()
    assert np.array_equal(default, kept(kmeans_max_iter=100, kmeans_n_init=1))
    assert not np.array_equal(default, kept(kmeans_max_iter=1))
    assert not np.array_equal(default, kept(kmeans_n_init=5))


def test_min_quality_pruning_is_one_rule_for_every_path():
    from curation.selection.budget import kept_by_min_quality

    q = np.array([3.0, 7.0, 6.0, 1.0, 9.0])
    np.testing.assert_array_equal(kept_by_min_quality(q, None), np.arange(5))
    np.testing.assert_array_equal(kept_by_min_quality(q, 6.0, budget=2), [1, 2, 4])  # >=, positions ascending
    for budget in (0, 3):  # no choice left: every kept candidate, or none, would be selected
        with pytest.raises(ValueError, match=r"3 of 5 candidates have quality >= .*'min_quality' \(6.0\)"):
            kept_by_min_quality(q, 6.0, budget=budget)
