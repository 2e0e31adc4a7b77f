"""Diagnostics of any selection: every objective, DiSF dominance, length and source mix."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
import torch

from curation.selection.objectives import DISF_EPS, Objective


def dominance_scores(features: np.ndarray, ks: Sequence[int] = (1, 10, 50)) -> dict[int, float]:
    """DiSF Sec. 2.3 / Fig. 3 dominance score, as the official code computes it.

    The official ``Visual&verify/dominance_score.py`` (``cal_egin``, MediaBrain-SJTU/DiSF)
    standardises every dimension over the given rows -- centre, divide by
    sqrt(1e-8 + unbiased variance) -- forms C = Z^T Z / (n - 1) (the correlation
    matrix, DiSF Eq. 3-4) and returns the sum of its top-k eigenvalues over the sum of
    all d (the trace, ~d). Smaller = flatter spectrum = less dimensional collapse.
    Because every dimension is standardised, the score does not change when a dimension
    is rescaled (a covariance-based share would). k > d are skipped. The official script
    scores 128 rows of a selection; here every row given (the whole selection).
    """
    x = np.asarray(features, dtype=np.float64)
    n = len(x)
    x = x - x.mean(0, keepdims=True)
    var = (x * x).sum(0, keepdims=True) / max(n - 1, 1)
    z = x / np.sqrt(DISF_EPS + var)
    corr = z.T @ z / max(n - 1, 1)
    eig = np.sort(np.linalg.eigvalsh(corr))[::-1]
    total = eig.sum()
    return {int(k): float(eig[:k].sum() / total) if total > 0 else float("nan") for k in ks if k <= len(eig)}


def diagnose(
    embeddings,
    quality,
    indices,
    *,
    lengths=None,
    sources=None,
    dominance_k: Sequence[int] = (1, 10, 50),
    fl_reference_size: int = 8192,
    seed: int = 0,
) -> dict[str, float]:
    """Flat dict of diagnostics of the selection `indices` of the block `embeddings`.

    Keys: quality_mean, pairwise_similarity, facility_location, facility_location_sum,
    disf (DiSF Eq. 3-5: -||C(U)||_F, features standardised over the selection
    itself; NaN for fewer than 2 items), disf_block (the block-standardised
    variant, not DiSF's objective), dominance_top{k}
    (DiSF Sec. 2.3), mean_length and mean_length_all (DATAMASK Fig. 8) when
    `lengths` is given, source_frac/<source> when `sources` is given, size;
    and the same five objectives of the two reference subsets of the same size
    that every table of DATAMASK/DiSF compares against: random/<objective> (a
    seeded uniform sample) and topk/<objective> (the highest-quality documents).
    """
    emb = torch.as_tensor(np.asarray(embeddings), dtype=torch.float64)
    q = torch.as_tensor(np.asarray(quality), dtype=torch.float64)
    idx_np = np.asarray(indices, dtype=np.int64)
    idx = torch.from_numpy(idx_np).unsqueeze(0)
    obj = Objective(emb, q, fl_reference_size=fl_reference_size, seed=seed)

    def coverage(index: torch.Tensor) -> float:
        # facility location over the same reference points as ``obj.facility_location``, without the (N, R)
        # table it would build for a step: R x S similarities, 512 reference rows at a time
        sel = obj.unit[index[0]]
        return float(sum(float((obj.reference[a : a + 512] @ sel.T).amax(1).sum())
                         for a in range(0, len(obj.reference), 512)) / len(obj.reference))
    out = {
        "size": float(len(idx_np)),
        "quality_mean": float(obj.quality_mean(idx)[0]),
        "pairwise_similarity": float(obj.pairwise_similarity(idx)[0]),
        "facility_location": coverage(idx),
        "facility_location_sum": float(obj.facility_location_sum(idx)[0]),
        "disf": float(obj.disf(idx)[0]) if len(idx_np) >= 2 else float("nan"),
        "disf_block": float(obj.disf_block(idx)[0]),
    }
    size = len(idx_np)
    if 0 < size < len(q):
        references = {
            "random": np.sort(np.random.default_rng([int(seed), 104729]).choice(len(q), size=size, replace=False)),
            "topk": np.sort(np.argsort(-q.numpy(), kind="stable")[:size]),
        }
        for name, ref in references.items():
            ref_idx = torch.from_numpy(ref.astype(np.int64)).unsqueeze(0)
            out[f"{name}/quality_mean"] = float(obj.quality_mean(ref_idx)[0])
            out[f"{name}/pairwise_similarity"] = float(obj.pairwise_similarity(ref_idx)[0])
            out[f"{name}/facility_location"] = coverage(ref_idx)
            out[f"{name}/facility_location_sum"] = float(obj.facility_location_sum(ref_idx)[0])
            out[f"{name}/disf"] = float(obj.disf(ref_idx)[0])
    for k, v in dominance_scores(emb[idx_np].numpy(), dominance_k).items():
        out[f"dominance_top{k}"] = v
    if lengths is not None:
        lens = np.asarray(lengths, dtype=np.float64)
        out["mean_length"] = float(lens[idx_np].mean())
        out["mean_length_all"] = float(lens.mean())
    if sources is not None:
        src = np.asarray(sources, dtype=object)[idx_np]
        for name, count in sorted(Counter(src.tolist()).items(), key=lambda kv: str(kv[0])):
            out[f"source_frac/{name}"] = count / len(idx_np)
    return out
