"""The lm-evaluation-harness wrapper answers the harness's three request types like LMScorer (needs lm_eval)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("lm_eval", reason="lm-evaluation-harness is optional: pip install lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402

from curation.evaluation import LMScorer  # noqa: E402
from curation.evaluation.harness import CurationLM  # noqa: E402
from curation.lm import CausalLM, ModelConfig, save_model, save_tokenizer, train_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def saved(corpus_sample, tmp_path_factory):
    folder = tmp_path_factory.mktemp("harness")
    tok = train_tokenizer(corpus_sample["text"].head(100).tolist(), vocab_size=512)
    save_tokenizer(tok, folder / "tokenizer.json")
    torch.manual_seed(0)
    model = CausalLM(ModelConfig(vocab_size=512, max_seq_len=64, n_layer=1, d_model=32, n_head=2, n_kv_head=1,
                                 d_ff=64))
    save_model(model, folder / "model")
    return folder, model, tok


def test_wrapper_matches_the_scorer(saved, corpus_sample):
    folder, model, tok = saved
    lm = CurationLM.create_from_arg_string(
        f"pretrained={folder / 'model'},tokenizer={folder / 'tokenizer.json'},batch_size=4"
    )
    scorer = LMScorer(model, tok, batch_size=4)
    text = corpus_sample["text"].iloc[2][:300]
    pairs = [(text[:50], text[50:80]), ("Question: what is it?\nAnswer:", " a test")]
    requests = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
    got = lm.loglikelihood(requests)
    want = scorer.loglikelihood(pairs)
    assert [g[0] for g in got] == pytest.approx([w[0] for w in want], abs=1e-5)

    rolling = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    assert rolling == pytest.approx(scorer.loglikelihood_rolling([text]), abs=1e-4)

    gen = lm.generate_until([Instance("generate_until", {}, (text[:40], {"until": ["\n"], "max_gen_toks": 5}), 0)])
    assert gen == scorer.generate_until([text[:40]], ["\n"], 5)


def test_the_harness_runs_a_local_task_on_our_checkpoint(saved, tmp_path):
    """lm_eval.simple_evaluate, a YAML task over a local JSONL file (no download), our model wrapper."""
    import json

    import lm_eval
    from lm_eval.tasks import TaskManager

    folder, model, tok = saved
    items = [{"question": "The capital of France is", "choices": [" Paris", " a banana"], "label": 0},
             {"question": "Water is made of hydrogen and", "choices": [" oxygen", " cheese"], "label": 0},
             {"question": "Two plus two is", "choices": [" five", " four"], "label": 1}]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(i) + "\n" for i in items))
    (tmp_path / "tiny_mc.yaml").write_text(
        "task: curation_tiny_mc\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        "doc_to_text: '{{question}}'\n"
        "doc_to_choice: '{{choices}}'\n"
        "doc_to_target: '{{label}}'\n"
        "metric_list:\n  - metric: acc\n  - metric: acc_norm\n")
    lm = CurationLM(pretrained=str(folder / "model"), tokenizer=str(folder / "tokenizer.json"), batch_size=4)
    results = lm_eval.simple_evaluate(model=lm, tasks=["curation_tiny_mc"],
                                      task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False))
    got = results["results"]["curation_tiny_mc"]
    # the same three items scored by our own log-likelihood scorer: same accuracy
    scorer = LMScorer(model, tok, batch_size=4)
    # The harness asks for context + target_delimiter (" ") + choice; acc takes the argmax of the
    # log-likelihoods, acc_norm of the log-likelihoods over the choice's length in characters.
    correct, correct_norm = 0, 0
    for item in items:
        scores = [s for s, _ in scorer.loglikelihood([(item["question"], " " + c) for c in item["choices"]])]
        norm = [s / len(c) for s, c in zip(scores, item["choices"])]
        correct += int(max(range(len(scores)), key=scores.__getitem__) == item["label"])
        correct_norm += int(max(range(len(norm)), key=norm.__getitem__) == item["label"])
    assert got["acc,none"] == pytest.approx(correct / 3)
    assert got["acc_norm,none"] == pytest.approx(correct_norm / 3)
