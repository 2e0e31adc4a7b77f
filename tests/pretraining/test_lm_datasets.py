"""Kedro datasets of the LM pipelines: tokenizer, packed tokens (one or many), versioned checkpoints."""

from __future__ import annotations

import torch
from kedro.io import Version

from curation.datasets import AtomicDataset, LMCheckpoint, LMCheckpointDataset, PackedTokensDataset
from curation.lm import CausalLM, ModelConfig, eos_id, pack_documents, train_tokenizer
from curation.cache import model_digest

TINY = ModelConfig(vocab_size=300, max_seq_len=16, n_layer=1, d_model=16, n_head=2, n_kv_head=1, d_ff=32)


def _texts(corpus_sample):
    return corpus_sample["text"].head(30).tolist()


def test_tokenizer_dataset_saves_atomically_and_loads_with_eos(corpus_sample, tmp_path):
    tokenizer = train_tokenizer(_texts(corpus_sample), vocab_size=300)
    dataset = AtomicDataset(filepath=str(tmp_path / "m" / "tokenizer.json"),
                            dataset={"type": "curation.datasets.TokenizerDataset"})
    dataset.save(tokenizer)
    loaded = dataset.load()
    assert loaded.to_str() == tokenizer.to_str() and eos_id(loaded) == 0
    assert [p.name for p in (tmp_path / "m").iterdir()] == ["tokenizer.json"]


def test_packed_tokens_one_folder_and_partitions(corpus_sample, tmp_path):
    tokenizer = train_tokenizer(_texts(corpus_sample), vocab_size=300)
    a = pack_documents(_texts(corpus_sample)[:10], tokenizer, tmp_path / "a", seq_len=16)
    b = pack_documents(_texts(corpus_sample)[10:], tokenizer, tmp_path / "b", seq_len=16)
    single = PackedTokensDataset(filepath=str(tmp_path / "out" / "one"))
    single.save(a)
    assert torch.equal(single.load()[3][0], a[3][0]) and single.load().index == a.index
    single.save(b)  # replaces the folder
    assert single.load().index.n_docs == 20
    many = PackedTokensDataset(filepath=str(tmp_path / "out" / "many"), partitions=True)
    many.save({"default_mix": a, "raw": b})
    loaded = many.load()
    assert sorted(loaded) == ["default_mix", "raw"] and loaded["raw"].index.n_tokens == b.index.n_tokens
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_versioned_checkpoint_loads_the_latest_version(corpus_sample, tmp_path):
    tokenizer = train_tokenizer(_texts(corpus_sample), vocab_size=300)
    path = str(tmp_path / "lm_checkpoint")
    digests = []
    for version, seed in (("2026-01-01T00.00.00.000Z", 0), ("2026-01-02T00.00.00.000Z", 1)):
        torch.manual_seed(seed)
        model = CausalLM(TINY).eval()
        digests.append(model_digest(model))
        LMCheckpointDataset(filepath=path, version=Version(None, version)).save(
            LMCheckpoint(model, tokenizer, {}))
    latest = LMCheckpointDataset(filepath=path, version=Version(None, None)).load()
    assert model_digest(latest.model) == digests[1] and digests[0] != digests[1]
    first = LMCheckpointDataset(filepath=path, version=Version("2026-01-01T00.00.00.000Z", None)).load()
    assert model_digest(first.model) == digests[0]
    assert latest.tokenizer.to_str() == tokenizer.to_str()
    assert not LMCheckpointDataset(filepath=str(tmp_path / "none"), version=Version(None, None)).exists()
