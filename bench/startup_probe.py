#!/usr/bin/env python3
"""Start-up timelines of `polsched run` on a running control plane (bench/NOTES.md
"Issue 15, fourth pass: start-up"):

  .venv/bin/python bench/startup_probe.py KUBECONFIG WORKLOAD [RUNS] [PYSPY_PREFIX]

Per run: clean the bench namespaces, create the workload's nodes, initial pods and backlog
(as bench/run.py --backlog does), start the polsched runner's own command through
bench/startup_timeline.py, wait for every bind, stop it. Prints the bind figures, the
process's CPU and its `TL` lines. PYSPY_PREFIX: also record the first 5 s with py-spy
(PREFIX-N.raw, for bench/profile_split.py). NOPRECOMPILE=1 leaves polsched's bytecode
alone (a tree under PYTHONPATH as the bench ran it before schedulers.precompile).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import many, measure, schedulers  # noqa: E402
from bench import run as brun  # noqa: E402
from bench import workloads as wl  # noqa: E402
from polsched.cluster.client import ApiClient  # noqa: E402


class _Args:
    concurrency = 32


class _Ctx:
    args = _Args()


async def probe(kubeconfig: str, w: wl.Workload, runs: int, pyspy: str | None) -> None:
    api = ApiClient.from_kubeconfig(kubeconfig)
    workdir = Path("/tmp/polsched-startup-probe")
    workdir.mkdir(exist_ok=True)
    await brun.ensure_namespace(api)
    try:
        for r in range(runs):
            await brun.clean(api)
            nodes = [w.node(i) for i in range(w.nodes)]
            await measure.create_objects(api, "/api/v1/nodes", measure.encode(nodes), 32)
            await brun.create_initial(_Ctx(), api, w, schedulers.POLICY_NAME)  # type: ignore[arg-type]
            runner = schedulers.Polsched(kubeconfig, Path("/nonexistent"), workdir,
                                         mode="operator")
            watcher = measure.BindWatcher(kubeconfig, wl.NAMESPACE, w.pods)
            await asyncio.to_thread(watcher.start)
            await measure.create_objects(api, brun.PODS, measure.encode(
                [w.pod(i, "polsched", schedulers.POLICY_NAME) for i in range(w.pods)]), 32)
            command = runner.command

            def timed(wk: wl.Workload, ext: str | None, r: int = r,
                      command: Any = command) -> list[str]:
                cmd: list[str] = command(wk, ext)
                i = cmd.index("polsched.commands.cli")
                cmd = [cmd[0], str(ROOT / "bench" / "startup_timeline.py"), *cmd[i + 1:]]
                if pyspy:
                    cmd = [str(ROOT / ".venv" / "bin" / "py-spy"), "record", "--rate", "200",
                           "--format", "raw", "--nonblocking", "--duration", "5",
                           "-o", f"{pyspy}-{r}.raw", "--", *cmd]
                return cmd
            runner.command = timed  # type: ignore[method-assign,assignment]
            runner.start(w, None)
            assert runner.proc is not None and runner.log_path is not None
            meter = measure.ProcessMeter(runner.proc.pid)
            meter.sample()
            seen = await asyncio.to_thread(watcher.result, 300)
            meter.sample()
            runner.stop()
            bound = seen["bound"]
            if bound:
                first = min(v[0] for v in bound.values()) - runner.started_at
                last = max(v[0] for v in bound.values()) - runner.started_at
                print(f"run {r}: bound {len(bound)}/{w.pods} rebinds {seen['rebinds']} "
                      f"first bind {first:.3f}s last {last:.3f}s cpu {meter.cpu():.2f}s",
                      flush=True)
            else:
                print(f"run {r}: nothing bound", flush=True)
            for line in runner.log_path.read_text().splitlines():
                if line.startswith("TL ") or "ERROR" in line or "Traceback" in line:
                    print("   ", line)
        await brun.clean(api)
    finally:
        await api.close()


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    kubeconfig, name = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    pyspy = sys.argv[4] if len(sys.argv) > 4 else None
    if os.environ.get("NOPRECOMPILE"):
        schedulers.precompile = lambda: None
    w = {**wl.WORKLOADS, **many.WORKLOADS}[name]
    asyncio.run(probe(kubeconfig, w, runs, pyspy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
