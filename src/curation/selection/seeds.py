"""Seeds of the selection methods' RNG streams (torch-free: the baselines and the config check import it)."""

from __future__ import annotations

import numpy as np


def derive_seed(*parts: int) -> int:
    """A 63-bit seed derived from integers, stable across processes (for RNG streams)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, dtype=np.uint64)[0] >> 1)
