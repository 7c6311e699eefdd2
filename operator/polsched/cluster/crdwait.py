"""Wait for CustomResourceDefinitions to be Established, through kubectl.

`kubectl wait --for=condition=Established` (kubectl 1.32 here) fails at once, instead of
waiting, on a CRD created a moment ago: the API server first stores it with
`status.conditions: null` (the field has no omitempty), and kubectl's condition waiter
reports ".status.conditions accessor error: <nil> is of the type <nil>". A cold CI run
lost `make demo`'s test to it. This polls the condition with a JSONPath instead, which
reads a null list as "not yet"."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence

ESTABLISHED = ('{range .items[*]}{.metadata.name}{"="}'
               '{.status.conditions[?(@.type=="Established")].status}{"\\n"}{end}')


def pending(output: str, names: Sequence[str] | None) -> list[str]:
    """The CRDs of `kubectl get crd -o jsonpath=ESTABLISHED`'s output that are not
    Established yet (of `names`, or of every CRD listed when None); a name missing from
    the output is pending too."""
    state = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    wanted = list(state) if names is None else list(names)
    return [n for n in wanted if state.get(n) != "True"]


def wait_established(names: Sequence[str] | None = None, *, timeout: float = 60,
                     env: Mapping[str, str] | None = None,
                     kubectl: Sequence[str] = ("kubectl",)) -> None:
    """Return once every CRD of `names` (every CRD when None) is Established; raise
    TimeoutError naming the ones that are not after `timeout` seconds. `env` is the
    kubectl process's environment (KUBECONFIG); the caller's when None."""
    deadline = time.monotonic() + timeout
    run_env = dict(os.environ if env is None else env)
    left: list[str] = list(names or [])
    detail = ""
    while True:
        proc = subprocess.run([*kubectl, "get", "crd", "-o", f"jsonpath={ESTABLISHED}"],
                              capture_output=True, text=True, env=run_env, timeout=60)
        if proc.returncode == 0:
            left = pending(proc.stdout, names)
            if not left:
                return
            detail = ""
        else:
            detail = f" (kubectl: {proc.stderr.strip()})"
        if time.monotonic() > deadline:
            raise TimeoutError(f"CustomResourceDefinition(s) not Established after "
                               f"{timeout:g}s: {', '.join(left) or 'unknown'}{detail}")
        time.sleep(0.2)
