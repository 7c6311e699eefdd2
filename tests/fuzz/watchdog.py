"""The parent side: a worker subprocess per run, fed one case at a time, killed when a case
overruns its time or memory.

A hang inside one C call that holds the GIL (a backtracking regex, a huge Decimal) cannot
be interrupted from inside the process, so the limit is enforced from outside: the parent
waits on the worker's stdout with a deadline, polls its RSS meanwhile, and on a breach
kills it (SIGKILL, by its pid) and starts a fresh one for the next case.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

Json = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
POLL_SECONDS = 0.05
_TICKS = os.sysconf("SC_CLK_TCK")
# The time limit is on the worker's CPU time, so that a loaded machine (other jobs on the
# same cores) does not turn slow answers into hangs; wall time gets this many times more,
# for a worker that is stuck without burning CPU.
WALL_FACTOR = 6.0


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of process `pid` so far."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Watchdog:
    """Runs cases in a worker subprocess under a time limit (CPU seconds per case; wall
    time WALL_FACTOR times that) and a memory limit (MiB of the worker's RSS)."""

    def __init__(self, timeout: float = 10.0, max_rss_mib: int = 1024) -> None:
        self.timeout = timeout
        self.max_rss_kb = max_rss_mib * 1024
        self._proc: subprocess.Popen[str] | None = None
        self.restarts = 0

    def _start(self) -> subprocess.Popen[str]:
        env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.worker"], cwd=REPO,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=env)
        # Warm-up: the imports are paid before the first case's clock starts.
        self._proc = proc
        warm = self._exchange({"kind": "warm-up"}, 120.0)
        if "error" in warm:
            raise RuntimeError(f"the fuzz worker did not start: {warm}")
        return proc

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def close(self) -> None:
        if self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.close()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        self._kill()

    def __enter__(self) -> Watchdog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _exchange(self, case: Json, timeout: float) -> Json:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        started = time.monotonic()
        cpu_started = _cpu_seconds(proc.pid)
        try:
            proc.stdin.write(json.dumps(case) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            self._kill()
            return {"error": "crash", "violations": ["crash: the worker exited"]}
        peak = 0
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                if sel.select(POLL_SECONDS):
                    line = proc.stdout.readline()
                    if not line:
                        code = proc.wait()
                        self._proc = None
                        return {"error": "crash", "violations": [
                            f"crash: the worker exited with {code}"]}
                    result: Json = json.loads(line)
                    result["wall_seconds"] = time.monotonic() - started
                    result["peak_rss_kb"] = max(peak, result.get("rss_kb", 0))
                    return result
                peak = max(peak, _rss_kb(proc.pid))
                elapsed = time.monotonic() - started
                cpu = _cpu_seconds(proc.pid) - cpu_started
                if cpu > timeout or elapsed > WALL_FACTOR * timeout:
                    self._kill()
                    return {"error": "hang", "violations": [
                        f"hang: no answer after {cpu:.1f} s of CPU ({elapsed:.1f} s)"],
                        "wall_seconds": elapsed}
                if peak > self.max_rss_kb:
                    self._kill()
                    return {"error": "memory", "violations": [
                        f"memory: RSS {peak // 1024} MiB over {self.max_rss_kb // 1024} MiB"],
                        "wall_seconds": elapsed}

    def run(self, case: Json) -> Json:
        """The worker's result for `case`, or {"error": "hang" | "memory" | "crash"}, each
        with its violation; the worker is restarted after any of those."""
        if self._proc is None:
            self._start()
            self.restarts += 1
        result = self._exchange(case, self.timeout)
        if result.get("peak_rss_kb", 0) > self.max_rss_kb:
            result["violations"].append(
                f"memory: RSS {result['peak_rss_kb'] // 1024} MiB over "
                f"{self.max_rss_kb // 1024} MiB")
            self._kill()  # a fresh worker, so one case's growth is not blamed on the next
        return result
