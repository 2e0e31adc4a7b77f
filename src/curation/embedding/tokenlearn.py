"""Tokenlearn: a static model trained to reproduce its teacher's sentence vectors on a corpus.

Model2Vec's distillation (``curation.embedding.static``) embeds every vocabulary token *alone*
through the teacher; a document is then the mean of its tokens' rows, which knows nothing of how
the teacher reads tokens in context. Tokenlearn (MinishLab; PyPI ``tokenlearn``, 0.2.x;
https://minishlab.github.io/tokenlearn_blogpost/) trains the table on a corpus instead: the
static mean of a document's tokens, through a linear head, regresses the teacher's vector of the
same document. That is how model2vec's potion models close most of the distance to their teachers.

Written here (a torch loop of a few dozen lines) rather than importing ``tokenlearn``: its
0.2.x pins its own ``pytorch-lightning``/``datasets`` stack and featurises from the hub. The
method is the same; the deliberate differences (docs/embeddings.md measures them):

- **Target**: the teacher's own sentence vector (MiniLM: mean pooling over every token,
  ``[CLS]``/``[SEP]`` included, then L2-normalised) of the text the teacher sees (first
  ``max_seq_length`` tokens), not tokenlearn's mean of token outputs without the special tokens.
  The agreement measures judge selections in that space.
- **No PCA of the targets**: tokenlearn centres and PCA-reduces the targets, then *drops* the
  head, so its static space is the targets' space up to an unknown linear map. Here the head
  ``W`` is folded into the table after training (a linear map commutes with the mean:
  ``W mean(E_t) = mean(W E_t)``), so the static model outputs what was trained, in the teacher's
  own coordinates; ``dims`` < teacher width projects onto the targets' top singular directions
  (uncentred, so raw cosines are kept up to the discarded energy).
- **Loss**: ``1 - cos`` per document (tokenlearn's ``cosine`` option; its newer default is an
  in-batch contrastive loss); the head starts at the least-squares map from the distilled means
  to the targets, so step 0 is already the best linear read-out of the distilled model.
- **Token weights** (model2vec's SIF weights) are folded into the rows before training (a scalar
  per token is a row scale), so every row is free to move.

No Kedro, MLflow or Hydra here: ``scripts/train_static_embedder.py`` runs it.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np


# Documents never trained on: the labels the embedders are evaluated with (the human-labelled DCLM rows,
# the LLM-scored FineWeb-Edu rows: the Edu head's ROC-AUC) and a salted id-hash share of the rest, from
# which the agreement benchmark (benchmarks/embedding/bench_backends.py) draws its documents.
EVAL_SOURCES = ("dclm_human_labeled", "fineweb_edu_scorer")
HOLDOUT_FRACTION = 0.2
HOLDOUT_SALT = "tokenlearn-holdout-v1"


def is_held_out(ids: Sequence[str], sources: Sequence[str]) -> np.ndarray:
    """True for the documents the shipped static model was not trained on."""
    hashed = np.array([int(hashlib.sha256(f"{HOLDOUT_SALT}|{i}".encode()).hexdigest()[:8], 16) / 2**32
                       for i in ids]) < HOLDOUT_FRACTION
    return np.isin(np.asarray(sources, dtype=object), EVAL_SOURCES) | hashed


@dataclass(frozen=True)
class TokenlearnConfig:
    """How the table is trained (defaults: the shipped model's recipe)."""

    epochs: int = 30               # upper bound; early stopping on the validation pair-cosine Spearman
    patience: int = 3              # epochs without a better validation cosine before stopping
    batch_size: int = 256
    lr: float = 3e-3               # Adam, table and head
    head_lr: float = 1e-3
    val_fraction: float = 0.1      # documents (id hash) held out for early stopping
    max_length: int = 256          # tokens per document: the teacher's window
    dims: int | None = 256         # width of the shipped table (None = the teacher's width)
    loss: str = "cosine"           # cosine: 1 - cos per document | contrastive: in-batch InfoNCE (tokenlearn's)
    temperature: float = 0.07      # contrastive only (tokenlearn's)
    pair_weight: float = 0.0       # + weight x mean squared error of the batch's pairwise cosines (0 = off)
    seed: int = 0
    threads: int = 2               # torch threads (the loop is deterministic at any count on CPU)

    def digest(self) -> str:
        return hashlib.sha256(repr(sorted(asdict(self).items())).encode()).hexdigest()[:16]


@dataclass
class TokenlearnResult:
    vectors: np.ndarray            # (vocab, dims) float32: the static model's rows
    metrics: dict[str, float]


def _mean_bags(ids: list[list[int]]):
    """Flat ids and offsets for ``torch.nn.functional.embedding_bag`` (mean mode)."""
    import torch

    lengths = np.array([len(x) for x in ids], dtype=np.int64)
    flat = torch.from_numpy(np.concatenate([np.asarray(x, dtype=np.int64) for x in ids]) if len(ids) else
                            np.zeros(0, dtype=np.int64))
    offsets = torch.from_numpy(np.r_[0, np.cumsum(lengths)[:-1]].astype(np.int64))
    return flat, offsets


def train_tokenlearn(rows: np.ndarray, token_ids: Sequence[Sequence[int]], targets: np.ndarray,
                     split_keys: Sequence[str], cfg: TokenlearnConfig | None = None,
                     log=print) -> TokenlearnResult:
    """Train the static table ``rows`` (vocab x d, SIF weights already folded in) so that the mean of a
    document's token rows, through a linear head, has the direction of ``targets`` (n x D, unit rows).

    ``token_ids``: each document's token ids (truncated to the teacher's window; documents with no
    token are left out). ``split_keys``: one string per document (its id) whose hash picks the
    validation documents. Returns the folded table (vocab x ``cfg.dims``) and the training metrics
    (validation cosine and pair-cosine Spearman at epoch 0, i.e. the distilled table with the
    least-squares head, and at the best epoch; epochs; seconds)."""
    import torch
    import torch.nn.functional as F

    cfg = cfg or TokenlearnConfig()
    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        keep = np.array([len(x) > 0 for x in token_ids])
        ids = [list(x) for x, k in zip(token_ids, keep) if k]
        y_all = torch.from_numpy(np.asarray(targets, dtype=np.float32)[keep])
        keys = [k for k, m in zip(split_keys, keep) if m]
        # validation documents by a salted hash of the id: independent of order and of the seed
        val = np.array([int(hashlib.sha256(f"tokenlearn-val|{k}".encode()).hexdigest()[:8], 16) / 2**32
                        < cfg.val_fraction for k in keys])
        tr, va = np.flatnonzero(~val), np.flatnonzero(val)
        torch.manual_seed(cfg.seed)
        table = torch.nn.Parameter(torch.from_numpy(np.asarray(rows, dtype=np.float32)).clone())

        def means(index: np.ndarray, weight: torch.Tensor) -> torch.Tensor:
            flat, offsets = _mean_bags([ids[i] for i in index])
            return F.embedding_bag(flat, weight, offsets, mode="mean")

        with torch.no_grad():  # the head starts at the least-squares map from distilled means to targets
            x_tr = means(tr, table)
            head0 = torch.linalg.lstsq(x_tr, y_all[tr]).solution.T.contiguous()  # (D, d)
        head = torch.nn.Parameter(head0)

        from scipy.stats import spearmanr

        iu = np.triu_indices(len(va), 1)
        y_va = F.normalize(y_all[va], dim=1)
        y_pairs = (y_va @ y_va.T).numpy()[iu]

        def val_scores(weight: torch.Tensor, h: torch.Tensor) -> tuple[float, float]:
            """Validation documents: mean cos to the target, and the Spearman of their pairwise cosines
            with the targets' (the geometry diversity terms read: the early-stopping criterion)."""
            with torch.no_grad():
                out = F.normalize(means(va, weight) @ h.T, dim=1)
                cos = float((out * y_va).sum(1).mean())
                return cos, float(spearmanr((out @ out.T).numpy()[iu], y_pairs)[0])

        start_cos, start_rho = val_scores(table, head)
        opt = torch.optim.Adam([{"params": [table], "lr": cfg.lr}, {"params": [head], "lr": cfg.head_lr}])
        rng = np.random.default_rng(cfg.seed)
        best = (start_rho, table.detach().clone(), head.detach().clone(), 0, start_cos)
        bad = 0
        for epoch in range(1, cfg.epochs + 1):
            order = tr[rng.permutation(len(tr))]
            total = 0.0
            for s in range(0, len(order), cfg.batch_size):
                batch = order[s:s + cfg.batch_size]
                out = means(batch, table) @ head.T
                if cfg.loss == "contrastive":  # each document's own target against the batch's others
                    sims = F.normalize(out, dim=1) @ F.normalize(y_all[batch], dim=1).T
                    loss = F.cross_entropy(sims / cfg.temperature, torch.arange(len(batch)))
                else:
                    loss = 1.0 - F.cosine_similarity(out, y_all[batch], dim=1).mean()
                if cfg.pair_weight:  # relational: the batch's pairwise cosines against the targets'
                    o, t = F.normalize(out, dim=1), F.normalize(y_all[batch], dim=1)
                    loss = loss + cfg.pair_weight * ((o @ o.T - t @ t.T) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(batch)
            cos, rho = val_scores(table, head)
            log(f"tokenlearn: epoch {epoch}: train loss {total / len(order):.4f}, validation cos {cos:.4f}, "
                f"pair-cos Spearman {rho:.4f}")
            if rho > best[0]:
                best, bad = (rho, table.detach().clone(), head.detach().clone(), epoch, cos), 0
            else:
                bad += 1
                if bad >= cfg.patience:
                    break
        best_rho, table_b, head_b, best_epoch, best_cos = best
        folded = (table_b @ head_b.T).numpy()  # (vocab, D): the head folded into every row
        metrics = {"val_cos_distilled": start_cos, "val_cos_trained": best_cos, "val_pair_spearman_distilled":
                   start_rho, "val_pair_spearman_trained": best_rho, "best_epoch": float(best_epoch),
                   "epochs_run": float(epoch), "train_docs": float(len(tr)), "val_docs": float(len(va))}
        if cfg.dims is not None and cfg.dims < folded.shape[1]:
            # uncentred: raw cosines between documents are kept up to the discarded energy
            _, sv, vt = np.linalg.svd(np.asarray(targets, dtype=np.float64)[keep][tr], full_matrices=False)
            basis = vt[: cfg.dims].T  # (D, dims)
            folded = folded @ basis
            metrics["target_energy_kept"] = float((sv[: cfg.dims] ** 2).sum() / (sv ** 2).sum())
            with torch.no_grad():  # the validation cosine in the projected space (target projected too)
                proj = means(va, torch.from_numpy(folded.astype(np.float32)))
                y_proj = y_all[va] @ torch.from_numpy(basis.astype(np.float32))
                metrics["val_cos_projected"] = float(F.cosine_similarity(proj, y_proj, dim=1).mean())
        metrics["seconds"] = time.perf_counter() - t0
        return TokenlearnResult(np.ascontiguousarray(folded, dtype=np.float32), metrics)
    finally:
        torch.set_num_threads(threads)
