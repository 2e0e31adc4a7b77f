"""Deduplication and benchmark decontamination of the ingested documents (the algorithm core: no Kedro,
MLflow or Hydra). :mod:`.text` normalises and hashes words and n-grams; :mod:`.exact` finds copies of a
normalised text; :mod:`.minhash` and :mod:`.fuzzy` find near-copies (MinHash + LSH); :mod:`.contamination`
finds 13-gram overlap with the evaluation tasks. :mod:`curation.data.ingest` runs them on shards."""

from curation.dedup.minhash import MinHashParams, candidate_probability
from curation.dedup.text import Tokens, normalize, words

__all__ = ["MinHashParams", "Tokens", "candidate_probability", "normalize", "words"]
