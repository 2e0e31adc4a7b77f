"""Knobs of a Meta-rater run (seeds/004 Alg. 1, Sec. 3.2, App. D) and the ``quick`` / ``paper`` presets.

``conf/metarater/<name>.yaml`` mirrors ``PRESETS[name]`` key for key (a test
keeps them equal). :func:`parse_metarater_config` builds a
:class:`MetaraterConfig` from any mapping (dict, OmegaConf ``DictConfig``);
unknown keys, wrong-typed and out-of-range values raise ``ConfigError`` (a
``ValueError``) naming the key, and missing keys take the dataclass defaults
(= the ``quick`` preset). The range checks also run on construction.

Defaults follow the paper where it says something: symmetric Dirichlet
(alpha = 1) weights, top 15% per proxy, LightGBM gbdt with 1000 iterations at
lr 0.01 (official script), w* = mean of the 128 best of a dense candidate
sample; N = 256 proxies (Sec. 5.1) and 1M candidates at paper scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from curation.configuration import ConfigError, at_least, each, in_range, parse_dataclass
from curation.lm.config import PRESETS as LM_PRESETS
from curation.lm.config import PretrainConfig, get_config
from curation.metarater.core import RegressionConfig

COMPARISON_METHODS = ("metarater", "uniform", "intersection", "random")


def _require(ok: bool, key: str, message: str, value: Any) -> None:
    if not ok:
        raise ConfigError(key, message, value)


@dataclass
class ValidationConfig:
    """The fixed held-out set every proxy is evaluated on (Alg. 1: D_v).

    Default: a slice of the encyclopedic and book documents plus the
    human-labelled high-quality rows; held-out documents are never candidates.
    """

    categories: list[str] = field(default_factory=lambda: ["encyclopedic", "books"])  # values of category_column
    category_column: str = "category"  # documents column naming each document's kind
    labels: list[float] = field(default_factory=lambda: [1.0])  # human labels that count as high quality
    label_column: str = "quality_label"  # documents column with the human label (null on most rows)
    fraction: float = 0.1  # share of each group's documents (or url groups) held out
    group_column: Optional[str] = "url"  # rows sharing a value are held out together (a book's passages)
    max_tokens: int = 65_536  # tokens of the validation stream, split equally between the groups
    path: Optional[str] = None  # a parquet/jsonl file with a `text` column used instead (nothing held out)
    seed: int = 0  # which documents are held out, and their order


@dataclass
class ProxyConfig:
    """The proxy LM (``curation.lm`` preset) and what changes from the preset."""

    preset: str = "proxy_quick"  # curation.lm preset: proxy_quick (1.4M params) | proxy_paper (18M, App. D)
    max_tokens: Optional[int] = 262_144  # training tokens per proxy (None = the preset's budget)
    batch_size: Optional[int] = None  # sequences per micro-batch (None = preset)
    lr: Optional[float] = 2e-3  # constant learning rate (None = preset); 128 steps need more than the preset's 4e-4
    vocab_size: Optional[int] = None  # BPE vocabulary (None = preset); trained on tokenizer_docs documents
    tokenizer_docs: int = 4_000  # documents (seeded sample of the whole corpus) the tokenizer is trained on
    num_threads: int = 2  # torch CPU threads per proxy
    seed: int = 0  # model init and batch order, the same for every sweep proxy: losses differ by data only

    def pretrain_config(self, seed: Optional[int] = None) -> PretrainConfig:
        """The preset with this config's overrides applied (validated)."""
        cfg = get_config(self.preset)
        if self.max_tokens is not None:
            cfg.train.max_tokens, cfg.train.max_steps = self.max_tokens, None
        if self.batch_size is not None:
            cfg.train.batch_size = self.batch_size
        if self.lr is not None:
            cfg.train.lr = cfg.train.min_lr = self.lr
        if self.vocab_size is not None:
            cfg.tokenizer.vocab_size = cfg.model.vocab_size = self.vocab_size
        cfg.train.num_threads = self.num_threads
        cfg.train.seed = self.seed if seed is None else seed
        cfg.train.val_batches = 1  # the proxy's own validation is evaluate_loss over the whole held-out set
        return cfg.validate()


@dataclass
class SearchConfig:
    """Sec. 3.2 "Optimal Weight Prediction": predict a dense Dirichlet sample, average the best."""

    n_candidates: int = 200_000  # candidate weight vectors predicted (count; paper scale 1M)
    top_k: int = 128  # best candidates averaged into w* (count)
    seed: int = 1  # candidate draw (different from the proxies' draw)
    batch: int = 100_000  # candidates predicted per batch (memory bound)


@dataclass
class ComparisonConfig:
    """Table 4 analogue: selections evaluated by one more proxy each; Fig. 2 analogue: w* vs N."""

    enabled: bool = True  # false: skip comparisons and the num-proxies curve (w* and its selection only)
    # of metarater (w*) | uniform (the Mean baseline) | intersection | random
    methods: list[str] = field(default_factory=lambda: list(COMPARISON_METHODS))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # proxy seeds (and random-selection seeds) per method
    single_raters: bool = True  # also each rater alone (top-k by one score)
    single_rater_seeds: list[int] = field(default_factory=lambda: [0])  # proxy seeds per single rater
    intersection_raters: Optional[list[str]] = None  # raters the intersection uses (None = all)
    # Fig. 2: N values of the regression (those above the proxies run are skipped)
    num_proxies: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128, 256])
    num_proxies_seeds: list[int] = field(default_factory=lambda: [0])  # proxy seeds per point of the N curve


