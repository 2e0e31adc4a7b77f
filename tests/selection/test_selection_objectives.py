"""Objectives (DATAMASK Eq. 3, 4, 12) against direct O(S^2) / O(S d^2) computations."""

import numpy as np
import pytest
import torch

from curation.selection.objectives import (
    Objective,
    disf,
    disf_block,
    facility_location,
    facility_location_sum,
    joint,
    pairwise_similarity,
    quality_mean,
)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(60, 8)) + 0.5
    quality = rng.uniform(0, 15, size=60)
    idx = rng.choice(60, size=12, replace=False)
    return emb, quality, idx


def _cos(a, b):
    return a @ b / (np.linalg.norm(a) * np.linalg.norm(b))


def test_quality_mean(data):
    emb, q, idx = data
    assert quality_mean(emb, q, idx) == pytest.approx(q[idx].mean(), rel=1e-12)


def test_pairwise_similarity_is_the_double_sum(data):
    emb, q, idx = data
    s = len(idx)
    direct = -sum(_cos(emb[i], emb[j]) for i in idx for j in idx) / (2 * s * s)
    assert pairwise_similarity(emb, q, idx) == pytest.approx(direct, rel=1e-12)


def test_facility_location_is_mean_max_similarity(data):
    emb, q, idx = data
    # reference_size >= N: every item is a reference point
    direct = np.mean([max(_cos(emb[r], emb[j]) for j in idx) for r in range(len(emb))])
    assert facility_location(emb, q, idx, reference_size=1000) == pytest.approx(direct, rel=1e-12)


def test_facility_location_on_a_reference_subsample(data):
    emb, q, idx = data
    full = facility_location(emb, q, idx, reference_size=1000)
    sub = facility_location(emb, q, idx, reference_size=20, seed=3)
    assert sub == facility_location(emb, q, idx, reference_size=20, seed=3)  # seeded
    assert sub != full


def test_facility_location_sum_is_eq4_as_printed(data):
    emb, q, idx = data
    n, s = len(emb), len(idx)
    direct = sum(_cos(emb[i], emb[j]) for i in range(n) for j in idx) / (2 * n * s)
    assert facility_location_sum(emb, q, idx) == pytest.approx(direct, rel=1e-12)


@pytest.mark.parametrize("size", [5, 30])  # S < d uses the Gram matrix, S >= d the covariance
def test_disf_is_frobenius_norm_of_the_covariance(size):
    rng = np.random.default_rng(1)
    emb = rng.normal(size=(80, 16)) * rng.uniform(0.5, 2, size=16) + 3
    idx = rng.choice(80, size=size, replace=False)
    x = emb[idx]
    z = (x - x.mean(0)) / np.sqrt(x.var(0, ddof=1) + 1e-8)  # standardised over U itself (DiSF Eq. 3)
    cov = z.T @ z / (size - 1)  # DiSF Eq. 4
    assert disf(emb, None, idx) == pytest.approx(-np.linalg.norm(cov, "fro"), rel=1e-10)
    zb = (emb - emb.mean(0)) / emb.std(0)  # disf_block: standardised once over the block
    cov_b = sum(np.outer(zb[i], zb[i]) for i in idx) / (len(emb) - 1)
    assert disf_block(emb, None, idx) == pytest.approx(-np.linalg.norm(cov_b, "fro"), rel=1e-10)


@pytest.mark.parametrize("diversity", ["pws", "fl", "fl_sum", "disf", "disf_block"])
def test_batched_objective_matches_single_sets(data, diversity):
    emb, q, _ = data
    rng = np.random.default_rng(2)
    sets = np.stack([rng.choice(60, size=10, replace=False) for _ in range(7)])
    obj = Objective(torch.tensor(emb), torch.tensor(q), diversity=diversity, lam=0.4, fl_reference_size=1000)
    batched = obj.terms(torch.tensor(sets))
    single = {"pws": pairwise_similarity, "fl_sum": facility_location_sum, "disf": disf, "disf_block": disf_block}
    for g, s in enumerate(sets):
        expected = (
            facility_location(emb, q, s, reference_size=1000)
            if diversity == "fl"
            else single[diversity](emb, q, s)
        )
        assert float(batched[diversity][g]) == pytest.approx(expected, rel=1e-10)
        assert float(batched["quality"][g]) == pytest.approx(q[s].mean(), rel=1e-12)
        assert float(obj(torch.tensor(s).unsqueeze(0))[0]) == pytest.approx(0.4 * q[s].mean() + 0.6 * expected)


