"""A fuzz campaign: the saved corpus, then generated cases, each through the watchdog; the
invariants only a whole run can judge (time against estimated cost); a summary.

Time against cost: the CEL cost model (cel/cost.py) exists so that an expression's price
is known before it runs. The worker times the Expression plugin's evaluations (CPU time,
so a worker waiting for a core is not flagged) and sums
the units they were charged; a case whose seconds per charged unit are far above the
run's median is one the model underprices (finding 1 of issue 36: `matches('\\w{200}')`
was charged a few hundred units and took 110 ms per evaluation compiling its pattern).
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fuzz import generators
from tests.fuzz.minimise import minimise
from tests.fuzz.watchdog import Watchdog

Json = dict[str, Any]

CORPUS = Path(__file__).resolve().parent / "corpus"
# Flagged: seconds per charged cost unit this many times the run's median, and the case
# slow enough for it to matter (tiny times are noise on a shared machine).
COST_RATIO = 100.0
COST_MIN_SECONDS = 0.25


@dataclass
class Outcome:
    name: str
    case: Json
    result: Json
    xfail: str = ""

    @property
    def violations(self) -> list[str]:
        found: list[str] = self.result.get("violations", [])
        return found


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0
    # The corpus's open findings: a generated case whose every violation starts with one
    # of these is that finding met again, counted apart and not as a failure.
    known: tuple[str, ...] = ()

    def _known(self, o: Outcome) -> bool:
        return bool(self.known) and all(v.startswith(self.known) for v in o.violations)

    def failures(self) -> list[Outcome]:
        """The outcomes with a violation that is not an expected (xfail) one."""
        return [o for o in self.outcomes if o.violations and not o.xfail and not self._known(o)]

    def known_again(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.violations and not o.xfail and self._known(o)]

    def xpassed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.xfail and not o.violations]

    def summary(self) -> str:
        kinds = Counter(o.case.get("kind", "?") for o in self.outcomes)
        classes = Counter(v.split(":", 1)[0] for o in self.failures() for v in o.violations)
        loaded = sum(1 for o in self.outcomes if o.result.get("loader"))
        decisions = sum(int(o.result.get("decisions", 0)) for o in self.outcomes)
        lines = [f"{len(self.outcomes)} cases in {self.seconds:.0f} s "
                 f"({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}); "
                 f"{loaded} policies loaded, {decisions} pods decided",
                 f"{len(self.failures())} cases with invariant violations"
                 + (f" ({', '.join(f'{k} {n}' for k, n in classes.most_common())})"
                    if classes else ""),
                 f"{sum(1 for o in self.outcomes if o.xfail)} known (xfail) corpus cases, "
                 f"{len(self.xpassed())} of them passed; {len(self.known_again())} generated "
                 "cases met a known finding again"]
        for o in self.failures()[:20]:
            lines.append(f"  {o.name}: {'; '.join(o.violations)[:400]}")
        return "\n".join(lines)


def repeat(obj: Json) -> Any:
    """A json object hook: {"$repeat": n, "item": x} is n copies of x, so that a saved
    case with thousands of equal terms stays a small file."""
    if set(obj) == {"$repeat", "item"}:
        return [obj["item"]] * int(obj["$repeat"])
    return obj


def _corpus(directory: Path) -> Iterator[Json]:
    for path in sorted(directory.glob("*.json")):
        doc: Json = json.loads(path.read_text(encoding="utf-8"), object_hook=repeat)
        doc["name"] = path.stem
        yield doc


def corpus_cases(directory: Path = CORPUS) -> Iterator[tuple[str, Json, str]]:
    """(name, case, xfail reason or "") of each saved case."""
    for doc in _corpus(directory):
        yield doc["name"], doc["case"], str(doc.get("xfail", ""))


def known_signatures(directory: Path = CORPUS) -> tuple[str, ...]:
    """The violations (their beginnings) of the corpus's open findings ("signature")."""
    return tuple(str(doc["signature"]) for doc in _corpus(directory)
                 if doc.get("xfail") and doc.get("signature"))


def flag_cost_outliers(outcomes: list[Outcome]) -> None:
    """Add a `cost` violation to each outcome whose CEL seconds per charged cost unit
    (worker._measure_cel) are COST_RATIO times the median of the run's cases that
    evaluated an expression."""
    rates = {id(o): o.result["cel_seconds"] / o.result["cel_units"]
             for o in outcomes if o.result.get("cel_units")}
    if len(rates) < 5:
        return
    median = statistics.median(rates.values())
    for o in outcomes:
        rate = rates.get(id(o))
        if rate is not None and rate > COST_RATIO * median \
                and o.result["cel_seconds"] > COST_MIN_SECONDS:
            o.violations.append(f"cost: {rate:.2e} s per charged cost unit, "
                                f"{rate / median:.0f}x the median")


def run(cases: int, seed: int, timeout: float = 10.0, corpus: Path | None = CORPUS,
        max_rss_mib: int = 1024, duration: float | None = None,
        findings: Path | None = None, progress: bool = False,
        limit: int = 10**6) -> Report:
    """The corpus (when given), then `cases` generated cases of campaign `seed`; stops
    early after `duration` seconds. Each failing generated case is saved to `findings`.
    `limit` caps the generators' sizes (generators.generate)."""
    report = Report(known=known_signatures(corpus) if corpus is not None else ())
    started = time.monotonic()
    with Watchdog(timeout, max_rss_mib) as dog:
        if corpus is not None:
            for name, case, xfail in corpus_cases(corpus):
                report.outcomes.append(Outcome(f"corpus/{name}", case, dog.run(case), xfail))
        for i in range(cases):
            if duration is not None and time.monotonic() - started > duration:
                break
            case = generators.generate(seed, i, limit)
            outcome = Outcome(f"seed {seed} case {i}", case, dog.run(case))
            if not outcome.violations:  # a long run keeps only what it must report
                outcome.case = {k: case[k] for k in ("kind", "seed", "index", "limit")}
            report.outcomes.append(outcome)
            if progress and i % 250 == 0:
                print(f"[fuzz] {i} cases, {len(report.failures())} failing, "
                      f"{time.monotonic() - started:.0f} s", flush=True)
    flag_cost_outliers(report.outcomes)
    report.seconds = time.monotonic() - started
    if findings is not None:
        save_findings(report, seed, limit, findings, timeout, max_rss_mib)
    return report


def save_findings(report: Report, seed: int, limit: int, findings: Path,
                  timeout: float, max_rss_mib: int) -> None:
    """Each failing generated case, whole, and minimised beside it (`.min.json`, the
    form the corpus keeps) when its violations can be judged from one run (not `cost`,
    which is relative to the run)."""
    findings.mkdir(parents=True, exist_ok=True)
    failing = [o for o in report.failures() if not o.name.startswith("corpus/")]
    if not failing:
        return
    with Watchdog(timeout, max_rss_mib) as dog:
        for o in failing:
            # regenerated: a case found slow only at the end was not kept whole
            case = generators.generate(seed, o.case["index"], limit)
            stem = findings / f"seed{seed}-case{o.case['index']}"
            stem.with_suffix(".json").write_text(
                json.dumps({"why": o.violations, "case": case}), encoding="utf-8")
            judged = [v for v in o.violations if not v.startswith("cost")]
            if not judged:
                continue
            small, runs = minimise(case, judged, lambda c: list(dog.run(c)["violations"]))
            stem.with_suffix(".min.json").write_text(json.dumps(
                {"why": judged, "minimised_in_runs": runs, "case": small}), encoding="utf-8")
