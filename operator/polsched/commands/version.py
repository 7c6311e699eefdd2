"""`polsched version`: the installed version, from the package's metadata (what pip and
the image recorded at install), so a release build and its image say the same."""

from __future__ import annotations

import argparse
from importlib import metadata

import polsched

DISTRIBUTION = "polsched"


def installed() -> str:
    """The distribution's version; the source tree's `__version__` when polsched runs from a
    checkout that was never installed (PYTHONPATH=operator)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return polsched.__version__


def run(args: argparse.Namespace) -> int:
    print(installed() if args.short else f"polsched {installed()}")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("version", help="print polsched's version",
                       description="Print the installed polsched's version (package metadata).")
    p.add_argument("--short", action="store_true", help="the version alone, without the name")
    p.set_defaults(func=run)
