"""The datatrove side of ``bench_scale.py datatrove``. Runs in the benchmark's own environment
(``/work/dtvenv``: ``pip install datatrove fasttext-numpy2 pyarrow pandas regex``), never in
the project's: datatrove is not a project dependency. Imports nothing from ``curation``.

    PYTHONPATH=benchmarks/scale /work/dtvenv/bin/python -c "import datatrove_side; datatrove_side.main()" \\
        fasttext --input DIR --output DIR --logs DIR --tasks 10 --workers 2 --model model.bin

Pipelines as a datatrove user writes them (0.10.1): ``read_write`` = ``ParquetReader`` -> ``ParquetWriter``;
``fasttext`` adds ``FastTextAnnotator`` (below: datatrove's ``FastTextClassifierFilter`` in annotate-only mode,
DCLM's newline replacement, the model loaded once per worker process, on the project's ``fasttext-numpy2``).
The writer gets an explicit schema (``output_schema``). ``tasks`` = input shards, ``workers`` = processes at
once. Prints one JSON line last.
"""

from __future__ import annotations

import time

_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402

from datatrove.data import Document  # noqa: E402
from datatrove.executor import LocalPipelineExecutor  # noqa: E402
from datatrove.pipeline.filters.base_filter import BaseFilter  # noqa: E402
from datatrove.pipeline.readers import ParquetReader  # noqa: E402
from datatrove.pipeline.writers import ParquetWriter  # noqa: E402


_MODELS: dict = {}


class FastTextAnnotator(BaseFilter):
    """datatrove's ``FastTextClassifierFilter`` with no labels to keep or remove, model loaded once per process."""

    name = "fastText annotator"

    def __init__(self, model_url: str, newline_replacement: str = " "):
        super().__init__()
        self.model_url = model_url
        self.newline_replacement = newline_replacement

    @property
    def model(self):
        if self.model_url not in _MODELS:  # once per worker process
            from fasttext.FastText import _FastText

            _MODELS[self.model_url] = _FastText(self.model_url)
        return _MODELS[self.model_url]

    def filter(self, doc: Document) -> bool:
        labels, scores = self.model.predict(doc.text.strip().replace("\n", self.newline_replacement), k=-1)
        doc.metadata.update({label: float(score) for label, score in zip(labels, scores)})
        return True


def output_schema(args):
    """The writer's schema, given: datatrove infers it from the first document otherwise, and a first
    document whose ``quality_label`` is None types the column ``null`` and fails the next batch
    ("Table schema does not match"). text, id, then ``metadata``: the other input columns, the reader's
    ``file_path`` and, for ``fasttext``, one float per label of the model."""
    import glob
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    first = sorted(glob.glob(os.path.join(args.input, "*.parquet")))[0]
    columns = pq.read_schema(first)
    meta = [columns.field(name) for name in columns.names if name not in ("text", "id")]
    meta.append(pa.field("file_path", pa.string()))
    if args.stage == "fasttext":
        import fasttext

        meta += [pa.field(label, pa.float64()) for label in fasttext.load_model(args.model).labels]
    return pa.schema([columns.field("text"), columns.field("id"), pa.field("metadata", pa.struct(meta))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=["read_write", "fasttext"])
    parser.add_argument("--input", required=True, help="folder of parquet shards")
    parser.add_argument("--output", required=True)
    parser.add_argument("--logs", required=True, help="datatrove's logging_dir (fresh: completed tasks are skipped)")
    parser.add_argument("--tasks", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", help="fastText .bin (stage fasttext)")
    args = parser.parse_args()

    steps = [ParquetReader(args.input, glob_pattern="*.parquet")]
    if args.stage == "fasttext":
        steps.append(FastTextAnnotator(args.model))
    steps.append(ParquetWriter(args.output, schema=output_schema(args)))
    imported = time.perf_counter()  # imports and the pipeline's set-up (the writer's schema)
    LocalPipelineExecutor(pipeline=steps, tasks=args.tasks, workers=args.workers, logging_dir=args.logs).run()
    done = time.perf_counter()
    print(json.dumps({"import_seconds": imported - _START, "engine_seconds": done - imported}))

