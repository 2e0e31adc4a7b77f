"""Pre-training at the papers' scale (Megatron-core); the tiny CPU models live in ``curation.lm``."""
