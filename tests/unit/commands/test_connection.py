"""kubectl's connection flags: the namespace comes from the flag, else the context, else
`default`; --context picks another context; --as becomes Impersonate-* headers."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from polsched.commands import cli, connection

pytestmark = pytest.mark.unit


def kubeconfig(path: Path, current: str | None, contexts: dict[str, str | None]) -> Path:
    doc = {"apiVersion": "v1", "kind": "Config",
           "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
           "users": [{"name": "u", "user": {"token": "t"}}],
           "contexts": [{"name": name, "context": {"cluster": "c", "user": "u",
                                                   **({"namespace": ns} if ns else {})}}
                        for name, ns in contexts.items()]}
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["explain", "p", *argv])


def test_namespace_is_the_flag_else_the_contexts_else_default(tmp_path: Path) -> None:
    kc = kubeconfig(tmp_path / "kc", "dev", {"dev": "team-a", "ops": None})
    assert connection.namespace(parse("--kubeconfig", str(kc))) == "team-a"
    assert connection.namespace(parse("--kubeconfig", str(kc), "-n", "x")) == "x"
    assert connection.namespace(parse("--kubeconfig", str(kc), "--namespace", "y")) == "y"
    # A context without a namespace means default, as in kubectl.
    assert connection.namespace(parse("--kubeconfig", str(kc), "--context", "ops")) == \
        "default"


def test_kubeconfig_env_lists_are_merged_first_one_wins(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    a = kubeconfig(tmp_path / "a", None, {"other": "from-a"})
    b = kubeconfig(tmp_path / "b", "dev", {"dev": "from-b", "other": "from-b"})
    monkeypatch.setenv("KUBECONFIG", f"{a}:{b}")
    assert connection.namespace(parse()) == "from-b"  # current-context only in b
    assert connection.namespace(parse("--context", "other")) == "from-a"  # a's first
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert connection.namespace(parse()) == "default"


def test_as_and_as_group_become_impersonation_headers() -> None:
    assert connection.impersonation(parse()) == []
    assert connection.impersonation(parse("--as", "jane", "--as-group", "dev",
                                          "--as-group", "ops")) == [
        ("Impersonate-User", "jane"), ("Impersonate-Group", "dev"),
        ("Impersonate-Group", "ops")]
    with pytest.raises(SystemExit, match="--as-group needs --as"):
        connection.impersonation(parse("--as-group", "dev"))


def test_every_command_that_talks_to_a_cluster_takes_kubectls_flags() -> None:
    parser = cli.build_parser()
    for argv in (["explain", "p"], ["snapshot"], ["simulate", "-f", "x"]):
        args = parser.parse_args([*argv, "--context", "c", "--kubeconfig", "k", "--as", "u"])
        assert (args.context, args.kubeconfig, args.as_user) == ("c", "k", "u"), argv
    for argv in (["explain", "p"], ["snapshot"], ["simulate", "-f", "x"], ["validate", "f"]):
        assert parser.parse_args([*argv, "-o", "yaml"]).output == "yaml", argv


def test_the_kubectl_plugin_names_itself_kubectl_polsched(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"], prog=cli.KUBECTL_PROG)
    assert capsys.readouterr().out.startswith("usage: kubectl polsched ")
