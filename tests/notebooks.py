"""Run a notebook of ``notebooks/`` headless (nbclient), as a user opens it: its kernel starts in the checkout's
``notebooks/`` folder (as Jupyter's does) and reads the MLflow store that ``MLFLOW_TRACKING_URI`` names."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def run_notebook(name: str, store: str, monkeypatch: pytest.MonkeyPatch, **env: str) -> tuple[str, int]:
    """Execute ``notebooks/<name>`` against ``store``; its printed text and how many images it drew."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.delenv("CURATION_PROJECT_ROOT", raising=False)  # the checkout the notebook sits in
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(notebook, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    return text, sum("image/png" in o.get("data", {}) for o in outputs)
