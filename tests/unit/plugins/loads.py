"""Nodes, pods and node loads for the load-aware scorers' unit tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polsched.framework import NodeInfo, PodInfo
from polsched.framework.load import NodeLoad, ResourceLoad, StaticLoad
from tests.builders import make_node, make_pod

MI = 1024 * 1024


def node(name: str, cpu: str = "4", memory: str = "8Gi", *,
         capacity_cpu: str | None = None) -> NodeInfo:
    n = make_node().name(name).allocatable({"cpu": cpu, "memory": memory, "pods": "110"})
    if capacity_cpu is not None:
        n.status(capacity={"cpu": capacity_cpu, "memory": memory, "pods": "110"})
    return n.info()


def container(requests: Mapping[str, str] | None = None,
              limits: Mapping[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = dict(requests)
    if limits:
        resources["limits"] = dict(limits)
    return {"name": "c", "image": "x", "resources": resources}


def pod(name: str = "p", *containers: dict[str, Any], node_name: str = "",
        overhead: Mapping[str, str] | None = None) -> PodInfo:
    p = (make_pod().name(name).namespace("default").uid(f"uid-{name}").containers(containers)
         .scheduler("test"))
    if node_name:
        p.node(node_name)
    if overhead:
        p.overhead(overhead)
    return p.info()


def load(cpu: float, memory: float = 0.0, *, cpu_avg: float | None = None,
         cpu_std: float = 0.0, mem_avg: float | None = None, mem_std: float = 0.0,
         timestamp: float = 1000.0) -> NodeLoad:
    """A node's load: latest usage `cpu` millicores and `memory` bytes; the history's
    mean defaults to the latest."""
    return NodeLoad(ResourceLoad(cpu, cpu if cpu_avg is None else cpu_avg, cpu_std),
                    ResourceLoad(memory, memory if mem_avg is None else mem_avg, mem_std),
                    timestamp)


def static(**loads: NodeLoad) -> StaticLoad:
    return StaticLoad(dict(loads))
