"""NodeResourcesBalancedAllocation: prefer nodes whose resource usage stays balanced across
resources (cpu vs memory by default) once the pod is placed.

Copies kube-scheduler v1.37's balanced_allocation.go (pkg/scheduler/framework/plugins/
noderesources): the balance is 1 - the standard deviation of the requested/allocatable
fractions (each capped at 1), scored by how the pod changes it:
MaxNodeScore/2 + (MaxNodeScore/2 + balanceWithPod - balanceWithoutPod) / 2. It counts plain
requests (not the non-zero defaults), and PreScore skips a pod that requests none of the
resources. Args: resources (names, weight must be 1; default cpu, memory).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

from polsched.framework import device_classes as dc
from polsched.framework import resources as res
from polsched.framework import signers
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    MAX_NODE_SCORE,
    Handle,
    PreScorePlugin,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from polsched.framework.listers import Listers
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.plugins.node_memo import SyncedValues
from polsched.plugins.node_resources_fit import (
    DEFAULT_RESOURCES,
    DeviceTotalsFn,
    ResourceVectors,
    device_totals,
    div_trunc,
    parse_resources,
)

NAME = "NodeResourcesBalancedAllocation"
_DEVICE_TOTALS_KEY = "PreScore" + NAME + "/DeviceTotals"

DEFAULT_ARGS: Mapping[str, Any] = {
    "resources": [{"name": n, "weight": w} for n, w in DEFAULT_RESOURCES],
}

_PRE_SCORE_KEY = "PreScore" + NAME
_SCORES_KEY = "PreScoreTable" + NAME
_node_name = attrgetter("name")
_HALF = MAX_NODE_SCORE // 2


def balanced_resource_score(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """balancedResourceScore: (1 - std of the utilization fractions) * MaxNodeScore."""
    fractions: list[float] = []
    total = 0.0
    for i, cap in enumerate(allocatable):
        if cap == 0:
            continue
        fraction = min(requested[i] / cap, 1.0)
        total += fraction
        fractions.append(fraction)
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = total / len(fractions)
        acc = 0.0
        for f in fractions:
            acc = acc + (f - mean) * (f - mean)
        std = math.sqrt(acc / len(fractions))
    return int((1 - std) * MAX_NODE_SCORE)


def balanced_score(requested: Sequence[int], allocated: Sequence[int],
                   allocatable: Sequence[int]) -> int:
    """balancedResourceScorer: how placing the pod changes the balance, centred on 50."""
    with_pod = balanced_resource_score(requested, allocatable)
    without_pod = balanced_resource_score(allocated, allocatable)
    return _HALF + div_trunc(_HALF + with_pod - without_pod, 2)


class NodeResourcesBalancedAllocation(SignPlugin, PreScorePlugin, ScorePlugin):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        # As NodeResourcesFit's: not signable with an extended resource a DeviceClass serves.
        if self.listers is not None and signers.requests_dra_extended_resource(
                pod, dc.resolver_for(self.listers)):
            return None
        return [(signers.RESOURCES, signers.resources(pod))]

    def __init__(self, resources: Sequence[str], listers: Listers | None = None) -> None:
        self.vectors = ResourceVectors(resources, use_requested=True)
        # DRAExtendedResource: a resource a DeviceClass serves counts the node's devices.
        self.listers = listers
        # The default resources get an unrolled score_nodes (see _score_cpu_memory).
        self._cpu_memory = tuple(resources) == (res.CPU, res.MEMORY)
        # A node's score depends only on the pod's requests and the node's allocatable and
        # requested, which change only with its generation: alike pods reuse the scores of
        # every node but the ones that changed since (typically the last pod's node).
        # The tables are brought up to date once per cycle, in PreScore (SyncedValues).
        self._memo: SyncedValues[int] = SyncedValues()
        # node name -> (node, generation, cpu and memory allocatable and requested, the
        # balance score without the pod): see _score_cpu_memory_once.
        self._rows: dict[str, tuple[NodeInfo, int, int, int, int, int, int]] = {}

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        requests = self.vectors.pod_requests(pod)
        if not any(requests):  # a best-effort pod changes no node's balance
            return SKIP
        state.write(_PRE_SCORE_KEY, requests)
        if self._cpu_memory:
            state.write(_SCORES_KEY, self._memo.table_if_repeated(requests, snapshot))
        else:
            state.write(_DEVICE_TOTALS_KEY, device_totals(self.listers, self.vectors.names))
        return SUCCESS

    def _requests(self, state: CycleState, pod: PodInfo) -> tuple[int, ...]:
        requests: tuple[int, ...] | None = state.get(_PRE_SCORE_KEY)
        return requests if requests is not None else self.vectors.pod_requests(pod)

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        requests = self._requests(state, pod)
        if not any(requests):
            return 0
        return balanced_score(*self.vectors.node(node, requests,
                                                 state.get(_DEVICE_TOTALS_KEY)))

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: Sequence[NodeInfo]) -> list[int]:
        requests = self._requests(state, pod)
        if not any(requests):
            return [0] * len(nodes)
        if self._cpu_memory:
            return self._score_cpu_memory(requests, nodes, state.get(_SCORES_KEY))
        vectors = self.vectors.node
        devices: DeviceTotalsFn | None = state.get(_DEVICE_TOTALS_KEY)
        return [balanced_score(*vectors(n, requests, devices)) for n in nodes]

    def _score_cpu_memory(self, requests: Sequence[int], nodes: Sequence[NodeInfo],
                          memo: dict[str, int] | None) -> list[int]:
        """score_nodes over cpu and memory (the default), unrolled: the float math of
        balanced_resource_score with two fractions, and balanced_score's Go division,
        without three lists and four calls per node (this runs pod x node). `memo`: a
        repeated request's scores, current for the cycle's snapshot (pre_score): read for
        every node at once, computed only for the nodes missing from it."""
        if memo is None:  # a signature seen once: nothing to read, nothing worth writing
            return self._score_cpu_memory_once(requests, nodes)
        out: list[int | None] = list(map(memo.get, map(_node_name, nodes)))
        if None in out:
            for i, hit in enumerate(out):
                if hit is None:
                    node = nodes[i]
                    out[i] = memo[node.name] = self._score_cpu_memory_node(requests, node)
        return out  # type: ignore[return-value]  # no None left

    def _score_cpu_memory_node(self, requests: Sequence[int], node: NodeInfo) -> int:
        pod_cpu, pod_mem = requests
        alloc = node.allocatable
        cap_cpu = alloc.get(res.CPU, 0)
        cap_mem = alloc.get(res.MEMORY, 0)
        if not (cap_cpu and cap_mem):  # fewer than two fractions: the general form
            return balanced_score(*self.vectors.node(node, requests))
        used = node.requested
        used_cpu = used.get(res.CPU, 0)
        used_mem = used.get(res.MEMORY, 0)
        f_cpu = (used_cpu + pod_cpu) / cap_cpu
        f_mem = (used_mem + pod_mem) / cap_mem
        f_cpu = f_cpu if f_cpu < 1.0 else 1.0
        f_mem = f_mem if f_mem < 1.0 else 1.0
        with_pod = int((1 - abs((f_cpu - f_mem) / 2)) * MAX_NODE_SCORE)
        f_cpu = used_cpu / cap_cpu
        f_mem = used_mem / cap_mem
        f_cpu = f_cpu if f_cpu < 1.0 else 1.0
        f_mem = f_mem if f_mem < 1.0 else 1.0
        without_pod = int((1 - abs((f_cpu - f_mem) / 2)) * MAX_NODE_SCORE)
        d = _HALF + with_pod - without_pod
        return _HALF + (d // 2 if d >= 0 else -(-d // 2))

    def _score_cpu_memory_once(self, requests: Sequence[int],
                               nodes: Sequence[NodeInfo]) -> list[int]:
        """_score_cpu_memory for a pod unlike the recent ones: no score to reuse, but each
        node's allocatable, requested and balance without the pod are kept per node
        generation (self._rows), so a node unchanged since the last pod costs the with-pod
        half of the math only."""
        pod_cpu, pod_mem = requests
        cpu, memory = res.CPU, res.MEMORY
        rows = self._rows
        out = []
        for node in nodes:
            row = rows.get(node.name)
            if row is None or row[1] != node.generation or row[0] is not node:
                alloc = node.allocatable
                cap_cpu = alloc.get(cpu, 0)
                cap_mem = alloc.get(memory, 0)
                if not (cap_cpu and cap_mem):  # fewer than two fractions: the general form
                    out.append(balanced_score(*self.vectors.node(node, requests)))
                    continue
                used = node.requested
                used_cpu = used.get(cpu, 0)
                used_mem = used.get(memory, 0)
                f_cpu = used_cpu / cap_cpu
                f_mem = used_mem / cap_mem
                f_cpu = f_cpu if f_cpu < 1.0 else 1.0
                f_mem = f_mem if f_mem < 1.0 else 1.0
                without_pod = int((1 - abs((f_cpu - f_mem) / 2)) * MAX_NODE_SCORE)
                rows[node.name] = (node, node.generation, cap_cpu, cap_mem, used_cpu,
                                   used_mem, without_pod)
            else:
                _, _, cap_cpu, cap_mem, used_cpu, used_mem, without_pod = row
            f_cpu = (used_cpu + pod_cpu) / cap_cpu
            f_mem = (used_mem + pod_mem) / cap_mem
            f_cpu = f_cpu if f_cpu < 1.0 else 1.0
            f_mem = f_mem if f_mem < 1.0 else 1.0
            d = _HALF + int((1 - abs((f_cpu - f_mem) / 2)) * MAX_NODE_SCORE) - without_pod
            out.append(_HALF + (d // 2 if d >= 0 else -(-d // 2)))
        return out


def new(args: Mapping[str, Any] | None, handle: Handle) -> NodeResourcesBalancedAllocation:
    """NodeResourcesBalancedAllocationArgs, validated as
    ValidateNodeResourcesBalancedAllocationArgs: no duplicate names, every weight 1."""
    args = args or {}
    if not isinstance(args, Mapping):
        raise ArgsError("", "must be an object with resources")
    for key in args:
        if key != "resources":
            raise ArgsError(str(key), "unknown field; allowed: resources")
    resources = parse_resources(args.get("resources"), "resources")
    seen: set[str] = set()
    for i, (name, weight) in enumerate(resources):
        if name in seen:
            raise ArgsError(f"resources[{i}].name", f"duplicate value {name!r}")
        seen.add(name)
        if weight != 1:
            raise ArgsError(f"resources[{i}].weight", f"invalid value {weight}: must be 1")
    return NodeResourcesBalancedAllocation([n for n, _ in resources], handle.listers)


SPEC = PluginSpec(name=NAME, score=new, default_args=DEFAULT_ARGS)
