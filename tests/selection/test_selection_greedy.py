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
