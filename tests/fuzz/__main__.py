"""`python -m tests.fuzz`: a fuzz campaign (what `make fuzz` runs); exit 1 on any
invariant violation outside the corpus's known (xfail) cases."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tests.fuzz import campaign
from tests.fuzz.minimise import minimise
from tests.fuzz.watchdog import Watchdog


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    ap.add_argument("--cases", type=int, default=10000, help="generated cases (10000)")
    ap.add_argument("--seed", type=int, default=0, help="campaign seed (0)")
    ap.add_argument("--timeout", type=float, default=10.0,
                    help="seconds per case before the watchdog records a hang (10)")
    ap.add_argument("--max-rss", type=int, default=1024,
                    help="MiB of the worker's RSS before it records a memory finding")
    ap.add_argument("--corpus", type=Path, default=campaign.CORPUS,
                    help="saved cases replayed first (tests/fuzz/corpus)")
    ap.add_argument("--no-corpus", action="store_true", help="generated cases only")
    ap.add_argument("--duration", type=float, default=None,
                    help="stop generating after this many seconds")
    ap.add_argument("--limit", type=int, default=10**6,
                    help="the largest list, string or nesting a generator draws")
    ap.add_argument("--findings", type=Path, default=Path("/tmp/polsched-fuzz/findings"),
                    help="where each failing generated case is saved")
    ap.add_argument("--minimise", type=Path, default=None, metavar="FILE",
                    help="minimise a saved case ({\"case\": ...}) instead of a campaign; "
                         "writes FILE with .min.json")
    args = ap.parse_args(argv)
    if args.minimise is not None:
        return _minimise(args.minimise, args.timeout, args.max_rss)
    report = campaign.run(args.cases, args.seed, args.timeout,
                          None if args.no_corpus else args.corpus, args.max_rss,
                          args.duration, args.findings, progress=True, limit=args.limit)
    print(report.summary())
    return 1 if report.failures() else 0


def _minimise(path: Path, timeout: float, max_rss: int) -> int:
    case = json.loads(path.read_text(encoding="utf-8"), object_hook=campaign.repeat)["case"]
    with Watchdog(timeout, max_rss) as dog:
        found = [v for v in dog.run(case)["violations"] if not v.startswith("cost")]
        if not found:
            print(f"{path}: no violation to minimise")
            return 1
        small, runs = minimise(case, found, lambda c: list(dog.run(c)["violations"]))
    out = path.with_suffix(".min.json")
    out.write_text(json.dumps({"why": found, "case": small}) + "\n", encoding="utf-8")
    print(f"{out}: {len(json.dumps(case))} -> {len(json.dumps(small))} bytes in {runs} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
