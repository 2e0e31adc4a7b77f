"""A SIGTERM or Ctrl-C ends a run whose tasks run in worker processes without waiting for them (issue #52: a
SIGTERM during decide's cells took as long as the cells in flight, 48 s, to end the run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.processes import GONE_WITHIN_S, MARKER_ENV, marked_processes, wait_for, wait_gone

pytestmark = pytest.mark.slow  # a real process with a pool of workers

SCRIPT = textwrap.dedent("""
    import sys, time
    from curation.shards.executor import EngineConfig, run_tasks
    from curation.tracking import interrupts

    if __name__ == "__main__":
        interrupts.install()
        print("started", flush=True)
        try:
            run_tasks(time.sleep, [120.0, 120.0], EngineConfig(workers=2, progress=False))
        except KeyboardInterrupt as err:
            print(f"ended: {type(err).__name__}", flush=True)
            sys.exit(143)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_tasks_in_flight_instead_of_waiting_for_them(tmp_path, sig):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    marker = f"executor-interrupt-{sig}-{time.time_ns()}"
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, MARKER_ENV: marker})
    assert proc.stdout.readline().strip() == "started"
    # the driver and its workers (and the fork server); then a moment for the workers to be inside their 120 s tasks
    wait_for(lambda: len(marked_processes(marker)) >= 3, GONE_WITHIN_S, "the workers", proc)
    time.sleep(2)
    signalled = time.monotonic()
    proc.send_signal(sig)  # to the driver only, as `kill` sends SIGTERM (Ctrl-C would reach the workers too)
    out, err = proc.communicate(timeout=90)
    took = time.monotonic() - signalled
    assert proc.returncode == 143, err[-2000:]
    expected = "Terminated" if sig == signal.SIGTERM else "KeyboardInterrupt"
    assert f"ended: {expected}" in out, (out, err[-2000:])
    assert took < 30, took  # the tasks had ~110 s left: stopped, not waited for
    assert not wait_gone(marker)  # and no worker is left behind
