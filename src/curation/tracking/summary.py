"""The closing summary of a run: what it read, kept, scored, pruned and selected, where the
outputs are, and how to open the run in MLflow.

Built from the ``*_metrics`` dicts the nodes return (by output name), printed with
``rich`` at the end of every ``curate`` / ``kedro run``, and stored as the MLflow run's
description (the ``mlflow.note.content`` tag, shown as markdown on the run page).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from curation.paths import BUNDLED_CORPUS, is_bundled_corpus, on_disk, relative

# selection.diversity -> the diagnostics key of that measure, and which way is "more diverse".
DIVERSITY_KEYS = {
    "pws": ("pairwise_similarity", "higher = more diverse"),
    "fl": ("facility_location", "higher = more diverse"),
    "fl_sum": ("facility_location_sum", "higher = more diverse"),
    "disf": ("disf", "higher = more diverse"),
}
NOTE_TAG = "mlflow.note.content"
_HANDLED = {"ingest_metrics", "document_stats_metrics", "embedding_metrics", "scoring_metrics",
            "pruning_metrics", "selection_run_metrics", "selection_metrics", "metarater_data_metrics",
            "metarater_regression_metrics", "decide_run_metrics", "decide_metrics"}


@dataclass
class Section:
    title: str
    rows: list[tuple[str, str]] = field(default_factory=list)
    # Optional comparison table: header + rows of cells.
    table: tuple[list[str], list[list[str]]] | None = None


@dataclass
class RunRecord:
    """What a pipeline run produced, gathered by the tracking hook."""

    pipelines: list[str]
    params: Mapping[str, Any]
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # output name -> its metrics dict
    outputs: dict[str, str] = field(default_factory=dict)  # dataset name -> file path
    seconds: float | None = None
    run_name: str | None = None
    run_id: str | None = None
    experiment_id: str | None = None
    tracking_uri: str | None = None
    status: str = "FINISHED"
    disk: "DiskUsage | None" = None  # what the run's outputs take on disk (measured at the end)


@dataclass
class DiskUsage:
    """Bytes on disk of a run's outputs, each file counted once (hard links too)."""

    outputs_bytes: int = 0
    files: int = 0
    linked_bytes: int = 0  # of which files with other hard links (the result cache's entries, counted once)
    cache_bytes: int | None = None  # the whole result cache (shared by every run), None when off
    cache_dir: str | None = None
    where: str = ""  # the namespace's folders, e.g. data/*/default

    def as_metrics(self) -> dict[str, float]:
        out = {"disk/outputs_bytes": float(self.outputs_bytes), "disk/outputs_files": float(self.files)}
        if self.cache_bytes is not None:
            out["disk/cache_bytes"] = float(self.cache_bytes)
        return out


def _walk_files(path: Path):
    if path.is_file():
        yield path
    elif path.is_dir():
        for folder, _, files in os.walk(path):
            for name in files:
                yield Path(folder) / name


def disk_usage(paths, cache_dir: Path | None = None, where: str = "") -> DiskUsage:
    """Allocated bytes of the files under ``paths`` (files or folders), each inode once; and of
    ``cache_dir`` when given. Never raises: a file removed meanwhile is skipped."""
    usage = DiskUsage(where=where, cache_dir=None if cache_dir is None else str(cache_dir))
    seen: set[tuple[int, int]] = set()
    for path in paths:
        for file in _walk_files(Path(path)):
            try:
                st = file.stat()
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            size = st.st_blocks * 512
            usage.outputs_bytes += size
            usage.files += 1
            if st.st_nlink > 1:
                usage.linked_bytes += size
    if cache_dir is not None and Path(cache_dir).is_dir():
        cache_seen: set[tuple[int, int]] = set()
        total = 0
        for file in _walk_files(Path(cache_dir)):
            try:
                st = file.stat()
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in cache_seen:
                cache_seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
        usage.cache_bytes = total
    return usage


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} TB"


def _disk(usage: DiskUsage) -> Section:
    section = Section("disk")
    linked = (f" ({human_bytes(usage.linked_bytes)} hard-linked from the result cache, not copied)"
              if usage.linked_bytes else "")
    section.rows.append(("outputs", f"{human_bytes(usage.outputs_bytes)} in {_num(usage.files)} files"
                                    f"{' under ' + usage.where if usage.where else ''}{linked}"))
    if usage.cache_bytes is not None:
        section.rows.append(("result cache", f"{human_bytes(usage.cache_bytes)} in {usage.cache_dir} (all runs)"))
    return section


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.{digits}g}" if abs(value) < 1e-2 else f"{value:,.{digits}f}".rstrip("0").rstrip(".")