def test_joint_raw_is_eq12(data):
    emb, q, idx = data
    value = joint(emb, q, idx, diversity="pws", lam=0.25)
    assert value == pytest.approx(0.25 * q[idx].mean() + 0.75 * pairwise_similarity(emb, q, idx))
    assert joint(emb, q, idx, lam=1.0) == pytest.approx(q[idx].mean())


def test_standardized_joint_is_zero_mean_unit_scale_on_random_sets(data):
    emb, q, _ = data
    obj = Objective(torch.tensor(emb), torch.tensor(q), diversity="pws", lam=0.5, standardize=True, scale_samples=200)
    w_q, w_d, offset = obj.weights(10)
    (mq, sq), (md, sd) = obj.term_stats(10)["quality"], obj.term_stats(10)["pws"]
    assert w_q == pytest.approx(0.5 / sq) and w_d == pytest.approx(0.5 / sd)
    # a set scoring exactly the random-subset means on both terms has joint value 0
    assert offset + w_q * mq + w_d * md == pytest.approx(0.0, abs=1e-9)


def test_single_set_functions_validate_indices(data):
    emb, q, _ = data
    with pytest.raises(ValueError, match="indices must be unique"):
        pairwise_similarity(emb, q, [1, 1, 2])
    with pytest.raises(ValueError, match=r"indices must be in \[0, 60\)"):
        pairwise_similarity(emb, q, [0, 60])
    with pytest.raises(ValueError, match=r"indices must be in \[0, 60\)"):
        pairwise_similarity(emb, q, [-1, 3])
    with pytest.raises(ValueError, match="indices must not be empty"):
        pairwise_similarity(emb, q, [])


def test_a_set_of_one_item_is_a_set(data):
    emb, q, _ = data
    assert quality_mean(emb, q, [7]) == pytest.approx(q[7], rel=1e-12)
    # PWS of one item: -cos(z, z) / 2 = -1/2; FL: the mean cosine of every item to it
    assert pairwise_similarity(emb, q, [7]) == pytest.approx(-0.5, rel=1e-12)
    direct = np.mean([_cos(emb[r], emb[7]) for r in range(len(emb))])
    assert facility_location(emb, q, [7], reference_size=1000) == pytest.approx(direct, rel=1e-12)


def test_single_set_functions_compute_in_float64_whatever_the_input(data):
    """float32 inputs and integer quality are cast to float64 first: the results equal the float64 ones
    to 1e-12, which float32 arithmetic (~1e-7) would miss."""
    emb, q, idx = data
    e32, qint = emb.astype(np.float32), np.round(q).astype(np.int64)
    ref_pws = -sum(_cos(e32[i].astype(np.float64), e32[j].astype(np.float64)) for i in idx for j in idx) \
        / (2 * len(idx) ** 2)
    assert pairwise_similarity(e32, q, idx) == pytest.approx(ref_pws, rel=1e-12, abs=0)
    assert quality_mean(emb, qint, idx) == pytest.approx(qint[idx].mean(), rel=1e-15)
    assert quality_mean(emb, None, idx) == 0.0  # no quality: zeros
    # indices given as floats of whole numbers are positions, as ints are
    assert pairwise_similarity(emb, q, idx.astype(np.float64)) == pairwise_similarity(emb, q, idx)


