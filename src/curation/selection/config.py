"""Typed knobs of every selection method, with the papers' defaults.

One ``@dataclass`` per method. Each mirrors ``conf/selection/<method>.yaml`` key
for key (``tests/selection/test_config.py`` loads every yaml and compares it with
``dataclasses.asdict`` of the default instance, so the two cannot drift).

``parse_selection_config(method, mapping)`` builds a config from any mapping (a
dict, an OmegaConf ``DictConfig``) with :func:`curation.configuration.parse_dataclass`:
missing keys take the defaults; unknown keys, values of the wrong type (``3.0``
is not an int) and out-of-range values raise ``ConfigError`` (a ``ValueError``)
naming the key. The range checks (``validate``) also run when a config is
constructed directly. :class:`BudgetConfig` is the ``budget`` group.

References: DATAMASK = seeds/000 (Eq. 3-13, Algorithm 1, Sec. 4.3, App. A.6-A.8);
DiSF = seeds/001 (Eq. 3-7, Algorithm 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from curation.configuration import ConfigError, at_least, check, in_range, one_of, parse_dataclass

DIVERSITIES = ("pws", "fl", "fl_sum", "disf", "disf_block")
# the diversity terms that read only unit vectors (DiSF's standardise the raw features)
UNIT_DIVERSITIES = ("pws", "fl", "fl_sum")
# facility-location similarity tables of a DataMask step (see DataMaskConfig.fl_sims_dtype)
FL_SIMS_DTYPES = ("float32", "int16", "int8", "auto")
# Normalisation of the DiSF term in Eq. 12: "set" -||Z_U^T Z_U||_F / (|U| - 1) (DiSF Eq. 3-5, C(U) as DiSF defines
# it) | "block" -||Z_U^T Z_U||_F / (N - 1), the 1/(N-1) that DATAMASK's Eq. 4 prints (N = the items the set is
# drawn from), i.e. the set form times (|U| - 1) / (N - 1).
DISF_SCALES = ("set", "block")
METHODS = ("datamask", "greedy", "topk_quality", "random", "semdedup", "dvrl")


def _require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(key, message)


@dataclass
class SelectionConfig:
    """Knobs every method understands."""

    method: str = ""
    # Quality-aware pruning in place (DATAMASK Sec. 4.3, App. A.5): items whose
    # quality is below this value are dropped before selecting; None = off.
    min_quality: Optional[float] = None
    # Candidates an in-memory method (greedy, semdedup, dvrl) may hold on the sharded path; past it the
    # run refuses and names the streaming methods. None = the method's default
    # (curation.selection.sharded.MAX_ITEMS); datamask, topk_quality and random stream and ignore it.
    max_items: Optional[int] = None
    # The column of the (pruned) scores table the method reads as quality, q of DATAMASK Eq. 3: ``quality``
    # = the merged 0-15 score (App. A.5); a rater's own column (``edu``, ``fasttext_dclm``, ``wiki`` ...)
    # instead. Read by the selection stage (curation.selection.corpus), not by select() itself.
    score: str = "quality"

    def __post_init__(self) -> None:
        self.validate()  # the subclass's checks: a config built by hand is checked like a parsed one

    def validate(self) -> None:
        _require(self.method in METHODS, "method", f"must be one of {METHODS}, got {self.method!r}")
        _require(isinstance(self.score, str) and bool(self.score.strip()), "score",
                 f"must name a column of the scores table, got {self.score!r}")
        _require(self.max_items is None or self.max_items >= 2, "max_items",
                 f"must be None or >= 2, got {self.max_items}")


@dataclass
class ObjectiveConfig(SelectionConfig):
    """Knobs of the joint objective f = lam * f_qua + (1 - lam) * f_div (DATAMASK Eq. 12)."""

    # Diversity term (DATAMASK Eq. 4): pws (pair-wise cosine similarity), fl
    # (facility location, max-similarity coverage), fl_sum (the printed Eq. 4
    # sum form), disf (-||C(U)||_F with per-set standardisation, DiSF Eq. 3-5),
    # disf_block (a variant standardised once per block; not DiSF's objective).
    diversity: str = "pws"
    # lambda of Eq. 12 in [0, 1]: 1.0 = quality only, 0.0 = diversity only.
    lam: float = 0.3
    # Standardise each term by its mean/std over uniformly random subsets of
    # the same size, so lam weighs "one random-subset std" of each term; False
    # = the paper's raw Eq. 12 (where quality in [0, 15] dwarfs diversity).
    standardize: bool = True
    # Number of random subsets used to estimate those term statistics.
    scale_samples: int = 64
    # Facility location reference points: a random subsample of the block of this many items (count; capped
    # at the block size, where FL is exact). A departure from DATAMASK Eq. 4, which sums over every item of D.
    # Measured share of the FL gain over random that a whole-block optimisation reaches: 6k items 1,024 -> 70%,
    # 4,096 -> 99.7%; 100k items (against R = 8,192, the largest affordable) 1,024 -> 56%, 4,096 -> 92%;
    # docs/selection.md "Facility location: reference points" gives the figures.
    fl_reference_size: int = 8192
    # Scale of the disf term in the raw Eq. 12 (standardize False): "set" = DiSF's -||C(U)||_F with
    # C(U) = Z^T Z / (|U| - 1) (DiSF Eq. 3-5); "block" = DATAMASK Eq. 4 as printed, 1/(N - 1) over the N items
    # the set is drawn from (= the set form times (|U| - 1) / (N - 1)). Same argmax at a fixed |U|; it moves
    # where a lambda sits between the terms (DATAMASK Fig. 6's lambda axis is the printed form's).
    disf_scale: str = "set"

    def validate(self) -> None:
        super().validate()
        _require(self.disf_scale in DISF_SCALES, "disf_scale", f"must be one of {DISF_SCALES}, got {self.disf_scale!r}")
        _require(self.diversity in DIVERSITIES, "diversity", f"must be one of {DIVERSITIES}, got {self.diversity!r}")
        _require(0.0 <= self.lam <= 1.0, "lam", f"must be in [0, 1], got {self.lam}")
        _require(self.scale_samples >= 2, "scale_samples", f"must be >= 2, got {self.scale_samples}")
        _require(self.fl_reference_size >= 1, "fl_reference_size", f"must be >= 1, got {self.fl_reference_size}")


@dataclass
class DataMaskConfig(ObjectiveConfig):
    """DATAMASK Algorithm 1 (policy-gradient mask learning)."""

    method: str = "datamask"
    # G of Eq. 10: masks sampled per step (paper recommends 128 or 256, Sec. 4.3).
    group_size: int = 128
    # eta of Eq. 11: step size on the logits (paper uses 10, App. A.6.1).
    lr: float = 10.0
    # E of Algorithm 1: update steps per block (paper: 7k-10k for 1M items, App. A.6.3).
    steps: int = 2000
    # r: fraction of the block that takes part in each step, budget scaled by r
    # (batch updating, Sec. 4.3; paper recommends 0.05-0.10).
    batch_ratio: float = 0.05
    # L^0: "zeros" (same initialisation) or "quality" (Eq. 13, App. A.6.2).
    init: str = "zeros"
    # Eq. 13 range of quality scores, q_min..q_max (paper: 0..15) ...
    q_min: float = 0.0
    q_max: float = 15.0
    # ... mapped linearly to logits l_min..l_max (paper: -5..5).
    l_min: float = -5.0
    l_max: float = 5.0
    # Final mask: "sample" S items from softmax(L^E) as Algorithm 1 does (the default: issue #53 measured the
    # alternatives, docs/selection.md), "topk" (the S largest final logits) or "best" (the best top-S mask recorded
    # during the run, by the joint objective, every history_every steps).
    final: str = "sample"
    # Items per independent random block (Sec. 4.3 "Splitting"); same keep ratio in every block.
    block_size: int = 1_000_000
    # Record a history row every this many steps (joint objective, terms, entropy, wall time).
    history_every: int = 10
    # Save logits + RNG state every this many steps (0 = never); needs checkpoint_dir.
    checkpoint_every: int = 500
    # Directory for per-block checkpoints; None = no checkpoints.
    checkpoint_dir: Optional[str] = None
    # Continue from the checkpoints in checkpoint_dir (same seed/config give the same selection).
    resume: bool = False
    # Torch device for the logits and objective: "cpu", "cuda", "cuda:1", or "auto".
    device: str = "cpu"
    # Blocks run at once on the sharded path, each in its own process (or Ray task; one per GPU).
    block_workers: int = 1
    # diversity=disf in a step: "exact" -||C(U)||_F, or "hutchinson": -||C(U)||_F^2 estimated without
    # bias from disf_probes Rademacher probes shared by the step's G masks (see Objective.disf_hutchinson).
    disf_estimator: str = "exact"
    disf_probes: int = 8
    # diversity=fl in a step: the (block x fl_reference_size) similarity table as "float32" (exact),
    # "int16" (cos rounded to 1/32767) or "int8" (1/127): the step's gather-max reads 2x / 4x fewer
    # bytes. A table above 1 GiB is not kept (similarities recomputed every step, far slower), so
    # "auto" takes int16 while the table fits in 1 GiB (65k items at R = 8192) and int8 beyond (131k items;
    # a 1M block's table fits only R <= 1073: auto then uses that many reference points, with a warning).
    fl_sims_dtype: str = "auto"

    def validate(self) -> None:
        super().validate()
        _require(self.block_workers >= 1, "block_workers", f"must be >= 1, got {self.block_workers}")
        _require(self.group_size >= 2, "group_size", f"G must be >= 2, got {self.group_size}")
        _require(self.disf_estimator in ("exact", "hutchinson"), "disf_estimator",
                 f"must be 'exact' or 'hutchinson', got {self.disf_estimator!r}")
        _require(self.disf_probes >= 1, "disf_probes", f"must be >= 1, got {self.disf_probes}")
        _require(self.fl_sims_dtype in FL_SIMS_DTYPES, "fl_sims_dtype",
                 f"must be one of {FL_SIMS_DTYPES}, got {self.fl_sims_dtype!r}")
        _require(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        _require(self.steps >= 0, "steps", f"must be >= 0, got {self.steps}")
        _require(0.0 < self.batch_ratio <= 1.0, "batch_ratio", f"must be in (0, 1], got {self.batch_ratio}")
        _require(self.init in ("zeros", "quality"), "init", f"must be 'zeros' or 'quality', got {self.init!r}")
        _require(self.q_max > self.q_min, "q_max", f"must be > q_min ({self.q_min}), got {self.q_max}")
        _require(self.l_max > self.l_min, "l_max", f"must be > l_min ({self.l_min}), got {self.l_max}")
        _require(self.final in ("sample", "topk", "best"), "final",
                 f"must be 'sample', 'topk' or 'best', got {self.final!r}")
        _require(self.block_size >= 2, "block_size", f"must be >= 2, got {self.block_size}")
        _require(self.history_every >= 1, "history_every", f"must be >= 1, got {self.history_every}")
        _require(self.checkpoint_every >= 0, "checkpoint_every", f"must be >= 0, got {self.checkpoint_every}")
        _require(
            not self.resume or self.checkpoint_dir is not None,
            "resume",
            "resume=true needs checkpoint_dir",
        )


@dataclass
class GreedyConfig(ObjectiveConfig):
    """Classical greedy maximisation of the joint objective (DiSF Algorithm 1 for disf)."""

    method: str = "greedy"
    # "fast" (closed-form / rank-1 updates), "reference" (re-evaluate the objective
    # from scratch for every candidate) or "official" (diversity=disf, lam=0 only:
    # the official DiSF code's per-candidate recomputation, the time anchor).
    # All three pick the same items on the same seed.
    impl: str = "fast"
    # b of DiSF Algorithm 1: contiguous batches of b items, each with its share
    # of the budget; None = 1024 for disf, the whole block otherwise.
    batch_size: Optional[int] = None
    # First pick of every batch: "random" (DiSF Algorithm 1) or "argmax".
    first_pick: str = "random"

    def validate(self) -> None:
        super().validate()
        impls = ("fast", "reference", "official")
        _require(self.impl in impls, "impl", f"must be one of {impls}, got {self.impl!r}")
        _require(
            self.impl != "official" or (self.diversity == "disf" and self.lam == 0.0),
            "impl",
            f"'official' is the DiSF code: needs diversity=disf and lam=0, got {self.diversity!r}, lam={self.lam}",
        )
        _require(
            not (self.diversity == "disf" and self.first_pick == "argmax"),
            "first_pick",
            "'argmax' needs a singleton value; disf has none (per-set variance): use 'random'",
        )
        _require(
            self.batch_size is None or self.batch_size >= 2,
            "batch_size",
            f"must be None or >= 2, got {self.batch_size}",
        )
        _require(
            self.first_pick in ("random", "argmax"),
            "first_pick",
            f"must be 'random' or 'argmax', got {self.first_pick!r}",
        )


@dataclass
class TopkQualityConfig(SelectionConfig):
    """Keep the `budget` items of highest quality (ties: lower index first)."""

    method: str = "topk_quality"


@dataclass
class RandomConfig(SelectionConfig):
    """Uniform random subset of size `budget`."""

    method: str = "random"


@dataclass
class SemDeDupConfig(SelectionConfig):
    """SemDeDup (Abbas et al. 2023, FAIR code): k-means, per-cluster cosine threshold 1 - eps."""

    method: str = "semdedup"
    # k-means clusters (count; capped at the number of items).
    n_clusters: int = 100
    # scikit-learn KMeans n_init and max_iter.
    kmeans_n_init: int = 1
    kmeans_max_iter: int = 100
    # Which duplicate survives inside a cluster (FAIR `which_to_keep`): "hard"
    # (far from the centroid, FAIR default), "easy" (close), "random", or
    # "quality" (highest quality first).
    keep: str = "hard"
    # Cosine-distance threshold: drop an item whose similarity to an earlier kept-order
    # item of its cluster exceeds 1 - eps. None = choose eps so exactly `budget` survive.
    eps: Optional[float] = None
    # With a fixed eps the survivors rarely number exactly `budget`: trim or top up
    # by "similarity" (most/least duplicated first) or "quality" (worst/best first).
    adjust: str = "similarity"

    def validate(self) -> None:
        super().validate()
        _require(self.n_clusters >= 1, "n_clusters", f"must be >= 1, got {self.n_clusters}")
        _require(self.kmeans_n_init >= 1, "kmeans_n_init", f"must be >= 1, got {self.kmeans_n_init}")
        _require(self.kmeans_max_iter >= 1, "kmeans_max_iter", f"must be >= 1, got {self.kmeans_max_iter}")
        keeps = ("hard", "easy", "random", "quality")
        _require(self.keep in keeps, "keep", f"must be one of {keeps}, got {self.keep!r}")
        _require(self.eps is None or 0.0 <= self.eps <= 2.0, "eps", f"must be None or in [0, 2], got {self.eps}")
        _require(
            self.adjust in ("similarity", "quality"),
            "adjust",
            f"must be 'similarity' or 'quality', got {self.adjust!r}",
        )


@dataclass
class DvrlConfig(ObjectiveConfig):
    """DVRL data value estimator (Yoon et al. 2020) as DATAMASK App. A.8 runs it."""

    method: str = "dvrl"
    # Reward = PWS only (DATAMASK Table 8).
    lam: float = 0.0
    # Width of the two hidden layers of the 3-layer ReLU MLP (DVRL default 100).
    hidden_dim: int = 100
    # REINFORCE iterations (DVRL default 2000).
    iterations: int = 2000
    # Items per iteration (DVRL default 2000; capped at the seen set).
    batch_size: int = 2000
    # Adam learning rate (DVRL's default 0.01 collapsed the selection rate in our runs).
    lr: float = 0.001
    # Moving-average baseline window T: b <- (T-1)/T b + r/T (DVRL default 20).
    baseline_window: int = 20
    # Weight of the penalty (mean selection probability - keep ratio)^2, which
    # replaces DVRL's [1-threshold, threshold] box on the selection rate.
    rate_penalty: float = 1000.0
    # Fraction of items held out from training ("unseen", App. A.8 / Table 8); 0 = none.
    unseen_fraction: float = 0.0
    # Record a history row every this many iterations.
    history_every: int = 10
    # Torch device: "cpu", "cuda", or "auto".
    device: str = "cpu"

    def validate(self) -> None:
        super().validate()
        _require(self.hidden_dim >= 1, "hidden_dim", f"must be >= 1, got {self.hidden_dim}")
        _require(self.iterations >= 0, "iterations", f"must be >= 0, got {self.iterations}")
        _require(self.batch_size >= 2, "batch_size", f"must be >= 2, got {self.batch_size}")
        _require(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        _require(self.baseline_window >= 1, "baseline_window", f"must be >= 1, got {self.baseline_window}")
        _require(self.rate_penalty >= 0, "rate_penalty", f"must be >= 0, got {self.rate_penalty}")
        _require(
            0.0 <= self.unseen_fraction < 1.0,
            "unseen_fraction",
            f"must be in [0, 1), got {self.unseen_fraction}",
        )
        _require(self.history_every >= 1, "history_every", f"must be >= 1, got {self.history_every}")


CONFIG_CLASSES: dict[str, type[SelectionConfig]] = {
    "datamask": DataMaskConfig,
    "greedy": GreedyConfig,
    "topk_quality": TopkQualityConfig,
    "random": RandomConfig,
    "semdedup": SemDeDupConfig,
    "dvrl": DvrlConfig,
}


# FineWeb-Mask's recipe as DATAMASK prints it (seeds/000 Sec. 4.4 with Sec. 4.2-4.3, App. A.6): the raw Eq. 12
# (standardize False) with lambda 0.5 and PWS, quality initialisation (Eq. 13), G 128, eta 10, r 0.05,
# E = 10,000 steps per block, the final mask sampled from softmax(L^E) (Algorithm 1); applied to the quality-pruned
# pool (App. A.5). conf/selection/datamask_paper.yaml
# holds the same values (a test keeps them equal). The project's default (DataMaskConfig()) differs: see
# docs/selection.md.
DATAMASK_PAPER: dict[str, Any] = {
    "diversity": "pws",
    "lam": 0.5,
    "standardize": False,
    "init": "quality",
    "group_size": 128,
    "lr": 10.0,
    "batch_ratio": 0.05,
    "steps": 10_000,
    "final": "sample",  # Algorithm 1's last line (also the project's default)
}


def parse_selection_config(method: str, config: Mapping[str, Any] | SelectionConfig | None = None,
                           path: str = "") -> SelectionConfig:
    """Build and validate the config of `method` from a mapping (missing keys = defaults).

    ``path`` (e.g. ``"selection"``) prefixes the keys named in errors.
    """
    key = f"{path}.method" if path else "method"
    if method not in CONFIG_CLASSES:
        raise ConfigError(key, f"must be one of {METHODS}", method)
    cls = CONFIG_CLASSES[method]
    if isinstance(config, SelectionConfig):
        _require(isinstance(config, cls), key, f"config is a {type(config).__name__}, not {cls.__name__}")
    values = dict(_as_mapping(config))
    _require(values.get("method", method) == method, key, f"is {values.get('method')!r} but {method!r} was asked")
    values["method"] = method
    return parse_dataclass(cls, values, path=path)


def _as_mapping(config: Any) -> Mapping[str, Any]:
    if config is None:
        return {}
    if isinstance(config, SelectionConfig):
        return {k: getattr(config, k) for k in config.__dataclass_fields__}
    return config  # a dict or any Mapping (a DictConfig is one; parse_dataclass reads it)


# --- the budget group: how many documents the selection keeps ---

RATIO_OF = ("corpus", "candidates")


@dataclass
class BudgetConfig:
    """``conf/budget/default.yaml``: documents the selection keeps (DATAMASK keeps ~10% of FineWeb)."""

    keep_ratio: float = 0.1  # fraction of ratio_of; strictly between 0 and 1
    docs: Optional[int] = None  # an exact number of documents instead (overrides keep_ratio; not with tokens)
    ratio_of: str = "corpus"  # corpus (ingested, before pruning) | candidates (what the selection sees)
    candidates: Optional[int] = None  # select from a seeded random subset of this many pruned candidates
    # A token budget instead of a document one (issue #38; curation.selection.tokens): the selected documents'
    # reference-tokenizer tokens (curation.data.tokens) within 1% of it. Overrides keep_ratio; refused with docs.
    tokens: Optional[int] = None  # tokens to select (count)
    token_ratio: Optional[float] = None  # or a share of the ingested corpus's tokens, in (0, 1)
    domain_column: Optional[str] = None  # fixed domain proportions by this document column (e.g. source)
    domain_proportions: Optional[dict[str, float]] = None  # domain -> share of the tokens (null = the pool's own)

    def __post_init__(self) -> None:
        in_range("keep_ratio", self.keep_ratio, 0, 1, low_open=True, high_open=True)
        at_least("docs", self.docs, 1, optional=True)
        one_of("ratio_of", self.ratio_of, RATIO_OF)
        at_least("candidates", self.candidates, 2, optional=True)
        at_least("tokens", self.tokens, 1, optional=True)
        in_range("token_ratio", self.token_ratio, 0, 1, low_open=True, high_open=True, optional=True)
        check(self.tokens is None or self.token_ratio is None, "token_ratio", self.token_ratio,
              "null when budget.tokens is set (keep one of the two)")
        token_key = "tokens" if self.tokens is not None else "token_ratio"
        check(self.docs is None or (self.tokens is None and self.token_ratio is None), "docs", self.docs,
              f"null when budget.{token_key} is set (a budget counts documents or tokens, and the token budget "
              f"would override budget.docs). Fix: keep one of budget.docs and budget.{token_key} "
              f"(set the other to null)")
        check(self.domain_proportions is None or self.domain_column is not None, "domain_proportions",
              self.domain_proportions, "null unless budget.domain_column names the document column of the domains")
        if self.domain_proportions is not None:
            shares = [float(v) for v in self.domain_proportions.values()]
            check(abs(sum(shares) - 1.0) < 1e-6 and min(shares) >= 0, "domain_proportions", self.domain_proportions,
                  "non-negative shares that sum to 1")
