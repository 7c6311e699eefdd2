"""The example policies in policies/ are valid, as `polsched validate` says and as the
operator would load them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
POLSCHED = Path(sys.executable).parent / "polsched"
EXAMPLES = ["label-priority.yaml", "cel-rules.yaml", "bin-packing.yaml", "zone-spread.yaml",
            "gpu-isolation.yaml", "extender/policy.yaml"]


def test_polsched_validate_policies_dir_passes() -> None:
    p = subprocess.run([str(POLSCHED), "validate", "-v", str(ROOT / "policies")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    for f in EXAMPLES:
        assert re.search(rf"{re.escape(f)}:\d+: SchedulingPolicy", p.stdout), \
            f"{f} was not validated"


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_example_says_what_it_shows(name: str) -> None:
    text = (ROOT / "policies" / name).read_text()
    assert text.startswith("#"), f"policies/{name} needs a comment header"
