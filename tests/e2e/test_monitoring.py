"""The shipped dashboard and alerts ask only for what polsched exports: a running operator
(production wiring, as an install runs it) is scraped, and every query of
manifests/monitoring/dashboard.json and prometheusrule.yaml is parsed with a PromQL parser;
each metric it selects must be in the scrape, and each label it matches on or groups by
must be on that metric's series. A panel on a misspelt metric or label would stay blank
and an alert on one would never fire: both fail here."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import yaml

from polsched.scheduler import metrics
from tests.conftest import NodeFactory, unique
from tests.e2e.operators import Harness, free_port, pod_manifest, wait_for, zone_policy

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "manifests" / "monitoring"
# Labels Prometheus puts on every series of a target (scrape config, ServiceMonitor,
# PodMonitor): not the exporter's to provide.
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "service", "container",
                           "endpoint"})
# Series Prometheus makes itself.
SYNTHETIC = frozenset({"up"})


def scrape(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())
    except (urllib.error.URLError, OSError):
        return ""


class Scrape:
    """A text exposition: each family's type and the label names of its series."""

    def __init__(self, text: str) -> None:
        self.types: dict[str, str] = {}
        self.labels: dict[str, set[str]] = {}
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                self.types[name] = kind
                continue
            m = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? \S+", line)
            if m:
                self.labels.setdefault(m.group(1), set()).update(
                    re.findall(r'(\w+)="(?:[^"\\]|\\.)*"', m.group(2) or ""))

    def family(self, series: str) -> str | None:
        """The family a series name belongs to (a histogram's _bucket, _sum, _count)."""
        if series in self.types:
            return series
        for suffix in ("_bucket", "_sum", "_count"):
            base = series.removesuffix(suffix)
            if base != series and self.types.get(base) == "histogram":
                return base
        return None

    def has_series(self, series: str) -> bool:
        return series in self.labels


def selectors(expr: Any) -> Iterator[Any]:
    """Every VectorSelector under `expr`."""
    if isinstance(expr, promql_parser.VectorSelector):
        yield expr
    elif isinstance(expr, promql_parser.MatrixSelector):
        yield expr.vector_selector
    elif isinstance(expr, promql_parser.BinaryExpr):
        yield from selectors(expr.lhs)
        yield from selectors(expr.rhs)
    elif isinstance(expr, promql_parser.Call):
        for arg in expr.args:
            yield from selectors(arg)
    elif isinstance(expr, promql_parser.AggregateExpr | promql_parser.ParenExpr |
                    promql_parser.UnaryExpr | promql_parser.SubqueryExpr):
        yield from selectors(expr.expr)


def groupings(expr: Any) -> Iterator[tuple[list[str], Any]]:
    """(labels, the aggregated expression) of every `by (...)` and `on (...)`."""
    if isinstance(expr, promql_parser.AggregateExpr):
        if expr.modifier is not None and str(expr.modifier.type).endswith("By"):
            yield list(expr.modifier.labels), expr.expr
        yield from groupings(expr.expr)
    elif isinstance(expr, promql_parser.BinaryExpr):
        yield from groupings(expr.lhs)
        yield from groupings(expr.rhs)
    elif isinstance(expr, promql_parser.Call):
        for arg in expr.args:
            yield from groupings(arg)
    elif isinstance(expr, promql_parser.ParenExpr | promql_parser.UnaryExpr |
                    promql_parser.SubqueryExpr):
        yield from groupings(expr.expr)


def grafana_to_promql(query: str) -> str:
    """Grafana's variables replaced by values a parser accepts."""
    return query.replace("$__rate_interval", "5m").replace("$job", ".+") \
        .replace("$profile", ".*")


