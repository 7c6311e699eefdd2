"""`make demo` as a newcomer runs it, on a control plane of its own (hack/cluster.sh in a
temporary directory, as `make demo DEV_DIR=...` does): every example policy becomes Ready,
every demo pod lands where its policy's header says, the table names the scorer that
decided, a second run changes nothing, and `demo.sh down` leaves no process behind."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import HACK
from tests.e2e.operators import free_port

POLICIES = {"label-priority", "cel-rules", "bin-packing", "zone-spread", "gpu-isolation",
            "extender-example"}


@pytest.fixture
def dev_dir(tmp_path: Path) -> Iterator[Path]:
    dev = tmp_path / "dev"
    subprocess.run([str(HACK / "cluster.sh"), "up", str(dev)], check=True, timeout=120,
                   capture_output=True)
    yield dev
    subprocess.run([str(HACK / "demo.sh"), "down"], env=demo_env(dev), timeout=60,
                   check=False)
    subprocess.run([str(HACK / "cluster.sh"), "down", str(dev)], timeout=60, check=False,
                   capture_output=True)


def demo_env(dev: Path, port: int | None = None) -> dict[str, str]:
    env = {**os.environ, "POLSCHED_DEV_DIR": str(dev)}
    if port is not None:
        env["POLSCHED_DEMO_EXTENDER_PORT"] = str(port)
    return env


def run_demo(dev: Path, port: int) -> str:
    proc = subprocess.run([str(HACK / "demo.sh"), "up"], env=demo_env(dev, port),
                          capture_output=True, text=True, timeout=120)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, f"demo.sh up failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def section(out: str, title: str) -> list[str]:
    """The non-empty lines under `== title` up to the next section or blank line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"== {title}"))
    body = []
    for line in lines[start + 1:]:
        if not line.strip() or line.startswith("=="):
            break
        body.append(line)
    return body


def table(out: str) -> dict[str, dict[str, str]]:
    """pod -> {node, zone, policy, feasible, decided}."""
    rows = section(out, "where each pod went")
    assert re.split(r"\s{2,}", rows[0]) == ["POD", "NODE (ZONE)", "POLICY", "FEASIBLE",
                                            "DECIDED BY"]
    parsed: dict[str, dict[str, str]] = {}
    for row in rows[1:]:
        pod, where, policy, rest = re.split(r"\s{2,}", row, maxsplit=3)
        feasible, _, decided = rest.partition("  ") if re.match(r"\d+/\d+\s{2,}", rest) \
            else ("", "", rest)
        node, _, zone = where.partition(" ")
        parsed[pod] = {"node": node, "zone": zone.strip("()"), "policy": policy,
                       "feasible": feasible, "decided": decided.strip()}
    return parsed


def alive(pidfile: Path) -> bool:
    try:
        os.kill(int(pidfile.read_text()), 0)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return False
    return True


def test_make_demo_end_to_end(dev_dir: Path) -> None:
    port = free_port()
    out = run_demo(dev_dir, port)
    pods = table(out)
    assert set(pods) == {"prio-1", "prio-2", "short", "much-too-long", "cel-any-name",
                         "pack-1", "pack-2", "pack-3", "web-1", "web-2", "web-3", "web-4",
                         "gpu-train", "cpu-batch", "want-you", "anyone"}
    assert {p["policy"] for p in pods.values()} == POLICIES
    # Every pod has a node, except the one whose point is to stay Pending.
    pending = {name for name, p in pods.items() if p["node"] == "<pending>"}
    assert pending == {"much-too-long"}
    assert "pod name is longer than 5" in pods["much-too-long"]["decided"]
    # Where the example policies' headers say the pods go, and which scorer decided.
    assert {pods[p]["node"] for p in ("prio-1", "prio-2")} == {"n-a1"}
    assert pods["prio-1"]["decided"] == "NodeLabelValue"
    assert len({pods[f"pack-{i}"]["node"] for i in (1, 2, 3)}) == 1
    assert [pods[f"web-{i}"]["zone"] for i in (1, 2, 3, 4)].count("zone-a") == 2
    assert pods["gpu-train"]["node"] == "gpu-1"
    assert pods["gpu-train"]["decided"] == "(only feasible node)"
    assert pods["cpu-batch"]["node"] != "gpu-1"
    assert pods["want-you"]["node"] == "10-9-101-66"
    assert pods["anyone"]["decided"] == f"http://127.0.0.1:{port}/"
    assert pods["short"]["decided"] == "Expression"
    # Every bound pod's decision was recorded by the engine.
    assert all(p["feasible"] and not p["decided"].startswith("(not recorded")
               for name, p in pods.items() if name not in pending)
    spol = section(out, "kubectl get spol")
    assert spol[0].split()[:3] == ["NAME", "SCHEDULER", "READY"]
    assert {line.split()[0]: line.split()[2] for line in spol[1:]} == \
        {p: "True" for p in POLICIES}
    # BOUND and PENDING agree with the pods' table above (the status is written in
    # batches; the demo waits for it rather than show a count a second old).
    counts = {line.split()[0]: [int(line.split()[3]), int(line.split()[4])]
              for line in spol[1:]}
    want = {policy: [0, 0] for policy in POLICIES}
    for p in pods.values():
        want[p["policy"]][1 if p["node"] == "<pending>" else 0] += 1
    assert counts == want, spol

    operator_pid = (dev_dir / "operator.pid").read_text().strip()
    again = run_demo(dev_dir, port)
    assert f"operator already running (pid {operator_pid})" in again
    assert "example extender already running" in again
    assert {n: p["node"] for n, p in table(again).items()} == \
        {n: p["node"] for n, p in pods.items()}

    down = subprocess.run([str(HACK / "demo.sh"), "down"], env=demo_env(dev_dir),
                          capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    assert "stopped operator" in down.stdout and "stopped example extender" in down.stdout
    assert not os.path.exists(f"/proc/{operator_pid}")
    assert not alive(dev_dir / "extender.pid")
