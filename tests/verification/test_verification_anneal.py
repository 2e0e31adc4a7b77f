"""Efficient verification's annealing runs draw the configured candidate share (Ultra-FineWeb Sec. 2.2, App. A).

The candidate and the default mix are packed from disjoint real documents, so every training sequence can be
told apart by its tokens. `train_cached` is wrapped (it still trains) to read the batches of each run's loader:
a candidate run at ratio r must hold round(r * sequences) candidate sequences, the default-only run none.

The steps before and after annealing are tested on small hand-made inputs, each function called inside its test
(mutmut credits a mutant only to the tests that ran it): which documents each candidate and the default mix get
(`select_candidates`), the seeded token-budget sample (`sample_tokens`), the packed corpora (`pack_candidates`),
a tiny WSD base run (`train_base`), App. A's annealing length (`annealing_length`) and the Table 8 metrics
(`tabulate`). Documents of k words "a a ... a" are k tokens under the test tokenizer (+1 EOS), so token counts
are worked out by hand.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from curation.lm import PackedDataset, pack_documents, train_tokenizer
from curation.lm.checkpoint import LMCheckpoint
from curation.lm.model import CausalLM
from curation.selection.baselines import select_random
from curation.selection.corpus import CorpusSpec
from curation.verification import anneal
from curation.verification.config import BASE, BASELINE, DEFAULT_MIX, VerificationConfig
from tests.verification.tiny_lm import tiny_pretrain

SEQ, BATCH, STEPS = 32, 4, 5


@pytest.fixture(scope="module")
def tokenizer(corpus_sample):
    return train_tokenizer(corpus_sample["text"].head(120).tolist(), vocab_size=512)


class _Stop(Exception):
    """Raised by a stand-in for ``train_cached`` once the call under test has been read."""


def _repacked(corpus_sample, tokenizer, root, seq_len):
    """Three disjoint corpora of the first 120 documents (default mix 60, two candidates of 30) packed at ``seq_len`` tokens a window (the runs re-read them at their own)."""
    texts = corpus_sample["text"].head(120).tolist()
    return {DEFAULT_MIX: pack_documents(texts[:60], tokenizer, root / "default", seq_len=seq_len),
            "cand": pack_documents(texts[60:90], tokenizer, root / "cand", seq_len=seq_len),
            "other": pack_documents(texts[90:], tokenizer, root / "other", seq_len=seq_len)}


@pytest.fixture(scope="module")
def packed(corpus_sample, tokenizer, tmp_path_factory):
    return tokenizer, _repacked(corpus_sample, tokenizer, tmp_path_factory.mktemp("verification"), SEQ)


def _rows(dataset) -> set[tuple[int, ...]]:
    return {tuple(dataset[i][0].tolist()) for i in range(len(dataset))}


def test_each_candidate_run_draws_its_share_and_the_default_only_run_none(packed, monkeypatch, caplog):
    tokenizer, tokens = packed
    pretrain = tiny_pretrain(seq_len=SEQ, batch_size=BATCH)
    # seed 3, not the default 0: the loader and the cache key must take the configured seed
    cfg = VerificationConfig(ratios=[0.25, 0.5], anneal_steps=STEPS, tasks=["piqa"], limit=2, seed=3)
    torch.manual_seed(0)
    base = LMCheckpoint(CausalLM(pretrain.model).eval(), tokenizer)

    sources = {name: _rows(p) for name, p in tokens.items()}
    assert not any(sources[a] & sources[b] for a in sources for b in sources if a < b)  # disjoint documents
    drawn: list[dict[str, int]] = []
    batches: list[list[list[int]]] = []
    keys: list[str] = []
    real = anneal.train_cached

    def counting_train_cached(cfg_, loader, data_key, cache, init_from=None):
        assert init_from is base.model  # each run anneals the base model, not a fresh one
        counts = dict.fromkeys(sources, 0)
        seen = []
        for x, _ in loader:  # the loader is seeded: training reads these very batches again
            seen.append(x.tolist())
            for row in x.tolist():
                (name,) = [n for n, rows in sources.items() if tuple(row) in rows]
                counts[name] += 1
        drawn.append(counts)
        batches.append(seen)
        keys.append(data_key)
        return real(cfg_, loader, data_key, cache, init_from=init_from)

    monkeypatch.setattr(anneal, "train_cached", counting_train_cached)
    with caplog.at_level("INFO", logger=anneal.log.name):
        results, history, metrics = anneal.anneal_candidates(
            base, tokens, pretrain, cfg, {"num_threads": 1}, {"enabled": False})

    runs = [k[: -len("_final_loss")] for k in metrics if k.endswith("_final_loss")]
    assert runs == ["default_only_r0.25", "default_only_r0.50", "cand_r0.25", "other_r0.25", "cand_r0.50",
                    "other_r0.50"]
    sequences = STEPS * BATCH  # 20 per run
    expected = {  # run -> sequences from (default mix, cand, other): round(ratio * 20) from the candidate
        "default_only_r0.25": (20, 0, 0), "default_only_r0.50": (20, 0, 0),
        "cand_r0.25": (15, 5, 0), "other_r0.25": (15, 0, 5),
        "cand_r0.50": (10, 10, 0), "other_r0.50": (10, 0, 10),
    }
    got = {run: (c[DEFAULT_MIX], c["cand"], c["other"]) for run, c in zip(runs, drawn)}
    assert got == expected and all(sum(v) == sequences for v in got.values())
    # the default-only runs go through the same sampler with share 0, so their batches are the seeded ones
    default = PackedDataset(tokens[DEFAULT_MIX].path, seq_len=SEQ)
    same_sampler = [x.tolist() for x, _ in anneal.mixed_loader(default, default, 0.0, BATCH, STEPS, seed=cfg.seed)]
    assert batches[0] == batches[1] == same_sampler
    assert same_sampler != [x.tolist() for x, _ in anneal.mixed_loader(default, default, 0.0, BATCH, STEPS, seed=0)]
    # a cache entry per training data: the two default-only runs (share 0, same length) are one run's data;
    # each candidate run's key holds its source, share and length
    assert keys[0] == keys[1] and len(set(keys)) == 5
    # ... and the seed: another seed's first run (stopped once its key is known) is another cache entry
    def first_key(cfg_, loader, data_key, cache, init_from=None):
        raise _Stop(data_key)

    monkeypatch.setattr(anneal, "train_cached", first_key)
    with pytest.raises(_Stop) as stopped:
        anneal.anneal_candidates(base, tokens, pretrain, dataclasses.replace(cfg, seed=4), {"num_threads": 1},
                                 {"enabled": False})
    assert stopped.value.args[0] not in keys
    assert [r.getMessage() for r in caplog.records if r.name == anneal.log.name and "annealing" in r.getMessage()] == [
        f"annealing {run}: {STEPS} steps, candidate share {share:.2f}"
        for run, share in zip(runs, [0, 0, 0.25, 0.25, 0.5, 0.5])]
    assert all(metrics[f"{r}_cache_hit"] == 0.0 for r in runs)  # no cache: each run trained
    # the history: step and one loss column per annealing run, a row per optimizer step
    assert list(history.columns) == ["step", *[f"{r}_loss" for r in runs]]
    assert history["step"].tolist() == list(range(1, STEPS + 1))
    assert np.isfinite(history.drop(columns="step").to_numpy()).all()
    assert metrics["anneal_steps"] == STEPS
    per_step = SEQ * BATCH  # tokens per optimizer step
    base_tokens = anneal.base_steps(pretrain, cfg) * per_step
    assert {k: metrics[k] for k in ("anneal_tokens", "anneal_peak_lr", "base_peak_lr", "anneal_steps_r0.25",
                                    "anneal_share_of_base_r0.50")} == pytest.approx({
        "anneal_tokens": STEPS * per_step, "anneal_peak_lr": cfg.anneal_lr_scale * pretrain.train.lr,
        "base_peak_lr": pretrain.train.lr, "anneal_steps_r0.25": STEPS,
        "anneal_share_of_base_r0.50": STEPS * per_step / base_tokens})
    # the results: every evaluated model on the configured tasks and item limit, one row per (task, metric)
    assert list(results.columns) == ["run", "dataset", "ratio", "task", "metric", "value", "n_items"]
    assert set(results["task"]) == {"piqa"} and set(results["n_items"]) == {2}
    assert results.loc[results["run"] == BASE, "ratio"].isna().all()
    assert set(results.loc[results["run"] == "cand_r0.50", "ratio"]) == {0.5}
    assert all(metrics[f"{r}_eval_cache_hit"] == 0.0 and np.isfinite(metrics[f"{r}_average"]) for r in [BASE, *runs])
    assert not any(k.endswith("_eval_seconds") for k in metrics)  # only the continuous metrics and the average
    assert set(results["run"]) == {BASE, *runs} and set(results["dataset"]) == {BASE, BASELINE, "cand", "other"}
    assert np.isfinite(pd.Series({r: metrics[f"{r}_final_loss"] for r in runs})).all()
    # every evaluated model's task-averaged continuous metrics and reference loss are recorded (the rank
    # agreement with from-scratch training reads them), and differ between differently annealed models
    for metric in ("mc_correct_prob_per_char", "mc_margin_per_char", "ref_bits_per_byte"):
        values = pd.Series({r: metrics[f"{r}_{metric}"] for r in [BASE, *runs]})
        assert np.isfinite(values).all() and values.nunique() > 1, metric


def test_without_a_fixed_length_each_run_anneals_app_a_steps_at_its_own_window_and_step_size(
        packed, corpus_sample, tmp_path, monkeypatch):
    tokenizer, _ = packed
    tokens = _repacked(corpus_sample, tokenizer, tmp_path, seq_len=16)  # packed at 16, annealed at 32
    pretrain = tiny_pretrain(seq_len=SEQ, batch_size=BATCH)
    pretrain.train = dataclasses.replace(pretrain.train, accumulate_grad_batches=2)  # 4 x 2 x 32 = 256 tokens a step
    cfg = VerificationConfig(ratios=[0.5], anneal_steps=None, anneal_epochs=0.5, anneal_max_steps=1000)
    base = LMCheckpoint(CausalLM(pretrain.model).eval(), tokenizer)
    seen = {}

    def first_run(cfg_, loader, data_key, cache, init_from=None):
        seen.update(steps=cfg_.train.max_steps, batches=len(loader), shape=tuple(next(iter(loader))[0].shape))
        raise _Stop

    monkeypatch.setattr(anneal, "train_cached", first_run)
    with pytest.raises(_Stop):
        anneal.anneal_candidates(base, tokens, pretrain, cfg, {"num_threads": 1}, {"enabled": False})
    # App. A: the candidate that needs the most, tokens x 0.5 epochs / 0.5 share, in steps of 256 tokens
    need = max(PackedDataset(tokens[c].path, seq_len=SEQ).n_tokens for c in ("cand", "other"))
    steps = -(-need // 256)
    assert steps > 1 and seen == {"steps": steps, "batches": 2 * steps, "shape": (BATCH, SEQ)}


def test_a_candidate_run_reads_its_candidate_at_the_runs_window_and_keys_the_default_mix_it_was_mixed_with(
        packed, corpus_sample, tmp_path, monkeypatch):
    tokenizer, _ = packed
    tokens = _repacked(corpus_sample, tokenizer, tmp_path, seq_len=16)  # packed at 16, annealed at 32
    pretrain = tiny_pretrain(seq_len=SEQ, batch_size=BATCH)
    cfg = VerificationConfig(ratios=[0.5], anneal_steps=2, tasks=["piqa"], limit=1)
    torch.manual_seed(0)
    base = LMCheckpoint(CausalLM(pretrain.model).eval(), tokenizer)
    real = anneal.train_cached

    def key_of_first_candidate_run(mix):
        def train(cfg_, loader, data_key, cache, init_from=None):
            if train.calls:  # the default-only run trained; the first candidate run is the one read
                raise _Stop(data_key, [tuple(x.shape) for x, _ in loader])
            train.calls += 1
            return real(cfg_, loader, data_key, cache, init_from=init_from)

        train.calls = 0
        monkeypatch.setattr(anneal, "train_cached", train)
        with pytest.raises(_Stop) as stopped:
            anneal.anneal_candidates(base, mix, pretrain, cfg, {"num_threads": 1}, {"enabled": False})
        key, shapes = stopped.value.args
        assert shapes == [(BATCH, SEQ)] * 2  # candidate and default rows alike at the run's 32 tokens
        return key

    # the same candidate, share, length, seed and base model; only the default mix differs
    same = key_of_first_candidate_run({DEFAULT_MIX: tokens[DEFAULT_MIX], "cand": tokens["cand"]})
    other = key_of_first_candidate_run({DEFAULT_MIX: tokens["other"], "cand": tokens["cand"]})
    assert same != other


# --- helpers for the hand-made inputs ---


def _words(k: int) -> str:
    return " ".join(["a"] * k)  # "a", "a a", ...: k tokens under the test tokenizer ("a", then " a" each)


def _ntokens(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def _tiny_pretrain():
    return tiny_pretrain(d_model=16, seq_len=SEQ, batch_size=BATCH)


def _documents(tokenizer, packed_dataset) -> list[str]:
    """The documents of a packed corpus, read back from its token stream (each ends with EOS, id 0)."""
    tokens = np.asarray(packed_dataset.tokens).tolist()
    docs, current = [], []
    for t in tokens:
        if t == 0:
            docs.append(tokenizer.decode(current))
            current = []
        else:
            current.append(t)
    assert not current  # the stream ends with an EOS
    return docs


# --- select_candidates ---


def _selection_inputs():
    """10 documents d0..d9 of 1..10 characters; raw and pruned scores with a known top 2."""
    documents = pd.DataFrame({"id": [f"d{i}" for i in range(10)],
                              "text": ["abcdefghij"[i] * (i + 1) for i in range(10)]})
    scores = pd.DataFrame({"id": documents["id"], "quality": [0.1, 0.9, 0.3, 0.2, 0.8, 0.7, 0.0, 0.4, 0.5, 0.6]})
    pruned_ids = ["d0", "d2", "d5", "d7", "d9"]
    pruned_scores = pd.DataFrame({"id": pruned_ids, "quality": [0.5, 0.9, 0.1, 0.6, 0.3]})
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(10, 4)).astype("float32")
    pruned_embeddings = embeddings[[0, 2, 5, 7, 9]]
    selected = documents.iloc[[0, 2, 3]].reset_index(drop=True)  # the run's own selection
    return documents, scores, embeddings, pruned_scores, pruned_embeddings, selected


def test_each_candidate_gets_its_recipes_documents_and_the_default_mix_a_seeded_sample():
    documents, scores, embeddings, pruned_scores, pruned_embeddings, selected = _selection_inputs()
    candidates = {"top": CorpusSpec(method="topk_quality", pool="raw", score="quality"),
                  "pruned_top": CorpusSpec(method="topk_quality", pool="pruned", score="quality"),
                  "raw": CorpusSpec(method="random", pool="raw"),
                  "selection": CorpusSpec(method="selection")}
    cfg = VerificationConfig(candidates=candidates, default_docs=4, seed=2)
    run_seed = 5  # the run's seed draws the random corpus; cfg.seed (2) draws the default mix
    got, table = anneal.select_candidates(documents, scores, embeddings, pruned_scores, pruned_embeddings, selected,
                                          cfg, {"docs": 2}, run_seed, {"enabled": False})

    # top 2 by quality of all documents: d1 (0.9), d4 (0.8); of the pruned pool: d2 (0.9), d7 (0.6);
    # random: the selection library's seeded draw of 2 of the 10; selection: the run's selected documents.
    drawn = [f"d{i}" for i in select_random(10, 2, run_seed)]
    assert drawn != [f"d{i}" for i in select_random(10, 2, cfg.seed)]  # so the seed that reaches it shows
    # default mix: pandas' seeded sample of 4 with cfg.seed, kept in corpus order
    mix = documents.sample(n=4, random_state=2).sort_index()["id"].tolist()
    assert mix == sorted(mix, key=lambda d: int(d[1:])) and len(set(mix)) == 4
    ids = {"top": ["d1", "d4"], "pruned_top": ["d2", "d7"], "raw": drawn, "selection": ["d0", "d2", "d3"],
           DEFAULT_MIX: mix}
    expected = pd.DataFrame({"candidate": [name for name, v in ids.items() for _ in v],
                             "id": [d for v in ids.values() for d in v]})
    pd.testing.assert_frame_equal(got, expected)  # one frame, numbered 0..n-1

    chars = {name: sum(int(d[1:]) + 1 for d in v) for name, v in ids.items()}  # document di has i+1 characters
    assert chars["top"] == 2 + 5 and chars["pruned_top"] == 3 + 8 and chars["selection"] == 1 + 3 + 4
    expected_table = pd.DataFrame([
        {"corpus": "top", "method": "topk_quality", "pool": "raw", "score": "quality", "docs": 2, "chars": 7},
        {"corpus": "pruned_top", "method": "topk_quality", "pool": "pruned", "score": "quality", "docs": 2,
         "chars": 11},
        {"corpus": "raw", "method": "random", "pool": "raw", "score": "quality", "docs": 2, "chars": chars["raw"]},
        {"corpus": "selection", "method": "selection", "pool": "raw", "score": "quality", "docs": 3, "chars": 8},
        {"corpus": DEFAULT_MIX, "method": "random", "pool": "raw", "score": "", "docs": 4,
         "chars": chars[DEFAULT_MIX]},
    ])
    pd.testing.assert_frame_equal(table, expected_table)


@pytest.mark.parametrize("default_docs, method", [(None, "all"), (10, "random"), (25, "random")])
def test_the_default_mix_is_the_whole_corpus_in_order_when_no_smaller_sample_is_asked(default_docs, method):
    # default_docs None keeps every document ("all"); a sample as large as the corpus or larger keeps every
    # document too, but is recorded as the configured random sample
    documents, scores, embeddings, pruned_scores, pruned_embeddings, selected = _selection_inputs()
    cfg = VerificationConfig(candidates={"selection": CorpusSpec(method="selection")}, default_docs=default_docs,
                             seed=2)
    got, table = anneal.select_candidates(documents, scores, embeddings, pruned_scores, pruned_embeddings, selected,
                                          cfg, {"docs": 2}, 0, {"enabled": False})
    assert got.loc[got["candidate"] == DEFAULT_MIX, "id"].tolist() == documents["id"].tolist()
    assert table.iloc[-1].to_dict() == {"corpus": DEFAULT_MIX, "method": method, "pool": "raw", "score": "",
                                        "docs": 10, "chars": 55}


# --- sample_tokens ---


def test_sample_tokens_draws_whole_documents_in_a_seeded_order_up_to_the_budget(tokenizer):
    texts = [_words(k) for k in range(1, 7)]  # 1..6 tokens, 2..7 with EOS
    assert [_ntokens(tokenizer, t) for t in texts] == [1, 2, 3, 4, 5, 6]
    assert np.random.default_rng(0).permutation(6).tolist() == [3, 2, 5, 4, 0, 1]  # the seeded draw order
    assert np.random.default_rng(1).permutation(6).tolist() == [4, 0, 2, 1, 5, 3]
    # seed 0, 14 tokens: texts[3] (5) -> 5, texts[2] (4) -> 9, texts[5] (7) would be 16: skipped, texts[4] (6)
    # would be 15: skipped, texts[0] (2) -> 11, texts[1] (3) -> exactly 14: kept. Returned in the given order.
    assert anneal.sample_tokens(texts, tokenizer, 14, seed=0) == [texts[0], texts[1], texts[2], texts[3]]
    # one token less and the last draw no longer fits
    assert anneal.sample_tokens(texts, tokenizer, 13, seed=0) == [texts[0], texts[2], texts[3]]
    # seed 1, 14 tokens: texts[4] (6) -> 6, texts[0] (2) -> 8, texts[2] (4) -> 12, the rest would exceed 14
    assert anneal.sample_tokens(texts, tokenizer, 14, seed=1) == [texts[0], texts[2], texts[4]]
    # a budget too small for any document keeps the first drawn alone (seed 0 draws texts[3] first)
    assert anneal.sample_tokens(texts, tokenizer, 1, seed=0) == [texts[3]]
    # a budget that holds everything keeps everything, in the given order
    assert anneal.sample_tokens(texts, tokenizer, 27, seed=0) == texts


def test_sample_tokens_stops_after_a_block_of_256_draws_once_fewer_than_16_tokens_are_left(tokenizer):
    # 300 distinct one-token documents (2 tokens with EOS): the draws go in blocks of 256
    words = sorted({tokenizer.decode([i]) for i in range(1, tokenizer.get_vocab_size())})
    texts = [w for w in words if _ntokens(tokenizer, w) == 1][:300]
    assert len(texts) == 300
    order = np.random.default_rng(4).permutation(300)

    def expect(positions):
        return [texts[i] for i in sorted(order[positions].tolist())]

    # 527 = 256 x 2 + 15: the first block fills 512, 15 < 16 are left, so the second block is not read
    assert anneal.sample_tokens(texts, tokenizer, 527, seed=4) == expect(slice(0, 256))
    # 528: 16 are left after the first block, so it goes on: 8 more documents of the second block
    assert anneal.sample_tokens(texts, tokenizer, 528, seed=4) == expect(slice(0, 264))
    # room for all: each of the 300 exactly once, in the given order
    assert anneal.sample_tokens(texts, tokenizer, 600, seed=4) == texts


# --- pack_candidates ---


def test_pack_candidates_packs_the_default_mix_whole_and_each_candidate_as_a_seeded_token_sample(tokenizer):
    documents = pd.DataFrame({"id": [f"d{k}" for k in range(1, 9)], "text": [_words(k) for k in range(1, 9)]})
    # select_candidates' layout: the candidates' rows, then the default mix's, each in corpus order
    candidates = pd.DataFrame({"candidate": ["raw"] * 5 + [DEFAULT_MIX] * 3, "id": documents["id"]})
    assert np.random.default_rng(0).permutation(5).tolist() == [2, 4, 3, 0, 1]
    assert np.random.default_rng(1).permutation(5).tolist() == [4, 0, 1, 2, 3]
    assert [_ntokens(tokenizer, t) for t in documents["text"]] == list(range(1, 9))
    text = dict(zip(documents["id"], documents["text"]))

    packed, metrics = anneal.pack_candidates(documents, candidates, tokenizer, seq_len=4, candidate_tokens=16)
    # raw: d1..d5 have 2..6 tokens with EOS; seed 0 (the default) draws d3 (4), d5 (6) -> 10, d4 (5) -> 15,
    # then d1 (2) and d2 (3) would exceed 16. The default mix d6..d8 (24 tokens > 16) is never cut.
    assert list(packed) == ["raw", DEFAULT_MIX]  # in the candidates' order
    assert _documents(tokenizer, packed["raw"]) == [text["d3"], text["d4"], text["d5"]]
    assert _documents(tokenizer, packed[DEFAULT_MIX]) == [text["d6"], text["d7"], text["d8"]]
    assert packed["raw"].seq_len == 4 and len(packed["raw"]) == (15 - 1) // 4
    assert metrics == {"raw_tokens": 15.0, "raw_verification_docs": 3.0,
                       f"{DEFAULT_MIX}_tokens": 24.0, f"{DEFAULT_MIX}_verification_docs": 3.0}

    # seed 1 draws d5 (6), d1 (2) -> 8, d2 (3) -> 11, d3 (4) -> 15; d4 (5) would exceed 16
    packed, metrics = anneal.pack_candidates(documents, candidates, tokenizer, seq_len=4, candidate_tokens=16, seed=1)
    assert _documents(tokenizer, packed["raw"]) == [text["d1"], text["d2"], text["d3"], text["d5"]]
    assert metrics["raw_tokens"] == 15.0 and metrics["raw_verification_docs"] == 4.0

    # candidate_tokens=None keeps every candidate whole
    packed, metrics = anneal.pack_candidates(documents, candidates, tokenizer, seq_len=4)
    assert _documents(tokenizer, packed["raw"]) == [text[f"d{k}"] for k in range(1, 6)]
    assert metrics["raw_tokens"] == 2 + 3 + 4 + 5 + 6 and metrics["raw_verification_docs"] == 5.0


# --- base run ---


def test_base_steps_are_the_base_tokens_in_whole_steps_rounded_up_as_the_run_trains_them():
    pretrain = _tiny_pretrain()  # 32 x 4 = 128 tokens a step
    assert anneal.base_steps(pretrain, VerificationConfig(base_tokens=1280)) == 10
    assert anneal.base_steps(pretrain, VerificationConfig(base_tokens=1281)) == 11  # a started step is trained
    assert anneal.base_steps(pretrain, VerificationConfig(base_tokens=5)) == 1


def test_train_base_trains_the_default_mix_alone_with_the_wsd_schedule_of_the_config(packed, corpus_sample, tmp_path,
                                                                                    monkeypatch):
    tokenizer, packed_tokens = packed
    # the default mix packed at 16 tokens a window: the base run re-reads it at its own 32
    tokens = {**packed_tokens, DEFAULT_MIX: pack_documents(corpus_sample["text"].head(60).tolist(), tokenizer,
                                                           tmp_path / "default16", seq_len=16)}
    pretrain = _tiny_pretrain()
    # the pretrain run's own budget and schedule must not leak into the base run
    pretrain.train = dataclasses.replace(pretrain.train, max_tokens=256, max_steps=3, seed=0)
    # 704 tokens = 5.5 steps of 128: 6 steps; warmup round(0.5 x 6) = 3, decay over the last 0.5 x 6 = 3 steps
    cfg = VerificationConfig(base_tokens=704, base_warmup_fraction=0.5, base_decay_fraction=0.5, seed=3)
    default_rows = _rows(PackedDataset(tokens[DEFAULT_MIX].path, seq_len=SEQ))
    seen: list[tuple[int, ...]] = []
    real = anneal.train_cached

    def reading_train_cached(cfg_, loader, **kwargs):
        for x, _ in loader:  # the loader is seeded: training reads these very batches again
            assert tuple(x.shape) == (BATCH, SEQ)
            seen.extend(tuple(row) for row in x.tolist())
        return real(cfg_, loader, **kwargs)

    monkeypatch.setattr(anneal, "train_cached", reading_train_cached)
    cache = {"enabled": True, "dir": str(tmp_path / "cache")}
    checkpoint, history, metrics = anneal.train_base(tokens, tokenizer, pretrain, cfg, cache)

    assert seen and set(seen) <= default_rows  # the default mix only, never a candidate
    # in the order of the configured seed's shuffle (3, not the loader's default 0)
    def order(seed):
        loader = anneal.loader_from(PackedDataset(tokens[DEFAULT_MIX].path, seq_len=SEQ), BATCH, seed)
        return [tuple(row) for x, _ in loader for row in x.tolist()]

    assert seen == order(3) != order(0)
    assert history["step"].tolist() == [1, 2, 3, 4, 5, 6] == list(range(1, anneal.base_steps(pretrain, cfg) + 1))
    assert history.columns.tolist()[:5] == ["step", "base_loss", "base_aux_loss", "base_lr", "base_tokens"]
    assert history["base_tokens"].tolist() == [128 * s for s in range(1, 7)]
    # row s holds the LR of step s (0-based): warmup 1/3, 2/3, 1 x peak (steps 0..2), then exponential decay
    # from the pretrain peak 4e-4 to its floor 4e-5 over steps 3..5; step 6 would stay at the floor
    lr, floor = pretrain.train.lr, pretrain.train.min_lr
    assert (lr, floor) == (4e-4, 4e-5)
    assert history["base_lr"].tolist() == pytest.approx([2 / 3 * lr, lr, lr * 0.1 ** (1 / 3), lr * 0.1 ** (2 / 3),
                                                         floor, floor])
    assert metrics["base_train_steps"] == 6 and metrics["base_train_tokens"] == 768
    assert np.isfinite(metrics["base_final_loss"]) and metrics["base_cache_hit"] == 0.0

    assert isinstance(checkpoint, LMCheckpoint) and isinstance(checkpoint.model, CausalLM)
    assert checkpoint.tokenizer is tokenizer
    train = checkpoint.config["train"]
    assert (train["schedule"], train["max_tokens"], train["max_steps"], train["warmup_steps"],
            train["decay_fraction"], train["seed"]) == ("wsd", 704, None, 3, 0.5, 3)
    assert checkpoint.config["model"] == dataclasses.asdict(pretrain.model)

    # cached by the default mix's content: the same run again is read back, another default mix is trained
    again, _, metrics = anneal.train_base(tokens, tokenizer, pretrain, cfg, cache)
    assert metrics["base_cache_hit"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(again.model.state_dict().values(),
                                                  checkpoint.model.state_dict().values()))
    other = {DEFAULT_MIX: tokens["cand"]}
    _, _, metrics = anneal.train_base(other, tokenizer, pretrain, cfg, cache)
    assert metrics["base_cache_hit"] == 0.0


def test_anneal_config_warms_up_then_decays_from_a_scaled_peak_for_exactly_the_given_steps():
    pretrain = _tiny_pretrain()
    # a linear-decay base: App. A's annealing decays exponentially whatever the base run did
    pretrain.train = dataclasses.replace(pretrain.train, max_steps=None, max_tokens=256, seed=0, decay_shape="linear")
    cfg = VerificationConfig(anneal_warmup_fraction=0.25, anneal_lr_scale=0.5, anneal_min_lr_scale=0.1, seed=7)
    train = anneal.anneal_config(pretrain, cfg, 20).train
    # warmup round(0.25 x 20) = 5, the other 15 of 20 steps decay exponentially; peak 0.5 x 4e-4, floor 0.1 x peak
    assert (train.schedule, train.decay_shape, train.warmup_steps, train.max_steps, train.total_steps(),
            train.seed) == ("wsd", "exp", 5, 20, 20, 7)
    assert train.decay_fraction == pytest.approx(15 / 20)
    assert (train.lr, train.min_lr) == pytest.approx((2e-4, 2e-5))
    assert (pretrain.train.lr, pretrain.train.schedule, pretrain.train.decay_shape) == (4e-4, "constant", "linear")  # untouched


# --- annealing length (App. A) ---


def test_annealing_length_is_app_a_formula_for_the_largest_need_capped(tokenizer, tmp_path):
    # candidates of 100 and 40 tokens: 10 documents of 9 words (+EOS), 4 of 9
    big = pack_documents([_words(9)] * 10, tokenizer, tmp_path / "big", seq_len=8)
    small = pack_documents([_words(9)] * 4, tokenizer, tmp_path / "small", seq_len=8)
    assert (big.n_tokens, small.n_tokens) == (100, 40)
    candidates = {"big": big, "small": small}
    cfg = VerificationConfig(anneal_epochs=3.0, anneal_max_steps=50)
    # steps = ceil(tokens x n_epoch / r / (batch x seq_len)), batch 4 x seq_len 8 = 32 tokens a step
    # big at r = 0.5: 100 x 3 / 0.5 / 32 = 18.75 -> 19; small: 40 x 3 / 0.5 / 32 = 7.5 -> 8
    assert anneal.annealing_length(cfg, candidates, [0.5], 4, 8) == 19
    assert anneal.annealing_length(cfg, {"small": small}, [0.5], 4, 8) == 8
    # over several ratios the one needing most: big at r = 0.25: 37.5 -> 38
    assert anneal.annealing_length(cfg, candidates, [0.5, 0.25], 4, 8) == 38
    # batch and sequence length enter as their product's steps: 2 x 8 = 16 tokens a step: 37.5 -> 38 at r = 0.5
    assert anneal.annealing_length(cfg, candidates, [0.5], 2, 8) == 38
    assert anneal.annealing_length(dataclasses.replace(cfg, anneal_epochs=5.0), candidates, [0.5], 4, 8) == 32
    # the cap binds: 38 > 30
    assert anneal.annealing_length(dataclasses.replace(cfg, anneal_max_steps=30), candidates, [0.25], 4, 8) == 30
    # a fixed anneal_steps overrides the formula, whether shorter or longer
    assert anneal.annealing_length(dataclasses.replace(cfg, anneal_steps=7), candidates, [0.25], 4, 8) == 7
    assert anneal.annealing_length(dataclasses.replace(cfg, anneal_steps=90), candidates, [0.25], 4, 8) == 90


# --- Table 8 ---


def _results(rows):
    return pd.DataFrame([{"run": run, "dataset": dataset, "ratio": ratio, "task": task, "metric": "acc",
                          "value": value, "n_items": 8}
                         for run, dataset, ratio, values in rows for task, value in values.items()])


def test_tabulate_reports_each_runs_average_and_each_candidates_deltas_in_points():
    results = _results([
        ("base", BASE, np.nan, {"piqa": 0.5, "arc_easy": 0.25}),
        ("cand_r0.30", "cand", 0.3, {"piqa": 0.75, "arc_easy": 0.25}),
        ("default_only_r0.30", BASELINE, 0.3, {"piqa": 0.625, "arc_easy": 0.375}),
        ("default_only_r0.50", BASELINE, 0.5, {"piqa": 0.5, "arc_easy": 0.5}),
        ("cand_r0.50", "cand", 0.5, {"piqa": 0.875, "arc_easy": 0.375}),
    ])
    table, metrics, candidates, tasks = anneal.tabulate(results)
    assert tasks == ["piqa", "arc_easy", "average"]  # the delta columns' names, the average included
    # percent: base 50 / 25 (average 37.5); r0.30: baseline 62.5 / 37.5 (50), cand 75 / 25 (50) -> +12.5, -12.5, 0;
    # r0.50: baseline 50 / 50 (50), cand 87.5 / 37.5 (62.5) -> +37.5, -12.5, +12.5
    assert metrics == {
        "base_average": 37.5,
        "default_only_r0.30_average": 50.0,
        "cand_r0.30_average": 50.0, "cand_r0.30_delta_piqa": 12.5, "cand_r0.30_delta_arc_easy": -12.5,
        "cand_r0.30_delta_average": 0.0,
        "default_only_r0.50_average": 50.0,
        "cand_r0.50_average": 62.5, "cand_r0.50_delta_piqa": 37.5, "cand_r0.50_delta_arc_easy": -12.5,
        "cand_r0.50_delta_average": 12.5,
    }
    assert table["dataset"].tolist() == [BASE, BASELINE, "cand", BASELINE, "cand"]
    pd.testing.assert_frame_equal(candidates, table.iloc[[2, 4]])  # the candidate rows only, as in the table


def test_tabulate_refuses_a_candidate_without_a_default_only_run_at_its_ratio():
    results = _results([("default_only_r0.30", BASELINE, 0.3, {"piqa": 0.5}),
                        ("cand_r0.50", "cand", 0.5, {"piqa": 0.5})])
    with pytest.raises(ValueError, match="^no default_only run at ratio 0.5 to compare cand with$"):
        anneal.tabulate(results)
