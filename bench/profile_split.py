#!/usr/bin/env python3
"""Where a live polsched process spends its time, from a py-spy raw (collapsed) profile.

  .venv/bin/py-spy record --pid PID --rate 250 --duration 8 --format raw -o live.raw
  .venv/bin/python bench/profile_split.py live.raw [TOP]

Each sample goes to the first category whose marker is in its stack (so a decision that
runs inside the engine's loop counts as decision, not engine); then the TOP leaf frames.
bench/NOTES.md has a run's output.
"""

from __future__ import annotations

import collections
import sys

CATEGORIES: tuple[tuple[str, str], ...] = (
    ("decision: schedule_pod", "(polsched/scheduler/algorithm.py"),
    ("startup: imports", "_find_and_load"),
    ("startup: TLS handshakes", "do_handshake"),
    ("bind: POST pods/binding", "polsched/scheduler/binder.py"),
    ("events: POST Scheduled events", "polsched/scheduler/recorder.py"),
    ("cache: initial list", "_relist (polsched"),
    ("cache: watch (read, json.loads, PodInfo, cache)", "_watch (polsched"),
    ("engine: queue, assume, bind callbacks", "polsched/scheduler/"),
)
OTHER = "other: event loop, aiohttp request/response plumbing"


def main() -> int:
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    total = 0
    by_category: collections.Counter[str] = collections.Counter()
    by_leaf: collections.Counter[str] = collections.Counter()
    with open(path) as f:
        for line in f:
            line = line.rstrip()
            if not line:
                continue
            stack, count = line.rsplit(" ", 1)
            n = int(count)
            total += n
            name = next((c for c, marker in CATEGORIES if marker in stack), OTHER)
            by_category[name] += n
            by_leaf[stack.split(";")[-1]] += n
    print(f"samples {total}")
    for name, n in by_category.most_common():
        print(f"{100 * n / total:5.1f}%  {name}")
    print("-- top leaf frames")
    for leaf, n in by_leaf.most_common(top):
        print(f"{100 * n / total:5.1f}%  {leaf[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