@pytest.mark.parametrize("dtype, half_step", [("int16", 0.5 / 32767), ("int8", 0.5 / 127)])
def test_integer_fl_table_is_within_half_a_rounding_step_of_the_exact_one(minilm_views, dtype, half_step):
    # real MiniLM vectors: the max over a set of rounded cosines is the rounded max, so every
    # reference point moves by <= half a step and so does their mean
    head, _ = minilm_views
    emb, q = torch.from_numpy(head), torch.zeros(len(head))
    gen = torch.Generator().manual_seed(0)
    idx = torch.stack([torch.randperm(len(head), generator=gen)[:16] for _ in range(32)])
    exact = Objective(emb, q, diversity="fl", fl_reference_size=64, seed=1)
    rounded = Objective(emb, q, diversity="fl", fl_reference_size=64, seed=1, fl_sims_dtype=dtype)
    assert rounded.reference_sims.dtype == getattr(torch, dtype)
    diff = (rounded.facility_location(idx).double() - exact.facility_location(idx).double()).abs()
    assert float(diff.max()) <= half_step + 1e-7
    assert float(diff.max()) > 0  # the table really is rounded


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_terms_within_a_batch_equal_terms_on_global_ids(data, dtype):
    emb, q, _ = data
    obj = Objective(torch.tensor(emb, dtype=torch.float32), torch.tensor(q), diversity="fl", lam=0.5,
                    fl_reference_size=30, fl_sims_dtype=dtype)
    gen = torch.Generator().manual_seed(1)
    within = torch.randperm(60, generator=gen)[:25]
    local = torch.stack([torch.randperm(25, generator=gen)[:7] for _ in range(9)])
    a, b = obj.terms(local, within=within), obj.terms(within[local])
    assert torch.equal(a["fl"], b["fl"]) and torch.equal(a["quality"], b["quality"])


def test_unknown_fl_sims_dtype_is_refused(data):
    emb, q, _ = data
    with pytest.raises(ValueError, match="fl_sims_dtype"):
        Objective(torch.tensor(emb), torch.tensor(q), diversity="fl", fl_sims_dtype="float16")


def test_disf_block_scale_is_eq4_as_printed(data):
    # DATAMASK Eq. 4 prints the DiSF term with 1/(N - 1) over the items the set is drawn from; DiSF's own
    # C(U) divides by |U| - 1. disf_scale="block" weighs the set-form term so the raw Eq. 12 holds the former.
    emb, q, idx = data
    x = emb[idx]
    z = (x - x.mean(0)) / np.sqrt(x.var(0, ddof=1) + 1e-8)  # standardised over U (DiSF Eq. 3)
    printed = -np.linalg.norm(z.T @ z, "fro") / (len(emb) - 1)
    t = torch.tensor(idx).unsqueeze(0)
    kw = dict(diversity="disf", lam=0.3, standardize=False)
    block = Objective(torch.tensor(emb), torch.tensor(q), disf_scale="block", **kw)
    setf = Objective(torch.tensor(emb), torch.tensor(q), **kw)
    assert float(block(t)[0]) == pytest.approx(0.3 * q[idx].mean() + 0.7 * printed, rel=1e-10)
    assert float(setf(t)[0]) == pytest.approx(0.3 * q[idx].mean() + 0.7 * disf(emb, q, idx), rel=1e-10)
    # drawn from a batch of 30 items (a DataMask step): 1/(30 - 1)
    terms = block.terms(t)
    assert float(block.combine(terms, len(idx), 30)[0]) == pytest.approx(
        0.3 * q[idx].mean() - 0.7 * np.linalg.norm(z.T @ z, "fro") / 29, rel=1e-10)
    # the raw term the history reports is DiSF's -||C(U)||_F either way; standardised terms ignore the scale
    assert float(terms["disf"][0]) == pytest.approx(disf(emb, q, idx), rel=1e-10)
    std_kw = dict(kw, standardize=True)
    a = Objective(torch.tensor(emb), torch.tensor(q), disf_scale="block", **std_kw)
    b = Objective(torch.tensor(emb), torch.tensor(q), **std_kw)
    assert float(a(t)[0]) == pytest.approx(float(b(t)[0]), rel=1e-12)
    with pytest.raises(ValueError, match="disf_scale"):
        Objective(torch.tensor(emb), torch.tensor(q), disf_scale="n")


