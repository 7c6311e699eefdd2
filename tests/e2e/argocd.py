"""Runs manifests/argocd/schedulingpolicy-health.lua as Argo CD does: `obj` is the live
object as a Lua table, the script returns {status, message}. A real Lua 5.4 interpreter
(hack/install-deps.sh lua) runs it."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from tests.conftest import ROOT

HEALTH_LUA = ROOT / "manifests" / "argocd" / "schedulingpolicy-health.lua"


def lua_literal(value: Any) -> str:
    """A JSON-like value as a Lua constructor (lists 1-indexed, as Argo CD's are)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(c if c.isascii() and c.isprintable() and c not in '"\\'
                             else "".join(f"\\{b:03d}" for b in c.encode())
                             for c in value) + '"'
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{lua_literal(str(k))}] = {lua_literal(v)}"
                               for k, v in value.items()) + "}"
    raise TypeError(f"no Lua literal for {type(value).__name__}")


def health(obj: dict[str, Any]) -> tuple[str, str]:
    lua = shutil.which("lua5.4") or shutil.which("lua")
    assert lua, "no Lua interpreter: run hack/install-deps.sh lua (apt-get install lua5.4)"
    program = (f"obj = {lua_literal(obj)}\n"
               f"local hs = dofile({lua_literal(str(HEALTH_LUA))})\n"
               "io.write(hs.status, '\\n', hs.message or '')\n")
    p = subprocess.run([lua, "-"], input=program, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    status, _, message = p.stdout.partition("\n")
    return status, message
