from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest
import torch

from curation.cache import (
    ResultCache,
    atomic_folder,
    cache_dir,
    config_key,
    file_digest,
    frame_fingerprint,
    model_digest,
    result_cache,
    text_digest,
    texts_digest,
)
from curation.paths import project_root


def test_same_inputs_hit_changed_inputs_miss(tmp_path, corpus_sample):
    docs = corpus_sample[["id", "text"]].head(50)
    calls = []

    def compute():
        calls.append(1)
        return np.arange(len(docs), dtype="float32")

    cache = ResultCache(tmp_path)
    key = config_key({"model": "m", "batch": 8}, frame_fingerprint(docs, ["id", "text"]))
    first = cache.array("emb", key, compute)
    second = cache.array("emb", key, compute)
    assert np.array_equal(first, second) and len(calls) == 1 and (cache.hits, cache.misses) == (1, 1)

    changed = docs.copy()
    changed.loc[changed.index[0], "text"] += " "
    assert config_key({"model": "m", "batch": 8}, frame_fingerprint(changed, ["id", "text"])) != key
    assert config_key({"model": "m", "batch": 16}, frame_fingerprint(docs, ["id", "text"])) != key
    assert not list(tmp_path.glob(".*tmp*"))


def test_frame_cache_roundtrip_and_disabled(tmp_path):
    cache = ResultCache(tmp_path)
    frame = pd.DataFrame({"id": ["a", "b"], "score": [0.5, 1.5]})
    assert cache.frame("scores", "k", lambda: frame).equals(frame)
    assert cache.frame("scores", "k", lambda: None).equals(frame)
    off = ResultCache(tmp_path / "off", enabled=False)
    off.frame("scores", "k", lambda: frame)
    assert not (tmp_path / "off").exists() and off.misses == 1


def test_the_cache_folder_comes_from_the_cache_group(tmp_path):
    assert cache_dir({"dir": "data/cache", "enabled": False}) is None
    assert cache_dir({"dir": "data/cache", "enabled": True}) == project_root() / "data" / "cache"
    assert cache_dir({"dir": str(tmp_path)}) == tmp_path
    assert not result_cache({"dir": str(tmp_path), "enabled": False}).enabled
    assert result_cache({"dir": str(tmp_path), "enabled": True}).directory == tmp_path
    with pytest.raises(KeyError, match="cache.dir"):
        cache_dir({"enabled": True})


def test_digests_are_sha256_of_the_content(tmp_path, corpus_sample):
    texts = corpus_sample["text"].head(20).tolist()
    path = tmp_path / "a.txt"
    path.write_text(texts[0])
    assert file_digest(path) == hashlib.sha256(texts[0].encode()).hexdigest() == text_digest(texts[0])
    assert texts_digest(texts) != texts_digest(texts[::-1])  # order-sensitive
    assert texts_digest(["\ud800"]) != texts_digest([""])  # a lone surrogate hashes, it does not raise
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    same = torch.nn.Linear(4, 2)
    same.load_state_dict(model.state_dict())
    assert model_digest(model) == model_digest(same)
    with torch.no_grad():
        same.bias[0] += 1e-6
    assert model_digest(model) != model_digest(same)


def test_atomic_folder_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "out"
    atomic_folder(target, lambda tmp: (tmp / "a.txt").write_text("first"))
    atomic_folder(target, lambda tmp: (tmp / "b.txt").write_text("second"))
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]  # no mix of old and new files

    def fail(tmp):
        (tmp / "c.txt").write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_folder(target, fail)
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder left behind
