"""`polsched completion bash|zsh|fish`: shell completion generated from the parser.

For: a static script per shell, written from the same argparse tree that parses the
command line (subcommands, each one's options, the choices of an option or positional
argument, file names where an argument is a FILE), so the completion cannot drift from
the options. It is generated rather than taken from argcomplete: argcomplete runs the
program on every TAB (a Python start-up and the parser, ~0.2 s here) and would be one
more dependency; a static script answers at once and needs nothing installed.

The scripts complete `polsched` and `kubectl-polsched`. `kubectl polsched <TAB>` is
completed by kubectl's own completion script, which asks the plugin's completion
executable `kubectl_complete-polsched` (a console script, cli.kubectl_complete: the same
tree answered in Python, with cobra's directive on the last line). zsh runs the bash
function through bashcompinit, as kubectl's zsh script once did: one generator, the same
answers in both shells.

What it must not do: import anything but argparse (it runs under `polsched --help`'s
budget).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

COMMANDS = ("polsched", "kubectl-polsched")
# Values asked of kubectl when it is there, as kubectl's own completion offers them.
_DYNAMIC = {
    "--context": "kubectl config get-contexts -o name 2>/dev/null",
    "--namespace": "kubectl get namespaces -o name 2>/dev/null | sed 's|^namespace/||'",
    "-n": "kubectl get namespaces -o name 2>/dev/null | sed 's|^namespace/||'",
}


@dataclass
class Command:
    """What the scripts need of one (sub)command."""

    name: str
    help: str = ""
    options: list[str] = field(default_factory=list)
    # option -> its choices, or None for a file name, for options that take a value
    values: dict[str, list[str] | None] = field(default_factory=dict)
    positional_choices: list[str] = field(default_factory=list)
    positional_files: bool = False


def _takes_file(a: argparse.Action) -> bool:
    return bool(re.search(r"FILE|DIR", str(a.metavar or "")))


def _command(name: str, parser: argparse.ArgumentParser, help_text: str = "") -> Command:
    cmd = Command(name, help_text)
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            continue
        if a.option_strings:
            cmd.options.extend(a.option_strings)
            if a.nargs != 0:
                values = [str(c) for c in a.choices] if a.choices else None
                if values is not None or _takes_file(a):
                    for o in a.option_strings:
                        cmd.values[o] = values
                else:
                    for o in a.option_strings:
                        cmd.values[o] = []  # a value, nothing to offer
        elif a.choices:
            cmd.positional_choices.extend(str(c) for c in a.choices)
        elif _takes_file(a):
            cmd.positional_files = True
    return cmd


def tree(parser: argparse.ArgumentParser) -> tuple[Command, list[Command]]:
    """The top-level command and its subcommands, in the parser's order."""
    top = _command("", parser)
    subs: list[Command] = []
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            helps = {c.dest: str(c.help or "") for c in a._choices_actions}
            for name, sub in a.choices.items():
                subs.append(_command(name, sub, helps.get(name, "")))
    return top, subs


def _words(xs: list[str]) -> str:
    return " ".join(xs)


def bash(parser: argparse.ArgumentParser) -> str:
    top, subs = tree(parser)
    lines = [
        "# bash completion for polsched (polsched completion bash); generated from its",
        "# argument parser. Load it with: source <(polsched completion bash)",
        "_polsched() {",
        "    local cur prev cmd i",
        '    cur="${COMP_WORDS[COMP_CWORD]}"',
        '    prev=""',
        '    (( COMP_CWORD > 0 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    cmd=""',
        "    for (( i = 1; i < COMP_CWORD; i++ )); do",
        '        case "${COMP_WORDS[i]}" in',
        '            polsched) (( i == 1 )) && continue ;;  # kubectl polsched ...',
        "            -*) continue ;;",
        "        esac",
        '        cmd="${COMP_WORDS[i]}"',
        "        break",
        "    done",
        '    if [[ -z "$cmd" ]]; then',
        f'        COMPREPLY=( $(compgen -W "{_words([s.name for s in subs] + top.options)}" '
        '-- "$cur") )',
        "        return 0",
        "    fi",
        '    case "$cmd" in',
    ]
    for s in subs:
        lines.append(f"        {s.name})")
        if s.values:
            lines.append('            case "$prev" in')
            for opt, values in s.values.items():
                if values is None:
                    action = 'COMPREPLY=( $(compgen -f -- "$cur") )'
                elif not values and opt in _DYNAMIC:
                    action = f'COMPREPLY=( $(compgen -W "$({_DYNAMIC[opt]})" -- "$cur") )'
                elif not values:
                    action = "COMPREPLY=()"
                else:
                    action = f'COMPREPLY=( $(compgen -W "{_words(values)}" -- "$cur") )'
                lines.append(f"                {opt}) {action}; return 0 ;;")
            lines.append("            esac")
        lines.append('            if [[ "$cur" == -* ]]; then')
        lines.append(f'                COMPREPLY=( $(compgen -W "{_words(s.options)}" '
                     '-- "$cur") )')
        if s.positional_choices:
            lines.append("            else")
            lines.append(f'                COMPREPLY=( $(compgen -W '
                         f'"{_words(s.positional_choices)}" -- "$cur") )')
        elif s.positional_files:
            lines.append("            else")
            lines.append('                COMPREPLY=( $(compgen -f -- "$cur") )')
        lines.append("            fi")
        lines.append("            ;;")
    lines += ["    esac", "    return 0", "}",
              f"complete -o default -F _polsched {' '.join(COMMANDS)}", ""]
    return "\n".join(lines)