def _share(part: float, whole: float) -> str:
    return f"{_num(part)} ({100 * part / whole:.1f}%)" if whole else _num(part)


def _ingest(m: dict[str, float], stats: dict[str, float]) -> Section:
    section = Section("ingest")
    read, kept = m.get("rows_read", 0), m.get("rows_kept", 0)
    shards = (f" from {_num(m['shards_read'])} of {_num(m['shards_total'])} shards"
              if "shards_read" in m and "shards_total" in m else "")
    if "files_read" in m and "files_total" in m:  # a file larger than data.piece_mb is read as several pieces
        pieces = (f" ({_num(m['shards_total'])} pieces)" if m.get("shards_total", 0) != m["files_total"] else "")
        shards = f" from {_num(m['files_read'])} of {_num(m['files_total'])} files{pieces}"
    section.rows.append(("read", f"{_num(read)} rows{shards}"))
    section.rows.append(("kept", _share(kept, read)))
    reasons = {k[len("dropped_"):]: v for k, v in m.items() if k.startswith("dropped_") and v}
    dropped = ", ".join(f"{reason} {_num(n)}" for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
    section.rows.append(("dropped", f"{_num(m.get('rows_dropped', 0))}" + (f" ({dropped})" if dropped else "")))
    if m.get("extra_unreadable"):  # kept, but their category is null
        section.rows.append(("extra", f"{_num(m['extra_unreadable'])} values of the extra column are not a JSON object: "
                                      "kept, their category null"))
    outside = m.get("outside_language", 0)
    if outside:
        # the raters were built on English: their scores on other languages are numbers without meaning
        what = ("dropped (data.language=drop)" if m.get("dropped_outside_language") else
                "kept (data.language=drop drops them)")
        section.rows.append(("language", f"{_share(outside, read)} not English, the raters' language: {what}"))
    if "sources" in stats:
        section.rows.append(("sources", f"{_num(stats['sources'])}, {_num(stats.get('words_total'))} words"))
    return section


def _scoring(scoring: dict[str, float], embedding: dict[str, float], params: Mapping[str, Any] | None = None
             ) -> Section:
    section = Section("scoring")
    if embedding:
        cached = " (from cache)" if embedding.get("embedding_cache_hit") else ""
        section.rows.append(("embedded", f"{_num(embedding.get('embedding_docs'))} docs, "
                                         f"dim {_num(embedding.get('embedding_dim'))}{cached}"))
    if scoring:
        scored = embedding.get("embedding_docs")
        nan = scoring.get("quality_nan", 0)
        cached = " (from cache)" if scoring.get("scoring_cache_hit") else ""
        section.rows.append(("scored", f"{_num(scored)} docs, quality mean {_num(scoring.get('quality_mean'))} "
                                       f"on 0-15, {_num(nan)} without a score{cached}"))
        if "roc_auc_quality" in scoring:
            # whose labels: the reference corpus's (training.source=reference, the default, on any corpus: the
            # bundled corpus unless scoring.training.reference_path names another) or the scored corpus's own
            # (training.source=corpus)
            quality, n = _num(scoring["roc_auc_quality"]), _num(scoring.get("roc_auc_n_eval"))
            training = ((params or {}).get("scoring") or {}).get("training") or {}
            reference = str(training.get("reference_path") or BUNDLED_CORPUS)
            if scoring.get("training_source_reference") == 0:
                text = f"merged quality {quality} on this corpus's {n} held-out human labels"
            elif is_bundled_corpus(reference):
                text = f"merged quality {quality} on the bundled corpus's {n} held-out human labels"
            else:
                text = f"merged quality {quality} on {n} held-out human labels of the reference corpus {reference}"
            section.rows.append(("ROC-AUC", text))
    return section


def _pruning(m: dict[str, float]) -> Section:
    section = Section("pruning")
    seen = m.get("docs_in", 0)
    section.rows.append(("kept", f"{_share(m.get('kept', 0), seen)} of {_num(seen)}"))
    cut = f" (quality < {_num(m['cut_quality'])})" if "cut_quality" in m else ""
    section.rows.append(("pruned", f"{_num(m.get('dropped_low_quality', seen - m.get('kept', 0)))}{cut}"))
    if "quality_mean_before" in m:
        section.rows.append(("quality mean", f"{_num(m['quality_mean_before'])} -> {_num(m.get('quality_mean_after'))}"))
    return section


def _selection(run: dict[str, float], diag: dict[str, float], selection: Mapping[str, Any]) -> Section:
    method = str(selection.get("method", "?"))
    score = str(selection.get("score") or "quality")
    section = Section(f"selection ({method})")
    if score != "quality":  # a row, not the title: the title sets the label column's width
        section.rows.append(("ranked by", f"{score} (the table below: the merged 0-15 quality)"))
    if run:
        section.rows.append(("selected", f"{_num(diag.get('selected_size', run.get('budget_docs')))} of "
                                         f"{_num(run.get('candidates'))} candidates"
                                         f" in {_num(run.get('selection_seconds'), 2)} s"
                                         + (" (from cache: the time of the run that made it)"
                                            if run.get("selection_cache_hit") else "")))
        if run.get("selected_tokens") is not None and math.isfinite(run["selected_tokens"]):
            tokens = f"{_num(run['selected_tokens'])} (reference tokenizer)"
            if run.get("budget_tokens") is not None:
                tokens += (f", budget {_num(run['budget_tokens'])} "
                           f"({100 * run.get('selected_token_error', 0.0):+.2f}%)")
            section.rows.append(("tokens", tokens))
    if diag:
        measure = str(selection.get("diversity") or "pws")
        key, direction = DIVERSITY_KEYS.get(measure, ("pairwise_similarity", "higher = more diverse"))
        header = ["subset", "quality mean", f"{measure} ({direction})"]
        rows = [["selected", _num(diag.get("selected_quality_mean")), _num(diag.get(f"selected_{key}"))]]
        for label, prefix in (("random", "selected_random_"), ("top-k quality", "selected_topk_")):
            if f"{prefix}quality_mean" in diag:
                rows.append([label, _num(diag[f"{prefix}quality_mean"]), _num(diag.get(f"{prefix}{key}"))])
        section.table = (header, rows)
    if run.get("info_blocks_warned", 0) > 0:  # DataMask policy health (issue #20)
        what = []
        if run.get("info_blocks_premature", 0) > 0:
            what.append(f"policy collapsed early (entropy {_num(run.get('info_final_entropy_min'))} nats)")
        if run.get("info_blocks_below_topk", 0) > 0:
            what.append(f"returned mask {100 * run.get('info_returned_shortfall_max', 0.0):.1f}% below the best top-S")
        # one fix per problem, named by its setting, as the log's warning (datamask_health.health_message) does
        fixes = []
        if run.get("info_blocks_below_topk", 0) > 0:
            fixes.append("selection.final=topk returns the learned top-S" if selection.get("final", "sample") ==
                         "sample" else "selection.final=best returns the best top-S recorded during the run")
        if run.get("info_blocks_premature", 0) > 0:
            fixes.append("a lower selection.lr avoids the collapse")
        section.rows.append(("WARNING", f"{', '.join(what)} in {_num(run['info_blocks_warned'])} of "
                                        f"{_num(run.get('info_n_blocks', 1))} blocks. Fix: {'; '.join(fixes)} "
                                        "(docs/selection.md)"))
    elif run.get("info_blocks_collapsed", 0) > 0:
        section.rows.append(("note", f"entropy of softmax(L) {_num(run.get('info_final_entropy_min'))} nats at the "
                                     f"end; the returned mask is within "
                                     f"{100 * run.get('info_returned_shortfall_max', 0.0):.1f}% of the best top-S"))
    return section


def _decide(run: dict[str, float], report: dict[str, float], record: RunRecord) -> Section:
    """``experiment=decide`` (issue #38): the cells, the equal budget, and the recommendation's first line."""
    section = Section("decide")
    section.rows.append(("cells", f"{_num(run.get('decide_cells'))} ({_num(run.get('decide_candidates'))} candidates x "
                                  f"{_num(run.get('decide_scales', run.get('decide_sizes')))} scales x seeds) in "
                                  f"{_num(run.get('decide_seconds'), 1)} s"))
    if "decide_cell_train_seconds" in run:
        cached = run.get("decide_cells_from_cache", 0)
        section.rows.append(("compute", f"{_num(run['decide_cell_train_seconds'], 1)} s training + "
                                        f"{_num(run.get('decide_cell_eval_seconds'), 1)} s evaluation in the cells"
                             + (f"; {_num(cached)} of them from the cache of an earlier run (their seconds counted "
                                "here, not in the time above)" if cached else "")))
    section.rows.append(("budget", f"{_num(run.get('decide_budget_tokens'))} reference tokens per candidate; "
                                   f"at most {_num(run.get('decide_max_epochs'))} epochs of any candidate"))
    if report:
        section.rows.append(("decided", f"{_num(report.get('decide_decided_pairs'))} of "
                                        f"{_num(report.get('decide_pairs'))} (scale, pair, metric) comparisons "
                                        "(seed and item error, Holm-corrected)"))
    path = record.outputs.get("decide_recommendation_markdown")
    if path:
        file = on_disk(path)
        text = file.read_text().splitlines() if file.is_file() else []
        for label, start in (("metrics", "**Metrics disagree"), ("answer", "**Answer")):
            line = next((x for x in text if x.startswith(start)), "")
            if line:
                section.rows.append((label, line.replace("**", "").replace("`", "")))
        # what is there (a failed run listed recommendation.md it never wrote, issue #52)
        described = {"decisions.csv": "decisions.csv (mean_diff, se, p, se_seed, se_item, p_holm, decided)"}
        names = [described.get(n, n) for n in ("recommendation.md", "decisions.csv", "snr.csv", "tasks.csv",
                                                "decisions.png", "ladder.png", "size_agreement.csv", "item_vs_seed.csv")
                 if (file.parent / n).is_file()]
        if names:
            section.rows.append(("written", f"{Path(path).parent}/: {', '.join(names)}"))
    cells = record.outputs.get("decide_cells_table")
    if cells:
        if on_disk(cells).is_file():  # every cell's metrics, seconds and provenance (issue #53: the summary did not say where)
            section.rows.append(("cells CSV", f"{cells} (one row per candidate, scale and seed: metrics, train_seconds, "
                                          "eval_seconds)"))
    return section


def _metarater(data: dict[str, float], regression: dict[str, float], params: Mapping[str, Any]) -> Section:
    """What Meta-rater's held-out sets are made of, the regression's fit, and its warning (issue #27)."""
    from curation.metarater.core import regression_warning, validation_description

    section = Section("metarater")
    if data:
        source = str(((params.get("metarater") or {}).get("validation") or {}).get("source", "holdout"))
        section.rows.append(("candidates", _num(data.get("candidates"))))
        section.rows.append(("held out", validation_description(data, source)))
    if regression:
        section.rows.append(("regression", f"{_num(regression.get('regression_proxies'))} proxies, Spearman rho "
                                           f"{_num(regression.get('regression_spearman_test'))} (test split), "
                                           f"{_num(regression.get('regression_spearman_cv'))} (5-fold CV), best "
                                           f"iteration {_num(regression.get('regression_best_iteration'))}"))
        warning = regression_warning(regression, prefix="regression_")
        if warning:
            section.rows.append(("WARNING", warning))
    return section


def _other(name: str, m: dict[str, float], limit: int = 8) -> Section:
    section = Section(name.removesuffix("_metrics").replace("_", " "))
    for key, value in list(m.items())[:limit]:
        section.rows.append((key, _num(value)))
    if len(m) > limit:
        section.rows.append(("...", f"{len(m) - limit} more metrics in MLflow"))
    return section


def _mlflow_rows(record: RunRecord) -> list[tuple[str, str]]:
    """The run, how to open the UI (or that it is open), the run's page and the runs table."""
    from curation.tracking.ui import run_url, runs_table_url, ui_address

    rows = [("run", f"{record.run_name}  ({record.run_id})")]
    address = ui_address(record.tracking_uri or "", record.run_id)
    if address is None:
        return rows
    if address.command:
        rows.append(("open the UI", address.command))
    elif address.serving and not (record.tracking_uri or "").startswith("http"):
        rows.append(("open the UI", f"already serving this store at {address.base}"))
    if record.experiment_id:
        rows.append(("this run", run_url(address.base, record.experiment_id, str(record.run_id))))
        rows.append(("all runs", runs_table_url(address.base, record.experiment_id)))
    return rows


def build_sections(record: RunRecord) -> list[Section]:
    m = record.metrics
    params = record.params
    sections = []
    if "ingest_metrics" in m:
        sections.append(_ingest(m["ingest_metrics"], m.get("document_stats_metrics", {})))
    if "scoring_metrics" in m or "embedding_metrics" in m:
        sections.append(_scoring(m.get("scoring_metrics", {}), m.get("embedding_metrics", {}), params))
    if "pruning_metrics" in m:
        sections.append(_pruning(m["pruning_metrics"]))
    if "selection_run_metrics" in m or "selection_metrics" in m:
        sections.append(_selection(m.get("selection_run_metrics", {}), m.get("selection_metrics", {}),
                                   params.get("selection") or {}))
    if "metarater_data_metrics" in m or "metarater_regression_metrics" in m:
        sections.append(_metarater(m.get("metarater_data_metrics", {}), m.get("metarater_regression_metrics", {}),
                                   params))
    if "decide_run_metrics" in m:
        sections.append(_decide(m["decide_run_metrics"], m.get("decide_metrics", {}), record))
    for name, values in m.items():
        if name not in _HANDLED and values:
            sections.append(_other(name, values))
    if record.disk is not None:
        sections.append(_disk(record.disk))
    outputs = record.outputs if record.status == "FINISHED" else _written(record.outputs)
    if outputs:
        sections.append(Section("outputs", [(name, path) for name, path in outputs.items()]))
    if record.run_id:
        sections.append(Section("MLflow", _mlflow_rows(record)))
    return sections


def _written(outputs: Mapping[str, str]) -> dict[str, str]:
    """The outputs of a run that did not finish that are on disk: a failed run listed the files it would have
    written (issue #52)."""
    from curation.paths import project_root

    root = project_root()
    kept = {}
    for name, path in outputs.items():
        if name == "figures":
            continue  # a list of names, not a path
        if on_disk(path, root).exists():
            kept[name] = path
    return kept


def _title(record: RunRecord) -> str:
    took = f" in {record.seconds:.1f} s" if record.seconds is not None else ""
    state = "finished" if record.status == "FINISHED" else record.status.lower()
    names = "+".join("default job" if n == "__default__" else n for n in record.pipelines)
    return f"curation: {names} {state}{took}"


def to_markdown(record: RunRecord, sections: list[Section] | None = None) -> str:
    """The summary as markdown (the MLflow run description)."""
    sections = build_sections(record) if sections is None else sections
    lines = [f"**{_title(record)}**", ""]
    for section in sections:
        if section.title == "MLflow":
            continue  # the reader is already on the run page
        lines.append(f"#### {section.title}")
        lines.extend(f"- {key}: `{value}`" if section.title == "outputs" else f"- {key}: {value}"
                     for key, value in section.rows)
        if section.table:
            header, rows = section.table
            lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def print_summary(record: RunRecord, console: Any = None) -> list[Section]:
    """Print the summary with rich; return its sections."""
    import sys

    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    sections = build_sections(record)
    # Counts go in a panel; paths and commands below it, unwrapped, so that they can be copied.
    plain = [section for section in sections if section.title in ("outputs", "MLflow")]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="cyan", no_wrap=True)
    grid.add_column(overflow="fold")
    for section in sections:
        if section in plain:
            continue
        grid.add_row(f"[bold]{section.title}[/bold]", "")
        for key, value in section.rows:
            grid.add_row(f"  {key}", value)
        if section.table:
            header, rows = section.table
            table = Table(*header, box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False, pad_edge=False)
            for row in rows:
                table.add_row(*row)
            grid.add_row("  vs baselines", table)
    if console is None:
        # A log file or a pipe gets 120 columns (rich's 80 would fold the table); a terminal its own width.
        console = Console(width=None if sys.stdout.isatty() else 120)
    console.print(Panel(grid, title=_title(record), title_align="left", expand=False))
    for section in plain:
        console.print(f"[bold]{section.title}[/bold]")
        width = max(len(key) for key, _ in section.rows)
        for key, value in section.rows:
            console.print(f"  [cyan]{escape(key):<{width}}[/cyan]  {escape(value)}", soft_wrap=True,
                          highlight=False)
    return sections


