"""Efficient verification's annealing runs draw the configured candidate share (Ultra-FineWeb Sec. 2.2, App. A).

The candidate and the default mix are packed from disjoint real documents, so every training sequence can be
told apart by its tokens. `train_cached` is wrapped (it still trains) to read the batches of each run's loader:
a candidate run at ratio r must hold round(r * sequences) candidate sequences, the default-only run none.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from curation.lm import get_config, pack_documents, train_tokenizer
from curation.lm.checkpoint import LMCheckpoint
from curation.lm.model import CausalLM, ModelConfig
from curation.verification import anneal
from curation.verification.config import BASE, BASELINE, DEFAULT_MIX, VerificationConfig

SEQ, BATCH, STEPS = 32, 4, 5


@pytest.fixture(scope="module")
def packed(corpus_sample, tmp_path_factory):
    texts = corpus_sample["text"].head(120).tolist()
    tokenizer = train_tokenizer(texts, vocab_size=512)
    root = tmp_path_factory.mktemp("verification")
    tokens = {DEFAULT_MIX: pack_documents(texts[:60], tokenizer, root / "default", seq_len=SEQ),
              "cand": pack_documents(texts[60:90], tokenizer, root / "cand", seq_len=SEQ),
              "other": pack_documents(texts[90:], tokenizer, root / "other", seq_len=SEQ)}
    return tokenizer, tokens


def _rows(dataset) -> set[tuple[int, ...]]:
    return {tuple(dataset[i][0].tolist()) for i in range(len(dataset))}


def test_each_candidate_run_draws_its_share_and_the_default_only_run_none(packed, monkeypatch):
    tokenizer, tokens = packed
    pretrain = get_config("tiny")
    pretrain.tokenizer.vocab_size = 512
    pretrain.model = ModelConfig(vocab_size=512, max_seq_len=SEQ, n_layer=1, d_model=32, n_head=2, n_kv_head=1,
                                 d_ff=64)
    pretrain.train = dataclasses.replace(pretrain.train, seq_len=SEQ, batch_size=BATCH, num_threads=1)
    cfg = VerificationConfig(ratios=[0.25, 0.5], anneal_steps=STEPS, tasks=["piqa"], limit=2)
    torch.manual_seed(0)
    base = LMCheckpoint(CausalLM(pretrain.model).eval(), tokenizer)

    sources = {name: _rows(p) for name, p in tokens.items()}
    assert not any(sources[a] & sources[b] for a in sources for b in sources if a < b)  # disjoint documents
    drawn: list[dict[str, int]] = []
    real = anneal.train_cached

    def counting_train_cached(cfg_, loader, data_key, cache, init_from=None):
        counts = dict.fromkeys(sources, 0)
        for x, _ in loader:  # the loader is seeded: training reads these very batches again
            for row in x.tolist():
                (name,) = [n for n, rows in sources.items() if tuple(row) in rows]
                counts[name] += 1
        drawn.append(counts)
        return real(cfg_, loader, data_key, cache, init_from=init_from)

    monkeypatch.setattr(anneal, "train_cached", counting_train_cached)
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
    assert metrics["anneal_steps"] == STEPS
    assert set(results["run"]) == {BASE, *runs} and set(results["dataset"]) == {BASE, BASELINE, "cand", "other"}
    assert np.isfinite(pd.Series({r: metrics[f"{r}_final_loss"] for r in runs})).all()
    # every evaluated model's task-averaged continuous metrics and reference loss are recorded (the rank
    # agreement with from-scratch training reads them), and differ between differently annealed models
    for metric in ("mc_correct_prob_per_char", "mc_margin_per_char", "ref_bits_per_byte"):
        values = pd.Series({r: metrics[f"{r}_{metric}"] for r in [BASE, *runs]})
        assert np.isfinite(values).all() and values.nunique() > 1, metric
