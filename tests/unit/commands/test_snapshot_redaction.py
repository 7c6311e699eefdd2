"""`polsched snapshot` leaves secrets out by default: container env values, command and
args, and pod annotations no policy names; --no-redact keeps them. Redaction changes no
decision: `polsched simulate` gives the same bytes on both snapshots. YAML is written by
libyaml's dumper, byte for byte what the Python dumper writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from polsched.commands import cli, output, snapshot
from tests.unit.test_simulate import cluster, node, pod, policy

pytestmark = pytest.mark.unit

SECRET = "hunter2-s3cr3t"


def with_secrets(p: dict[str, Any], annotations: dict[str, str] | None = None
                 ) -> dict[str, Any]:
    """`p` with a secret in every place the snapshot should redact."""
    c = p["spec"]["containers"][0]
    c["env"] = [{"name": "DB_PASSWORD", "value": SECRET},
                {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "db",
                                                                       "key": "pw"}}}]
    c["command"] = ["/bin/sh", "-c", f"login --password {SECRET}"]
    c["args"] = [f"--token={SECRET}"]
    c["livenessProbe"] = {"exec": {"command": ["check", SECRET]}, "periodSeconds": 5}
    p["spec"]["initContainers"] = [{"name": "init", "image": "x", "args": [SECRET],
                                    "env": [{"name": "K", "value": SECRET}]}]
    p["metadata"]["annotations"] = {"vault.example.com/secret": SECRET,
                                    "polsched.io/deciding-scorer": "NodeLabelValue",
                                    **(annotations or {})}
    return p


def secret_cluster() -> list[dict[str, Any]]:
    objs = [with_secrets(o) if o["kind"] == "Pod" else o for o in cluster()]
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
          "metadata": {"name": "web", "namespace": "default",
                       "annotations": {"deployment.kubernetes.io/desired-replicas": "1"}},
          "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                   "template": with_secrets(pod("tmpl", created="2026-01-01T00:00:00Z"))}}
    return [*objs, rs]


def test_a_snapshot_leaves_env_values_commands_args_and_annotations_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "objects.json"
    src.write_text(json.dumps({"kind": "List", "items": secret_cluster()}))
    for fmt in ("json", "yaml"):
        assert cli.main(["snapshot", "-f", str(src), "-o", fmt]) == 0
        text = capsys.readouterr().out
        assert SECRET not in text, fmt
        assert "vault.example.com/secret" not in text
    doc = snapshot.as_list(secret_cluster())
    p = next(o for o in doc["items"] if o["kind"] == "Pod")
    c = p["spec"]["containers"][0]
    # Names stay (what a reader of the file needs to recognise the pod); values go.
    assert c["env"] == [{"name": "DB_PASSWORD", "value": snapshot.REDACTED},
                        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {
                            "name": "db", "key": "pw"}}}]
    assert c["command"] == c["args"] == [snapshot.REDACTED]
    assert c["livenessProbe"] == {"exec": {"command": [snapshot.REDACTED]},
                                  "periodSeconds": 5}
    assert c["resources"] == {"requests": {"cpu": "1"}}  # what scheduling reads stays
    assert p["metadata"]["annotations"] == {"polsched.io/deciding-scorer": "NodeLabelValue"}
    rs = next(o for o in doc["items"] if o["kind"] == "ReplicaSet")
    assert rs["spec"]["template"]["spec"]["containers"][0]["args"] == [snapshot.REDACTED]
    # --no-redact keeps everything.
    assert cli.main(["snapshot", "-f", str(src), "--no-redact"]) == 0
    assert SECRET in capsys.readouterr().out


def test_an_annotation_a_policy_names_is_kept() -> None:
    reads = policy("reads-annotation")
    reads["spec"]["filters"] = [{"name": "Expression", "args": {
        "expression": "pod.metadata.annotations['example.com/tier'] == 'gold'"}}]
    objs = [reads, node("n1", 1, "a"),
            with_secrets(pod("p", created="2026-01-01T00:00:00Z"),
                         {"example.com/tier": "gold"})]
    doc = snapshot.as_list(objs)
    p = next(o for o in doc["items"] if o["kind"] == "Pod")
    assert p["metadata"]["annotations"] == {"example.com/tier": "gold",
                                            "polsched.io/deciding-scorer": "NodeLabelValue"}


def simulate_json(capsys: pytest.CaptureFixture[str], snap: Path, candidate: Path,
                  *extra: str) -> str:
    code = cli.main(["simulate", "-f", str(candidate), "--snapshot", str(snap), "-o", "json",
                     *extra])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    doc.pop("source")
    doc["summary"].pop("seconds")
    return json.dumps(doc, indent=1, sort_keys=True)


@pytest.mark.parametrize("extra", [(), ("--replay",)])
def test_redacted_and_full_snapshots_give_byte_identical_decisions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...]) -> None:
    objs = secret_cluster()
    full, redacted = tmp_path / "full.json", tmp_path / "redacted.yaml"
    full.write_text(snapshot.dump(snapshot.as_list(objs, redact_secrets=False), "json"))
    redacted.write_text(snapshot.dump(snapshot.as_list(objs), "yaml"))
    assert SECRET in full.read_text() and SECRET not in redacted.read_text()
    for name, candidate in (("reverse", policy(reverse=True)),
                            ("special", policy(require="special"))):
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump(candidate))
        a = simulate_json(capsys, full, f, *extra)
        b = simulate_json(capsys, redacted, f, *extra)
        assert json.loads(a)["pods"], name  # pods were decided
        assert a == b, name


def test_libyamls_dumper_writes_the_python_dumpers_bytes() -> None:
    """The snapshot's YAML through CSafeDumper and SafeDumper, on values that stress an
    emitter: unicode, quotes, multi-line text, strings YAML would read as other types,
    long lines, empty containers."""
    assert output.dumper() is yaml.CSafeDumper  # PyYAML here is built with libyaml
    odd: dict[str, Any] = {
        "unicode": "zone-\u00e9\u00e8 \u2603 \U0001f680", "quotes": "it's \"quoted\"",
        "multiline": "line one\nline two\n  indented\n", "trailing": "space ",
        "lookalikes": ["yes", "no", "on", "null", "~", "1e3", "0123", "0x1f", "1.0", ""],
        "long": "x" * 5000, "colon": "a: b", "hash": "a #b", "dash": "- a",
        "empty": {}, "emptylist": [], "nested": [[1, 2], {"k": [None, True, 1.5]}],
        "ints": [0, -1, 2**63], "tab": "a\tb", "control": "bell\x07",
    }
    objs = [*secret_cluster(), {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "odd", "namespace": "default",
                                              "annotations": {"k": "v\u00e9"}},
                                 "data": odd}]
    doc = snapshot.as_list(objs, redact_secrets=False)
    # The snapshot's settings (non-ASCII escaped): the same bytes.
    c = output.to_yaml(doc, sort_keys=True, allow_unicode=False, dumper_cls=yaml.CSafeDumper)
    py = output.to_yaml(doc, sort_keys=True, allow_unicode=False, dumper_cls=yaml.SafeDumper)
    assert c == py
    # (Reports allow unicode; there libyaml writes a character beyond the BMP as it is,
    # where the Python emitter escapes it: the one difference, and both read back alike.)
    c = output.to_yaml(doc, allow_unicode=True, dumper_cls=yaml.CSafeDumper)
    py = output.to_yaml(doc, allow_unicode=True, dumper_cls=yaml.SafeDumper)
    assert yaml.safe_load(c) == yaml.safe_load(py) == doc
    assert snapshot.dump(doc, "yaml") == output.to_yaml(
        doc, sort_keys=True, allow_unicode=False, dumper_cls=yaml.SafeDumper)
    assert yaml.safe_load(snapshot.dump(doc, "yaml")) == doc
