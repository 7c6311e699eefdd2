"""The child side: run one case through production code and say what happened.

Run as `python -m tests.fuzz.worker`: it reads one JSON case per line on stdin and writes
one JSON result per line on stdout, so the parent (tests.fuzz.watchdog) pays the imports
once per worker and not once per case. The parent kills the worker when a case overruns
its time or memory; nothing here tries to time itself out (a hang inside one C call that
holds the GIL could not be interrupted from this process anyway).

What a case goes through, each stage as production runs it:
- the CRD's OpenAPI schema (jsonschema Draft 4, as `polsched validate`);
- polsched.api.load_policy with the in-tree catalog (the operator's loader);
- the webhook's validate_policy;
- `polsched validate` (api.validate_files.check_text) on the document as a YAML file;
- for a policy that loads: scheduler.pipelines.build_pipeline, the pods and nodes fed to a
  ClusterCache as watch events, each pod through the PreEnqueue plugins and
  scheduler.algorithm.schedule_pod;
- a DRA selector: polsched.dra.device_cel.compile_selector and Selector.matches.

The result lists `violations` (an invariant broken here: an exception that escaped, a
message unfit for a condition, the CRD and the loader disagreeing); the parent adds the
ones only it can see (hang, memory, time against estimated cost).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import traceback
from typing import Any

import jsonschema
import yaml

from polsched.api import PolicyError, load_policy
from polsched.api.crd import openapi_schema
from polsched.api.validate_files import check_text, pruned_nulls
from polsched.cluster.cache import ClusterCache
from polsched.controller.process.kopf_import import kopf
from polsched.controller.webhook.admission import validate_policy
from polsched.dra import CELError
from polsched.dra.device_cel import DeviceInput, compile_selector
from polsched.framework.diagnosis import PipelineError
from polsched.framework.interfaces import Handle
from polsched.framework.messages import MAX_CONDITION_MESSAGE_CHARS, condition_message
from polsched.framework.types import NodeInfo, PodInfo
from polsched.plugins import CATALOG
from polsched.plugins.expression import Budget, Evaluator, Rate, compile_expression
from polsched.scheduler.algorithm import schedule_pod
from polsched.scheduler.pipelines import build_pipeline
from tests.fuzz import events, extender

Json = dict[str, Any]

# A PolicyError's text becomes the policy's Valid condition and the webhook's answer; the
# API server refuses a metav1.Condition whose message is longer than this.
MAX_POLICY_ERROR_CHARS = 32768
# The top-level fields a FieldError's path may start with.
FIELD_ROOTS = ("spec", "metadata", "apiVersion", "kind")

_SCHEMA = jsonschema.Draft4Validator(openapi_schema())


def _escape(stage: str, err: BaseException) -> str:
    tb = traceback.extract_tb(err.__traceback__)
    where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
    return f"escape:{stage}: {type(err).__name__}{where}: {str(err)[:300]}"


def _names_a_field(err: PolicyError) -> bool:
    return bool(err.errors) and all(
        e.path.split(".", 1)[0].split("[", 1)[0] in FIELD_ROOTS for e in err.errors)


def _schema_accepts(doc: Any) -> bool | None:
    """Whether the CRD's schema admits `doc`; None when jsonschema itself gave up (deep
    nesting past its recursion), which is the fuzzer's problem, not the scheduler's."""
    try:  # nulls pruned first, as the API server does
        return bool(_SCHEMA.is_valid(pruned_nulls(doc, openapi_schema())))
    except RecursionError:
        return None


def _expressions(doc: Json) -> list[str]:
    """The expressions of the policy's Expression entries."""
    spec = doc.get("spec") or {}
    return [str((e.get("args") or {}).get("expression"))
            for key in ("filters", "scorers") for e in spec.get(key) or []
            if isinstance(e, dict) and e.get("name") == "Expression"]