def zsh(parser: argparse.ArgumentParser) -> str:
    return "\n".join([
        "#compdef polsched kubectl-polsched",
        "# zsh completion for polsched (polsched completion zsh): the bash function, run",
        "# through zsh's bashcompinit. Load it with: source <(polsched completion zsh)",
        "autoload -U +X compinit && compinit",
        "autoload -U +X bashcompinit && bashcompinit",
        bash(parser)])


def _fish_quote(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish(parser: argparse.ArgumentParser) -> str:
    top, subs = tree(parser)
    names = _words([s.name for s in subs])
    lines = ["# fish completion for polsched (polsched completion fish); generated from its",
             "# argument parser. Load it with: polsched completion fish | source"]
    for c in COMMANDS:
        lines.append(f"complete -c {c} -f")
        for s in subs:
            lines.append(f"complete -c {c} -n 'not __fish_seen_subcommand_from {names}' "
                         f"-a {s.name} -d {_fish_quote(s.help)}")
        for s in subs:
            cond = f"-n '__fish_seen_subcommand_from {s.name}'"
            for opt in s.options:
                flag = f"-l {opt[2:]}" if opt.startswith("--") else f"-s {opt[1:]}"
                if opt not in s.values:
                    extra = ""  # a flag
                elif (values := s.values[opt]) is None:
                    extra = " -rF"
                elif values:
                    extra = f" -xa {_fish_quote(_words(values))}"
                elif opt in _DYNAMIC:
                    extra = f" -xa {_fish_quote('(' + _DYNAMIC[opt] + ')')}"
                else:
                    extra = " -x"
                lines.append(f"complete -c {c} {cond} {flag}{extra}")
            if s.positional_choices:
                lines.append(f"complete -c {c} {cond} -a "
                             f"{_fish_quote(_words(s.positional_choices))}")
            elif s.positional_files:
                lines.append(f"complete -c {c} {cond} -F")
    return "\n".join(lines) + "\n"


SHELLS = {"bash": bash, "zsh": zsh, "fish": fish}

# cobra's ShellCompDirective values, which kubectl reads from a plugin's last line.
DIRECTIVE_DEFAULT = 0  # and file names when there is no candidate
DIRECTIVE_NO_FILE_COMP = 4


def candidates(parser: argparse.ArgumentParser, words: Sequence[str]
               ) -> tuple[list[str], int]:
    """What completes the last of `words` (the words after the command's name; the last
    one is being typed, "" for a new word), and cobra's directive for the shell."""
    top, subs = tree(parser)
    *before, cur = list(words) or [""]
    cmd = next((w for w in before if not w.startswith("-")), None)

    def starting(xs: Iterable[str]) -> list[str]:
        return [x for x in xs if x.startswith(cur)]

    if cmd is None:
        return starting([*(s.name for s in subs), *top.options]), DIRECTIVE_NO_FILE_COMP
    sub = next((s for s in subs if s.name == cmd), None)
    if sub is None:
        return [], DIRECTIVE_NO_FILE_COMP
    prev = before[-1]
    if prev != cmd and prev in sub.values:
        values = sub.values[prev]
        if values is None:
            return [], DIRECTIVE_DEFAULT  # a file
        return starting(values), DIRECTIVE_NO_FILE_COMP
    if cur.startswith("-"):
        return starting(sub.options), DIRECTIVE_NO_FILE_COMP
    if sub.positional_choices:
        return starting(sub.positional_choices), DIRECTIVE_NO_FILE_COMP
    return [], DIRECTIVE_DEFAULT if sub.positional_files else DIRECTIVE_NO_FILE_COMP


def kubectl_answer(parser: argparse.ArgumentParser, words: Sequence[str]) -> str:
    """What `kubectl_complete-polsched WORDS...` prints for kubectl: one candidate a line,
    then cobra's directive (kubectl/pkg/cmd/plugin/plugin_completion.go reads it)."""
    found, directive = candidates(parser, words)
    return "".join(f"{c}\n" for c in found) + f":{directive}\n"


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    return SHELLS[shell](parser)
