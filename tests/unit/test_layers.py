"""The arrows between packages that the design relies on (docs/architecture.md, "The
rules of the layers"), checked the way they can break: every module of polsched is
imported alone, in a fresh interpreter, and what came along with it is looked at.

A direct-import check misses the transitive arrow (a plugin importing a helper whose
package __init__ imports the API layer); sys.modules does not. One subprocess imports the
modules one by one and forgets polsched's modules (and aiohttp's) between two imports, so
each import starts from nothing of ours. Third-party modules stay loaded (some native
ones, the CEL engine's, cannot be initialised twice in one process), so the modules that
must stay light are imported first: a third-party module one of them pulled in by mistake
cannot hide what a later one pulls in, since the earlier one already failed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import pytest

import polsched

pytestmark = pytest.mark.unit

PACKAGE = Path(polsched.__file__).parent

API = "polsched.api"
CLUSTER = "polsched.cluster"
CONTROLLER = "polsched.controller"
EXTENDER = "polsched.extender"
FRAMEWORK = "polsched.framework"
PLUGINS = "polsched.plugins"
SCHEDULER = "polsched.scheduler"
AIOHTTP = "aiohttp"

# Importing a module under the key (a package, or one module) must not load any module
# under the listed names. The first key that matches a module is its rule.
RULES: tuple[tuple[str, frozenset[str]], ...] = (
    # The one shared type (Json): the lowest layer, nothing of ours.
    ("polsched.objects", frozenset({API, CLUSTER, CONTROLLER, EXTENDER, FRAMEWORK, PLUGINS,
                                    SCHEDULER, AIOHTTP})),
    # Plain data below the API layer: the standard library only.
    ("polsched.extender.config", frozenset({
        API, CLUSTER, CONTROLLER, FRAMEWORK, PLUGINS, SCHEDULER, "polsched.extender.client",
        "polsched.extender.wire", AIOHTTP})),
    # The wire types are what a plugin (preemption) may need of an extender: no client.
    ("polsched.extender.wire", frozenset({
        API, CLUSTER, CONTROLLER, PLUGINS, SCHEDULER, "polsched.extender.client", AIOHTTP})),
    # The extender client speaks HTTP (cluster.http1's client); it does not read policies.
    (EXTENDER, frozenset({API, CONTROLLER, PLUGINS, SCHEDULER})),
    # The DRA library (allocator, device selectors) is below the plugins, as upstream's
    # k8s.io/dynamic-resource-allocation: no plugin, policy, cache or client.
    ("polsched.dra", frozenset({API, CLUSTER, CONTROLLER, EXTENDER, PLUGINS, SCHEDULER,
                                AIOHTTP})),
    # Preemption (upstream's framework/preemption): the executor writes through the API
    # server, a scheduler part; the rest (candidates, victims' facts, the pod-group
    # evaluator) is computation below the plugins that DefaultPreemption uses.
    ("polsched.preemption.executor", frozenset({API, CONTROLLER, PLUGINS})),
    ("polsched.preemption", frozenset({API, CLUSTER, CONTROLLER, EXTENDER, PLUGINS, SCHEDULER,
                                       AIOHTTP})),
    # The framework is computation: it knows no plugin, policy, cache or client.
    (FRAMEWORK, frozenset({API, CLUSTER, CONTROLLER, EXTENDER, PLUGINS, SCHEDULER, AIOHTTP})),
    # A plugin reads a snapshot and returns a Status: it knows no policy, no cache, no
    # client, no scheduler and no extender.
    (PLUGINS, frozenset({API, CLUSTER, CONTROLLER, EXTENDER, SCHEDULER, AIOHTTP})),
    # The API layer parses and validates; the plugins are handed to it (a Catalog).
    (API, frozenset({CLUSTER, CONTROLLER, PLUGINS, SCHEDULER, "polsched.extender.client",
                     AIOHTTP})),
    # cluster/ talks to the API server about pods and nodes; it schedules nothing.
    (CLUSTER, frozenset({API, CONTROLLER, EXTENDER, PLUGINS, SCHEDULER})),
    # The scheduler runs policies; the controller above it decides which ones.
    (SCHEDULER, frozenset({CONTROLLER})),
    # The dry-run commands run a pipeline; they never run the operator.
    ("polsched.commands.dryrun", frozenset({CONTROLLER})),
    ("polsched.commands.explain", frozenset({CONTROLLER})),
    ("polsched.commands.simulate", frozenset({CONTROLLER})),
    # `polsched --help` loads nothing but the argument parser.
    ("polsched.commands.cli", frozenset({API, CLUSTER, CONTROLLER, EXTENDER, FRAMEWORK,
                                         PLUGINS, SCHEDULER, AIOHTTP})),
    # The options of `polsched run` and `polsched scheduler`: the parser builds them for
    # every subcommand, so they load nothing of the process they configure.
    ("polsched.controller.process.options", frozenset({
        API, CLUSTER, EXTENDER, FRAMEWORK, PLUGINS, SCHEDULER, AIOHTTP,
        "polsched.controller.policies", "polsched.controller.dedicated",
        "polsched.controller.webhook", "polsched.controller.operator"})),
    # The policy lifecycle is handed its leadership; it never runs the process, the
    # operator or the webhook.
    ("polsched.controller.policies", frozenset({
        "polsched.controller.operator", "polsched.controller.webhook",
        "polsched.controller.process.server", "polsched.controller.dedicated.scheduler"})),
)

# Arrows other branches remove; each marker names who, and is strict so that it fails
# (and is taken out) once the arrow is gone.
EXPECTED_TO_FAIL: Mapping[str, str] = {}

# The order modules are imported in: the light layers first (see the module docstring).
_ORDER = ("polsched.objects", "polsched.extender.config", "polsched.extender.wire", FRAMEWORK,
          "polsched.dra", "polsched.preemption", PLUGINS, API, CLUSTER, EXTENDER, SCHEDULER)


def _under(module: str, name: str) -> bool:
    return module == name or module.startswith(name + ".")


def all_modules() -> list[str]:
    """Every module of the package, from the files (nothing imported to list them)."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append(".".join(parts))

    def rank(m: str) -> tuple[int, str]:
        return next((i for i, p in enumerate(_ORDER) if _under(m, p)), len(_ORDER)), m

    return sorted(out, key=rank)


