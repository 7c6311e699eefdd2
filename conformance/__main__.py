"""`python -m conformance`: run the differential suite, print the table, write the JSON.

Exit status 0 when every pod agreed (ties apart), 1 when any pod differs or a scenario
could not be played.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

from conformance import compare, runner
from conformance import scenarios as scn


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


# 25 scenarios for each family (the gang and DRA families' issues ask >= 25 / 40).
DEFAULT_COUNT = 25 * len(scn.FAMILY_NAMES)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=DEFAULT_COUNT,
                    help="scenarios (default %(default)s)")
    ap.add_argument("--families", default="",
                    help="comma-separated families to play (default: all of "
                         + ", ".join(scn.FAMILY_NAMES) + ")")
    ap.add_argument("--only", default="", help="comma-separated scenario indices")
    ap.add_argument("--out", default="conformance-results",
                    help="directory for differences.json and results.json (%(default)s)")
    ap.add_argument("--workdir", default=None,
                    help="control planes' directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="leave the control planes running")
    ap.add_argument("--oracle-vs-oracle", action="store_true",
                    help="run kube-scheduler on both sides: shows what is not deterministic")
    args = ap.parse_args(argv)

    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in scn.FAMILIES]
    if unknown:
        ap.error(f"unknown families {unknown}; known: {', '.join(scn.FAMILY_NAMES)}")
    scenarios = scn.generate_all(args.seed, args.count, families)
    if args.only:
        wanted = {int(i) for i in args.only.split(",")}
        scenarios = [s for s in scenarios if s.index in wanted]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(args.workdir) if args.workdir else Path(
        tempfile.mkdtemp(prefix="polsched-conformance-"))
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        print(f"[conformance {time.monotonic() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    progress(f"{len(scenarios)} scenarios, {sum(len(s.pods) for s in scenarios)} pods, "
             f"{sum(len(s.steps) for s in scenarios)} steps, "
             f"seed {args.seed}; control planes in {workdir}")
    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so that nothing is left running.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        results = asyncio.run(runner.run_sides(scenarios, workdir, progress=progress,
                                               keep=args.keep,
                                               oracle_vs_oracle=args.oracle_vs_oracle))
    except KeyboardInterrupt:
        progress("interrupted; stopping the schedulers and control planes")
        runner.stop_leftovers(workdir)
        return 130
    runner.dump_results(out / "results.json", results)
    c = compare.compare(scenarios, results["kube"], results["polsched"])
    wall = time.monotonic() - t0
    meta = {"seed": args.seed, "count": len(scenarios), "wall_seconds": round(wall, 1),
            "oracle_vs_oracle": args.oracle_vs_oracle,
            "families_played": sorted({s.family for s in scenarios})}
    (out / "differences.json").write_text(
        json.dumps(compare.report_json(c, scenarios, meta), indent=1))
    print(compare.table(c))
    print(f"{len(scenarios)} scenarios in {wall:.0f}s; {c.pods_differing} pods differ, "
          f"{len(c.errors)} scenarios not played; details in {out / 'differences.json'}")
    return 1 if c.pods_differing or c.errors else 0


if __name__ == "__main__":
    sys.exit(main())
