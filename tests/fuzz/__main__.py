"""`python -m tests.fuzz`: a fuzz campaign (what `make fuzz` runs); exit 1 on any
invariant violation outside the corpus's known (xfail) cases."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.fuzz import campaign


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
    args = ap.parse_args(argv)
    report = campaign.run(args.cases, args.seed, args.timeout,
                          None if args.no_corpus else args.corpus, args.max_rss,
                          args.duration, args.findings, progress=True, limit=args.limit)
    print(report.summary())
    return 1 if report.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
