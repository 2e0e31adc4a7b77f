"""Kedro-Viz, in headless Chromium, draws the project's pipelines: every node of the registry is on the flowchart."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import pytest

from curation.pipeline_registry import DEFAULT_PIPELINES

BIN = Path(sys.executable).parent


def _pipeline(name: str):
    return importlib.import_module(f"curation.pipelines.{name}.pipeline").create_pipeline()


def _flowchart_labels(page, kind: str, expected: set[str], timeout_s: float = 60) -> set[str]:
    """Labels of the drawn flowchart nodes of ``kind`` (task or data): polled until they are ``expected``
    (the graph is laid out and drawn after the page loaded), or the last ones seen after ``timeout_s``."""
    nodes = page.locator(f"svg g.pipeline-node--{kind}")
    deadline = time.monotonic() + timeout_s
    while True:
        labels = {text.strip() for text in nodes.all_text_contents()}
        if labels == expected or time.monotonic() > deadline:
            return labels
        time.sleep(0.25)


@pytest.mark.slow  # `kedro viz` and Chromium
def test_kedro_viz_draws_the_pipelines(project, page, start_server, save_screenshot):
    server = start_server([str(BIN / "kedro"), "viz", "run", "--host", "127.0.0.1", "--port", "{port}",
                           "--no-browser"], project, "/api/main")
    base = server.wait_ready()

    # The default job: the nodes of all its pipelines, in one flowchart.
    default_nodes = {node.name for name in DEFAULT_PIPELINES for node in _pipeline(name).nodes}
    page.goto(f"{base}/?pid=__default__", wait_until="domcontentloaded")
    assert _flowchart_labels(page, "task", default_nodes) == default_nodes

    # The ingest pipeline alone: its two nodes and the datasets between them (parameters are hidden by default).
    ingest = _pipeline("ingest")
    ingest_nodes = {node.name for node in ingest.nodes}
    # kedro-viz draws a transcoded dataset (documents@shards, documents@frame) once, under its base name
    ingest_data = {name.split("@")[0] for name in ingest.datasets() if not name.startswith("params:")}
    assert "ingest_documents_node" in ingest_nodes
    page.goto(f"{base}/?pid=ingest", wait_until="domcontentloaded")
    assert _flowchart_labels(page, "task", ingest_nodes) == ingest_nodes
    assert _flowchart_labels(page, "data", ingest_data) == ingest_data

    # It opens clean (issue #53): no upgrade banner offline ("Kedro-Viz None is here!": the settings answer
    # its PyPI check with the installed version) and every parameter of every pipeline found.
    assert page.locator(".update-reminder-unexpanded").count() == 0
    assert page.get_by_text("Kedro-Viz None").count() == 0
    log = server.log_path.read_text()
    assert "Cannot find parameter" not in log, log[-3000:]

    # A feature tour covers the flowchart in a first visit's screenshot.
    for overlay in (page.locator(".feature-hints__close"), page.get_by_role("button", name="Dismiss")):
        if overlay.count():
            overlay.first.click()
    save_screenshot(page, "kedro_viz_ingest")
