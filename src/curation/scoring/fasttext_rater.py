"""fastText quality classifiers: the DCLM and Ultra-FineWeb recipes.

References
- DCLM (Li et al., 2024), cited in DATAMASK Appendix A.5: a fastText
  classifier, ``wordNgrams=2`` and otherwise fastText's defaults, trained on
  equal halves of high-quality (``__label__hq``) and crawl (``__label__cc``)
  documents, each document joined onto one line. The score is the probability
  of ``__label__hq``.
- Ultra-FineWeb (Wang et al., 2025) Sec. 2.5: "removing redundant empty lines
  and extra spaces, stripping diacritics, and converting all English text to
  lowercase", tokenised with a subword tokenizer (DeepSeek-V2 there; here the
  project tokenizer, by default the ``tokenizer.json`` shipped with the offline
  MiniLM package), "we preserve structural information such as \\n, \\t, and
  \\r" (kept as the escaped tokens ``\\n`` ``\\t`` ``\\r``); "a vector dimension of
  256, a learning rate of 0.1, a maximum word n-gram length of 3, a minimum
  word occurrence threshold of 5, and a total of 3 training epochs"; training
  set evenly split between positives and negatives; inference threshold 0.5.
  This rater is the recipe without the paper's seed loop (its positives are
  fixed categories, not verified seed pools; no second round): the loop is
  ``curation.verification.seed_loop`` (``curate pipeline=ufw_classifier``).

Either recipe can instead load a pretrained ``.bin`` (the public DCLM
``openhermes_reddit_eli5_vs_rw_v2_bigram_200k_train.bin`` or the Ultra-FineWeb
classifier): set ``pretrained_path`` and the matching ``positive_label``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from curation.scoring.base import Rater, ensure_texts


@dataclass
class FastTextConfig:
    """fastText ``train_supervised`` arguments plus labels; defaults = DCLM recipe."""

    # "dclm": newlines -> spaces; "ultrafineweb": Sec. 2.5 normalisation + subword tokens
    recipe: str = "dclm"
    # embedding width (fastText default 100)
    dim: int = 100
    # learning rate (fastText default)
    lr: float = 0.1
    # max word n-gram length; DCLM's one change to the defaults
    word_ngrams: int = 2
    # minimum count of a word to enter the vocabulary (fastText default 1)
    min_count: int = 1
    # passes over the training file (fastText default 5)
    epoch: int = 5
    # hash buckets for n-grams; memory is (vocab + bucket) * dim * 4 bytes (2M*100 = 0.8 GB)
    bucket: int = 2_000_000
    # loss: softmax (fastText default for supervised)
    loss: str = "softmax"
    # training threads; 1 = bit-reproducible (the default: same input, same model); >1 is faster but
    # fastText's lock-free SGD (Hogwild) then depends on thread timing, so scores differ run to run
    thread: int = 1
    # fastText's RNG seed
    seed: int = 0
    # label name of the high-quality class ("hq" in DCLM's public model)
    positive_label: str = "hq"
    # label name of the crawl class
    negative_label: str = "cc"
    # score >= threshold means "keep" in predict_keep; None: rank only (DCLM keeps a top fraction)
    threshold: float | None = None
    # ultrafineweb recipe: tokenizers JSON; None = the offline MiniLM package's tokenizer.json
    tokenizer_path: str | None = None
    # use this trained .bin instead of fitting
    pretrained_path: str | None = None
    # after "Encountered NaN": identical re-runs of the training in a fresh process
    nan_retries: int = 3
    # train in a fresh interpreter (model handed back as a .bin): immune to native state
    # left by other libraries in a long-lived process; false trains in this process
    isolate_training: bool = True
    # fastText's own quantize() after training ("FastText.zip", Joulin et al. 2016, Sec. 3): keep the
    # quantize_cutoff rows of the input matrix (words and n-gram buckets) with the largest norms,
    # optionally retrain with only those (quantize_retrain), then product-quantise the rows (sub-vectors
    # of quantize_dsub dims, 256 centroids each) and their norms (qnorm). false = keep the full model.
    # Defaults: 32,768 rows, 2-dim sub-vectors, norms not quantized apart, no retraining. The quantizer's
    # k-means runs over min(cutoff, 65,536) rows, so the cutoff sets its cost: 32,768 rows quantize the
    # Ultra-FineWeb model 5.5x faster than 200k (the set-up's critical path), with Spearman 0.9975 / 0.9971
    # against the 200k models (Ultra-FineWeb / DCLM) and held-out ROC-AUC 0.794 / 0.677 against 0.795 / 0.667
    # (benchmarks/scoring/fasttext_build_cost.py). Measured at 200k on the
    # DCLM reference model (Spearman vs the full model, 16.5k documents): 0.995 as set; 0.988 with qnorm
    # (its norm codebook, fitted mostly on tiny rows, blurs the large ones: 0.969 at 1M rows); 0.975-0.980
    # with retraining (it moves the model away from the full one); 1-dim sub-vectors 0.988 like 2-dim, 6x
    # slower (benchmarks/scoring/quantized_fasttext.py, benchmarks/results/quantized_fasttext.csv).
    quantize: bool = True
    quantize_cutoff: int = 32_768
    quantize_dsub: int = 2
    quantize_qnorm: bool = False
    quantize_retrain: bool = False


@dataclass
class UltraFineWebConfig(FastTextConfig):
    """Ultra-FineWeb Sec. 2.5 defaults."""

    recipe: str = "ultrafineweb"
    dim: int = 256
    lr: float = 0.1
    word_ngrams: int = 3
    min_count: int = 5
    epoch: int = 3
    positive_label: str = "pos"
    negative_label: str = "neg"
    # "we maintain the default threshold of 0.5"
    threshold: float | None = 0.5


# --- preprocessing ---------------------------------------------------------

_BLANK_LINES = re.compile(r"\n[ \t\r\f\v]*(?:\n[ \t\r\f\v]*)+")  # 2+ newlines with only blanks between
_SPACES = re.compile(r"[ \u00a0\u2000-\u200b\u3000]{2,}")  # runs of spaces (not \t: it is structure)
_ESCAPED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def dclm_normalise(text: str) -> str:
    """DCLM: the document on one line (fastText reads one example per line)."""
    return " ".join(text.split("\n")).replace("\r", " ").strip()


def ultrafineweb_clean(text: str) -> str:
    """Ultra-FineWeb Sec. 2.5 cleaning before tokenisation.

    Collapse blank lines, collapse runs of spaces, lowercase, NFKD and drop the
    combining marks (strips diacritics: "café" -> "cafe").
    """
    text = _BLANK_LINES.sub("\n", text.strip())
    text = _SPACES.sub(" ", text)
    text = text.lower()
    if text.isascii():  # nothing to decompose; most English documents stop here
        return text
    text = unicodedata.normalize("NFKD", text)
    table = _combining_marks()
    # most decomposed documents hold no mark (curly quotes, dashes): a set test is ~4x cheaper than translate
    return text if _COMBINING_CHARS.isdisjoint(text) else text.translate(table)


_COMBINING: dict[int, None] | None = None
_COMBINING_CHARS: frozenset[str] = frozenset()


def _combining_marks() -> dict[int, None]:
    """str.translate table deleting every combining mark (built once, ~0.3 s)."""
    global _COMBINING, _COMBINING_CHARS
    if _COMBINING is None:
        _COMBINING = {cp: None for cp in range(0x110000) if unicodedata.combining(chr(cp))}
        _COMBINING_CHARS = frozenset(map(chr, _COMBINING))
    return _COMBINING


class UltraFineWebTokenizer:
    """Clean, then subword-tokenise with \\n \\t \\r kept as escaped tokens.

    The structure characters are registered as added tokens, which the
    tokenizer matches before its normaliser and pre-tokeniser (a BERT
    pre-tokeniser would otherwise drop them as whitespace); one
    ``encode_batch_fast`` call then tokenises whole documents.

    With the default tokenizer (a ``BertNormalizer``) the normaliser runs here, not in the
    tokenizer (``fast=True``): its steps (drop control characters, whitespace to a space, pad CJK
    ideographs, strip accents, lowercase) act on each character alone, and a cleaned text is already
    decomposed with no combining mark left (``ultrafineweb_clean``), so mapping each character through
    the tokenizer's own normaliser gives the normalised text, and encoding that with the normaliser
    off gives the same tokens, about 25% faster (the tokenizer's normaliser tracks every character's
    alignment). Only the characters a batch holds are looked up, once per process; only the
    documents holding one that changes are rewritten. ``fast=False`` is the tokenizer as it is (the
    tests' oracle: the same tokens on the corpus and on edge texts); any other normaliser always runs
    as it is.

    >>> UltraFineWebTokenizer()(["Café\\n\\n\\nBar"])
    ['cafe \\\\n bar']
    """

    # normalisers that act on each character alone (see the class docstring)
    PER_CHARACTER_NORMALIZERS = ("BertNormalizer",)

    @staticmethod
    def resolve_path(tokenizer_path: str | None = None) -> str:
        """The tokenizer file: ``tokenizer_path``, or the offline MiniLM package's ``tokenizer.json``."""
        if tokenizer_path is None:
            from curation.embedding import packaged_tokenizer_path

            tokenizer_path = packaged_tokenizer_path()
        return str(tokenizer_path)

    def __init__(self, tokenizer_path: str | None = None, fast: bool = True):
        from tokenizers import AddedToken, Tokenizer

        self.tokenizer_path = self.resolve_path(tokenizer_path)
        self._tok = Tokenizer.from_file(self.tokenizer_path)
        # the model's own truncation/padding settings must not cut documents
        self._tok.no_truncation()
        self._tok.no_padding()
        self._tok.add_tokens([AddedToken(c, normalized=False, special=False) for c in _ESCAPED])
        # encode_batch_fast returns ids only; map them back to token strings ourselves,
        # with the structure tokens already escaped
        vocab = self._tok.get_vocab(with_added_tokens=True)
        self._id2tok = [""] * (max(vocab.values()) + 1)
        for token, idx in vocab.items():
            self._id2tok[idx] = _ESCAPED.get(token, token)
        self._normalizer = self._tok.normalizer
        kind = (json.loads(self._tok.to_str()).get("normalizer") or {}).get("type")
        self._unnormalised = None
        if fast and kind in self.PER_CHARACTER_NORMALIZERS:
            self._unnormalised = Tokenizer.from_str(self._tok.to_str())
            self._unnormalised.normalizer = None
        self._char_map: dict[int, str] = {}  # code point -> its normalised form, where that differs
        self._changing: frozenset[str] = frozenset()  # the characters of _char_map
        self._looked_up: set[str] = set(_ESCAPED)  # the structure tokens are never normalised

    @property
    def fast(self) -> bool:
        """Whether the normaliser runs here, character by character (see the class docstring)."""
        return self._unnormalised is not None

    def _normalise(self, docs: list[str]) -> list[str]:
        new = set().union(*map(set, docs)) - self._looked_up
        for ch in new:
            out = self._normalizer.normalize_str(ch)
            if out != ch:
                self._char_map[ord(ch)] = out
        if new:
            self._looked_up |= new
            self._changing = frozenset(map(chr, self._char_map))
        changing = self._changing
        return [d.translate(self._char_map) if not changing.isdisjoint(d) else d for d in docs]

    def __call__(self, texts: Sequence[str]) -> list[str]:
        cleaned = [ultrafineweb_clean(t) for t in texts]
        # encode only documents with content; "" marks nothing to classify
        live = [i for i, t in enumerate(cleaned) if t.strip()]
        docs = [cleaned[i] for i in live]
        if self._unnormalised is not None:
            encoded = self._unnormalised.encode_batch_fast(self._normalise(docs), add_special_tokens=False)
        else:
            encoded = self._tok.encode_batch_fast(docs, add_special_tokens=False)
        out = [""] * len(cleaned)
        for i, enc in zip(live, encoded):
            out[i] = " ".join([self._id2tok[j] for j in enc.ids])
        return out


# --- the rater ---------------------------------------------------------------


_FRESH_TRAIN = """
import json, sys
import fasttext
params, quantize, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
try:
    model = fasttext.train_supervised(**params)
    if quantize:
        model.quantize(**quantize)
    model.save_model(out)
except RuntimeError as err:
    print(err, file=sys.stderr)
    sys.exit(3)
"""


def _train(params: dict, quantize: dict | None):
    """``fasttext.train_supervised(**params)``, then ``model.quantize(**quantize)`` if given, in this process."""
    import fasttext

    model = fasttext.train_supervised(**params)
    if quantize:
        model.quantize(**quantize)
    return model


def _train_in_fresh_process(params: dict, quantize: dict | None = None):
    """``_train`` in a new interpreter; the model comes back as a file."""
    import subprocess
    import sys

    import fasttext

    from curation.processes import die_with_parent_kwargs

    fd, out = tempfile.mkstemp(suffix=".bin", prefix="fasttext_model_")
    os.close(fd)
    try:
        done = subprocess.run([sys.executable, "-c", _FRESH_TRAIN, json.dumps(params), json.dumps(quantize or {}),
                               out], capture_output=True, text=True, **die_with_parent_kwargs())
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip() or f"fastText training process exited {done.returncode}")
        return fasttext.load_model(out)
    finally:
        os.unlink(out)


