"""Quantized vs full fastText raters on the bundled corpus (issue 25, "Disk and memory proportionate").

Each fastText rater (DCLM, Ultra-FineWeb; default recipes, 2M buckets), trained as the reference raters are:
``full`` (and ``full_seed1``: how far two equally good full models disagree) and each setting of fastText's own
``model.quantize`` (cutoff, retrain, ``dsub``, ``qnorm``; ``default`` marks the config's). Every model scores
the 16,513 documents: Spearman/Pearson and largest difference against the full model, ROC-AUC on the held-out
human labels, file size, seconds and the load average.

    .venv/bin/python benchmarks/scoring/quantized_fasttext.py            # both raters, ~1 CPU-hour
    .venv/bin/python benchmarks/scoring/quantized_fasttext.py --settings "" --no-seed-baseline   # the default only

Writes benchmarks/results/quantized_fasttext.{csv,png}.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from curation.scoring import ScoringConfig  # noqa: E402
from curation.scoring.fasttext_rater import FastTextRater  # noqa: E402
from curation.scoring.reference import ensure_reference, load_reference_corpus  # noqa: E402
from curation.scoring.training_sets import EVAL, build_training_set, eval_roc_auc, human_label_split  # noqa: E402

# (cutoff, retrain, dsub, qnorm); the config default is added and marked
SETTINGS = [(200_000, False, 2, True), (200_000, True, 2, False), (1_000_000, False, 2, True)]


def result_row(cfg, model_path, seconds, scores, full, **cells) -> dict:
    """``cells`` (rater, variant, the quantize settings), the model's size and ``seconds``, then ``scores`` against
    the full model's: Spearman/Pearson, largest difference; ROC-AUC on the held-out human labels; the load average."""
    from scipy.stats import pearsonr, spearmanr

    ref = load_reference_corpus(cfg.training.reference_path)  # cached: the corpus the scores are of
    eval_mask = (human_label_split(ref, cfg.training.eval_fraction, cfg.training.split_salt) == EVAL).to_numpy()
    ok = np.isfinite(full) & np.isfinite(scores)
    auc = eval_roc_auc(ref.loc[eval_mask].reset_index(drop=True), scores[eval_mask], cfg.training)
    load1, load5, load15 = os.getloadavg()
    row = {**cells, "size_mb": round(os.path.getsize(model_path) / 2**20, 3), "seconds": seconds,
           "spearman_vs_full": float(spearmanr(full[ok], scores[ok]).statistic),
           "pearson_vs_full": float(pearsonr(full[ok], scores[ok]).statistic),
           "max_abs_diff": float(np.abs(full[ok] - scores[ok]).max()),
           "roc_auc_eval": auc["roc_auc"], "n_eval": auc["n_eval"], "docs": int(ok.sum()),
           "loadavg_1": round(load1, 2), "loadavg_5": round(load5, 2), "loadavg_15": round(load15, 2)}
    print({k: row[k] for k in ("rater", "variant", "size_mb", "seconds", "spearman_vs_full", "roc_auc_eval")},
          flush=True)
    return row


def train_full(rater: FastTextRater, pos, neg, prepared, path: Path) -> tuple[float, np.ndarray]:
    """Train ``rater`` (a full, unquantized config) on the prepared positives and negatives, save the model to
    ``path``; its training seconds and its scores of ``prepared`` (the baseline every variant is compared to)."""
    t0 = time.perf_counter()
    rater.fit_prepared(pos, neg)
    seconds = time.perf_counter() - t0
    rater.model.save_model(str(path))
    return seconds, rater.score_prepared(prepared)


