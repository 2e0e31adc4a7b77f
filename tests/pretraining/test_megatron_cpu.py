"""The Megatron-core training loop runs on CPU (gloo): loss falls, a checkpoint resumes exactly, and the
exported model computes what Megatron's GPTModel computes, so `pipeline=evaluate` can score it.

Everything runs in one subprocess (megatron-core keeps global parallel state, and importing it costs
~10 s): a tiny dense GPT for 8 steps, the same run resumed to 12, an uninterrupted 12-step run to
compare with, and a tiny MoE for 6 steps; then both are exported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("megatron.core", reason="optional extra: pip install -e .[megatron]")
pytestmark = pytest.mark.slow  # one subprocess of four Megatron training runs, then gloo data parallel: minutes

SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("ignore")
    from pathlib import Path
    from curation.pretraining.launch import export, main
    root = Path(sys.argv[1])
    common = ["--device", "cpu", "--data-prefix", str(root / "meg" / "docs"), "--tokenizer",
              str(root / "tokenizer.json"), "--seq-length", "64", "--global-batch-size", "4",
              "--micro-batch-size", "2", "--lr", "3e-3", "--warmup-iters", "2", "--log-interval", "1"]
    main(["train", "--model", "tiny_dense", "--train-iters", "8", "--save", str(root / "dense"),
          "--save-interval", "4", *common])
    main(["train", "--model", "tiny_dense", "--train-iters", "12", "--save", str(root / "dense"),
          "--save-interval", "4", *common])
    main(["train", "--model", "tiny_dense", "--train-iters", "12", "--save", str(root / "straight"),
          "--save-interval", "12", *common])
    main(["train", "--model", "tiny_moe", "--train-iters", "6", "--save", str(root / "moe"),
          "--save-interval", "6", *common])
    out = {name: export(root / name, root / f"export_{name}") for name in ("dense", "moe")}
    print("RESULT " + json.dumps(out))
""")


def _log(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(corpus_sample, tmp_path_factory):
    from curation.lm import train_tokenizer
    from curation.pretraining.launch import convert

    root = tmp_path_factory.mktemp("megatron_cpu")
    docs = corpus_sample.head(60)[["id", "text"]]
    docs.to_parquet(root / "docs.parquet")
    train_tokenizer(docs["text"].tolist(), vocab_size=600).save(str(root / "tokenizer.json"))
    convert(root / "docs.parquet", root / "meg" / "docs", root / "tokenizer.json")
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(root)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    return root, result


def test_loss_falls_and_the_checkpoint_resumes_exactly(runs):
    root, _ = runs
    log = _log(root / "dense")
    steps = [r for r in log if "iteration" in r]
    assert [r["iteration"] for r in steps] == list(range(1, 13))  # 1-8, then 9-12 after the resume
    assert {"resumed_from": 8} in log
    assert steps[-1]["lm_loss"] < steps[0]["lm_loss"] - 0.5  # from ~ln(600) = 6.4
    assert json.loads((root / "dense" / "latest.json").read_text())["iteration"] == 12
    assert sorted(p.name for p in (root / "dense").glob("iter_*")) == ["iter_0000004", "iter_0000008",
                                                                       "iter_0000012"]
    # Model, optimizer moments and LR schedule are restored: the resumed run is the uninterrupted one.
    straight = [r for r in _log(root / "straight") if "iteration" in r]
    for a, b in zip(steps, straight):
        assert a["lm_loss"] == pytest.approx(b["lm_loss"], rel=1e-4, abs=1e-5), (a, b)
        assert a["lr"] == pytest.approx(b["lr"])
    assert steps[0]["lr"] < steps[2]["lr"] == pytest.approx(3e-3)  # 2 warm-up steps


def test_moe_trains_and_exports_match_megatrons_forward(runs):
    root, result = runs
    moe = [r for r in _log(root / "moe") if "iteration" in r]
    assert len(moe) == 6 and moe[-1]["lm_loss"] < moe[0]["lm_loss"]
    for name in ("dense", "moe"):
        assert result[name]["max_abs_logit_diff"] < 1e-4 * max(result[name]["logit_scale"], 1.0), result[name]
    assert result["dense"]["iteration"] == 12 and result["moe"]["iteration"] == 6


def test_exported_checkpoint_is_scored_by_the_evaluation(runs):
    """The exported folder is a regular model folder: the zero-shot scorer reads it like any checkpoint."""
    from curation.evaluation.scoring import LMScorer
    from curation.lm import load_model, load_tokenizer

    root, _ = runs
    folder = root / "export_dense"
    model, tokenizer = load_model(folder), load_tokenizer(folder / "tokenizer.json")
    assert json.loads((folder / "config.json").read_text())["megatron"]["iteration"] == 12
    scorer = LMScorer(model, tokenizer)
    (good, _), (bad, _) = scorer.loglikelihood([("The", " the"), ("The", " zqxv")])
    assert good > bad  # a trained model prefers a common word to a junk string
    # --versioned writes the layout of the versioned lm_checkpoint dataset: pipeline=evaluate loads it.
    from curation.datasets import LMCheckpointDataset
    from curation.pretraining.launch import export

    written = export(root / "dense", root / "catalog" / "lm_checkpoint", versioned=True, check_tokens=0)
    from kedro.io.core import Version

    loaded = LMCheckpointDataset(filepath=str(root / "catalog" / "lm_checkpoint"), version=Version(None, None)).load()
    assert written["output"].endswith("/lm_checkpoint") and loaded.model.config.n_layer == 2
    assert loaded.model.embed_tokens.weight.equal(model.embed_tokens.weight)


def test_two_gloo_processes_train_data_parallel(runs):
    """torchrun with 2 CPU processes (gloo, torch DDP): the first step's loss over the global batch is the
    single-process run's (same samples, same initial weights), and both ranks finish."""
    root, _ = runs
    argv = ["--model", "tiny_dense", "--device", "cpu", "--data-prefix", str(root / "meg" / "docs"),
            "--tokenizer", str(root / "tokenizer.json"), "--seq-length", "64", "--global-batch-size", "4",
            "--micro-batch-size", "1", "--lr", "3e-3", "--warmup-iters", "2", "--log-interval", "1",
            "--train-iters", "4", "--save", str(root / "ddp"), "--save-interval", "4"]
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", "29761", "-m", "curation.pretraining.launch", "train", *argv],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    ddp = [r for r in _log(root / "ddp") if "iteration" in r]
    single = [r for r in _log(root / "straight") if "iteration" in r]
    assert [r["world_size"] for r in ddp] == [2] * 4
    assert ddp[0]["lm_loss"] == pytest.approx(single[0]["lm_loss"], rel=1e-5)
    assert json.loads((root / "ddp" / "latest.json").read_text())["iteration"] == 4
