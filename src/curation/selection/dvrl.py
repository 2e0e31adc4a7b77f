"""DVRL (Yoon et al. 2020) as DATAMASK App. A.8 runs it against DATAMASK (Table 8).

A data value estimator -- three linear layers with ReLU between them and a
final sigmoid -- maps an item's embedding to a selection probability p_i. Each
iteration draws a batch of items, samples a Bernoulli selection s_i ~ p_i,
and takes a REINFORCE step on

    loss = -(r - b) * sum_i log P(s_i | p_i) + rate_penalty * (mean_i p_i - S/N)^2

where the reward r is the joint objective of the selected items (PWS by
default, as in Table 8) and b a moving-average baseline over a window of T
rewards (DVRL). The rate penalty keeps the selection rate at the budget's keep
ratio; it replaces DVRL's box [1 - threshold, threshold] on mean(p), because
here the budget is fixed. The selection is the top-S items by predicted p.

Engineering choices (App. A.8 reports divergence "at the 1M sample scale" and
"careful selection of hyperparameters"): the log-probability is averaged, not
summed, over the batch so the REINFORCE term does not swamp the rate penalty;
the reward is standardised against random sets of the same size (see
``train_dvrl``); the output bias starts at logit(keep ratio); Adam lr 1e-3.
A per-item score cannot express a set objective such as PWS: on clustered data
the top-S by p tends to concentrate in the region the reward favours, so the
top-S can score *worse* than a random subset. That is the baseline's weakness
the paper points out, not something this module tries to hide.

Seen/unseen evaluation (Table 8): with ``unseen_fraction > 0`` a random part of
the items is held out of training; ``info`` reports, for the seen and the unseen
part separately, the joint objective of a random subset and of the top-ratio
subset by predicted p at the same keep ratio.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Optional

import numpy as np
import pandas as pd
import torch
from torch import nn

from curation.selection.config import DvrlConfig
from curation.selection.objectives import Objective, derive_seed

log = logging.getLogger(__name__)

Progress = Optional[Callable[[int, int], None]]


class DataValueEstimator(nn.Module):
    """Linear-ReLU-Linear-ReLU-Linear-sigmoid: embedding (d,) -> selection probability."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, hidden_dim),
            nn.ReLU(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.ReLU(),
            nn.Linear(hidden_dim, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(x)).squeeze(-1)


def train_dvrl(
    objective: Objective,
    train_ids: torch.Tensor,
    keep_ratio: float,
    cfg: DvrlConfig,
    *,
    seed: int,
    progress: Progress = None,
) -> tuple[DataValueEstimator, pd.DataFrame]:
    """REINFORCE training of the estimator on the items `train_ids` of the objective's block."""
    device = objective.embeddings.device
    with torch.random.fork_rng(devices=[]):  # seeded parameter init without touching the global RNG
        torch.manual_seed(derive_seed(seed, 50))
        model = DataValueEstimator(objective.d, cfg.hidden_dim).to(device)
        # start at the keep ratio instead of p ~ 0.5, so the rate penalty does not
        # have to drag every probability down first (which can saturate the sigmoid)
        model.net[-1].bias.data.fill_(float(np.log(keep_ratio / (1 - keep_ratio))))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = torch.Generator(device=device).manual_seed(derive_seed(seed, 51))
    features = objective.embeddings.float()
    batch = min(cfg.batch_size, len(train_ids))
    baseline, rows, t0 = None, [], time.perf_counter()
    for it in range(cfg.iterations):
        ids = train_ids[torch.randperm(len(train_ids), generator=gen, device=device)[:batch]]
        p = model(features[ids]).clamp(1e-6, 1 - 1e-6)
        s = torch.bernoulli(p.detach(), generator=gen)
        chosen = ids[s.bool()]
        rate = cfg.rate_penalty * (p.mean() - keep_ratio) ** 2
        if len(chosen) < 2:  # no set objective for fewer than 2 items: only the rate penalty acts
            opt.zero_grad()
            rate.backward()
            opt.step()
            if progress is not None:  # still an iteration: the callback must reach its total
                progress(it + 1, cfg.iterations)
            continue
        terms = objective.terms(chosen.unsqueeze(0), objective.needed_terms())
        # standardised against random sets of the *same* size, so the reward does not
        # just count how many items the Bernoulli draw happened to select
        reward = float(objective.combine(terms, len(chosen))[0])
        baseline = reward if baseline is None else baseline
        log_prob = (s * torch.log(p) + (1 - s) * torch.log(1 - p)).mean()  # mean, not sum: see module doc
        loss = -(reward - baseline) * log_prob + rate
        opt.zero_grad()
        loss.backward()
        opt.step()
        # DVRL moving-average baseline over T iterations
        baseline = (cfg.baseline_window - 1) / cfg.baseline_window * baseline + reward / cfg.baseline_window
        if (it + 1) % cfg.history_every == 0 or it + 1 == cfg.iterations:
            rows.append(
                {
                    "step": it + 1,
                    "reward": reward,
                    "baseline": baseline,
                    "mean_probability": float(p.detach().mean()),
                    "selected": int(len(chosen)),
                    "wall_time_s": time.perf_counter() - t0,
                }
            )
        if progress is not None:
            progress(it + 1, cfg.iterations)
    return model, pd.DataFrame(rows)


@torch.no_grad()
def predict(model: DataValueEstimator, features: torch.Tensor, chunk: int = 65536) -> torch.Tensor:
    """Selection probabilities for every row of `features`, in chunks."""
    return torch.cat([model(features[a : a + chunk].float()) for a in range(0, len(features), chunk)])


def _top(scores: torch.Tensor, k: int) -> torch.Tensor:
    return torch.argsort(-scores, stable=True)[:k]


def select_dvrl(
    objective: Objective, budget: int, cfg: DvrlConfig, *, seed: int = 0, progress: Progress = None
) -> tuple[np.ndarray, pd.DataFrame, dict]:
    """Train on the seen items, select the top-`budget` of all items by predicted p."""
    n = objective.n
    device = objective.embeddings.device
    keep_ratio = budget / n
    perm = torch.from_numpy(np.random.default_rng(derive_seed(seed, 52)).permutation(n)).to(device)
    n_unseen = int(round(cfg.unseen_fraction * n))
    seen, unseen = perm[n_unseen:], perm[:n_unseen]
    model, history = train_dvrl(objective, seen, keep_ratio, cfg, seed=seed, progress=progress)
    p = predict(model, objective.embeddings)
    indices = np.sort(_top(p, budget).cpu().numpy()).astype(np.int64)

    info: dict = {"seen": int(len(seen)), "unseen": int(len(unseen)), "device": str(device)}
    gen = torch.Generator().manual_seed(derive_seed(seed, 53))
    for name, part in (("seen", seen), ("unseen", unseen)):
        k = int(round(keep_ratio * len(part)))
        if not 1 <= k < len(part):
            continue
        top = part[_top(p[part], k)].unsqueeze(0)
        rand = part[torch.randperm(len(part), generator=gen)[:k].to(device)].unsqueeze(0)
        info[f"{name}_before"] = float(objective.combine(objective.terms(rand), k)[0])
        info[f"{name}_after"] = float(objective.combine(objective.terms(top), k)[0])
    log.info("dvrl: %s", {k: v for k, v in info.items() if k.endswith(("_before", "_after"))})
    return indices, history, info

