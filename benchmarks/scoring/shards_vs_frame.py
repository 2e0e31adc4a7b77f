"""Scoring and embeddings on shards vs the whole-frame path, on the bundled corpus (issue 14).

Each path in a fresh child process: ``frame`` (``make_embedder(cfg).encode`` then ``score_corpus`` on one frame)
and ``shards`` (``--shards`` document shards, ``embed_shards`` then ``score_shards``). Both fit on every document,
so the scores must be identical (checked). fastText ``bucket`` lowered to 200k for both.

    flock /tmp/bench.lock .venv/bin/python benchmarks/scoring/shards_vs_frame.py

Writes benchmarks/results/scoring_shards_vs_frame.{csv,png} and logs them to MLflow.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402

SCORING = {"fasttext_dclm": {"bucket": 200000, "thread": 1}, "fasttext_ultrafineweb": {"bucket": 200000, "thread": 1}}
EMBEDDING = dict(backend="static", dim=256, pca_dims=256, max_seq_length=256, batch_size=1024, sort_by_length=False,
                 device="cpu", show_progress=False, num_workers=1)


def load_corpus(n: int | None):
    import pandas as pd

    from curation.scoring.training_sets import category_of

    files = sorted(bench.CORPUS.glob("corpus-*.parquet"))
    df = pd.concat([pd.read_parquet(f, dtype_backend="numpy_nullable") for f in files], ignore_index=True)
    df = df.iloc[:n] if n else df
    return df.assign(category=category_of(df["extra"]).astype("string")).reset_index(drop=True)


def child(path: str, n: int | None, shards: int, work: Path) -> dict:
    import numpy as np

    from curation.embedding import EmbedderConfig, make_embedder
    from curation.scoring import score_corpus, scoring_config_from_dict

    df = load_corpus(n)
    cfg = scoring_config_from_dict(SCORING)
    emb_cfg = EmbedderConfig(**EMBEDDING)
    t0 = time.perf_counter()
    if path == "frame":
        vectors = make_embedder(emb_cfg).encode(df["text"].tolist()).embeddings
        t1 = time.perf_counter()
        scores = score_corpus(df, cfg, embeddings=vectors).scores
    else:
        from curation.embedding.sharded import embed_shards
        from curation.scoring.sharded import score_shards
        from curation.shards import ShardedDataset, ShardWriter, shard_names

        writer = ShardWriter(work / "documents", "frame")
        names = shard_names(shards)
        for name, rows in zip(names, np.array_split(np.arange(len(df)), shards)):
            writer.mark_complete(writer.write(name, df.iloc[rows]))
        writer.finalize(names, stage="ingest")
        documents = ShardedDataset(work / "documents")
        t0 = time.perf_counter()
        vectors, _ = embed_shards(documents, emb_cfg, work / "embeddings")
        t1 = time.perf_counter()
        scores = score_shards(documents, vectors, cfg, work / "scoring").scores.to_frame()
    t2 = time.perf_counter()
    scores.to_parquet(work / f"{path}_scores.parquet", index=False)
    return {"path": path, "docs": len(df), "shards": shards if path == "shards" else 1,
            "embed_seconds": t1 - t0, "score_seconds": t2 - t1,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    args = bench.parser(__doc__, n={"type": int, "default": None, "help": "documents (default: the whole bundled corpus)"},
                        shards=8, child=None, work=None, out=bench.RESULTS / "scoring_shards_vs_frame").parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.n, args.shards, Path(args.work))))
        return

    import pandas as pd

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("frame", "shards"):
            load_before = bench.loadavg()
            cmd = [sys.executable, __file__, "--child", path, "--shards", str(args.shards), "--work", tmp]
            if args.n:
                cmd += ["--n", str(args.n)]
            done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
            if done.returncode:
                raise SystemExit(done.stderr[-3000:])
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row.update(load_before=load_before, load_after=bench.loadavg())
            rows.append(row)
        a = pd.read_parquet(Path(tmp) / "frame_scores.parquet")
        b = pd.read_parquet(Path(tmp) / "shards_scores.parquet")
        identical = bool(a.equals(b))
    frame = pd.DataFrame(rows)
    frame["score_docs_per_s_per_core"] = frame["docs"] / frame["score_seconds"]  # one process, one core busy
    frame["embed_docs_per_s"] = frame["docs"] / frame["embed_seconds"]
    frame["scores_identical"] = identical
    base = frame.iloc[0]
    frame["score_speed_vs_frame"] = frame["score_docs_per_s_per_core"] / base["score_docs_per_s_per_core"]
    frame["embed_speed_vs_frame"] = frame["embed_docs_per_s"] / base["embed_docs_per_s"]
    print(frame.to_string())

    def plot(_, png: Path) -> None:
        with bench.figure(png, 1, 2, figsize=(8, 3.2)) as (fig, axes):
            axes[0].bar(frame["path"], frame["score_docs_per_s_per_core"], color=["#888", "#2a7"])
            axes[0].set_title("scoring docs/s (all raters + merge)")
            axes[1].bar(frame["path"], frame["peak_rss_mb"], color=["#888", "#2a7"])
            axes[1].set_title("peak RSS, MB")
            fig.suptitle(f"{int(base['docs'])} docs, shards={args.shards}, identical={identical}")

    bench.write_result(frame, args.out.with_suffix(".csv"), plot=plot, log=dict(
        name="scoring_shards_vs_frame", params={"docs": int(base["docs"]), "shards": args.shards, "bucket": 200000},
        metrics={"score_speed_ratio": float(frame["score_speed_vs_frame"].iloc[1]),
                 "embed_speed_ratio": float(frame["embed_speed_vs_frame"].iloc[1]),
                 "scores_identical": float(identical)}))

if __name__ == "__main__":
    main()
