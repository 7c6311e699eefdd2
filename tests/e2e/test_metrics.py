"""The operator's /metrics, /healthz and /readyz on a real API server: the attempts a
Prometheus scrape counts are the binds and failures that happened, under kube-scheduler's
metric names, and a policy's reloads are counted by result."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

from tests.conftest import NodeFactory, unique
from tests.e2e.operators import Harness, free_port, pod_manifest, wait_for, zone_policy


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()
    except OSError:
        return 0, ""


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the series `name` whose labels include `labels`."""
    for line in text.splitlines():
        m = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        if m is None or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


def test_metrics_count_the_binds_and_failures_that_happened(
        harness: Harness, namespace: str, nodes: NodeFactory) -> None:
    h = harness
    rid = unique("metrics")
    for i in range(2):
        nodes(f"{rid}-a{i}", labels={"zone": "a"})
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    h.operator(f"{rid}-op", "--metrics-listen", f"127.0.0.1:{port}")
    # /healthz answers while the process runs; /readyz once the cache has synced.
    wait_for(lambda: get(f"{base}/healthz") == (200, "ok"), 15, "/healthz ok")
    wait_for(lambda: get(f"{base}/readyz") == (200, "ok"), 15, "/readyz ok")

    name = h.apply_policy(zone_policy(rid, "a"))
    h.wait_ready(name, 8)
    h.create_pods(namespace, ["p0", "p1", "p2"], rid)
    huge = pod_manifest("huge", rid)
    huge["metadata"]["namespace"] = namespace
    huge["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1000"
    h.cluster.apply(huge)
    wait_for(lambda: len(h.bound(namespace)) == 3, 15, "3 pods bound")

    def scraped() -> str | None:
        code, text = get(f"{base}/metrics")
        done = code == 200 and sample(text, "scheduler_schedule_attempts_total",
                                      profile=rid, result="scheduled") == 3 \
            and sample(text, "scheduler_schedule_attempts_total", profile=rid,
                       result="unschedulable") is not None
        return text if done else None

    # The bind callback can come after the watch showed the pod bound: wait for it.
    text = wait_for(scraped, 10, "3 scheduled attempts and an unschedulable one in /metrics")
    print("\n".join(line for line in text.splitlines()
                    if not line.startswith("#") and "_bucket" not in line))
    assert sample(text, "scheduler_schedule_attempts_total", profile=rid, result="error") \
        is None
    assert sample(text, "scheduler_scheduling_attempt_duration_seconds_count", profile=rid,
                  result="scheduled") == 3
    assert sample(text, "scheduler_scheduling_attempt_duration_seconds_bucket", profile=rid,
                  result="scheduled", le="+Inf") == 3
    # This process schedules only our policy: the huge pod is the one unschedulable pod
    # (between attempts it waits in unschedulable or, after a cluster event, in backoff).
    waiting = sum(sample(text, "scheduler_pending_pods", queue=q) or 0
                  for q in ("active", "backoff", "unschedulable"))
    assert waiting == 1
    assert sample(text, "polsched_policy_reloads_total", policy=name, result="success") == 1
    assert sample(text, "polsched_policy_reload_duration_seconds_count", policy=name) == 1

    # An edit that does not load counts as a failed reload; the old pipeline keeps running.
    bad = zone_policy(rid, "a")
    bad["spec"]["filters"].append(
        {"name": "Expression", "args": {"expression": "node.metadata.name =="}})
    h.cluster.apply(bad)
    wait_for(lambda: sample(get(f"{base}/metrics")[1], "polsched_policy_reloads_total",
                            policy=name, result="error") == 1, 10, "a failed reload counted")

    # An address given explicitly must be served: a second operator on the same port exits.
    second = h.operator(f"{rid}-op2", "--metrics-listen", f"127.0.0.1:{port}")
    assert second.proc is not None
    assert second.proc.wait(30) != 0
    assert f"--metrics-listen 127.0.0.1:{port}" in second.log()


def test_metrics_listen_empty_disables_the_endpoints(harness: Harness) -> None:
    p = harness.operator(unique("nometrics"), "--metrics-listen", "", "-v")
    wait_for(lambda: "polsched operator" in p.log() and "started" in p.log(), 15,
             "the operator started")
    assert p.alive()
    assert "serving /metrics" not in p.log()
    assert "not serving metrics" not in p.log()  # disabled, not given up


def test_first_decision_names_the_generation_that_made_it(
        harness: Harness, namespace: str, nodes: NodeFactory) -> None:
    """The reload signal (polsched_policy_first_decision_*, and its log line) moves to a
    new generation only when that generation decides a pod, not when it is loaded."""
    h = harness
    rid = unique("firstdec")
    nodes(f"{rid}-a0", labels={"zone": "a"})
    nodes(f"{rid}-b0", labels={"zone": "b"})
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    op = h.operator(f"{rid}-op", "--metrics-listen", f"127.0.0.1:{port}")
    name = h.apply_policy(zone_policy(rid, "a"))
    h.wait_ready(name, 30)
    h.create_pod(namespace, "p0", rid)
    wait_for(lambda: h.bound(namespace).get("p0"), 30, "p0 bound")

    def signal() -> tuple[float | None, float | None]:
        text = get(f"{base}/metrics")[1]
        return (sample(text, "polsched_policy_first_decision_generation", policy=name),
                sample(text, "polsched_policy_first_decision_timestamp_seconds", policy=name))

    gen1 = int(h.policy(name)["metadata"]["generation"])
    first, t1 = wait_for(lambda: signal() if signal()[0] == gen1 else None, 10,
                         f"generation {gen1} named by the first-decision gauge")
    assert t1 is not None and t1 > 0
    assert f"SchedulingPolicy {name} generation {gen1} decided its first pod " \
           f"{namespace}/p0 (node {rid}-a0)" in op.log()

    # The edit loads and runs (observedGeneration), but no pod is decided yet: the
    # signal still names the old generation.
    h.cluster.apply(zone_policy(rid, "b"))
    gen2 = int(h.policy(name)["metadata"]["generation"])
    assert gen2 > gen1
    wait_for(lambda: h.status(name).get("observedGeneration") == gen2, 30,
             f"observedGeneration {gen2}")
    assert signal() == (first, t1)

    # The next pod is decided by the new generation (zone b), and the signal says so.
    h.create_pod(namespace, "p1", rid)
    wait_for(lambda: h.bound(namespace).get("p1") == f"{rid}-b0", 30, "p1 bound in zone b")
    gen, t2 = wait_for(lambda: signal() if signal()[0] == gen2 else None, 10,
                       f"generation {gen2} named by the first-decision gauge")
    assert t2 is not None and t2 >= t1
    # p1 was created after the swap (observedGeneration is written after it): the wait
    # from the swap to that decision began with no pod to decide, and says so.
    text = get(f"{base}/metrics")[1]
    wait = sample(text, "polsched_policy_first_decision_wait_seconds", policy=name)
    idle = sample(text, "polsched_policy_first_decision_idle_seconds", policy=name)
    assert wait is not None and idle is not None
    assert 0 < idle <= wait
    assert f"SchedulingPolicy {name} generation {gen2} decided its first pod " \
           f"{namespace}/p1 (node {rid}-b0)" in op.log()
    # One line per generation: p0's generation named only p0.
    assert op.log().count(f"SchedulingPolicy {name} generation {gen1} decided") == 1


def test_run_applies_the_gc_policy(harness: Harness) -> None:
    """`polsched run` sets the collector's thresholds at start, collects nothing until the
    cache has synced, then freezes the heap and collects again, and exports each
    collection's pause (controller/process/gcpolicy.py)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    harness.operator(unique("gc-op"), "--metrics-listen", f"127.0.0.1:{port}")
    wait_for(lambda: get(f"{base}/readyz") == (200, "ok"), 15, "/readyz ok")

    def frozen() -> str | None:
        text = get(f"{base}/metrics")[1]
        return text if (sample(text, "polsched_gc_frozen_objects") or 0) > 0 else None

    text = wait_for(frozen, 10, "the heap frozen after the sync")
    assert [sample(text, "polsched_gc_threshold", generation=str(g)) for g in range(3)] \
        == [700, 10, 100]
    # None before the freeze (tests/unit/controller/test_gcpolicy.py); after it, the
    # collector runs again: a policy loaded and reported makes young passes.
    name = unique("gc-pol")
    harness.apply_policy(zone_policy(name, "z"))
    harness.wait_ready(name)

    def collected() -> str | None:
        text = get(f"{base}/metrics")[1]
        return text if (sample(text, "polsched_gc_pause_seconds_count", generation="0")
                        or 0) > 0 else None

    wait_for(collected, 15, "young collections after the freeze")