def test_disf_block_scale_moves_lambda_not_the_diversity_only_argmax():
    from curation.selection import select

    rng = np.random.default_rng(1)
    emb = rng.normal(size=(256, 12))
    q = rng.uniform(0, 15, 256)
    picks = {s: select("greedy", quality=q, embeddings=emb, budget=16, seed=0,
                       config={"diversity": "disf", "lam": 0.0, "disf_scale": s, "batch_size": 128}).indices
             for s in ("set", "block")}
    np.testing.assert_array_equal(picks["set"], picks["block"])
    # at a lambda in between, the printed (1/(N-1)) form is ~ keep-ratio times smaller, so quality gains weight
    mixed = {s: select("greedy", quality=q, embeddings=emb, budget=16, seed=0,
                       config={"diversity": "disf", "lam": 0.05, "standardize": False, "disf_scale": s,
                               "batch_size": 128}).indices for s in ("set", "block")}
    assert q[mixed["block"]].mean() > q[mixed["set"]].mean()


def test_auto_fl_table_caps_the_reference_points_to_what_fits(monkeypatch, caplog):
    # the default 8,192 reference points do not fit a 1M block's 1 GiB int8 table: "auto" keeps a table and warns
    import curation.selection.objectives as objectives

    monkeypatch.setattr(objectives, "_MAX_REFERENCE_SIMS_BYTES", 100 * 16)  # 100 items: 16 int8 columns fit
    rng = np.random.default_rng(0)
    emb, q = torch.tensor(rng.normal(size=(100, 8))), torch.zeros(100)
    with caplog.at_level("WARNING"):
        obj = Objective(emb, q, diversity="fl", fl_reference_size=64, fl_sims_dtype="auto")
    assert obj.fl_sims_dtype == "int8" and obj.reference.shape[0] == 16 and obj.reference_sims.shape == (100, 16)
    assert "above the 1 GiB cap: using 16 reference points" in caplog.text
    # an explicit dtype keeps R (no table: the steps recompute); other diversities are untouched
    assert Objective(emb, q, diversity="fl", fl_reference_size=64, fl_sims_dtype="int8").reference.shape[0] == 64
    assert Objective(emb, q, diversity="pws", fl_reference_size=64, fl_sims_dtype="auto").fl_reference_size == 64


@pytest.mark.parametrize("dtype", ["float32", "int16", "int8"])
def test_facility_location_without_a_table_recomputes_the_exact_similarities(data, monkeypatch, dtype):
    # a block whose (N, R) table would pass the 1 GiB cap: every step recomputes cos against the reference
    # points, in chunks of masks; the value is the exact mean_r max_j cos whatever the table dtype asked
    import curation.selection.objectives as objectives

    emb, q, _ = data
    monkeypatch.setattr(objectives, "_MAX_REFERENCE_SIMS_BYTES", 60 * 30 - 1)  # one byte short of any table
    monkeypatch.setattr(objectives, "_MAX_CHUNK_ELEMENTS", 7 * (30 + 8) * 2)  # two masks per chunk
    obj = Objective(torch.tensor(emb), torch.tensor(q), diversity="fl", fl_reference_size=30, seed=2,
                    fl_sims_dtype=dtype)
    assert obj.reference_sims is None
    gen = torch.Generator().manual_seed(3)
    idx = torch.stack([torch.randperm(60, generator=gen)[:7] for _ in range(5)])  # 5 masks: chunks 2, 2, 1
    ref = obj.reference.numpy()
    direct = [np.mean([max(_cos(r, emb[j]) for j in row) for r in ref]) for row in idx.numpy()]
    np.testing.assert_allclose(obj.facility_location(idx).numpy(), direct, rtol=1e-12)
    within = torch.randperm(60, generator=gen)[:20]
    local = torch.stack([torch.randperm(20, generator=gen)[:7] for _ in range(3)])
    assert torch.equal(obj.facility_location(local, within=within), obj.facility_location(within[local]))
    # the same values as the float32 table the cap would otherwise allow
    monkeypatch.setattr(objectives, "_MAX_REFERENCE_SIMS_BYTES", 1 << 30)
    table = Objective(torch.tensor(emb), torch.tensor(q), diversity="fl", fl_reference_size=30, seed=2)
    assert table.reference_sims is not None
    np.testing.assert_allclose(table.facility_location(idx).numpy(), direct, rtol=1e-12)


# --- issue #28: the survivors of mutation testing (benchmarks/results/mutation.csv), each from a derivation ---