def rule_for(module: str) -> frozenset[str]:
    return next((forbidden for key, forbidden in RULES if _under(module, key)), frozenset())


_IMPORT_EACH = """
import importlib, json, sys, traceback
ours = ("polsched", "aiohttp")
out = {}
for name in json.loads(sys.argv[1]):
    for key in [k for k in sys.modules if k.split(".")[0] in ours]:
        del sys.modules[key]
    try:
        importlib.import_module(name)
    except BaseException:
        out[name] = {"error": traceback.format_exc()}
        continue
    out[name] = {"loaded": sorted(k for k in sys.modules if k.split(".")[0] in ours)}
print(json.dumps(out))
"""


@cache
def loaded_by_module() -> dict[str, dict[str, object]]:
    """module -> {"loaded": the polsched and aiohttp modules importing it alone loads}, or
    {"error": the traceback}; from one fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", _IMPORT_EACH, json.dumps(all_modules())],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, dict[str, object]] = json.loads(proc.stdout)
    return result


def _params() -> list[object]:
    out: list[object] = []
    for m in all_modules():
        marks = []
        if m in EXPECTED_TO_FAIL:
            marks.append(pytest.mark.xfail(reason=EXPECTED_TO_FAIL[m], strict=True))
        out.append(pytest.param(m, marks=marks, id=m))
    return out


@pytest.mark.parametrize("module", _params())
def test_importing_a_module_alone_loads_only_what_its_layer_may_use(module: str) -> None:
    got = loaded_by_module()[module]
    assert "error" not in got, f"importing {module} alone failed:\n{got['error']}"
    loaded = got["loaded"]
    assert isinstance(loaded, list)
    forbidden = rule_for(module)
    offenders = sorted(m for m in loaded if any(_under(m, f) for f in forbidden))
    packages = sorted({".".join(m.split(".")[:2]) for m in offenders})
    assert not offenders, f"importing {module} alone loads {packages}: {offenders}"


def test_every_layer_has_a_rule_and_the_check_can_fail() -> None:
    """The rules name real packages, and a module that breaks one is caught: the
    extender client loads aiohttp, which the wire types must not."""
    modules = all_modules()
    for key, forbidden in RULES:
        assert any(_under(m, key) for m in modules), key
        assert all(f == AIOHTTP or any(_under(m, f) for m in modules) for f in forbidden), key
    client = loaded_by_module()["polsched.extender.client"]["loaded"]
    assert isinstance(client, list)
    assert AIOHTTP in client
    assert any(_under(m, AIOHTTP) for m in rule_for("polsched.extender.wire"))


# What building the parser may load (`polsched --help`, and every subcommand before it
# runs): the parser, and the options of the two long-running commands.
_PARSER_MODULES = frozenset({
    "polsched", "polsched.commands", "polsched.commands.cli", "polsched.commands.connection",
    "polsched.commands.version",
    "polsched.controller",
    "polsched.controller.process", "polsched.controller.process.options"})


def test_building_the_cli_parser_loads_only_the_parser() -> None:
    probe = ("import json, sys\n"
             "from polsched.commands import cli\n"
             "cli.build_parser()\n"
             "print(json.dumps(sorted(k for k in sys.modules\n"
             "                        if k.split('.')[0] in ('polsched', 'aiohttp', 'kopf'))))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(proc.stdout))
    assert loaded <= _PARSER_MODULES, f"`polsched --help` loads {sorted(loaded - _PARSER_MODULES)}"