def shipped_queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every dashboard panel target and every rule."""
    out: list[tuple[str, str]] = []
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            out.append((f"dashboard panel {panel['title']!r}",
                        grafana_to_promql(target["expr"])))
    for var in dashboard["templating"]["list"]:
        q = var.get("definition", "")
        m = re.fullmatch(r"label_values\((.*), (\w+)\)", q)
        if m:  # label_values(SELECTOR, LABEL): the selector must carry the label
            out.append((f"dashboard variable {var['name']}",
                        f"count by ({m.group(2)}) ({grafana_to_promql(m.group(1))})"))
    rules = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    for group in rules["spec"]["groups"]:
        for rule in group["rules"]:
            out.append((f"alert {rule['alert']}", rule["expr"]))
    return out


def declared_labels(family: str) -> set[str]:
    return next((set(m.labels) for m in metrics.ALL if m.name == family), set())


def missing(scrape: Scrape, where: str, query: str) -> list[str]:
    """What `query` asks for that the scrape lacks."""
    problems = []
    expr = promql_parser.parse(query)
    for sel in selectors(expr):
        if sel.name in SYNTHETIC:
            continue
        family = scrape.family(sel.name)
        if family is None:
            problems.append(f"{where}: {sel.name} is not exported")
            continue
        have = scrape.labels.get(sel.name) or declared_labels(family)
        for matcher in sel.matchers.matchers:
            if matcher.name not in TARGET_LABELS | {"__name__"} | have:
                problems.append(f"{where}: {sel.name} has no label {matcher.name}")
    for labels, inner in groupings(expr):
        have = set(TARGET_LABELS)
        for sel in selectors(inner):
            family = scrape.family(sel.name) or ""
            have |= scrape.labels.get(sel.name) or declared_labels(family)
            if sel.name.endswith("_bucket"):
                have.add("le")
        for label in labels:
            if label not in have:
                problems.append(f"{where}: grouped by {label}, which no series it "
                                "aggregates has")
    return problems


def test_every_dashboard_and_alert_query_finds_its_metrics_and_labels(
        harness: Harness, namespace: str, nodes: NodeFactory) -> None:
    h = harness
    rid = unique("monitoring")
    for i in range(2):
        nodes(f"{rid}-a{i}", labels={"zone": "a"})
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    h.operator(f"{rid}-op", "--metrics-listen", f"127.0.0.1:{port}",
               "--webhook-listen", f"127.0.0.1:{free_port()}")
    name = h.apply_policy(zone_policy(rid, "a"))
    h.wait_ready(name, 30)
    h.create_pods(namespace, ["p0", "p1"], rid)
    huge = pod_manifest("huge", rid)
    huge["metadata"]["namespace"] = namespace
    huge["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1000"
    h.cluster.apply(huge)
    wait_for(lambda: len(h.bound(namespace)) == 2, 30, "2 pods bound")

    def settled() -> Scrape | None:
        s = Scrape(scrape(f"{base}/metrics"))
        wanted = ("scheduler_unschedulable_pods", "polsched_policy_condition",
                  "leader_election_master_status", "polsched_pending_pods",
                  "scheduler_pod_scheduling_sli_duration_seconds_bucket",
                  "polsched_webhook_certificate_expiration_timestamp_seconds",
                  "rest_client_requests_total", "process_resident_memory_bytes",
                  "polsched_build_info")
        return s if all(s.has_series(w) for w in wanted) else None

    scraped = wait_for(settled, 30, "the operator's series after binds and a rejection")
    problems = [p for where, q in shipped_queries() for p in missing(scraped, where, q)]
    assert problems == []
    # The policy's pods are counted where the dashboard looks for them: per profile (the
    # schedulerName) and per rejecting plugin.
    text = scrape(f"{base}/metrics")
    assert re.search(rf'scheduler_unschedulable_pods\{{plugin="[^"]+",profile="{rid}"\}} 1',
                     text), text
    assert re.search(rf'polsched_policy_condition\{{policy="{name}",status="True",'
                     r'type="Valid"\} 1', text)
    assert re.search(r'leader_election_master_status\{name="[^"]+"\} 1', text)


def test_the_checker_fails_on_a_metric_or_label_the_scrape_lacks() -> None:
    """The check above is only worth something if it can fail."""
    s = Scrape('# TYPE scheduler_pending_pods gauge\nscheduler_pending_pods{queue="active"} 1\n')
    assert missing(s, "q", 'sum by (queue) (scheduler_pending_pods{job="x"})') == []
    assert missing(s, "q", "scheduler_pending_podz") == ["q: scheduler_pending_podz is not "
                                                         "exported"]
    assert missing(s, "q", 'scheduler_pending_pods{profile="p"}') == [
        "q: scheduler_pending_pods has no label profile"]
    assert missing(s, "q", "sum by (plugin) (scheduler_pending_pods)") == [
        "q: grouped by plugin, which no series it aggregates has"]
