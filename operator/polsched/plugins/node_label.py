"""NodeLabel: polsched's own plugin for rules on node labels.

As a filter, args `{requirements: [NodeSelectorRequirement]}`: a node passes when every
requirement holds (key, operator In NotIn Exists DoesNotExist Gt Lt, values; the
semantics of component-helpers' nodeaffinity). A node that fails is Unschedulable with the
reason "node(s) didn't match NodeLabel requirement <key> <operator>[ <values>]" naming
the first requirement it fails, e.g.
"node(s) didn't match NodeLabel requirement priority.lixueduan.com Exists".

As a scorer, args `{preferred: [{weight: 1..100, requirement: {key, operator, values}}]}`:
the raw score is the sum of the weights of the requirements a node matches (like
NodeAffinity's preferredDuringScheduling terms), normalized by the maximum with
framework.default_normalize.

Requirements are compiled once when the policy loads; Filter and Score are label lookups.
The filter's verdict does not depend on the pod, so it also names the nodes it passes
(NodeSetFilter), computed once per NodeIndex (rebuilt only when a node is added, removed,
or changes its labels, taints or cordon) instead of per pod and node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    FilterPlugin,
    Handle,
    NodeSetFilter,
    ScoreExtensions,
    ScorePlugin,
    default_normalize,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.selectors import Matcher, NodeSet, SelectorError, compile_requirement
from polsched.framework.status import SUCCESS, Status
from polsched.framework.types import NodeIndex, NodeInfo, PodInfo, Snapshot

NAME = "NodeLabel"

MAX_WEIGHT = 100


def describe_requirement(req: Mapping[str, Any]) -> str:
    """A requirement as the reason text shows it: "zone In (a, b)", "gpu Exists",
    "priority Gt 5". Called on a requirement that compiled, so its fields are valid."""
    key, op = req["key"], req["operator"]
    values: Sequence[str] = req.get("values") or ()
    if op in ("In", "NotIn"):
        return f"{key} {op} ({', '.join(values)})"
    if op in ("Gt", "Lt"):
        return f"{key} {op} {values[0]}"
    return f"{key} {op}"


def _compile(req: Any, path: str) -> Matcher:
    try:
        return compile_requirement(req, path)
    except SelectorError as err:
        raise ArgsError(err.path, err.message) from err


def _check_keys(args: Mapping[str, Any], allowed: tuple[str, ...], point: str) -> None:
    if not isinstance(args, Mapping):
        raise ArgsError("", f"must be an object with {' and '.join(allowed)}")
    for k in args:
        if k not in allowed:
            raise ArgsError(str(k), f"unknown field: NodeLabel as a {point} takes "
                                    f"{' and '.join(allowed)}")


class NodeLabelFilter(FilterPlugin, NodeSetFilter):
    NAME = NAME

    def __init__(self, args: Mapping[str, Any]) -> None:
        _check_keys(args, ("requirements",), "filter")
        reqs = args.get("requirements")
        if not isinstance(reqs, list) or not reqs:
            raise ArgsError("requirements", "must be a non-empty list of "
                                            "{key, operator, values} requirements")
        checks: list[tuple[Matcher, Status]] = []
        for i, req in enumerate(reqs):
            matcher = _compile(req, f"requirements[{i}]")
            # One Status per requirement, built now: Filter allocates nothing per node.
            reason = f"node(s) didn't match NodeLabel requirement {describe_requirement(req)}"
            checks.append((matcher, Status.unschedulable(reason)))
        self._checks = tuple(checks)
        # The nodes Filter passes, for the NodeIndex (so the snapshot and its nodes'
        # labels) they were computed on.
        self._passing: tuple[NodeIndex, NodeSet] | None = None

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        labels = node.labels
        for matches, rejection in self._checks:
            if not matches(labels):
                return rejection
        return SUCCESS

    def filter_nodes(self, state: CycleState, pod: PodInfo,
                     snapshot: Snapshot) -> NodeSet | None:
        """Filter's verdict depends on the node's labels alone: the nodes it passes are
        found once per NodeIndex (by Filter itself, so exactly) and shared by every pod."""
        index = snapshot.node_index()
        got = self._passing
        if got is not None and got[0] is index:
            return got[1]
        checks = self._checks
        passing = NodeSet(frozenset(
            n.name for n in snapshot.nodes
            if all(matches(n.labels) for matches, _ in checks)))
        self._passing = (index, passing)
        return passing

    def filter_rejection(self, state: CycleState, pod: PodInfo) -> Status | None:
        """With one requirement every node outside the set fails it; with more, the first
        one a node fails is its reason, so Filter is called for it."""
        return self._checks[0][1] if len(self._checks) == 1 else None


class NodeLabelScorer(ScorePlugin, ScoreExtensions):
    NAME = NAME

    def __init__(self, args: Mapping[str, Any]) -> None:
        _check_keys(args, ("preferred",), "scorer")
        preferred = args.get("preferred")
        if not isinstance(preferred, list) or not preferred:
            raise ArgsError("preferred", "must be a non-empty list of "
                                         "{weight, requirement} entries")
        terms: list[tuple[Matcher, int]] = []
        for i, term in enumerate(preferred):
            path = f"preferred[{i}]"
            if not isinstance(term, Mapping):
                raise ArgsError(path, "must be an object with weight and requirement")
            for k in term:
                if k not in ("weight", "requirement"):
                    raise ArgsError(f"{path}.{k}", "unknown field: a preferred entry takes "
                                                   "weight and requirement")
            weight = term.get("weight")
            if isinstance(weight, bool) or not isinstance(weight, int) \
                    or not 1 <= weight <= MAX_WEIGHT:
                raise ArgsError(f"{path}.weight", f"must be an integer in 1..{MAX_WEIGHT}")
            if "requirement" not in term:
                raise ArgsError(f"{path}.requirement", "is required")
            terms.append((_compile(term["requirement"], f"{path}.requirement"), weight))
        self._terms = tuple(terms)

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        labels = node.labels
        total = 0
        for matches, weight in self._terms:
            if matches(labels):
                total += weight
        return total

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        return default_normalize(scores)


def new_filter(args: Mapping[str, Any], handle: Handle) -> FilterPlugin:
    return NodeLabelFilter(args)


def new_scorer(args: Mapping[str, Any], handle: Handle) -> ScorePlugin:
    return NodeLabelScorer(args)


SPEC = PluginSpec(NAME, filter=new_filter, score=new_scorer)
