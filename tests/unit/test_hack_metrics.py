"""hack/metrics.sh's rewrite of kwok's stages for METRICS=1: node-initialize keeps its
status template unchanged and first annotates the node with its resource-metrics path
(what metrics-server scrapes when every fake node shares kwok's address)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import HACK

pytestmark = pytest.mark.unit

STAGES = """---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-initialize
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.phase'
      operator: 'NotIn'
      values:
      - 'Running'
  next:
    statusTemplate: |
      conditions:
      - type: Ready

        status: "True"
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  next:
    statusTemplate: |
      phase: Running
"""


def test_node_initialize_annotates_then_patches_the_status(tmp_path: Path) -> None:
    src, out = tmp_path / "stages.yaml", tmp_path / "out.yaml"
    src.write_text(STAGES)
    subprocess.run([str(HACK / "metrics.sh"), "kwok-stages", str(src), str(out)], check=True,
                   capture_output=True)
    init, ready = [d for d in yaml.safe_load_all(out.read_text()) if d]
    assert "next" not in init["spec"]
    meta, status = (s["patch"] for s in init["spec"]["steps"])
    assert (meta["root"], meta["type"]) == ("metadata", "merge")
    assert yaml.safe_load(meta["template"]) == {"annotations": {
        "metrics.k8s.io/resource-metrics-path":
            "/metrics/nodes/{{ .metadata.name }}/metrics/resource"}}
    assert (status["subresource"], status["root"]) == ("status", "status")
    assert status["template"] == 'conditions:\n- type: Ready\n\n  status: "True"\nphase: Running\n'
    assert ready["spec"]["next"] == {"statusTemplate": "phase: Running\n"}
