"""Fixtures of the browser tests: Debian's Chromium driven headless by Playwright,
and the web servers (``mlflow server``, ``kedro viz run``) on 127.0.0.1.

Chromium is ``/usr/bin/chromium`` from Debian's ``chromium`` package, which
``scripts/install_browser.sh`` installs (``scripts/test.sh`` calls it before
pytest). Playwright's Python package only drives it through
``executable_path``: no test tool downloads a browser, and every request that
leaves 127.0.0.1 is aborted, so the pages render the same without a network.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.foundation.test_servers import _free_port, _get_json
from tests.processes import start_in_group, stop_group

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
INSTALL_SCRIPT = REPO / "scripts" / "install_browser.sh"
# Headless, no sandbox (CI runs as root), no GPU, and no background connections
# (a closed network refuses them, many at a time); /tmp instead of a small
# /dev/shm in containers. Playwright passes a fresh --user-data-dir (the profile).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
VIEWPORT = {"width": 1600, "height": 1000}
TIMEOUT_MS = 60_000  # generous: two shared cores, other work running


@pytest.fixture(scope="session")
def chromium() -> Path:
    """/usr/bin/chromium, installed by scripts/install_browser.sh if missing; skip only if that fails."""
    if not os.access(CHROMIUM, os.X_OK):
        done = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=900)
        if not os.access(CHROMIUM, os.X_OK):
            pytest.skip(f"{CHROMIUM} is missing and scripts/install_browser.sh could not install Debian's "
                        f"chromium: {(done.stdout + done.stderr).strip()[-500:]}")
    return CHROMIUM


def _processes_using(marker: str) -> list[int]:
    """Ids of live processes whose command line contains ``marker`` (read from /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile, or not ours to read
            continue
        if marker in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def page(chromium: Path, tmp_path: Path) -> Iterator[object]:
    """A Playwright page in a fresh headless Chromium; the browser never outlives the test."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # a set-up error, not a reason to skip
        pytest.fail(f"playwright (a pinned dev dependency) is not installed: {exc}; run bash scripts/setup.sh")
    profile = tmp_path / "chromium-profile"  # a new, empty --user-data-dir
    driver = sync_playwright().start()
    context = None
    try:
        context = driver.chromium.launch_persistent_context(
            str(profile), executable_path=str(chromium), headless=True, args=CHROMIUM_FLAGS,
            viewport=VIEWPORT, timeout=TIMEOUT_MS)
        context.set_default_timeout(TIMEOUT_MS)
        # Only the servers under test: fonts or telemetry on the internet are refused at once.
        context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("http://127.0.0.1:")
                      else route.abort())
        yield context.pages[0] if context.pages else context.new_page()
    finally:
        try:
            if context is not None:
                context.close()
        finally:
            try:
                driver.stop()
            finally:
                _reap(profile)


def _reap(profile: Path, grace_s: float = 15) -> None:
    """Kill (and fail on) Chromium processes of ``profile`` still alive ``grace_s`` after the browser closed."""
    deadline = time.monotonic() + grace_s
    while _processes_using(str(profile)) and time.monotonic() < deadline:
        time.sleep(0.2)
    leftovers = _processes_using(str(profile))
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not leftovers, f"Chromium processes outlived the browser fixture (killed): {leftovers}"


class Server:
    """A server process on 127.0.0.1 (in its own process group) and the JSON endpoint that says it is up."""

    def __init__(self, args: list[str], cwd: Path, ready_path: str, data: bytes | None = None) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.name = Path(args[0]).name
        self.log_path = cwd / f"{self.name}-server.log"
        self._log = self.log_path.open("w")
        self._ready = (ready_path, data)
        env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.process = start_in_group([a.replace("{port}", str(self.port)) for a in args], cwd=cwd, env=env,
                                      stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 120) -> str:
        """Poll the ready endpoint (bounded); return the base URL."""
        path, data = self._ready
        try:
            _get_json(self.url + path, timeout_s=timeout_s, data=data)
        except TimeoutError as exc:
            raise AssertionError(f"{self.name} did not come up: {self.log_path.read_text()[-3000:]}") from exc
        return self.url

    def stop(self) -> None:
        """SIGTERM the whole process group (mlflow runs uvicorn as a child), SIGKILL what lingers."""
        try:
            stop_group(self.process)
        finally:
            self._log.close()


@pytest.fixture
def start_server() -> Iterator[Callable[..., Server]]:
    """``start_server(args, cwd, ready_path, data=None) -> Server``; ``{port}`` in args becomes a free port.

    The server starts in the background (``Server.wait_ready()`` waits for it);
    every server started is killed, with its children, when the test ends.
    """
    started: list[Server] = []

    def start(args: list[str], cwd: Path, ready_path: str, data: bytes | None = None) -> Server:
        started.append(Server(args, cwd, ready_path, data))
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def save_screenshot(tmp_path: Path) -> Callable[[object, str], Path]:
    """``save_screenshot(page, name)``: a PNG under the test's tmp dir, copied to $CURATION_SCREENSHOTS if set."""

    def save(page, name: str) -> Path:
        path = tmp_path / f"{name}.png"
        page.screenshot(path=str(path))
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000, path
        target = os.environ.get("CURATION_SCREENSHOTS")
        if target:
            Path(target).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(target) / path.name)
        return path

    return save
