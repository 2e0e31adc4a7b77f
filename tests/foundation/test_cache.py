from __future__ import annotations

import numpy as np
import pandas as pd

from curation.cache import ResultCache, config_key, frame_fingerprint


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
