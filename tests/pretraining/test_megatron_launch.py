"""Megatron launcher on CPU: indexed-dataset round trip, GPTDataset samples, the plan and its refusals."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("megatron.core", reason="optional extra: pip install -e .[megatron]")

from curation.lm import eos_id, pack_documents, train_tokenizer  # noqa: E402
from curation.pretraining.launch import build_plan, build_train_dataset, convert, parser, train  # noqa: E402


@pytest.fixture(scope="module")
def selection(corpus_sample, tmp_path_factory):
    """40 real documents as a selection parquet, a tokenizer trained on them, and their packed tokens."""
    root = tmp_path_factory.mktemp("megatron")
    docs = corpus_sample.head(40)[["id", "text"]]
    docs.to_parquet(root / "selected_documents.parquet")
    tokenizer = train_tokenizer(docs["text"].tolist(), vocab_size=600)
    tokenizer.save(str(root / "tokenizer.json"))
    pack_documents(docs["text"].tolist(), tokenizer, root / "packed", seq_len=64)
    return root, docs, tokenizer


def test_conversion_round_trips_through_megatrons_indexed_dataset(selection):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    root, docs, tokenizer = selection
    stats = convert(root / "selected_documents.parquet", root / "meg" / "from_parquet", root / "tokenizer.json")
    assert (stats.documents, stats.dtype, stats.eod_id) == (40, "uint16", eos_id(tokenizer))
    indexed = IndexedDataset(str(root / "meg" / "from_parquet"))
    assert len(indexed) == 40
    for i, text in enumerate(docs["text"]):  # token equality, document by document, EOS appended
        expected = [*tokenizer.encode(text, add_special_tokens=False).ids, eos_id(tokenizer)]
        assert indexed[i].tolist() == expected
    assert int(indexed.sequence_lengths.sum()) == stats.tokens
    # Our packed stream (doc EOS doc EOS ...) converts to the very same files.
    convert(root / "packed", root / "meg" / "from_packed")
    for ext in (".bin", ".idx"):
        assert (root / "meg" / f"from_packed{ext}").read_bytes() == (root / "meg" / f"from_parquet{ext}").read_bytes()
    assert not list((root / "meg").glob(".*tmp*"))  # temporary files renamed away
    # The pipeline's sharded selected_documents folder (3 shards) converts to the very same files too.
    from curation.datasets import ShardedDataset

    ShardedDataset(path=str(root / "selected_documents"), rows_per_shard=15).save(docs)
    convert(root / "selected_documents", root / "meg" / "from_shards", root / "tokenizer.json")
    for ext in (".bin", ".idx"):
        assert (root / "meg" / f"from_shards{ext}").read_bytes() == (root / "meg" / f"from_parquet{ext}").read_bytes()


def test_gpt_dataset_samples_are_windows_of_whole_documents(selection):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    root, _, tokenizer = selection
    convert(root / "packed", root / "meg" / "train")
    documents = [tuple(d.tolist()) for d in IndexedDataset(str(root / "meg" / "train"))]
    dataset = build_train_dataset(str(root / "meg" / "train"), str(root / "tokenizer.json"), seq_length=64,
                                  num_samples=50, seed=0, cache_dir=str(root / "cache"))
    assert len(dataset) >= 50
    eod = eos_id(tokenizer)
    for i in (0, 7, 49):
        sample = dataset[i]
        assert sample["tokens"].shape == (64,) and bool((sample["tokens"][1:] == sample["labels"][:-1]).all())
        window = [*sample["tokens"].tolist(), int(sample["labels"][-1])]
        cuts = [j for j, t in enumerate(window) if t == eod]
        pieces = [tuple(window[a + 1:b + 1]) for a, b in zip(cuts, cuts[1:])]
        assert all(p in documents for p in pieces)  # interior pieces are whole documents
        if cuts:  # the edges are a document's tail and a document's head
            assert any(d[-(cuts[0] + 1):] == tuple(window[:cuts[0] + 1]) for d in documents)
            assert any(d[:len(window) - cuts[-1] - 1] == tuple(window[cuts[-1] + 1:]) for d in documents)


def _args(*argv: str) -> argparse.Namespace:
    return parser().parse_args(["train", *argv])


def test_plan_arithmetic_and_refusals():
    plan = build_plan(_args("--model", "qwen2_5_1_5b", "--micro-batch-size", "2"), world_size=64, count=False)
    assert (plan.data_parallel, plan.grad_accumulation) == (64, 12)  # 1536 = 2 x 64 x 12
    assert plan.tokens_per_iteration == 1536 * 8192 and plan.train_iters == 31790  # ceil(400e9 / 12.58M)
    assert (plan.lr, plan.weight_decay, plan.clip_grad, plan.lr_schedule) == (4e-4, 0.1, 1.0, "constant")
    tp = build_plan(_args("--model", "qwen2_5_1_5b", "--tensor-parallel", "4", "--tokens", "1e9"), 64, count=False)
    assert (tp.data_parallel, tp.grad_accumulation, tp.train_iters) == (16, 96, 80)
    with pytest.raises(SystemExit, match="not a multiple"):
        build_plan(_args("--model", "qwen2_5_1_5b", "--global-batch-size", "1000"), 64, count=False)
    with pytest.raises(SystemExit, match="expert"):
        build_plan(_args("--model", "moe_7b", "--expert-parallel", "3"), 64, count=False)
    if not torch.cuda.is_available():  # CPU training exists (--device cpu); asking for CUDA without it fails
        with pytest.raises(SystemExit, match="no CUDA GPU"):
            train(_args("--model", "qwen2_5_1_5b", "--device", "cuda", "--data-prefix", "x", "--tokenizer", "y"))
    with pytest.raises(SystemExit, match="no paper budget"):
        build_plan(_args("--model", "tiny_dense", "--seq-length", "64"), 1, count=False)
    with pytest.raises(SystemExit, match="exceeds"):
        build_plan(_args("--model", "tiny_dense", "--train-iters", "5"), 1, count=False)  # 8192 > 256 positions


def test_dry_run_builds_on_meta_and_prints_the_plan(selection):
    root, _, _ = selection
    stats = convert(root / "packed", root / "meg" / "plan")
    # A subprocess: building initialises torch.distributed (gloo) and Megatron's global state.
    done = subprocess.run(
        [sys.executable, "-m", "curation.pretraining.launch", "train", "--model", "moe_7b", "--dry-run",
         "--world-size", "64", "--expert-parallel", "2", "--data-prefix", str(root / "meg" / "plan"),
         "--tokenizer", str(root / "tokenizer.json")],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    plan = json.loads(done.stdout.strip().splitlines()[-1])
    assert plan["train_iters"] == 23842 and plan["grad_accumulation"] == 24  # 300B / (1536 x 8192)
    assert abs(plan["total_parameters"] / 7.0e9 - 1) < 0.05
    assert abs(plan["active_non_embedding_parameters"] / 0.68e9 - 1) < 0.05
    assert plan["dataset_tokens"] == stats.tokens and plan["tokenizer_vocab_size"] == 600
    assert np.isclose(plan["epochs"], plan["train_iters"] * 1536 * 8192 / stats.tokens)


def test_blank_texts_are_skipped_and_counted(selection, tmp_path, capsys):
    """Issue #44: blank texts were dropped (null, empty) or written (white space) without a word; now each is
    skipped and counted, in the stats and on stderr."""
    import pandas as pd
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    from curation.pretraining.launch import main

    root, docs, tokenizer = selection
    texts = list(docs["text"].head(6))
    frame = pd.DataFrame({"id": [f"d{i}" for i in range(9)],
                          "text": texts[:2] + [None, ""] + texts[2:4] + [" \n\t "] + texts[4:6]})
    frame.to_parquet(tmp_path / "blanks.parquet")
    stats = convert(tmp_path / "blanks.parquet", tmp_path / "meg" / "b", root / "tokenizer.json")
    assert (stats.documents, stats.blank_skipped) == (6, 3)
    indexed = IndexedDataset(str(tmp_path / "meg" / "b"))
    assert [d.tolist() for d in indexed] == [[*tokenizer.encode(t, add_special_tokens=False).ids, eos_id(tokenizer)]
                                             for t in texts]
    assert main(["convert", "--input", str(tmp_path / "blanks.parquet"), "--tokenizer", str(root / "tokenizer.json"),
                 "--output-prefix", str(tmp_path / "meg" / "cli")]) == 0
    out, err = capsys.readouterr()
    assert "3 of 9 rows skipped: blank text (null, empty or white space only); 6 documents written" in err
    assert json.loads(out.strip().splitlines()[-1])["blank_skipped"] == 3
    frame.assign(text=[None, "", " "] * 3).to_parquet(tmp_path / "all_blank.parquet")
    from curation.pretraining.launch import LaunchInputError

    with pytest.raises(LaunchInputError, match=r"has no documents \(9 rows, all blank\)"):
        convert(tmp_path / "all_blank.parquet", tmp_path / "meg" / "none", root / "tokenizer.json")
    assert not list((tmp_path / "meg").glob("none*"))


def test_an_existing_prefix_is_not_overwritten_without_force(selection, tmp_path, capsys):
    from curation.pretraining.launch import LaunchInputError, main

    root, docs, _ = selection
    docs.head(10).to_parquet(tmp_path / "other.parquet")
    convert(root / "selected_documents.parquet", tmp_path / "sel", root / "tokenizer.json")
    before = {ext: (tmp_path / f"sel{ext}").read_bytes() for ext in (".bin", ".idx")}
    with pytest.raises(LaunchInputError, match=r"^--output-prefix \S+/sel: \S+/sel\.bin and \S+/sel\.idx already "
                                               r"exist .*Fix: pass --force to replace them"):
        convert(tmp_path / "other.parquet", tmp_path / "sel", root / "tokenizer.json")
    assert {ext: (tmp_path / f"sel{ext}").read_bytes() for ext in (".bin", ".idx")} == before
    # the command: one line, exit 2; with --force the other selection replaces it
    args = ["convert", "--input", str(tmp_path / "other.parquet"), "--tokenizer", str(root / "tokenizer.json"),
            "--output-prefix", str(tmp_path / "sel")]
    assert main(args) == 2
    assert "curate-megatron: error: --output-prefix" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["documents"] == 10
    assert (tmp_path / "sel.bin").read_bytes() != before[".bin"]


def test_a_folder_prefix_means_inside_the_folder(selection, tmp_path):
    root, _, _ = selection
    stats = convert(root / "selected_documents.parquet", f"{tmp_path / 'out'}/", root / "tokenizer.json")
    assert stats.prefix == str(tmp_path / "out" / "selected_documents")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["selected_documents.bin", "selected_documents.idx"]
    assert not list(tmp_path.glob("out.*"))  # not beside the folder
    # an existing folder without the slash: inside it too (the packed folder's name)
    (tmp_path / "existing").mkdir()
    stats = convert(root / "packed", tmp_path / "existing")
    assert stats.prefix == str(tmp_path / "existing" / "packed") and (tmp_path / "existing" / "packed.idx").is_file()


def test_an_unexpected_failure_is_one_line_naming_the_file_with_its_trace(project, tmp_path, capsys, monkeypatch):
    """Issue #52: ``curate-megatron`` printed the whole trace of a failure no check foresaw (one per rank under
    torchrun); now, as ``curate``, one line naming the file under the project's ``logs/`` that holds it, exit 1.
    The failure is real: a checkpoint folder whose ``latest.json`` was cut short (a copy interrupted half-way),
    which ``export`` reads as JSON."""
    from curation.pretraining.launch import main

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "latest.json").write_text('{"iteration": 3, "dir": "iter_00')
    assert main(["export", "--load", str(checkpoint), "--output", str(tmp_path / "model")]) == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    import re

    found = re.fullmatch(r"curate-megatron: unexpected error: JSONDecodeError: .+ \(the full trace is in "
                         r"(\S+/logs/curate-megatron-\S+\.trace); please report it with that file\)", lines[0])
    assert found, lines[0]
    trace = Path(found.group(1))
    assert trace.parent == project / "logs"
    text = trace.read_text()
    assert "Traceback" in text and "json.decoder.JSONDecodeError" in text and "_latest" in text
    assert not (tmp_path / "model").exists()