def _np_disf_sq_estimate(x, probes):
    """-||C||_F^2 estimated as mean_k ||C v_k||^2, C = Z^T Z / (S - 1), Z standardised over the set (DiSF Eq. 3-4)."""
    s = len(x)
    xc = x - x.mean(0)
    z = xc / np.sqrt((xc * xc).sum(0) / (s - 1) + 1e-8)
    c = z.T @ z / (s - 1)
    return -np.mean(np.sum((c @ probes) ** 2, axis=0))


def test_hutchinson_probes_follow_the_documented_seed_stream(data):
    # without a per-step probe seed, probes come from one stream seeded with derive_seed(seed, 6): the first call
    # uses its first draw, the next call the next draw; the estimate is mean_k ||C v_k||^2 with those probes
    from curation.selection.objectives import derive_seed

    emb, q, _ = data
    idx = torch.tensor([[0, 3, 5, 8, 13, 21, 34], [1, 2, 4, 9, 16, 25, 36]])
    obj = Objective(torch.tensor(emb), torch.tensor(q), diversity="disf", disf_probes=3, seed=4)
    gen = torch.Generator().manual_seed(derive_seed(4, 6))
    for _ in range(2):  # two calls: the stream advances
        probes = (torch.randint(0, 2, (8, 3), generator=gen).double() * 2 - 1).numpy()
        expected = [_np_disf_sq_estimate(emb[row], probes) for row in idx.numpy()]
        np.testing.assert_allclose(obj.disf(idx).numpy(), expected, rtol=1e-10)
    # a per-step probe seed replaces the stream for that call
    obj.disf_probe_seed = 11
    probes = (torch.randint(0, 2, (8, 3), generator=torch.Generator().manual_seed(11)).double() * 2 - 1).numpy()
    np.testing.assert_allclose(obj.disf(idx).numpy(), [_np_disf_sq_estimate(emb[r], probes) for r in idx.numpy()],
                               rtol=1e-10)


def test_one_hutchinson_probe_is_the_estimator_and_a_larger_batch_regrows_the_buffer(data):
    emb, q, _ = data
    obj = Objective(torch.tensor(emb), torch.tensor(q), diversity="disf", disf_probes=1)
    obj.disf_probe_seed = 5
    small, big = torch.tensor([[0, 1, 2, 3]]), torch.stack([torch.arange(i, i + 9) for i in range(0, 45, 9)])
    probes = (torch.randint(0, 2, (8, 1), generator=torch.Generator().manual_seed(5)).double() * 2 - 1).numpy()
    np.testing.assert_allclose(obj.disf(small).numpy(), [_np_disf_sq_estimate(emb[:4], probes)], rtol=1e-10)
    # the gather buffer sized for 4 rows must grow for 5 x 9 (a second, larger call gives the fresh object's value)
    fresh = Objective(torch.tensor(emb), torch.tensor(q), diversity="disf", disf_probes=1)
    fresh.disf_probe_seed = 5
    torch.testing.assert_close(obj.disf(big), fresh.disf(big), rtol=0, atol=0)


def test_term_stats_are_population_moments_over_the_documented_subsets(data):
    # scale_samples subsets of `size` drawn with derive_seed(seed, 2, size); std with ddof 0; Hutchinson probes of
    # their own (derive_seed(seed, 7, size)), the step's probe seed left as it was
    from curation.selection.objectives import derive_seed

    emb, q, _ = data
    obj = Objective(torch.tensor(emb), torch.tensor(q), diversity="disf", lam=0.4, standardize=True,
                    scale_samples=5, seed=9, disf_probes=2)
    obj.disf_probe_seed = 123
    stats = obj.term_stats(6)
    assert obj.disf_probe_seed == 123
    gen = torch.Generator().manual_seed(derive_seed(9, 2, 6))
    subsets = [torch.randperm(60, generator=gen)[:6].numpy() for _ in range(5)]
    probes = (torch.randint(0, 2, (8, 2), generator=torch.Generator().manual_seed(derive_seed(9, 7, 6))).double()
              * 2 - 1).numpy()
    quality = [q[s].mean() for s in subsets]
    div = [_np_disf_sq_estimate(emb[s], probes) for s in subsets]
    assert stats["quality"] == pytest.approx((np.mean(quality), np.std(quality)), rel=1e-10)
    assert stats["disf"] == pytest.approx((np.mean(div), np.std(div)), rel=1e-10)


