"""Dedup stages measured (issue 23 item 5).

``quality``: the bundled corpus + 200 injected copies of each kind (exact, 1/3/10 % of words replaced,
paragraph moved) through the sharded ingest; each copy's truth is the exact 5-gram Jaccard with its original
(near-duplicate iff >= 0.8): recall and precision per kind, with and without ``verify``, and the corpus's own
pairs (25 x 4-band LSH candidates verified exactly). ``scale``: the MinHash stage alone on the REPLICATED
corpus (``make_corpus.py``) in a child process, ``copies`` (~98 % duplicates) and ``salted`` (no duplicates);
seconds, docs/s per core, peak RSS of the process tree, load before/after.

    flock /tmp/bench.lock .venv/bin/python benchmarks/dedup/bench_dedup.py quality
    flock /tmp/bench.lock .venv/bin/python benchmarks/dedup/bench_dedup.py scale --sizes 100000 1000000

Writes benchmarks/results/dedup_quality.csv/.png and dedup_scale.csv/.png.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from _driver import RESULTS, bundled, loadavg  # noqa: E402

KINDS = [("exact", 0.0), ("words", 0.01), ("words", 0.03), ("words", 0.10), ("paragraphs", 0.0)]


def corpus_pairs(originals, threshold: float = 0.8) -> dict:
    """The bundled corpus's own near-duplicate pairs (exact Jaccard >= threshold) and exact duplicates."""
    import numpy as np
    import pandas as pd

    from curation.dedup.exact import text_hashes
    from curation.dedup.fuzzy import set_jaccard, shingle_sets
    from curation.dedup.minhash import MinHashParams, band_keys, has_signature, signatures
    from curation.dedup.text import Tokens

    texts = originals["text"].tolist()
    h = text_hashes(texts)
    exact_dups = int(pd.DataFrame(h).duplicated().sum())
    wide = MinHashParams(bands=25, rows=4)
    sigs = signatures(Tokens.of(texts), wide)
    ok = np.flatnonzero(has_signature(sigs))
    keys = band_keys(sigs[ok], wide.bands, wide.rows)
    pairs = set()
    for b in range(wide.bands):
        frame = pd.DataFrame({"k": keys[:, b], "doc": ok})
        for _, g in frame.groupby("k"):
            if len(g) > 1:
                docs = g["doc"].to_numpy()
                pairs.update((int(x), int(y)) for i, x in enumerate(docs) for y in docs[i + 1:])
    sets = shingle_sets(texts, 5)
    true = [(a, b) for a, b in pairs if set_jaccard(sets[a], sets[b]) >= threshold]
    docs_in = len({d for p in true for d in p})
    return {"corpus_docs": len(texts), "corpus_exact_duplicates": exact_dups, "corpus_candidate_pairs_25x4": len(pairs),
            "corpus_true_pairs_j08": len(true), "corpus_docs_in_true_pairs": docs_in}


