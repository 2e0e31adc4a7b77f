"""Lineage: every stage output records the fingerprint of its inputs; a stage refuses inputs
that do not belong together, naming the stale dataset and the command that re-makes it.

Two kinds of evidence, strongest first:

1. **Recorded fingerprints.** A sharded dataset's manifest names the fingerprints of its
   inputs; a frame can carry them in ``attrs`` (``attrs["fingerprint"]`` = its own,
   ``attrs["inputs"] = {name: fingerprint}``; pandas keeps ``attrs`` through parquet).
2. **Ids.** Derived rows (scores, pruned scores) must all be rows of the documents they are
   used with, and arrays aligned with a frame must have its length. This catches today's
   single-file outputs, which record no fingerprint.
"""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from curation.errors import UserError

# How to re-make each dataset (named in the error).
REMAKE = {
    "documents": "curate pipeline=ingest",
    "scores": "curate pipeline=scoring",
    "embeddings": "curate pipeline=scoring",
    "pruned_scores": "curate pipeline=scoring+pruning",
    "pruned_embeddings": "curate pipeline=scoring+pruning",
    "selected_ids": "curate pipeline=selection",
}


class LineageError(UserError, ValueError):
    """Inputs of a stage were not made from each other; the message names the stale dataset."""


def _remake(name: str) -> str:
    return REMAKE.get(name, "re-run the stage that writes it")


def check_lineage(
    stage: str,
    source_name: str,
    source: pd.DataFrame,
    derived: Mapping[str, pd.DataFrame],
    *,
    aligned: Mapping[str, tuple[Any, str]] | None = None,
    id_column: str = "id",
) -> None:
    """Refuse ``derived`` frames not made from ``source`` (e.g. ``pruned_scores`` from another
    ``documents``), and arrays in ``aligned`` (``name -> (array, frame name)``) whose row count
    differs from the frame they are aligned with. Raises :class:`LineageError`.
    """
    source_fp = source.attrs.get("fingerprint")
    for name, frame in derived.items():
        recorded = (frame.attrs.get("inputs") or {}).get(source_name)
        if recorded and source_fp and recorded != source_fp:
            raise LineageError(
                f"{stage}: {name} was made from {source_name} {recorded}, but the current {source_name} is "
                f"{source_fp}: {name} is stale. Re-make it with `{_remake(name)}`.")
        if id_column not in frame.columns:
            continue
        present = pd.Index(frame[id_column].astype(str)).isin(pd.Index(source[id_column].astype(str)))
        missing = int((~present).sum())
        if missing:
            example = frame[id_column][~present].iloc[0]
            raise LineageError(
                f"{stage}: {missing} of the {len(frame)} ids of {name} are not in {source_name} "
                f"({len(source)} documents), e.g. {example!r}: {name} was made from another {source_name} "
                f"(was {source_name} re-ingested since?) and is stale. Re-make it with `{_remake(name)}`, "
                f"or re-ingest the documents it was made from.")
    frames = {source_name: source, **derived}
    for name, (array, frame_name) in (aligned or {}).items():
        if len(array) != len(frames[frame_name]):
            raise LineageError(
                f"{stage}: {name} has {len(array)} rows but {frame_name} has {len(frames[frame_name])}; they are "
                f"aligned row for row, so one is stale. Re-make both with `{_remake(name)}`.")


def check_manifest_inputs(stage: str, name: str, recorded_inputs: Mapping[str, str],
                          current: Mapping[str, str]) -> None:
    """Refuse a sharded dataset whose manifest names other input fingerprints than the current
    ones (``current``: input name -> fingerprint of the dataset now on disk)."""
    for input_name, fingerprint in current.items():
        was = recorded_inputs.get(input_name)
        if was is not None and was != fingerprint:
            raise LineageError(
                f"{stage}: {name} was made from {input_name} {was}, but the current {input_name} is {fingerprint}: "
                f"{name} is stale. Re-make it with `{_remake(name)}`.")