class FastTextRater(Rater):
    """Binary fastText quality classifier; ``score`` = P(positive label).

    >>> rater = FastTextRater(FastTextConfig(bucket=100_000)).fit(pos_texts, neg_texts)
    >>> rater.score(texts)  # (n,) float64 in [0, 1], NaN for empty documents
    """

    def __init__(self, cfg: FastTextConfig | None = None):
        self.cfg = cfg or FastTextConfig()
        if self.cfg.recipe not in ("dclm", "ultrafineweb"):
            raise ValueError(f"unknown fastText recipe {self.cfg.recipe!r} (dclm | ultrafineweb)")
        self.name = f"fasttext_{self.cfg.recipe}"
        self._tokenizer = UltraFineWebTokenizer(self.cfg.tokenizer_path) if self.cfg.recipe == "ultrafineweb" else None
        self.model = None
        if self.cfg.pretrained_path:
            self._load_model(self.cfg.pretrained_path)

    # preprocessing shared by fit and score, so train and inference match
    def preprocess(self, texts: Sequence[str]) -> list[str]:
        texts = ensure_texts(texts)
        if self._tokenizer is not None:
            return self._tokenizer(texts)
        return [dclm_normalise(t) for t in texts]

    def _normalise(self, text: str) -> str:
        return self.preprocess([text])[0]

    def empty_mask(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([not t for t in self.preprocess(texts)], dtype=bool)

    def fit(self, positives: Sequence[str], negatives: Sequence[str]) -> "FastTextRater":
        """Train on positive / negative documents (balance them beforehand: see training_sets)."""
        return self.fit_prepared(self.preprocess(positives), self.preprocess(negatives))

    def fit_prepared(self, positives: Sequence[str], negatives: Sequence[str]) -> "FastTextRater":
        """``fit`` on texts already passed through ``preprocess`` (lets a caller tokenise once)."""
        if self.cfg.pretrained_path:
            raise ValueError("pretrained_path is set: this rater loads a trained model, it does not fit")
        pos = [t for t in positives if t]
        neg = [t for t in negatives if t]
        if not pos or not neg:
            raise ValueError(f"need both classes to train: {len(pos)} positives, {len(neg)} negatives")
        fd, path = tempfile.mkstemp(suffix=".txt", prefix="fasttext_train_")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                self.write_training_file(pos, neg, f)
            params = dict(input=path, dim=self.cfg.dim, lr=self.cfg.lr, wordNgrams=self.cfg.word_ngrams,
                          minCount=self.cfg.min_count, epoch=self.cfg.epoch, bucket=self.cfg.bucket,
                          loss=self.cfg.loss, thread=self.cfg.thread, seed=self.cfg.seed, verbose=0)
            quantize = self.quantize_params(path)
            # fasttext-numpy2 0.10.4 misbehaves inside a long-lived process that has run other
            # native code: in our full test suite the identical call stopped with "Encountered
            # NaN" for every seed, or returned a model scoring ~0.5 everywhere, while a fresh
            # interpreter trained it normally. So by default training runs in a fresh process;
            # a NaN there (small data) is retried up to nan_retries times, and counted.
            mode = "fresh_process" if self.cfg.isolate_training else "in_process"
            attempts = 0
            for attempts in range(1, self.cfg.nan_retries + 2):
                try:
                    self.model = (_train_in_fresh_process(params, quantize) if self.cfg.isolate_training
                                  else _train(params, quantize))
                    break
                except RuntimeError as err:
                    if "NaN" not in str(err) or attempts > self.cfg.nan_retries:
                        raise RuntimeError(f"fastText training failed after {attempts} attempt(s): {err}") from err
        finally:
            os.unlink(path)
        self.n_train_ = {"positives": len(pos), "negatives": len(neg), "train_mode": mode, "attempts": attempts,
                         "quantized": bool(quantize)}
        return self

    def write_training_file(self, positives: Sequence[str], negatives: Sequence[str], f) -> None:
        """fastText's training file: one ``__label__<class> <preprocessed text>`` line per document, shuffled
        by ``cfg.seed`` (fastText reads the file in order: SGD must not see one class then the other)."""
        lines = [f"__label__{self.cfg.positive_label} {t}" for t in positives]
        lines += [f"__label__{self.cfg.negative_label} {t}" for t in negatives]
        for i in np.random.default_rng(self.cfg.seed).permutation(len(lines)):
            f.write(lines[i] + "\n")

    def quantize_params(self, train_file: str) -> dict | None:
        """``model.quantize`` arguments of the config (None: keep the full model). Retraining reads
        ``train_file`` (the training set) with the config's epochs, learning rate and threads."""
        if not self.cfg.quantize:
            return None
        return dict(input=train_file, qout=False, cutoff=self.cfg.quantize_cutoff, retrain=self.cfg.quantize_retrain,
                    epoch=self.cfg.epoch, lr=self.cfg.lr, thread=self.cfg.thread, verbose=0,
                    dsub=self.cfg.quantize_dsub, qnorm=self.cfg.quantize_qnorm)

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """P(positive label) per document, float64; NaN where preprocessing leaves nothing."""
        return self.score_prepared(self.preprocess(texts))

    def score_counted(self, texts: Sequence[str]) -> tuple[np.ndarray, dict[str, int]]:
        return self.score_prepared_counted(self.preprocess(texts))

    def score_prepared_counted(self, prepared: Sequence[str]) -> tuple[np.ndarray, dict[str, int]]:
        """Scores and counts of preprocessed texts; "" counts as empty_text."""
        scores = self.score_prepared(prepared)
        nan = ~np.isfinite(scores)
        empty = sum(1 for t in prepared if not t)
        return scores, {"total": len(prepared), "scored": int((~nan).sum()), "empty_text": empty, "nan_score": int(nan.sum())}

    def score_prepared(self, prepared: Sequence[str]) -> np.ndarray:
        """``score`` on texts already passed through ``preprocess``."""
        if self.model is None:
            raise RuntimeError(f"{self.name}: call fit() or set pretrained_path first")
        out = np.full(len(prepared), np.nan)
        keep = [i for i, t in enumerate(prepared) if t]
        if not keep:
            return out
        want = f"__label__{self.cfg.positive_label}"
        labels, probs = self.model.predict([prepared[i] for i in keep], k=-1, threshold=0.0)
        for j, i in enumerate(keep):
            hit = np.flatnonzero(np.asarray(labels[j]) == want)
            # a label that k=-1 did not return has probability ~0
            out[i] = float(probs[j][hit[0]]) if hit.size else 0.0
        # fastText's softmax can exceed 1 by float error (1.00001)
        return np.clip(out, 0.0, 1.0)

    def predict_keep(self, texts: Sequence[str]) -> np.ndarray:
        """Ultra-FineWeb inference rule: keep where score >= threshold (False for NaN)."""
        if self.cfg.threshold is None:
            raise ValueError(f"{self.name} has no threshold (rank by score instead)")
        s = self.score(texts)
        return np.where(np.isfinite(s), s >= self.cfg.threshold, False)

    # --- persistence --------------------------------------------------------

    def _load_model(self, path: str | Path) -> None:
        import fasttext

        self.model = fasttext.load_model(str(path))
        labels = self.model.get_labels()
        want = f"__label__{self.cfg.positive_label}"
        if want not in labels:
            raise ValueError(f"{path}: positive label {want!r} not among the model's labels {labels}")

    def save(self, path: str | Path) -> None:
        """Write the fastText ``.bin`` and a ``.json`` sidecar with the config."""
        if self.model is None:
            raise RuntimeError("nothing to save: the model is not trained")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.model.save_model(str(path))
        cfg = asdict(self.cfg) | {"pretrained_path": None, "config_class": type(self.cfg).__name__}
        path.with_suffix(".json").write_text(json.dumps(cfg, indent=2))

    @classmethod
    def load(cls, path: str | Path) -> "FastTextRater":
        """Load a ``.bin`` written by ``save`` (config from its sidecar)."""
        path = Path(path)
        raw = json.loads(path.with_suffix(".json").read_text())
        cfg_cls = UltraFineWebConfig if raw.pop("config_class", "") == "UltraFineWebConfig" else FastTextConfig
        raw["pretrained_path"] = str(path)
        return cls(cfg_cls(**raw))
