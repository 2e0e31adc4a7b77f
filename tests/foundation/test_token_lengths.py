"""The token-length plot's counts (``curation.data.stats.token_lengths``): untruncated, batch by batch."""

from __future__ import annotations

from tokenizers import Tokenizer

from curation.data.stats import token_lengths
from curation.embedding.embedder import packaged_tokenizer_path


def test_each_count_is_the_untruncated_encoding_of_its_text_across_batches(corpus_sample):
    texts = corpus_sample["text"].head(70).tolist()
    tokenizer = Tokenizer.from_file(packaged_tokenizer_path())
    tokenizer.no_truncation()
    tokenizer.no_padding()  # the packaged tokenizer.json pads to 128
    expected = [len(tokenizer.encode(t).ids) for t in texts]  # one at a time, with offsets: the plain API
    got = token_lengths(texts, packaged_tokenizer_path(), batch_size=16)  # 5 batches, the last one short
    assert got.tolist() == expected
    assert max(expected) > 512  # longer than MiniLM's truncation: the counts are not cut there
