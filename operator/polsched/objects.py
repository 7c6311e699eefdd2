"""The one type every layer shares: a Kubernetes object (or any JSON object) as the API
server sends it and as YAML files give it, decoded into plain dicts.

The lowest layer of polsched: it imports nothing of ours, so any module may use it
(tests/unit/test_layers.py). Typed views of the objects the scheduler reads live above
it (framework.types.PodInfo, NodeInfo).
"""

from __future__ import annotations

from typing import Any, TypeAlias

Json: TypeAlias = dict[str, Any]

__all__ = ["Json"]
