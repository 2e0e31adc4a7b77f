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
from curation.metarater.core import PROTOCOLS, RegressionConfig

COMPARISON_METHODS = ("metarater", "uniform", "intersection", "random")
# the model-based quality raters of the scoring pipeline (Table 4 intersects model-based raters only)
MODEL_BASED_RATERS = ("fasttext_dclm", "fasttext_ultrafineweb", "edu", "wiki")


def _require(ok: bool, key: str, message: str, value: Any) -> None:
    if not ok:
        raise ConfigError(key, message, value)


VALIDATION_SOURCES = ("holdout", "high_quality", "file")
SELECTION_RULES = ("domain_budget", "top_frac")


@dataclass
class ValidationConfig:
    """The held-out sets every proxy is evaluated on: D_v (Alg. 1) and the judge set (issue #27).

    ``source``:

    - ``holdout`` (default): a general slice of the corpus in its own category proportions, like the
      paper's all-domain SlimPajama validation set: ``fraction`` of each category's documents, drawn
      only from documents no rater trained on (fastText DCLM / Ultra-FineWeb, Edu, Wiki, DSIR targets;
      ``curation.scoring.reference.training_ids``). On the bundled corpus this needs
      ``scoring.training.holdout_fraction`` > 0 (the Meta-rater experiments set 0.1), since the raters
      otherwise train on every encyclopedic and book document.
    - ``high_quality``: the earlier set: ``fraction`` of the ``categories`` documents (whole
      ``group_column`` groups) plus the human-labelled ``labels`` rows, an equal token share per group.
    - ``file``: the ``text`` column of ``path`` (parquet/jsonl); nothing is held out for D_v.

    Whatever the source, a second set (``test_fraction`` of each category, clean and corpus-proportional,
    disjoint from D_v) is held out: the comparisons are judged on it, on data w* never saw.
    Held-out documents are never candidates.
    """

    source: str = "holdout"  # holdout | high_quality | file
    fraction: float = 0.03  # holdout: share of each category in D_v; high_quality: of each group
    test_fraction: float = 0.03  # share of each category in the judge set (0 = none)
    max_tokens: int = 65_536  # tokens of the D_v stream (holdout: split by the categories' document shares)
    test_max_tokens: int = 65_536  # tokens of the judge stream
    category_column: str = "category"  # documents column naming each document's kind (absent: one category)
    # high_quality only
    categories: list[str] = field(default_factory=lambda: ["encyclopedic", "books"])  # values of category_column
    labels: list[float] = field(default_factory=lambda: [1.0])  # human labels that count as high quality
    label_column: str = "quality_label"  # documents column with the human label (null on most rows)
    group_column: Optional[str] = "url"  # rows sharing a value are held out together (a book's passages)
    # file only
    path: Optional[str] = None  # a parquet/jsonl file with a `text` column used as D_v
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
    # proxy seeds (and random-selection seeds) per method: not the sweep's proxy.seed, so w* is judged on new seeds
    seeds: list[int] = field(default_factory=lambda: [101, 102, 103])
    single_raters: bool = True  # also each rater alone (top-k by one score)
    single_rater_seeds: list[int] = field(default_factory=lambda: [101])  # proxy seeds per single rater
    # raters the intersection uses (Table 4: the model-based ones present; None = all)
    intersection_raters: Optional[list[str]] = field(default_factory=lambda: list(MODEL_BASED_RATERS))
    # Fig. 2: N values of the regression (those above the proxies run are skipped)
    num_proxies: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128, 256])
    num_proxies_seeds: list[int] = field(default_factory=lambda: [0])  # proxy seeds per point of the N curve


@dataclass
class MetaraterConfig:
    name: str = "quick"
    # --- Alg. 1 step 1: N weight vectors from a symmetric Dirichlet over the m raters ---
    num_proxies: int = 64  # N (paper: 256); benchmarks/results/metarater_regressor_protocols.csv
    alpha: float = 1.0  # Dirichlet concentration (1 = uniform on the simplex)
    seed: int = 0  # weight draw; the first n vectors do not depend on num_proxies, so N can grow
    proxy_id: Optional[int] = None  # experiment=metarater_proxy: train only this proxy (0-based)
    # --- step 2-3: raters min-max scaled to [0, 5], top keep_frac by w . q ---
    raters: Optional[list[str]] = None  # score columns (None = all but `quality` and the *_0_5 merge copies)
    invert: list[str] = field(default_factory=list)  # raters where lower is better (5 - scaled); paper: none
    keep_frac: float = 0.15  # share of the candidates' tokens (domain_budget) or documents (top_frac) kept
    # the paper's rule: a token budget with fixed domain proportions (domain_budget) | global top-k (top_frac)
    selection_rule: str = "domain_budget"
    # category -> share of the token budget (None = the candidates' own token shares)
    domain_proportions: Optional[dict[str, float]] = None
    # --- step 4-5: proxies, resumable ---
    retry_failed: bool = False  # re-run proxies recorded as failed (default: keep the failure, report it)
    work_dir: Optional[str] = None  # per-proxy results (None = the catalog entry metarater_work_dir)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    # --- regression and search ---
    regression: RegressionConfig = field(default_factory=RegressionConfig)
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
        _require(v.source in VALIDATION_SOURCES, "validation.source", f"must be one of {VALIDATION_SOURCES}", v.source)
        _require(v.source != "file" or v.path is not None, "validation.path", "validation.source=file needs a path",
                 v.path)
        in_range("validation.fraction", v.fraction, 0, 1, low_open=True, high_open=True)
        in_range("validation.test_fraction", v.test_fraction, 0, 1, high_open=True)
        _require(v.fraction + v.test_fraction < 1, "validation.test_fraction",
                 f"fraction + test_fraction must be < 1 (fraction={v.fraction})", v.test_fraction)
        at_least("validation.max_tokens", v.max_tokens, 2)
        at_least("validation.test_max_tokens", v.test_max_tokens, 2)
        _require(self.selection_rule in SELECTION_RULES, "selection_rule", f"must be one of {SELECTION_RULES}",
                 self.selection_rule)
        if self.domain_proportions is not None:
            _require(all(x >= 0 for x in self.domain_proportions.values())
                     and abs(sum(self.domain_proportions.values()) - 1) < 1e-6, "domain_proportions",
                     "must be non-negative shares summing to 1", self.domain_proportions)
        unknown = [m for m in self.comparisons.methods if m not in COMPARISON_METHODS]
        _require(not unknown, "comparisons.methods", f"unknown method {unknown[:1]}; known: {COMPARISON_METHODS}",
                 self.comparisons.methods)
        each("comparisons.num_proxies", self.comparisons.num_proxies, lambda k, n: at_least(k, n, 1))
        r = self.regression
        _require(r.model in ("lightgbm", "ridge"), "regression.model", "must be lightgbm or ridge", r.model)
        _require(r.protocol in PROTOCOLS, "regression.protocol", f"must be one of {PROTOCOLS}", r.protocol)
        for key in ("n_estimators", "num_leaves", "early_stopping_rounds"):
            at_least(f"regression.{key}", getattr(r, key), 1)
        at_least("regression.min_child_samples", r.min_child_samples, 1, optional=True)
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
