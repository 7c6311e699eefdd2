"""`polsched validate`, run as users run it: the installed console script on files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
POLSCHED = Path(sys.executable).parent / "polsched"
GOOD = ROOT / "tests/unit/data/policies/contract-example.yaml"

HEAD = """apiVersion: polsched.io/v1alpha1
kind: SchedulingPolicy
metadata:
  name: {name}
spec:
"""

# file name -> (spec body, the path the output must name)
BROKEN: dict[str, tuple[str, str]] = {
    "unknown-plugin.yaml": ("  filters:\n    - name: Foo\n", "spec.filters[0].name"),
    "wrong-point.yaml": ("  filters:\n    - name: NodeLabelValue\n      args: {key: a}\n",
                         "spec.filters[0].name"),
    "bad-operator.yaml": (
        "  filters:\n    - name: NodeLabel\n      args:\n        requirements:\n"
        "          - {key: a, operator: Exists}\n          - {key: b, operator: Near}\n",
        "spec.filters[0].args.requirements[1].operator"),
    "zero-weight.yaml": ("  scorers:\n    - name: ImageLocality\n"
                         "    - name: NodeLabelValue\n      weight: 0\n      args: {key: a}\n",
                         "spec.scorers[1].weight"),
    "extender-weight.yaml": ("  extenders:\n    - urlPrefix: http://e:8888/\n"
                             "      prioritizeVerb: prioritize\n", "spec.extenders[0].weight"),
    "two-binders.yaml": ("  extenders:\n    - {urlPrefix: 'http://a/', bindVerb: bind}\n"
                         "    - {urlPrefix: 'http://b/', bindVerb: bind}\n", "spec.extenders"),
    "bad-expression.yaml": ("  scorers:\n    - name: Expression\n      args: {expression: '1 +'}\n",
                            "spec.scorers[0].args.expression"),
    # a 12-level .all() hidden behind // comments with quotes: refused by its cost
    "cel-bomb.yaml": ("  filters:\n    - name: Expression\n      args:\n        expression: |\n"
                      + "".join(f"          [0, 1, 2, 3, 4, 5, 6, 7, 8, 9].all(x{i}, // it's ' (\n"
                                for i in range(12))
                      + "          true" + ")" * 12 + "\n",
                      "spec.filters[0].args.expression"),
    "too-long-name.yaml": ("  scorers:\n    - name: " + "N" * 64 + "\n", "spec.scorers[0].name"),
    "status-type.yaml": ("  paused: false\nstatus:\n  boundPods: many\n", "status.boundPods"),
    "disabled.yaml": ("  disabledPlugins: [NodeLabel]\n", "spec.disabledPlugins[0]"),
}


def validate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(POLSCHED), "validate", *args], capture_output=True, text=True,
                          input=stdin, timeout=60)


def test_a_good_policy_passes() -> None:
    proc = validate(str(GOOD))
    assert (proc.returncode, proc.stdout) == (0, "1 policies valid\n"), proc.stderr


def test_each_broken_file_is_reported_with_its_path(tmp_path: Path) -> None:
    for i, (fname, (body, _)) in enumerate(BROKEN.items()):
        (tmp_path / fname).write_text(HEAD.format(name=f"p{i}") + body)
    (tmp_path / "good.yml").write_text(GOOD.read_text())
    proc = validate(str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for fname, (_, path) in BROKEN.items():
        prefix = f"{tmp_path / fname}:0: {path}: "
        assert any(line.startswith(prefix) for line in lines), (prefix, proc.stdout)
    assert not any("good.yml" in line for line in lines)
    # One problem per broken file, nothing reported twice by schema and loader.
    problems = [line for line in lines if line.startswith(str(tmp_path))]
    assert len(problems) == len(BROKEN) == len(lines) - 1, proc.stdout
    assert lines[-1] == f"{len(BROKEN)} problems in {len(BROKEN) + 1} policies"


def test_multi_document_files_count_documents_and_skip_other_kinds(tmp_path: Path) -> None:
    f = tmp_path / "mixed.yaml"
    f.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n"
                 + GOOD.read_text() + "---\n"
                 + HEAD.format(name="second") + "  percentageOfNodesToScore: 150\n---\n")
    proc = validate("-v", str(f))
    assert proc.returncode == 1
    assert f"{f}:2: spec.percentageOfNodesToScore: must be between 0 and 100" in proc.stdout
    assert f"{f}:0: skipped: kind 'ConfigMap'" in proc.stdout
    assert f"{f}:1: SchedulingPolicy 'label-priority' valid" in proc.stdout


def test_not_yaml(tmp_path: Path) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text("spec: [unclosed\n")
    proc = validate(str(f))
    assert proc.returncode == 1
    [line] = [x for x in proc.stdout.splitlines() if x.startswith(str(f))]
    assert line.startswith(f"{f}: not YAML: ")


def test_a_file_nested_too_deep_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    # A fuzz finding: PyYAML's composer recursed past Python's limit on args nested 900
    # deep (which the API server admits), and `polsched validate` ended in a traceback.
    f = tmp_path / "deep.yaml"
    f.write_text(HEAD.format(name="deep") + "  filters:\n    - name: NodeLabel\n      args: "
                 + '{"x": ' * 900 + "1" + "}" * 900 + "\n")
    proc = validate(str(f))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    [line] = [x for x in proc.stdout.splitlines() if x.startswith(str(f))]
    assert line == f"{f}: not YAML this command can read: nested too deep"


def test_duplicate_keys_are_refused_as_kubectl_does(tmp_path: Path) -> None:
    f = tmp_path / "dup.yaml"
    f.write_text(HEAD.format(name="d") + "  scorers: []\n  scorers: []\n")
    proc = validate(str(f))
    assert proc.returncode == 1 and "found duplicate key 'scorers'" in proc.stdout


def test_missing_path_and_stdin_list(tmp_path: Path) -> None:
    proc = validate(str(tmp_path / "nope.yaml"))
    assert proc.returncode == 1
    assert f"{tmp_path / 'nope.yaml'}: no such file or directory" in proc.stdout
    # `kubectl get spol -o yaml | polsched validate -`: a v1 List.
    items = GOOD.read_text().replace("\n", "\n    ")
    listing = f"apiVersion: v1\nkind: List\nitems:\n  - {items}\n"
    proc = validate("-", stdin=listing)
    assert (proc.returncode, proc.stdout) == (0, "1 policies valid\n"), proc.stdout


def test_usage_error_exits_2() -> None:
    proc = subprocess.run([str(POLSCHED), "validate"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "usage: polsched validate" in proc.stderr
