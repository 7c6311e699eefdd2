"""`polsched version`: the installed distribution's version, as pip recorded it."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

POLSCHED = str(Path(sys.executable).parent / "polsched")


def test_version_prints_the_package_metadata_version() -> None:
    out = subprocess.run([POLSCHED, "version"], capture_output=True, text=True, check=True)
    assert out.stdout == f"polsched {metadata.version('polsched')}\n"
    out = subprocess.run([POLSCHED, "version", "--short"], capture_output=True, text=True,
                         check=True)
    assert out.stdout == f"{metadata.version('polsched')}\n"