@dataclass
class MetaraterConfig:
    name: str = "quick"
    # --- Alg. 1 step 1: N weight vectors from a symmetric Dirichlet over the m raters ---
    num_proxies: int = 32  # N (paper: 256)
    alpha: float = 1.0  # Dirichlet concentration (1 = uniform on the simplex)
    seed: int = 0  # weight draw; the first n vectors do not depend on num_proxies, so N can grow
    proxy_id: Optional[int] = None  # experiment=metarater_proxy: train only this proxy (0-based)
    # --- step 2-3: raters min-max scaled to [0, 5], top keep_frac by w . q ---
    raters: Optional[list[str]] = None  # score columns (None = all but `quality` and the *_0_5 merge copies)
    invert: list[str] = field(default_factory=list)  # raters where lower is better (5 - scaled); paper: none
    keep_frac: float = 0.15  # share of the candidates each proxy (and the final selection) keeps
    # --- step 4-5: proxies, resumable ---
    retry_failed: bool = False  # re-run proxies recorded as failed (default: keep the failure, report it)
    work_dir: Optional[str] = None  # per-proxy results (None = the catalog entry metarater_work_dir)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    # --- regression and search ---
    regression: RegressionConfig = field(default_factory=lambda: RegressionConfig(min_child_samples=3))
    search: SearchConfig = field(default_factory=SearchConfig)
    comparisons: ComparisonConfig = field(default_factory=ComparisonConfig)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> "MetaraterConfig":
        """Range checks (keys relative to ``metarater``); returns ``self``."""
        at_least("num_proxies", self.num_proxies, 1)
        at_least("alpha", self.alpha, 0, strict=True)
        in_range("keep_frac", self.keep_frac, 0, 1, low_open=True)
        _require(self.proxy_id is None or 0 <= self.proxy_id < self.num_proxies, "proxy_id",
                 f"must be in [0, num_proxies={self.num_proxies}) or null", self.proxy_id)
        _require(self.proxy.preset in LM_PRESETS, "proxy.preset", f"unknown; known: {sorted(LM_PRESETS)}",
                 self.proxy.preset)
        p = self.proxy
        for key in ("max_tokens", "batch_size", "vocab_size"):
            at_least(f"proxy.{key}", getattr(p, key), 1, optional=True)
        at_least("proxy.lr", p.lr, 0, strict=True, optional=True)
        at_least("proxy.tokenizer_docs", p.tokenizer_docs, 1)
        at_least("proxy.num_threads", p.num_threads, 1)
        v = self.validation
        in_range("validation.fraction", v.fraction, 0, 1, low_open=True, high_open=True)
        at_least("validation.max_tokens", v.max_tokens, 2)
        unknown = [m for m in self.comparisons.methods if m not in COMPARISON_METHODS]
        _require(not unknown, "comparisons.methods", f"unknown method {unknown[:1]}; known: {COMPARISON_METHODS}",
                 self.comparisons.methods)
        each("comparisons.num_proxies", self.comparisons.num_proxies, lambda k, n: at_least(k, n, 1))
        r = self.regression
        _require(r.model in ("lightgbm", "ridge"), "regression.model", "must be lightgbm or ridge", r.model)
        for key in ("n_estimators", "min_child_samples", "num_leaves", "early_stopping_rounds"):
            at_least(f"regression.{key}", getattr(r, key), 1)
        at_least("regression.learning_rate", r.learning_rate, 0, strict=True)
        in_range("regression.test_frac", r.test_frac, 0, 1, low_open=True, high_open=True)
        in_range("regression.early_stop_frac", r.early_stop_frac, 0, 1, high_open=True)
        _require(r.test_frac + r.early_stop_frac < 1, "regression.early_stop_frac",
                 f"test_frac + early_stop_frac must be < 1 (test_frac={r.test_frac})", r.early_stop_frac)
        _require(self.search.top_k >= 1 and self.search.n_candidates >= self.search.top_k, "search.top_k",
                 f"must be in [1, search.n_candidates={self.search.n_candidates}]", self.search.top_k)
        at_least("search.batch", self.search.batch, 1)
        try:
            self.proxy.pretrain_config()  # the preset with the overrides must be valid
        except ConfigError as err:
            raise ConfigError("proxy", f"gives an invalid {self.proxy.preset!r} LM config: {err}") from None
        return self


def _quick() -> MetaraterConfig:
    return MetaraterConfig()


def _paper() -> MetaraterConfig:
    # seeds/004: N = 256 (Sec. 5.1), 1M candidates, the 18M proxy on 0.5B tokens (App. D, Table 11).
    return MetaraterConfig(
        name="paper",
        num_proxies=256,
        proxy=ProxyConfig(preset="proxy_paper", max_tokens=None, lr=None, tokenizer_docs=20_000),
        regression=RegressionConfig(),
        search=SearchConfig(n_candidates=1_000_000),
    )


PRESETS: dict[str, MetaraterConfig] = {"quick": _quick(), "paper": _paper()}


def parse_metarater_config(mapping: Mapping[str, Any] | MetaraterConfig | None = None,
                           path: str = "") -> MetaraterConfig:
    """A validated :class:`MetaraterConfig` from ``cfg.metarater`` (or any mapping)."""
    if mapping is None:
        return MetaraterConfig().validate()
    return parse_dataclass(MetaraterConfig, mapping, path=path).validate()
