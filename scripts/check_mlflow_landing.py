"""Which view the MLflow UI opens an experiment on, checked in headless Chromium (issue #23 item 6c).

A user runs `mlflow ui`, opens its home page in a browser and clicks the experiment. This script does
exactly that, in a fresh browser profile each time, for experiments whose only difference is the
``mlflow.experimentKind`` tag (absent, ``custom_model_development`` as the project sets it,
``genai_development``), then once more with the browser's own ``mlflow.workflowType`` setting at
"machine_learning" (what one click on the sidebar's *Model training* toggle stores), and prints
the tab each landed on and whether the runs table ("matching runs") is on the page.

    .venv/bin/python scripts/check_mlflow_landing.py     # needs /usr/bin/chromium (scripts/install_browser.sh)

Prints one line per case and exits 0; it asserts nothing (it is the evidence for docs/running.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import mlflow

BIN = Path(sys.executable).parent
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
KINDS = {"no tag": None, "custom_model_development": "custom_model_development",
         "genai_development": "genai_development"}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    body = json.dumps({"max_results": 10}).encode()
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST",
                                                               headers={"Content-Type": "application/json"}),
                                        timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(url)


def _landing(playwright, profile: Path, base: str, name: str, workflow: str | None) -> tuple[str, bool, str]:
    context = playwright.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True,
                                                            args=FLAGS, viewport={"width": 1600, "height": 1000})
    try:
        context.set_default_timeout(60_000)
        context.route("**/*", lambda r: r.continue_() if r.request.url.startswith(base) else r.abort())
        page = context.pages[0] if context.pages else context.new_page()
        page.goto(f"{base}/", wait_until="domcontentloaded")
        if workflow is not None:  # what the sidebar toggle stores in this browser
            # the UI's useLocalStorage hook: key "<key>_v<version>", value JSON (mlflow 3.17.2's bundle)
            page.evaluate("([k, v]) => window.localStorage.setItem(k, v)", ["mlflow.workflowType_v1",
                                                                            json.dumps(workflow)])
            page.reload(wait_until="domcontentloaded")
        page.get_by_role("link", name=name, exact=True).first.click()
        # the experiment page redirects to its default tab: wait until the URL has a tab and stays put 3 s
        url, since, deadline = page.url, time.monotonic(), time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.25)
            if page.url != url:
                url, since = page.url, time.monotonic()
            elif re.search(r"#/experiments/\d+/[a-z-]+", url) and time.monotonic() - since > 3:
                break
        try:
            page.get_by_text(re.compile(r"\d+ matching runs?")).first.wait_for(timeout=15_000)
            runs_table = True
        except Exception:  # not on the page
            runs_table = False
        text = " ".join(page.locator("main").first.inner_text().split()) if page.locator("main").count() else ""
        text = text or " ".join(page.locator("body").inner_text().split())
        if os.environ.get("SCREENSHOTS"):
            page.screenshot(path=str(Path(os.environ["SCREENSHOTS"]) / f"{profile.name}.png"))
        return url.split("#", 1)[1], runs_table, text
    finally:
        context.close()


def main() -> int:
    from playwright.sync_api import sync_playwright

    from curation.tracking.store import EXPERIMENT_KIND_TAG

    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite:///{tmp}/mlflow.db"
        client = mlflow.MlflowClient(tracking_uri=store)
        for label, kind in KINDS.items():
            tags = {EXPERIMENT_KIND_TAG: kind} if kind else {}
            experiment_id = client.create_experiment(label.replace(" ", "_"), tags=tags)
            run = client.create_run(experiment_id, run_name="a run")
            client.log_metric(run.info.run_id, "rows_kept", 40)
            client.set_terminated(run.info.run_id)
        port = _free_port()
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        server = subprocess.Popen([str(BIN / "mlflow"), "server", "--backend-store-uri", store, "--host", "127.0.0.1",
                                   "--port", str(port), "--workers", "1"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        try:
            _wait(f"{base}/api/2.0/mlflow/experiments/search")
            print(f"mlflow {mlflow.__version__}, {CHROMIUM}, a fresh browser profile per line")
            with sync_playwright() as playwright:
                cases = [(label, None) for label in KINDS] + [("no tag", "machine_learning"),
                                                               ("custom_model_development", "machine_learning")]
                for i, (label, workflow) in enumerate(cases):
                    path, runs_table, text = _landing(playwright, Path(tmp) / f"profile-{i}", base,
                                                      label.replace(" ", "_"), workflow)
                    browser = f"browser's workflowType={workflow}" if workflow else "new browser"
                    genai = "GenAI view" if re.search(r"trac(e|ing)", text, re.I) and not runs_table else ""
                    print(f"tag={label:<25} {browser:<40} -> {path:<16} runs table: {'yes' if runs_table else 'no '}"
                          f"  {genai:<10}  page: {text[:110]!r}")
        finally:
            os.killpg(server.pid, 15)
            server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
