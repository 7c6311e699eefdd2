"""`polsched validate`, run as users run it: the installed console script on files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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

# file name -> (spec body, the path the output must name, and the line: the field's, a
# missing field's parent's; HEAD is lines 1-5)
BROKEN: dict[str, tuple[str, str, int]] = {
    "unknown-plugin.yaml": ("  filters:\n    - name: Foo\n", "spec.filters[0].name", 7),
    "wrong-point.yaml": ("  filters:\n    - name: NodeLabelValue\n      args: {key: a}\n",
                         "spec.filters[0].name", 7),
    "bad-operator.yaml": (
        "  filters:\n    - name: NodeLabel\n      args:\n        requirements:\n"
        "          - {key: a, operator: Exists}\n          - {key: b, operator: Near}\n",
        "spec.filters[0].args.requirements[1].operator", 11),
    "zero-weight.yaml": ("  scorers:\n    - name: ImageLocality\n"
                         "    - name: NodeLabelValue\n      weight: 0\n      args: {key: a}\n",
                         "spec.scorers[1].weight", 9),
    "extender-weight.yaml": ("  extenders:\n    - urlPrefix: http://e:8888/\n"
                             "      prioritizeVerb: prioritize\n", "spec.extenders[0].weight",
                             7),
    "two-binders.yaml": ("  extenders:\n    - {urlPrefix: 'http://a/', bindVerb: bind}\n"
                         "    - {urlPrefix: 'http://b/', bindVerb: bind}\n", "spec.extenders",
                         6),
    "bad-expression.yaml": ("  scorers:\n    - name: Expression\n      args: {expression: '1 +'}\n",
                            "spec.scorers[0].args.expression", 8),
    # a 12-level .all() hidden behind // comments with quotes: refused by its cost
    "cel-bomb.yaml": ("  filters:\n    - name: Expression\n      args:\n        expression: |\n"
                      + "".join(f"          [0, 1, 2, 3, 4, 5, 6, 7, 8, 9].all(x{i}, // it's ' (\n"
                                for i in range(12))
                      + "          true" + ")" * 12 + "\n",
                      "spec.filters[0].args.expression", 9),
    "too-long-name.yaml": ("  scorers:\n    - name: " + "N" * 64 + "\n", "spec.scorers[0].name",
                           7),
    "status-type.yaml": ("  paused: false\nstatus:\n  boundPods: many\n", "status.boundPods",
                         8),
    "disabled.yaml": ("  disabledPlugins: [NodeLabel]\n", "spec.disabledPlugins[0]", 6),
    # decimal.Overflow used to escape the loader and crash the command
    "huge-quantity.yaml": ("  runtime:\n    mode: Dedicated\n    resources:\n"
                           "      requests: {cpu: 1e999999999}\n",
                           "spec.runtime.resources.requests.cpu", 9),
}


def validate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(POLSCHED), "validate", *args], capture_output=True, text=True,
                          input=stdin, timeout=60)


def test_a_good_policy_passes() -> None:
    proc = validate(str(GOOD))
    assert (proc.returncode, proc.stdout) == (0, "1 policies valid\n"), proc.stderr


def test_each_broken_file_is_reported_with_its_line_and_path(tmp_path: Path) -> None:
    for i, (fname, (body, _, _)) in enumerate(BROKEN.items()):
        (tmp_path / fname).write_text(HEAD.format(name=f"p{i}") + body)
    (tmp_path / "good.yml").write_text(GOOD.read_text())
    proc = validate(str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for fname, (_, path, line_no) in BROKEN.items():
        prefix = f"{tmp_path / fname}:{line_no}:"
        assert any(line.startswith(prefix) and f": {path}: " in line for line in lines), (
            prefix, path, proc.stdout)
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
    # Lines count through the whole file, across documents.
    second = 3 + 1 + GOOD.read_text().count("\n") + 1 + 1
    assert (f"{f}:{second + 5}:3: spec.percentageOfNodesToScore: must be between 0 and 100"
            in proc.stdout), proc.stdout
    assert f"{f}:1: skipped: kind 'ConfigMap'" in proc.stdout
    # A document's line is its first field's (GOOD opens with a comment).
    first = 4 + 1 + GOOD.read_text().splitlines().index("apiVersion: polsched.io/v1alpha1")
    assert f"{f}:{first}: SchedulingPolicy 'label-priority' valid" in proc.stdout


def test_not_yaml(tmp_path: Path) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text("spec: [unclosed\n")
    proc = validate(str(f))
    assert proc.returncode == 1
    [line] = [x for x in proc.stdout.splitlines() if x.startswith(str(f))]
    assert line.startswith(f"{f}:2:1: not YAML: "), line  # where the parser gave up


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
    assert f"{f}:7:3: not YAML: " in proc.stdout, proc.stdout  # the second `scorers`


def test_a_field_in_a_list_and_a_dotted_label_key_get_their_own_lines(tmp_path: Path) -> None:
    """The line of the field itself, even behind a key with dots (a label key)."""
    f = tmp_path / "p.yaml"
    f.write_text(HEAD.format(name="lines") + "  filters:\n"
                 "    - name: NodeLabel\n"
                 "      args:\n"
                 "        requirements:\n"
                 "          - key: example.com/a\n"
                 "            operator: Exists\n"
                 "          - key: example.com/b\n"
                 "            operator: In\n"
                 "            values: []\n")
    proc = validate(str(f))
    assert proc.returncode == 1
    problems = [x for x in proc.stdout.splitlines() if x.startswith(str(f))]
    assert problems and all(x.startswith(f"{f}:1") for x in problems), proc.stdout
    assert any(x.startswith(f"{f}:1") and "requirements[1]" in x for x in problems)


def test_json_output_lists_each_problem_with_file_line_column_and_path(tmp_path: Path
                                                                     ) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(HEAD.format(name="j") + "  filters:\n    - name: Foo\n")
    proc = validate("-o", "json", str(f))
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["valid"] is False and doc["policies"] == 1
    [p] = doc["problems"]
    assert (p["file"], p["line"], p["column"], p["document"], p["path"]) == (
        str(f), 7, 7, 0, "spec.filters[0].name")
    proc = validate("-o", "yaml", str(GOOD))
    assert proc.returncode == 0
    assert yaml.safe_load(proc.stdout) == {"policies": 1, "valid": True, "problems": []}


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


def test_validate_reads_yaml_with_libyaml() -> None:
    """The composer is libyaml's (fuzz seed 4242 case 330: a 1.7 MB policy took 6.3 s of
    CPU in the pure-Python one), and duplicate keys are still refused with their line."""
    from polsched.api import validate_files
    from polsched.plugins import CATALOG

    assert issubclass(validate_files._StrictLoader, yaml.CSafeLoader)
    report = validate_files.check_text("a: 1\nb: 2\na: 3\n", "dup.yaml", CATALOG)
    assert [p.line for p in report.problems] == [3]
    assert "duplicate key" in report.problems[0].message
