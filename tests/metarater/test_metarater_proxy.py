"""The held-out set, the token table and one real proxy run (curation.lm + Lightning)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from curation.lm import PackedDataset, pack_documents
from curation.metarater.config import ProxyConfig, ValidationConfig
from curation.metarater.proxy import TokenTable, TokenWindows, build_bench, hold_out_validation


def test_validation_holds_out_whole_url_groups_of_each_kind(documents):
    config = ValidationConfig(fraction=0.2, seed=3)
    groups = hold_out_validation(documents, config)
    assert set(groups.dropna()) == {"encyclopedic", "books", "label_1.0"}
    assert groups.equals(hold_out_validation(documents, config))  # reproducible
    books = documents["category"] == "books"
    held_books = documents.loc[books & groups.notna(), "url"]
    kept_books = documents.loc[books & groups.isna(), "url"]
    assert len(held_books) and not set(held_books) & set(kept_books)  # no book on both sides
    n_urls = documents.loc[books, "url"].nunique()
    assert held_books.nunique() == max(1, round(0.2 * n_urls))
    high = documents["quality_label"] == 1.0
    assert (groups[high.fillna(False)].dropna() == "label_1.0").all()  # labelled rows join their label group
    assert groups[(documents["category"] == "web") & ~high.fillna(False)].isna().all()  # web is never held out
    with pytest.raises(KeyError, match="category_column"):
        hold_out_validation(documents.drop(columns=["category"]), config)
    with pytest.raises(ValueError, match="poetry"):
        hold_out_validation(documents, ValidationConfig(categories=["poetry"]))


def test_token_table_windows_equal_the_packed_dataset(documents, tmp_path):
    from curation.lm import train_tokenizer

    texts = documents["text"].head(40).tolist()
    tokenizer = train_tokenizer(texts, vocab_size=400)
    table = TokenTable.build(texts, tokenizer, batch_docs=7)
    assert len(table) == 40 and table.offsets[-1] == len(table.tokens)
    rows = [5, 0, 17, 3]
    packed = pack_documents([texts[i] for i in rows], tokenizer, tmp_path / "packed", seq_len=32)
    windows = TokenWindows(table.stream(rows), seq_len=32)
    reference = PackedDataset(packed.path)
    assert len(windows) == len(reference) > 3
    for i in (0, 1, len(windows) - 1):
        assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(windows[i], reference[i]))
    assert len(table.stream(rows, max_tokens=50)) == 50
    table.save(tmp_path / "table")
    loaded = TokenTable.load(tmp_path / "table")
    assert np.array_equal(loaded.tokens, table.tokens) and np.array_equal(loaded.offsets, table.offsets)


def test_a_proxy_trained_on_held_out_like_data_has_the_lower_validation_loss(documents, tmp_path):
    validation = ValidationConfig(source="high_quality", categories=["encyclopedic"], labels=[], fraction=0.3,
                                  max_tokens=4096)
    groups = hold_out_validation(documents, validation)
    proxy = ProxyConfig(max_tokens=16 * 8 * 128, batch_size=8, lr=3e-3, vocab_size=512, tokenizer_docs=300,
                        num_threads=1)
    bench = build_bench(documents["text"].tolist(), groups, proxy, validation, tmp_path)
    assert set(bench.validation_groups) == {"encyclopedic"} and len(bench.validation) > 0
    candidates = groups.isna().to_numpy()
    encyclopedic = np.flatnonzero(candidates & (documents["category"] == "encyclopedic").to_numpy())
    docs = np.flatnonzero(candidates & (documents["category"] == "docs").to_numpy())
    near = bench.evaluate(encyclopedic)
    far = bench.evaluate(docs)
    assert np.isfinite(near["val_loss"]) and near["steps"] == 16 and near["tokens"] == 16 * 8 * 128
    assert near["val_loss"] < far["val_loss"] - 0.05
    assert near["selection_docs"] == len(encyclopedic) and len(near["history"]) == 16
    assert bench.evaluate(encyclopedic)["val_loss"] == pytest.approx(near["val_loss"], abs=1e-6)  # seeded
    # The token cache: a second bench loads the same tokenizer and table instead of training them.
    again = build_bench(documents["text"].tolist(), groups, proxy, validation, tmp_path)
    assert np.array_equal(again.table.tokens, bench.table.tokens)
    assert len(list(tmp_path.glob("tokens-*"))) == 1
    # metarater.validation.path: an external D_v, tokenised with the same tokenizer, cut at max_tokens.
    external = build_bench(documents["text"].tolist(), groups, proxy, validation, tmp_path,
                           external_validation=documents.loc[documents["category"] == "books", "text"].tolist())
    assert list(external.validation_groups) == ["external"] and len(external.validation["external"].stream) == 4096
    with pytest.raises(ValueError, match="less than one batch"):
        bench.evaluate(encyclopedic[:1])
    pd.testing.assert_series_equal(groups, hold_out_validation(documents, validation))
