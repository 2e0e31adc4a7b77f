"""What the reference fastText raters cost to build, and what cheaper builds lose (issue #53: set-up <= 180 s).

The set-up's critical path is the Ultra-FineWeb rater (dim 256): fastText's ``quantize`` trains a product quantizer
whose k-means runs 25 iterations over min(cutoff, 65,536) rows x 256 centroids in every sub-space, ~130 CPU-s at the
default cutoff of 200,000 rows, four times its training. Each rater is trained once (its config: 2M buckets), then
quantized at each ``--cutoffs`` value (the k-means sample shrinks below 65,536 rows), and, as the other way to a small
file, trained with fewer ``--buckets`` and kept full. Every model scores the 16,513 bundled documents: Spearman
against TODAY's reference artifact (``data/06_models/shared``, what every run scores with now) and against the full
2M model, ROC-AUC on the 242 held-out human labels, file size, build seconds (one core each; the load average is in
the row).

    .venv/bin/python benchmarks/scoring/fasttext_build_cost.py                 # both raters, ~15 CPU-minutes

Writes benchmarks/results/fasttext_build_cost.{csv,png}.
"""

from __future__ import annotations

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quantized_fasttext import train_full  # noqa: E402  (the full-model baseline both benchmarks train)


def main() -> None:
    args = bench.parser(__doc__, raters="fasttext_ultrafineweb,fasttext_dclm", cutoffs="200000,65536,50000,32768,16384",
                        buckets="200000,50000", out=bench.RESULTS / "fasttext_build_cost.csv").parse_args()
    import fasttext
    from scipy.stats import spearmanr

    cfg = ScoringConfig()
    ref = load_reference_corpus(cfg.training.reference_path)
    ts = build_training_set(ref, cfg.training)
    eval_mask = (human_label_split(ref, cfg.training.eval_fraction, cfg.training.split_salt) == EVAL).to_numpy()
    work = Path(tempfile.mkdtemp(prefix="fasttext-build-cost-"))
    rows: list[dict] = []
    for name in args.raters.split(","):
        default = getattr(cfg, name)
        today = ensure_reference(replace(cfg, raters=[name])).raters[name]
        rater = FastTextRater(replace(default, quantize=False, isolate_training=False))
        t0 = time.perf_counter()
        prepared = rater.preprocess(ref["text"].tolist())
        pos, neg = rater.preprocess(ts.positives), rater.preprocess(ts.negatives)
        prep_seconds = time.perf_counter() - t0
        today_scores = today.score_prepared(prepared)
        train_file = work / f"{name}.txt"
        with open(train_file, "w", encoding="utf-8") as f:
            rater.write_training_file([t for t in pos if t], [t for t in neg if t], f)

        def record(variant: str, path: Path, scores: np.ndarray, seconds: float, full: np.ndarray, **knobs) -> None:
            ok = np.isfinite(scores) & np.isfinite(today_scores) & np.isfinite(full)
            auc = eval_roc_auc(ref.loc[eval_mask].reset_index(drop=True), scores[eval_mask], cfg.training)
            rows.append({"rater": name, "variant": variant, **knobs, "size_mb": round(path.stat().st_size / 2**20, 2),
                         "build_seconds": round(seconds, 1), "preprocess_seconds": round(prep_seconds, 1),
                         "spearman_vs_today": round(float(spearmanr(today_scores[ok], scores[ok]).statistic), 4),
                         "spearman_vs_full": round(float(spearmanr(full[ok], scores[ok]).statistic), 4),
                         "roc_auc_eval": round(auc["roc_auc"], 4), "n_eval": auc["n_eval"],
                         "load": bench.loadavg3()})
            print(rows[-1], flush=True)
            bench.write_result(rows, args.out)  # after every row: a stopped run keeps what it measured

        full_path = work / f"{name}_full.bin"
        train_seconds, full = train_full(rater, pos, neg, prepared, full_path)
        record("full", full_path, full, train_seconds, full, bucket=default.bucket, cutoff=0, train_seconds=round(
            train_seconds, 1), quantize_seconds=0)
        for cutoff in (int(c) for c in args.cutoffs.split(",") if c):
            model = fasttext.load_model(str(full_path))
            t0 = time.perf_counter()
            model.quantize(input=str(train_file), cutoff=cutoff, retrain=False, epoch=default.epoch, lr=default.lr,
                           thread=1, verbose=0, dsub=default.quantize_dsub, qnorm=default.quantize_qnorm)
            seconds = time.perf_counter() - t0
            path = work / f"{name}_q{cutoff}.ftz"
            model.save_model(str(path))
            rater.model = model
            record(f"quantized cutoff={cutoff}", path, rater.score_prepared(prepared), train_seconds + seconds, full,
                   bucket=default.bucket, cutoff=cutoff, train_seconds=round(train_seconds, 1),
                   quantize_seconds=round(seconds, 1))
            path.unlink()
        for buckets in (int(b) for b in args.buckets.split(",") if b):
            small = FastTextRater(replace(default, quantize=False, isolate_training=False, bucket=buckets))
            t0 = time.perf_counter()
            small.fit_prepared(pos, neg)
            seconds = time.perf_counter() - t0
            path = work / f"{name}_b{buckets}.bin"
            small.model.save_model(str(path))
            record(f"full bucket={buckets}", path, small.score_prepared(prepared), seconds, full, bucket=buckets,
                   cutoff=0, train_seconds=round(seconds, 1), quantize_seconds=0)
            path.unlink()
        rater.model = None
        for p in work.glob(f"{name}*"):
            p.unlink()
    bench.write_result(rows, args.out, plot=plot)


def plot(rows: list[dict], path: Path) -> None:
    raters = sorted({r["rater"] for r in rows})
    with bench.figure(path, 1, len(raters), figsize=(6.5 * len(raters), 4.5), squeeze=False) as (fig, axes):
        for ax, name in zip(axes[0], raters):
            cells = [r for r in rows if r["rater"] == name]
            for r in cells:
                ax.scatter(float(r["build_seconds"]), float(r["spearman_vs_today"]))
                ax.annotate(f"{r['variant']}\nAUC {float(r['roc_auc_eval']):.3f}, {float(r['size_mb']):.0f} MiB",
                            (float(r["build_seconds"]), float(r["spearman_vs_today"])), fontsize=6,
                            xytext=(3, 3), textcoords="offset points")
            ax.set(xlabel="build seconds (train + quantize, one core)", ylabel="Spearman vs today's reference rater",
                   title=f"{name} (load at the end {cells[-1]['load']})")
            ax.grid(alpha=0.3)


if __name__ == "__main__":
    main()