def main() -> None:
    args = bench.parser(
        __doc__, raters="fasttext_dclm,fasttext_ultrafineweb", out=bench.RESULTS / "quantized_fasttext.csv",
        settings=(",".join(":".join(str(int(v)) for v in s) for s in SETTINGS), "quantize settings "
                  "cutoff:retrain:dsub:qnorm, comma-separated (the config default is always added); '' = the default only"),
        no_seed_baseline=(False, "skip the second full model (seed 1)"),
        full_model=(None, "compare this saved full model (one rater in --raters) with the quantized reference model of "
                          "the config (data/06_models/shared) instead of training; appends to --out")).parse_args()
    if args.full_model:
        return compare_reference(args)
    chosen = [tuple(int(v) for v in item.split(":")) for item in args.settings.split(",") if item]
    chosen = [(c, bool(r), d, bool(q)) for c, r, d, q in chosen]

    import fasttext

    cfg = ScoringConfig()
    ref = load_reference_corpus(cfg.training.reference_path)
    ts = build_training_set(ref, cfg.training)
    rows: list[dict] = []
    work = Path(tempfile.mkdtemp(prefix="quantized-fasttext-"))

    def record(name, variant, model_path, scores, full, seconds, **extra):
        rows.append(result_row(cfg, model_path, round(seconds, 1), scores, full, rater=name, variant=variant, **extra))
        bench.write_result(rows, args.out)  # after every row: a stopped run keeps what it measured

    for name in args.raters.split(","):
        default = getattr(cfg, name)
        rater = FastTextRater(replace(default, quantize=False, isolate_training=False))
        prepared = rater.preprocess(ref["text"].tolist())
        pos, neg = rater.preprocess(ts.positives), rater.preprocess(ts.negatives)
        train_file = work / f"{name}.txt"
        with open(train_file, "w", encoding="utf-8") as f:
            rater.write_training_file([t for t in pos if t], [t for t in neg if t], f)
        full_path = work / f"{name}_full.bin"
        full_seconds, full = train_full(rater, pos, neg, prepared, full_path)
        knobs = dict(cutoff=0, retrain=False, dsub=0, qnorm=False, default=False)
        record(name, "full", full_path, full, full, full_seconds, **knobs)

        if not args.no_seed_baseline:
            other = FastTextRater(replace(default, quantize=False, isolate_training=False, seed=1))
            t0 = time.perf_counter()
            other.fit_prepared(pos, neg)
            seconds = time.perf_counter() - t0
            other.model.save_model(str(work / f"{name}_seed1.bin"))
            record(name, "full_seed1", work / f"{name}_seed1.bin", other.score_prepared(prepared), full, seconds,
                   **knobs)
            del other

        settings = list(chosen)
        configured = (default.quantize_cutoff, default.quantize_retrain, default.quantize_dsub, default.quantize_qnorm)
        if configured not in settings:
            settings.append(configured)
        for cutoff, retrain, dsub, qnorm in settings:
            model = fasttext.load_model(str(full_path))
            t0 = time.perf_counter()
            model.quantize(input=str(train_file), cutoff=cutoff, retrain=retrain, epoch=default.epoch, lr=default.lr,
                           thread=default.thread, verbose=0, dsub=dsub, qnorm=qnorm)
            seconds = time.perf_counter() - t0
            path = work / f"{name}_q{cutoff}_{int(retrain)}_{dsub}.ftz"
            model.save_model(str(path))
            rater.model = model
            record(name, f"quantized cutoff={cutoff} retrain={retrain} dsub={dsub}", path,
                   rater.score_prepared(prepared), full, seconds, cutoff=cutoff, retrain=retrain, dsub=dsub,
                   qnorm=qnorm, default=(cutoff, retrain, dsub, qnorm) == configured)
            del model
        rater.model = None
        for p in work.glob(f"{name}*"):
            p.unlink()

    bench.write_result(rows, args.out, plot=plot)


def compare_reference(args) -> None:
    """One row: the config's quantized reference model vs a full model trained on the same set (--full-model)."""
    (name,) = args.raters.split(",")
    cfg = replace(ScoringConfig(), raters=[name])
    quantized = ensure_reference(cfg).raters[name]
    full = FastTextRater.load(quantized.cfg.pretrained_path)
    full._load_model(args.full_model)
    prepared = quantized.preprocess(load_reference_corpus(cfg.training.reference_path)["text"].tolist())
    default = getattr(cfg, name)
    row = result_row(cfg, quantized.cfg.pretrained_path, "", quantized.score_prepared(prepared),
                     full.score_prepared(prepared), rater=name,
                     variant=f"quantized reference artifact {Path(quantized.cfg.pretrained_path).parent.name}",
                     cutoff=default.quantize_cutoff, retrain=default.quantize_retrain, dsub=default.quantize_dsub,
                     qnorm=default.quantize_qnorm, default=True)
    bench.write_result([row], args.out, append=True, plot=plot)


def plot(rows: list[dict], path: Path) -> None:
    raters = sorted({r["rater"] for r in rows})
    with bench.figure(path, 1, len(raters), figsize=(6.5 * len(raters), 4.2), squeeze=False, dpi=120) as (fig, axes):
        for ax, name in zip(axes[0], raters):
            for r in (r for r in rows if r["rater"] == name):
                default = r["default"] in (True, "True")  # "True" as read back from the CSV (appending)
                marker = "*" if default else ("s" if r["variant"].startswith("full") else "o")
                ax.scatter(r["size_mb"], r["spearman_vs_full"], s=120 if default else 50, marker=marker)
                ax.annotate(r["variant"].replace("quantized ", "q "), (r["size_mb"], r["spearman_vs_full"]),
                            fontsize=7, xytext=(4, 4), textcoords="offset points")
            ax.axhline(0.99, color="grey", ls="--", lw=0.8)
            ax.set_xscale("log")
            ax.set_xlabel("model file (MiB, log)")
            ax.set_ylabel("Spearman vs the full model (16,513 docs)")
            ax.set_title(f"{name}: quantized vs full (* = config default)")
        load = rows[-1]
        fig.suptitle(f"fastText quantization on the bundled corpus; load average {load['loadavg_1']}/"
                     f"{load['loadavg_5']}/{load['loadavg_15']} at the end", fontsize=9)

if __name__ == "__main__":
    main()