def quality(args) -> None:
    import numpy as np
    import pandas as pd

    from curation.data import ValidationConfig
    from curation.datasets import CorpusShardsDataset
    from curation.dedup.fuzzy import set_jaccard, shingle_sets
    from curation.dedup.synthetic import inject, vocabulary_of
    from curation.shards import ShardTask
    from curation.data.ingest import dedup_settings, ingest_shards

    originals = bundled()
    vocabulary = vocabulary_of(originals["text"].tolist())
    copies = [inject(originals, args.copies, kind, rate=rate, seed=100 + i, vocabulary=vocabulary).assign(
        kind=f"{kind}{'' if kind != 'words' else f' {rate:.0%}'}") for i, (kind, rate) in enumerate(KINDS)]
    copies = pd.concat(copies, ignore_index=True)
    frame = pd.concat([originals, copies], ignore_index=True)
    cols = ["id", "text", "source", "url", "quality_label", "extra"]
    summary = corpus_pairs(originals)
    print(summary, flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        raw.mkdir()
        for i, part in enumerate(np.array_split(np.arange(len(frame)), 5)):
            frame.iloc[part][cols].to_parquet(raw / f"part-{i}.parquet", index=False)
        tasks = [ShardTask(k, v) for k, v in CorpusShardsDataset(path=str(raw)).load().items()]
        for verify in (True, False):
            settings = dedup_settings({"dedup": {"verify": verify}, "decontaminate": "off"})
            start, before = time.perf_counter(), loadavg()
            out = ingest_shards(tasks, ValidationConfig(), work_dir=Path(tmp) / f"w{verify}", dedup=settings)
            seconds = time.perf_counter() - start
            rejected = out.rejected.to_frame().set_index("id")
            reason = rejected["reason"].astype(object).reindex(frame["id"]).fillna("").to_numpy(dtype=object)
            kept_of = rejected["duplicate_of"].astype(object).reindex(frame["id"]).to_numpy(dtype=object)
            is_copy = frame["id"].isin(copies["id"]).to_numpy()
            # originals rejected as near-duplicates whose kept document is not a true pair
            orig_hit = np.flatnonzero(~is_copy & (reason == "near_duplicate"))
            text = frame.set_index("id")["text"]
            a = shingle_sets(text[frame["id"].to_numpy()[orig_hit]].tolist(), 5)
            b = shingle_sets(text[kept_of[orig_hit]].tolist(), 5)
            beyond = int(sum(set_jaccard(x, y) < 0.8 for x, y in zip(a, b)))
            for kind, group in copies.groupby("kind", sort=False):
                r = pd.Series(reason, index=frame["id"])[group["id"]].to_numpy()
                removed = np.isin(r, ["near_duplicate", "exact_duplicate"])
                truth = group["jaccard"].to_numpy() >= 0.8
                tp = int((removed & truth).sum())
                rows.append({
                    "kind": kind, "verify": verify, "copies": len(group), "jaccard_median": round(float(np.median(group["jaccard"])), 3),
                    "true_near_duplicates": int(truth.sum()), "rejected": int(removed.sum()),
                    "rejected_exact": int((r == "exact_duplicate").sum()), "rejected_near": int((r == "near_duplicate").sum()),
                    "recall": round(tp / truth.sum(), 4) if truth.sum() else None,
                    "precision": round(tp / removed.sum(), 4) if removed.sum() else None,
                    "originals_rejected_near": len(orig_hit), "originals_beyond_true_pairs": beyond,
                    "lsh_candidate_pairs": out.metrics.get("lsh_candidate_pairs"),
                    "lsh_false_positive_pairs": out.metrics.get("lsh_false_positive_pairs"),
                    "ingest_seconds": round(seconds, 1), "load_before": before, "load_after": loadavg(), **summary})
                print(rows[-1], flush=True)
    bench.write_result(rows, RESULTS / "dedup_quality.csv", plot=lambda rows, png: plot_quality(copies, rows, png))


CHILD = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import numpy as np, pandas as pd
    corpus, work, salted, buckets = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "salted", int(sys.argv[4])
    from curation.dedup.fuzzy import candidate_pairs, components, partition_bands, verify_pairs
    from curation.dedup.minhash import MinHashParams, signatures
    from curation.dedup.text import Tokens
    files = sorted(Path(corpus).glob("part-*.parquet"))
    names = [f.stem for f in files]
    params = MinHashParams()
    import functools
    def load(f):
        frame = pd.read_parquet(f, columns=["id", "text"])
        if not salted:
            return frame["text"].tolist()
        # every 4th word followed by a replica token: no 5-gram is shared between replicas (no duplicates)
        rep = frame["id"].str.rsplit("#rep", n=1).str[1].tolist()
        out = []
        for t, k in zip(frame["text"].tolist(), rep):
            w = t.split()
            for j in range(len(w) - 1, 0, -4):
                w.insert(j, "r" + k)
            out.append(" ".join(w))
        return out
    cached = functools.lru_cache(maxsize=2)(load)  # verification: the two shards of a pair group
    start = time.perf_counter(); docs = 0; t_load = 0.0
    for i, f in enumerate(files):
        t0 = time.perf_counter(); text = load(f); t_load += time.perf_counter() - t0
        sigs = np.concatenate([signatures(Tokens.of(text[j:j + 1024]), params) for j in range(0, len(text), 1024)])
        np.save(work / f"{f.stem}.npy", sigs)
        partition_bands(sigs, params, shard=f.stem, shard_index=i, bucket_dir=work / "buckets", num_buckets=buckets)
        docs += len(text)
    t_sig = time.perf_counter() - start - t_load
    pairs = candidate_pairs(work / "buckets", names, buckets)
    kept, counts = verify_pairs(pairs, params, 0.8, signatures_of=lambda s: np.load(work / f"{names[s]}.npy"),
        texts_of=lambda s, rows: [cached(files[s])[r] for r in rows])
    comps = components(kept)
    total = time.perf_counter() - start - t_load
    print(json.dumps({"rows": docs, "seconds": total, "signature_seconds": t_sig, "bucket_seconds": total - t_sig,
                      "candidate_pairs": len(pairs), "near_duplicates": len(comps), **counts}))
""")


def scale(args) -> None:
    from make_corpus import make_corpus
    from process_tree import run_json

    rows = []
    for n, mode in itertools.product(args.sizes, args.modes):
        corpus = make_corpus(n, args.corpus_dir / f"{n}")
        buckets = max(16, n // args.docs_per_bucket)
        with tempfile.TemporaryDirectory(dir=args.corpus_dir) as work:
            result = run_json(CHILD, corpus, work, mode, buckets)
            row = {"stage": "minhash", "docs": result["rows"], "seconds": round(result["seconds"], 1),
                   "signature_seconds": round(result["signature_seconds"], 1),
                   "bucket_seconds": round(result["bucket_seconds"], 1),
                   "docs_per_s_per_core": round(result["rows"] / result["seconds"], 1),
                   "signature_docs_per_s_per_core": round(result["rows"] / result["signature_seconds"], 1),
                   "peak_rss_mb": round(result["peak_rss_mb"], 1), "cores": 1,
                   "candidate_pairs": result["candidate_pairs"], "near_duplicates": result["near_duplicates"],
                   "pairs_verified_by_text": result.get("lsh_pairs_verified"),
                   "corpus": mode, "buckets": buckets, "load_before": result["load_before"],
                   "load_after": result["load_after"]}
            rows.append(row)
            print(row, flush=True)
    bench.write_result(rows, RESULTS / "dedup_scale.csv", plot=plot_scale, append=args.append)


def plot_quality(copies, rows, path: Path) -> None:
    import numpy as np

    from curation.dedup.minhash import candidate_probability

    with bench.figure(path, 1, 2, figsize=(11, 4)) as (fig, (ax1, ax2)):
        s = np.linspace(0, 1, 201)
        ax1.plot(s, candidate_probability(s, 14, 8), label="P(candidate), 14 bands x 8 rows")
        ax1.axvline(0.8, color="grey", ls=":", label="threshold 0.8")
        for kind, group in copies.groupby("kind", sort=False):
            ax1.scatter(group["jaccard"], np.full(len(group), 0.02 + 0.04 * list(copies["kind"].unique()).index(kind)),
                        s=6, label=f"copies: {kind}")
        ax1.set_xlabel("exact Jaccard of 5-gram shingles with the original")
        ax1.set_ylabel("probability")
        ax1.legend(fontsize=7, loc="center left")
        verified = [r for r in rows if r["verify"]]
        kinds = [r["kind"] for r in verified]
        x = np.arange(len(kinds))
        ax2.bar(x - 0.2, [r["rejected"] / r["copies"] for r in verified], 0.4, label="rejected (verify on)")
        ax2.bar(x + 0.2, [r["rejected"] / r["copies"] for r in rows if not r["verify"]], 0.4,
                label="rejected (verify off)")
        ax2.plot(x, [r["true_near_duplicates"] / r["copies"] for r in verified], "k_", ms=20, mew=2,
                 label="share with Jaccard >= 0.8")
        ax2.set_xticks(x, kinds, fontsize=8)
        ax2.set_ylabel("share of the 200 copies")
        ax2.legend(fontsize=7)
        fig.suptitle("Dedup on the bundled corpus + injected copies")


def plot_scale(rows, path: Path) -> None:
    with bench.figure(path, 1, 2, figsize=(9, 3.5)) as (fig, (ax1, ax2)):
        for mode in dict.fromkeys(r["corpus"] for r in rows):
            part = sorted((r for r in rows if r["corpus"] == mode), key=lambda r: r["docs"])
            docs = [r["docs"] for r in part]
            ax1.plot(docs, [r["docs_per_s_per_core"] for r in part], "o-", label=f"{mode}: whole stage")
            ax1.plot(docs, [r["signature_docs_per_s_per_core"] for r in part], "s--", label=f"{mode}: signatures")
            ax2.plot(docs, [r["peak_rss_mb"] for r in part], "o-", label=mode)
        ax1.set(xscale="log", xlabel="documents (replicated corpus)", ylabel="docs/s per core")
        ax2.set(xscale="log", xlabel="documents", ylabel="peak RSS (MB)")
        ax1.legend(fontsize=7)
        ax2.legend(fontsize=7)
        ax2.set_ylim(bottom=0)
        loads = [float(r["load_before"]) for r in rows] + [float(r["load_after"]) for r in rows]
        fig.suptitle(f"MinHash stage, 1 process (load average {min(loads):.1f}-{max(loads):.1f} on 2 cores)")


if __name__ == "__main__":
    args = bench.commands(__doc__, "what", quality=dict(copies=200), scale=dict(
        sizes=[100_000], corpus_dir=Path(tempfile.gettempdir()) / "scale_corpus",
        modes=(["salted", "copies"], "copies: the replicated corpus as it is (every text a copy); salted: each "
               "replica's words interleaved with a replica token (no shared 5-gram, so no duplicates)"),
        append=(False, "add the rows to dedup_scale.csv instead of replacing it"),
        docs_per_bucket=(6250, "band buckets = max(16, docs / this): memory per bucket stays flat as docs grow"))).parse_args()
    quality(args) if args.what == "quality" else scale(args)
