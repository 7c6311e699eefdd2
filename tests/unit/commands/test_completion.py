"""`polsched completion`: the scripts complete what the parser accepts. bash is run as
bash-completion's own tests run it: the function called with COMP_WORDS and COMP_CWORD
set, COMPREPLY read back."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from polsched.commands import cli

pytestmark = pytest.mark.unit

POLSCHED = Path(sys.executable).parent / "polsched"
SUBCOMMANDS = list(next(a for a in cli.build_parser()._actions
                        if a.dest == "command").choices or ())


def script(shell: str) -> str:
    p = subprocess.run([str(POLSCHED), "completion", shell], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    f = tmp_path_factory.mktemp("completion") / "polsched.bash"
    f.write_text(script("bash"))
    return f


def complete(bash_script: Path, *words: str, cwd: Path | None = None) -> list[str]:
    """COMPREPLY for the command line `words` (the last one is being completed)."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    program = (f"source {bash_script}\n"
               f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
               "COMP_LINE=\"${COMP_WORDS[*]}\"; COMP_POINT=${#COMP_LINE}\n"
               "_polsched\n"
               "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], capture_output=True,
                       text=True, timeout=30, cwd=cwd)
    assert p.returncode == 0, p.stderr
    return [w for w in p.stdout.splitlines() if w]


def test_bash_completes_the_subcommands(bash_script: Path) -> None:
    assert {"validate", "explain", "snapshot", "simulate", "completion"} <= set(SUBCOMMANDS)
    assert complete(bash_script, "polsched", "") == [*SUBCOMMANDS, "-h", "--help",
                                                     "--version"]
    assert complete(bash_script, "polsched", "s") == ["snapshot", "simulate", "scheduler"]
    # As kubectl hands a plugin's words over, and as the plugin's own name.
    assert complete(bash_script, "kubectl", "polsched", "ex") == ["explain"]
    assert complete(bash_script, "kubectl-polsched", "comp") == ["completion"]


def test_bash_completes_options_their_choices_and_files(bash_script: Path,
                                                         tmp_path: Path) -> None:
    assert complete(bash_script, "polsched", "simulate", "-o", "") == [
        "table", "json", "yaml", "markdown"]
    assert "--context" in complete(bash_script, "polsched", "explain", "--c")
    assert complete(bash_script, "polsched", "completion", "") == ["bash", "zsh", "fish"]
    (tmp_path / "policy.yaml").write_text("")
    assert complete(bash_script, "polsched", "simulate", "-f", "pol", cwd=tmp_path) == [
        "policy.yaml"]
    assert complete(bash_script, "polsched", "validate", "p", cwd=tmp_path) == [
        "policy.yaml"]


def test_bash_registers_both_command_names(bash_script: Path) -> None:
    p = subprocess.run(["bash", "--norc", "-c", f"source {bash_script}; complete -p"],
                       capture_output=True, text=True, timeout=30)
    registered = p.stdout.splitlines()
    assert "complete -o default -F _polsched polsched" in registered, p.stdout
    assert "complete -o default -F _polsched kubectl-polsched" in registered, p.stdout


def test_every_option_of_every_subcommand_is_in_the_script() -> None:
    text = script("bash")
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():  # type: ignore[union-attr]
        for action in p._actions:
            for opt in action.option_strings:
                assert f" {opt}" in text, (name, opt)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_loads_the_script_and_registers_it(tmp_path: Path) -> None:
    f = tmp_path / "polsched.zsh"
    f.write_text(script("zsh"))
    p = subprocess.run(["zsh", "-f", "-c", f"source {f}; print -r -- $_comps[polsched]"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "_polsched" in p.stdout, p.stdout + p.stderr


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_the_subcommands_and_choices(tmp_path: Path) -> None:
    f = tmp_path / "polsched.fish"
    f.write_text(script("fish"))

    def fish(line: str) -> list[str]:
        p = subprocess.run(["fish", "--no-config", "-c", f"source {f}; complete -C '{line}'"],
                           capture_output=True, text=True, timeout=60,
                           env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
        assert p.returncode == 0, p.stderr
        return [w.split("\t")[0] for w in p.stdout.splitlines()]

    assert set(fish("polsched s")) == {"snapshot", "simulate", "scheduler"}
    assert fish("polsched simulate -o ") == ["json", "markdown", "table", "yaml"]


def test_kubectl_hands_plugin_completion_to_kubectl_complete_polsched() -> None:
    """kubectl's completion (`kubectl __complete`, what its shell scripts call) runs the
    plugin's kubectl_complete-polsched found on PATH and passes its candidates on."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    env = {"PATH": f"{POLSCHED.parent}:/usr/bin:/bin", "HOME": "/nonexistent"}

    def ask(*words: str) -> tuple[list[str], str]:
        p = subprocess.run([kubectl, "__complete", "polsched", *words], capture_output=True,
                           text=True, env=env, timeout=60)
        assert p.returncode == 0, p.stderr
        *found, directive = p.stdout.splitlines()
        return found, directive

    assert ask("s") == (["snapshot", "simulate", "scheduler"], ":4")
    assert ask("explain", "-o", "") == (["table", "json", "yaml"], ":4")
    # A file is expected: no candidate, and the shell's file completion (directive 0).
    assert ask("simulate", "--snapshot", "") == ([], ":0")
