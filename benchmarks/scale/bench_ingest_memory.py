"""Peak memory and documents/s of ``curate pipeline=ingest data.workers=1`` on ONE large input file (issue #52):
JSON Lines and parquet, 400 MB and 2 GB (``--sizes``), for the code of a given checkout (``--tree``; default this
one), so a run before and after a change is the same script.

The files are the bundled corpus's real documents REPEATED with new ids (``<id>#rep<k>``) until the file reaches
its size (the issue's own method: a timing and memory benchmark only, never quality). Columns: ``id, text, source,
url, quality_label, extra``, as the bundled corpus. The JSON Lines file is written line by line; the parquet copy
holds the same rows in row groups of 106,044 rows (~400 MB: the 400 MB file is one row group, as pandas writes
it, the hard case for a reader by row groups).

Peak RSS is the whole process tree's (``/proc`` polled every 0.1 s: process_tree.run_measured); documents/s is
rows read / wall seconds of the whole command (start-up, the decontamination index, validation, text dedup,
document statistics). Results: ``benchmarks/results/ingest_memory.csv/.png``, with the 1-minute load average
before and after each run (other jobs share the 2 cores).

    .venv/bin/python benchmarks/scale/bench_ingest_memory.py --sizes 400,2000 --label after
    .venv/bin/python benchmarks/scale/bench_ingest_memory.py --sizes 400 --label before --tree /tmp/before
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _driver as bench  # noqa: E402
from process_tree import run_measured  # noqa: E402

COLUMNS = ["id", "text", "source", "url", "quality_label", "extra"]
GROUP_ROWS = 106_044  # rows per parquet row group: the 400 MB file's rows
CSV = bench.RESULTS / "ingest_memory.csv"


def make_jsonl(path: Path, megabytes: int) -> int:
    """Write ``path`` (skipped when it exists at its size); return its documents."""
    marker = path.with_suffix(".json.done")
    if path.exists() and marker.exists():
        return json.loads(marker.read_text())["documents"]
    base = bench.bundled(COLUMNS)
    records = base.to_dict("records")
    target, written, n = megabytes * 1_000_000, 0, 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            row = dict(records[n % len(records)])
            row["id"] = f"{row['id']}#rep{n // len(records)}"
            row["quality_label"] = None if row["quality_label"] != row["quality_label"] else row["quality_label"]
            line = json.dumps(row, ensure_ascii=False) + "\n"
            out.write(line)
            written += len(line.encode("utf-8"))
            n += 1
    marker.write_text(json.dumps({"documents": n, "bytes": written}))
    return n


def make_parquet(jsonl: Path, path: Path) -> None:
    """The same rows as ``jsonl``, in row groups of ``GROUP_ROWS`` rows (one write per group: bounded memory)."""
    if path.exists():
        return
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    tmp = path.with_name(path.name + ".tmp")
    for chunk in pd.read_json(jsonl, lines=True, dtype=False, chunksize=GROUP_ROWS):
        chunk = chunk[COLUMNS].astype({"quality_label": "float64"})
        table = pa.Table.from_pandas(chunk, preserve_index=False)
        if writer is None:
            writer = pq.ParquetWriter(tmp, table.schema)
        writer.write_table(table, row_group_size=GROUP_ROWS)
    writer.close()
    os.replace(tmp, path)


def measure(tree: Path, data_path: Path, namespace: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "CURATION_PROJECT_ROOT": str(tree),
           "CURATION_DECONTAMINATION_INDEX": str(bench.ROOT / "data" / "06_models" / "decontamination"),
           "COLUMNS": "200"}
    load_before = bench.loadavg3()
    run = run_measured([str(bench.ROOT / ".venv" / "bin" / "curate"), "pipeline=ingest", "data.workers=1",
                        f"data.path={data_path}", f"run.namespace={namespace}", "tracking.enabled=false"],
                       cwd=str(tree), env=env)
    # the summary counts files, and the pieces a large file is read in (before issue #52's last change: shards)
    read = re.search(r"read\s+([\d,]+) rows from (\d+) of (\d+) (?:shards|files)(?: \(([\d,]+) pieces\))?",
                     run.stdout)
    kept = re.search(r"kept\s+([\d,]+)", run.stdout)
    if read is None or kept is None:
        raise RuntimeError(f"no ingest summary in the output: {run.stdout[-2000:]}")
    rows = int(read.group(1).replace(",", ""))
    shards = int((read.group(4) or read.group(3)).replace(",", ""))
    return {"rows_read": rows, "rows_kept": int(kept.group(1).replace(",", "")), "shards": shards,
            "seconds": round(run.seconds, 1), "docs_per_s": round(rows / run.seconds, 1),
            "peak_rss_mb": round(run.peak_rss_mb), "peak_anon_mb": round(run.peak_anon_mb),
            "load_before": load_before, "load_after": bench.loadavg3()}


def plot(rows: list[dict], path: Path) -> None:
    with bench.figure(path, 1, 2) as (fig, axes):
        for (label, fmt), marker in zip(sorted({(r["label"], r["format"]) for r in rows}), "osD^v<>"):
            cells = sorted((r for r in rows if (r["label"], r["format"]) == (label, fmt)), key=lambda r: r["file_mb"])
            xs = [r["file_mb"] for r in cells]
            axes[0].plot(xs, [r["peak_rss_mb"] for r in cells], marker=marker, label=f"{fmt}, {label}")
            axes[1].plot(xs, [r["docs_per_s"] for r in cells], marker=marker, label=f"{fmt}, {label}")
        axes[0].set(xlabel="input file (MB)", ylabel="peak RSS of the process tree (MB)",
                    title="curate pipeline=ingest data.workers=1")
        axes[1].set(xlabel="input file (MB)", ylabel="documents / s (whole command)")
        for ax in axes:
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)


def main() -> None:
    args = bench.parser(__doc__, sizes="400,2000", formats="jsonl,parquet", label="after", tree=str(bench.ROOT), commit="",
                        files="/tmp/ingest_memory").parse_args()
    files = Path(args.files)
    files.mkdir(parents=True, exist_ok=True)
    # the rows already measured (other sizes, labels), numbers as numbers, the comment line skipped: file_mb an int,
    # as the key below compares it with --sizes
    rows = bench.read_rows(CSV) if CSV.exists() else []
    for size in (int(s) for s in args.sizes.split(",")):
        jsonl = files / f"corpus-{size}mb.jsonl"
        documents = make_jsonl(jsonl, size)
        parquet = files / f"corpus-{size}mb.parquet"
        if "parquet" in args.formats:
            make_parquet(jsonl, parquet)
        for fmt in args.formats.split(","):
            path = jsonl if fmt == "jsonl" else parquet
            cell = {"label": args.label, "commit": args.commit, "format": fmt, "file_mb": size, "file_bytes": path.stat().st_size,
                    "documents": documents,
                    **measure(Path(args.tree), path, f"ingest_memory_{args.label}_{fmt}_{size}")}
            print(json.dumps(cell), flush=True)
            rows = [r for r in rows if (r["label"], r["format"], r["file_mb"]) != (args.label, fmt, size)] + [cell]
            bench.write_result(rows, CSV, plot=plot,
                               comment="issue #52: one large file, curate pipeline=ingest data.workers=1")


if __name__ == "__main__":
    main()
