"""The `polsched` command: a thin dispatcher over subcommands.

Each subcommand lives in its own module and is imported only when it runs, so that
`polsched validate` starts fast and needs no cluster libraries. To add one, write an
`_add_<name>(subparsers)` that registers its arguments and sets `func` to a callable
taking the parsed namespace and returning the exit code, and call it in `build_parser`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from polsched import __version__


def _run_validate(args: argparse.Namespace) -> int:
    from polsched.api import validate_files

    return validate_files.run(args.paths, verbose=args.verbose)


def _add_validate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "validate",
        help="check SchedulingPolicy manifests offline (schema and semantics)",
        description="Check SchedulingPolicy manifests against the CRD schema and the same "
                    "rules the operator applies. Prints `file:doc-index: path: message` per "
                    "problem; exits 1 if there is any. Directories are walked for *.yaml and "
                    "*.yml; `-` reads standard input; documents of other kinds are skipped.",
    )
    p.add_argument("paths", nargs="+", metavar="FILE|DIR", help="manifests to check")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also say which documents were valid or skipped")
    p.set_defaults(func=_run_validate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="polsched",
        description="A Kubernetes-native scheduler driven by SchedulingPolicy resources.")
    parser.add_argument("--version", action="version", version=f"polsched {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_validate(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