def test_derive_seed_is_stable_across_versions():
    # every RNG stream (reference points, subsets, probes, DataMask steps) is derived here: a changed value would
    # change every seeded selection and refuse no resume, so the values are pinned
    from curation.selection.objectives import derive_seed

    assert derive_seed(0, 1) == 2918264622725855778
    assert derive_seed(4, 6) == 4144276108970852052
    assert all(0 <= derive_seed(i, 7, 3) < 2**63 for i in range(20))


def test_chunk_len_bounds():
    import curation.selection.objectives as objectives

    cap = objectives._MAX_CHUNK_ELEMENTS
    assert objectives._chunk_len(0) == cap and objectives._chunk_len(1) == cap
    assert objectives._chunk_len(cap // 3) == 3 and objectives._chunk_len(cap * 5) == 1


def test_standardize_features_leaves_a_constant_column_at_zero():
    from curation.selection.objectives import standardize_features

    x = torch.tensor([[1.0, 2.0], [1.0, 4.0], [1.0, 9.0]])
    z = standardize_features(x)
    assert torch.equal(z[:, 0], torch.zeros(3))
    expected = (x[:, 1] - x[:, 1].mean()) / x[:, 1].std(unbiased=False)
    torch.testing.assert_close(z[:, 1], expected)


def test_weights_of_the_block_scaled_disf(data):
    emb, q, _ = data
    # exact term: weighed by (S - 1) / (N - 1); Hutchinson's square by its square; N = the population if given
    exact = Objective(torch.tensor(emb), torch.tensor(q), diversity="disf", lam=0.2, disf_scale="block")
    assert exact.weights(11) == pytest.approx((0.2, 0.8 * 10 / 59, 0.0))
    assert exact.weights(11, population=21) == pytest.approx((0.2, 0.8 * 10 / 20, 0.0))
    assert exact.weights(2, population=2) == pytest.approx((0.2, 0.8, 0.0))
    for probes in (1, 4):
        est = Objective(torch.tensor(emb), torch.tensor(q), diversity="disf", lam=0.2, disf_scale="block",
                        disf_probes=probes)
        assert est.weights(11) == pytest.approx((0.2, 0.8 * (10 / 59) ** 2, 0.0))


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_one_term_alone_is_not_standardised(data, lam):
    emb, q, _ = data
    obj = Objective(torch.tensor(emb), torch.tensor(q), diversity="pws", lam=lam, standardize=True)
    assert obj.weights(10) == (lam, 1.0 - lam, 0.0) and obj._stats == {}  # no random-subset statistics computed
    assert obj.needed_terms() == (("quality",) if lam == 1.0 else ("pws",))
    assert Objective(torch.tensor(emb), torch.tensor(q), lam=0.5).needed_terms() == ("quality", "pws")


def test_a_term_constant_over_random_sets_gets_scale_one(data):
    emb, _, _ = data
    equal = torch.full((60,), 7.0, dtype=torch.float64)
    obj = Objective(torch.tensor(emb), equal, diversity="pws", lam=0.5, standardize=True, scale_samples=50)
    (mq, sq), (md, sd) = obj.term_stats(10)["quality"], obj.term_stats(10)["pws"]
    assert sq == 0 and 0 < sd < 1
    w_q, w_d, offset = obj.weights(10)
    assert (w_q, w_d) == pytest.approx((0.5, 0.5 / sd)) and offset == pytest.approx(-(0.5 * 7.0 + 0.5 * md / sd))
    # a quality spread below 1 is divided by its own std, not replaced by 1
    small = Objective(torch.tensor(emb), torch.linspace(0, 0.1, 60, dtype=torch.float64), diversity="pws", lam=0.5,
                      standardize=True, scale_samples=50)
    sq_small = small.term_stats(10)["quality"][1]
    assert 0 < sq_small < 1 and small.weights(10)[0] == pytest.approx(0.5 / sq_small)


def test_auto_table_dtype_at_the_cap(monkeypatch, caplog):
    # int16 while N x R x 2 bytes fit (the boundary included), else int8; the warning names the int8 table's GiB
    import curation.selection.objectives as objectives

    emb, q = torch.tensor(np.random.default_rng(0).normal(size=(100, 8))), torch.zeros(100)
    monkeypatch.setattr(objectives, "_MAX_REFERENCE_SIMS_BYTES", 100 * 16 * 2)
    assert Objective(emb, q, diversity="fl", fl_reference_size=16, fl_sims_dtype="auto").fl_sims_dtype == "int16"
    assert Objective(emb, q, diversity="fl", fl_reference_size=17, fl_sims_dtype="auto").fl_sims_dtype == "int8"
    with caplog.at_level("WARNING"):  # R = 32 int8 columns fit exactly: no cap, no warning
        assert Objective(emb, q, diversity="fl", fl_reference_size=32, fl_sims_dtype="auto").reference.shape[0] == 32
    assert caplog.text == ""
    monkeypatch.setattr(objectives, "_MAX_REFERENCE_SIMS_BYTES", 2**30 // 2**10)  # 1 MiB
    big = torch.zeros((2048, 2)), torch.zeros(2048)
    with caplog.at_level("WARNING"):
        obj = Objective(*big, diversity="fl", fl_reference_size=2048, fl_sims_dtype="auto")
    assert obj.fl_reference_size == 512
    assert "2048 reference points of 2048 items need a 0.0 GiB int8 table" in caplog.text
    monkeypatch.setattr(objectives, "_MAX_REFERENCE_SIMS_BYTES", 10)  # not one int8 column fits: one reference point
    assert Objective(emb, q, diversity="fl", fl_reference_size=8, fl_sims_dtype="auto").fl_reference_size == 1


def test_unit_rows_are_used_as_given_and_refused_for_raw_feature_terms(data):
    emb, q, _ = data
    unit = torch.nn.functional.normalize(torch.tensor(emb), dim=1)
    assert Objective(unit, torch.tensor(q), diversity="pws", unit_rows=True).unit is unit
    for diversity in ("disf", "disf_block"):
        with pytest.raises(ValueError, match=f"^unit_rows: diversity='{diversity}' standardises the raw features"):
            Objective(unit, torch.tensor(q), diversity=diversity, unit_rows=True)
    with pytest.raises(ValueError, match="^diversity must be one of"):
        Objective(unit, torch.tensor(q), diversity="coverage")


def test_disf_of_a_pair_and_the_refusal_of_one_item(data):
    emb, q, _ = data
    # two items a, b standardised over themselves: per dimension t = var = (a - b)^2 / 2 and z = +-(a - b) / 2 /
    # sqrt(t + eps), so C = 2 z z^T (rank one) and ||C||_F = 2 ||z||^2 = sum_k t_k / (t_k + eps)
    t = (emb[3] - emb[7]) ** 2 / 2
    assert disf(emb, q, [3, 7]) == pytest.approx(-np.sum(t / (t + 1e-8)), rel=1e-12)
    with pytest.raises(ValueError, match="^disf needs sets of >= 2 items"):
        disf(emb, q, [3])


def test_joint_defaults_and_options_reach_the_objective(data):
    emb, q, idx = data
    # lam defaults to 0.5, the equal weighting of Eq. 12
    assert joint(emb, q, idx) == pytest.approx(0.5 * q[idx].mean() + 0.5 * pairwise_similarity(emb, q, idx))
    obj = Objective(torch.tensor(emb), torch.tensor(q))
    assert obj.lam == 0.5 and float(obj(torch.tensor(idx)[None])[0]) == pytest.approx(joint(emb, q, idx))
    # every option is passed on: standardised FL with 11 reference points, 7 subsets, seed 3
    opts = dict(diversity="fl", lam=0.3, standardize=True, scale_samples=7, fl_reference_size=11, seed=3)
    direct = Objective(torch.tensor(emb, dtype=torch.float64), torch.tensor(q), **opts)
    assert joint(emb, q, idx, **opts) == pytest.approx(float(direct(torch.tensor(idx)[None])[0]), rel=1e-12)
    stats = direct.term_stats(len(idx))
    manual = (0.3 * (q[idx].mean() - stats["quality"][0]) / stats["quality"][1]
              + 0.7 * (facility_location(emb, q, idx, reference_size=11, seed=3) - stats["fl"][0]) / stats["fl"][1])
    assert joint(emb, q, idx, **opts) == pytest.approx(manual, rel=1e-9)


def test_the_core_defaults_are_the_config_defaults():
    # a caller of the core without a config gets what a config-less `curate` run gets
    import inspect

    from curation.selection.config import ObjectiveConfig

    core = inspect.signature(Objective.__init__).parameters
    wrapper = inspect.signature(joint).parameters
    for name in ("scale_samples", "fl_reference_size"):
        assert core[name].default == wrapper[name].default == ObjectiveConfig.__dataclass_fields__[name].default
    assert core["seed"].default == wrapper["seed"].default == 0


def test_defaults_in_use(data):
    # the defaults as a call without them sees them (a signature check alone would not see a changed default
    # behind a wrapper): seed 0, 64 random subsets, 8,192 reference points
    emb, q, idx = data
    e, t = torch.tensor(emb), torch.tensor(q)
    assert torch.equal(Objective(e, t, diversity="fl", fl_reference_size=10).reference,
                       Objective(e, t, diversity="fl", fl_reference_size=10, seed=0).reference)
    assert Objective(e, t, standardize=True).term_stats(5) == Objective(e, t, standardize=True,
                                                                        scale_samples=64).term_stats(5)
    many = torch.zeros((8200, 2))
    assert Objective(many, torch.zeros(8200), diversity="fl").reference.shape[0] == 8192
    opts = dict(diversity="fl", standardize=True, fl_reference_size=10)
    assert joint(emb, q, idx, **opts) == joint(emb, q, idx, **opts, seed=0, scale_samples=64)
    assert facility_location(emb, q, idx, reference_size=20) == facility_location(emb, q, idx, reference_size=20,
                                                                                  seed=0)


def test_index_errors_say_exactly_what_is_wrong(data):
    emb, q, _ = data
    with pytest.raises(ValueError, match="^indices must not be empty$"):
        quality_mean(emb, q, [])
    with pytest.raises(ValueError, match="^indices must be unique$"):
        quality_mean(emb, q, [1, 1])
    with pytest.raises(ValueError, match=r"^indices must be in \[0, 60\)$"):
        quality_mean(emb, q, [60])


def test_a_diversity_constant_over_random_sets_gets_scale_one():
    # every item the same vector: PWS is the same for every set (sd 0), so its weight stays 1 - lam
    emb = torch.ones((40, 3), dtype=torch.float64)
    q = torch.linspace(0, 1, 40, dtype=torch.float64)
    obj = Objective(emb, q, diversity="pws", lam=0.5, standardize=True, scale_samples=30)
    (mq, sq), (md, sd) = obj.term_stats(8)["quality"], obj.term_stats(8)["pws"]
    assert sd == 0 and sq > 0
    assert obj.weights(8) == pytest.approx((0.5 / sq, 0.5, -(0.5 * mq / sq + 0.5 * md)))


def test_the_cap_warning_gives_the_table_size_in_gib(monkeypatch, caplog):
    import curation.selection.objectives as objectives

    monkeypatch.setattr(objectives, "_MAX_REFERENCE_SIMS_BYTES", 1 << 20)
    with caplog.at_level("WARNING"):  # 32,768 items x 16,384 reference points = 2^29 bytes in int8
        Objective(torch.zeros((32768, 2)), torch.zeros(32768), diversity="fl", fl_reference_size=16384,
                  fl_sims_dtype="auto")
    assert caplog.messages == [
        "facility location: 16384 reference points of 32768 items need a 0.5 GiB int8 table, above the 1 GiB cap: "
        "using 32 reference points (1,024 kept ~56-70% of the whole-block FL gain in the measurements of "
        "docs/selection.md)"]


def test_disf_block_of_a_two_item_block_in_closed_form(data):
    # standardised over a block of two, every coordinate is +-1 (population std), so sum_i z_i z_i^T = 2 s s^T with
    # s the sign vector: ||.||_F = 2 d, divided by N - 1 = 1
    emb, _, _ = data
    assert disf_block(emb[:2], None, [0, 1]) == pytest.approx(-2.0 * emb.shape[1], rel=1e-12)