def _measure_cel(case: Json, doc: Json, out: Json,
                 evaluator_type: type[Evaluator] = Evaluator) -> None:
    """Time against cost: each Expression evaluated on every (pod, node) of the case by
    the plugin's own Evaluator (what the scheduling cycle runs, its caches included), with
    a budget and a rate too large to refuse; the CPU seconds it took and the units it
    charged go to the campaign, which flags a case whose seconds per unit are far above
    the run's median (an evaluation the cost model underprices). Only evaluate() is timed:
    what a pod's size costs elsewhere in the cycle is not CEL's.

    The time is this thread's CPU time (time.thread_time), not the wall clock: a worker
    run under `nice` on a loaded machine waits hundreds of milliseconds for a core now and
    then, and a wait that fell inside one 50 us evaluation made `(true) ? 1000 : 0` look
    14,000 times overpriced (seed 4040, case 8635). What the evaluation itself does (the
    CEL core, a conversion, a garbage collection it triggers) is CPU and still counts."""
    pods = [PodInfo.from_json(p) for p in case["pods"]]
    nodes = [NodeInfo.from_json(n) for n in case["nodes"]]
    for source in _expressions(doc):
        evaluator = evaluator_type(compile_expression(source),
                                   Rate(rate=10**15, burst=10**15))
        for pod in pods:
            view = evaluator.pod_view(pod)
            if view.refused:
                continue
            for node in nodes:
                budget = Budget(10**15)
                started = time.thread_time()
                evaluator.evaluate(view, node, budget)
                out["cel_seconds"] += time.thread_time() - started
                out["cel_units"] += 10**15 - budget.left


def _check_message(out: Json, where: str, text: str) -> None:
    written = condition_message(text)
    out["max_message"] = max(out["max_message"], len(text))
    if len(written) > MAX_CONDITION_MESSAGE_CHARS + 3 or not written.isprintable():
        out["violations"].append(f"message:{where}: {len(written)} chars written, "
                                 f"printable={written.isprintable()}")


def _run_policy(case: Json, out: Json) -> None:
    doc = case["policy"]
    schema_ok = _schema_accepts(doc)
    out["schema"] = schema_ok
    policy = None
    try:
        policy = load_policy(doc, CATALOG)
        out["loader"] = True
    except PolicyError as err:
        out["loader"] = False
        text = str(err)
        out["max_message"] = max(out["max_message"], len(text))
        if not _names_a_field(err):
            out["violations"].append(f"unnamed-field: {text[:300]}")
        if len(text) > MAX_POLICY_ERROR_CHARS:
            out["violations"].append(f"message:policy-error: {len(text)} chars")
    except BaseException as err:  # noqa: BLE001 - the invariant: nothing else escapes
        out["violations"].append(_escape("loader", err))
        return
    if out["loader"] and schema_ok is False:
        out["violations"].append("disagree: the loader accepts what the CRD schema refuses")
    try:
        validate_policy(doc)
        webhook = True
    except kopf.AdmissionError as err:
        webhook = False
        if getattr(err, "code", 422) >= 500:
            out["violations"].append(f"webhook-500: {str(err)[:300]}")
    except BaseException as err:  # noqa: BLE001
        out["violations"].append(_escape("webhook", err))
        return
    if webhook != out["loader"]:
        out["violations"].append(f"disagree: webhook {webhook}, loader {out['loader']}")
    _run_validate(doc, schema_ok, out)
    if policy is None or not case.get("nodes"):
        return
    try:
        pipeline = build_pipeline(policy, Handle())
    except BaseException as err:  # noqa: BLE001
        out["violations"].append(_escape("build", err))
        return
    _decide(case, pipeline, out)
    try:
        _measure_cel(case, doc, out)
    except BaseException as err:  # noqa: BLE001 - the Evaluator never raises, it says
        out["violations"].append(_escape("expression", err))


def _run_validate(doc: Any, schema_ok: bool | None, out: Json) -> None:
    """`polsched validate` (api.validate_files.check_text) on the document written as a
    YAML file: nothing escapes, and it finds a problem exactly when the CRD schema or the
    loader does. A document that PyYAML cannot write (nested past its recursion) is
    written as JSON, which is YAML too, and only checked for escapes: JSON's 1e308 would
    read back as a string in YAML 1.1."""
    try:
        text, exact = yaml.safe_dump(doc, allow_unicode=True), True
    except RecursionError:
        text, exact = json.dumps(doc), False
    except yaml.YAMLError:
        return  # not representable (a lone surrogate): the fuzzer's problem
    try:
        report = check_text(text, "fuzz.yaml", CATALOG)
    except BaseException as err:  # noqa: BLE001
        out["violations"].append(_escape("validate", err))
        return
    if not exact or report.policies != 1 or schema_ok is None:
        return
    valid = not report.problems
    if valid != (bool(out["loader"]) and schema_ok):
        out["violations"].append(f"disagree: polsched validate {valid}, schema {schema_ok}, "
                                 f"loader {out['loader']}: "
                                 f"{'; '.join(str(p) for p in report.problems)[:300]}")


def _decide(case: Json, pipeline: Any, out: Json) -> None:
    cache = ClusterCache(None)
    try:
        for n in case["nodes"]:
            cache.on_node_event("ADDED", n)
        for p in case["pods"]:
            cache.on_pod_event("ADDED", p)
    except BaseException as err:  # noqa: BLE001
        out["violations"].append(_escape("cache", err))
        return
    started = time.perf_counter()
    for p in case["pods"]:
        key = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        info = cache.pods.get(key)
        if info is None:
            continue
        try:
            refused = [st for st in (pl.pre_enqueue(info) for pl in pipeline.pre_enqueue_plugins)
                       if not st.ok]
            if refused:
                _check_message(out, "pre-enqueue", refused[0].message)
                continue
            result = asyncio.run(schedule_pod(pipeline, info, cache.snapshot))
        except PipelineError as err:  # the documented outcome of a failing plugin
            _check_message(out, "pipeline-error", str(err))
            continue
        except BaseException as err:  # noqa: BLE001
            out["violations"].append(_escape("schedule", err))
            return
        out["decisions"] += 1
        if result.node is None and result.fit_error is not None:
            _check_message(out, "fit-error", result.fit_error.message)
    out["sched_seconds"] = time.perf_counter() - started
    out["evaluations"] = out["decisions"] * len(case["nodes"])


def _run_selector(case: Json, out: Json) -> None:
    started = time.perf_counter()
    try:
        sel = compile_selector(case["selector"])
    except CELError as err:
        _check_message(out, "selector", str(err))
        return
    except BaseException as err:  # noqa: BLE001
        out["violations"].append(_escape("selector-compile", err))
        return
    for d in case["devices"]:
        try:
            sel.matches(DeviceInput(d["driver"], d["attributes"], d["capacity"]))
        except CELError as err:
            _check_message(out, "selector", str(err))
        except BaseException as err:  # noqa: BLE001
            out["violations"].append(_escape("selector-match", err))
        out["evaluations"] += 1
    out["sched_seconds"] = time.perf_counter() - started


def _rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def run_case(case: Json) -> Json:
    out: Json = {"violations": [], "max_message": 0, "decisions": 0, "evaluations": 0,
                 "cel_seconds": 0.0, "cel_units": 0, "sched_seconds": 0.0}
    started = time.perf_counter()
    if "policy" in case and case.get("kind") != "extender":
        _run_policy(case, out)
    if "selector" in case:
        _run_selector(case, out)
    if case.get("kind") == "extender":
        try:
            extender.run(case, out)
        except BaseException as err:  # noqa: BLE001 - the invariant: nothing else escapes
            out["violations"].append(_escape("extender", err))
    if case.get("kind") == "events":
        events.run(case, out)
    out["seconds"] = time.perf_counter() - started
    out["rss_kb"] = _rss_kb()
    return out


def main() -> None:
    # The answers go on a copy of stdout; fd 1 itself goes to stderr, so that what a
    # library prints (the CEL core prints failed Python functions) cannot corrupt them.
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    for line in sys.stdin:
        result = run_case(json.loads(line))
        answers.write(json.dumps(result) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
