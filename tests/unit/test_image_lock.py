"""The image installs hack/image/requirements.txt, not pyproject.toml: every runtime pin of
pyproject.toml must be in that lock at the same version, or the image starts without it
(orjson was pinned in pyproject.toml but not locked, and the in-cluster operator crashed
on import). Regenerate the lock with `hack/image.sh lock`."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _name(n: str) -> str:
    return re.sub(r"[-_.]+", "-", n).lower()


def _locked() -> dict[str, str]:
    text = (ROOT / "hack/image/requirements.txt").read_text()
    return {_name(m[1]): m[2] for m in re.finditer(r"^([A-Za-z0-9_.\-]+)==(\S+)", text, re.M)}


def test_every_runtime_pin_is_in_the_image_lock_at_the_same_version() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    locked = _locked()
    missing = []
    for dep in deps:
        name, _, version = dep.partition("==")
        assert version, f"pyproject.toml dependency {dep!r} is not pinned with =="
        if locked.get(_name(name)) != version:
            missing.append(f"{dep} (lock has {locked.get(_name(name), 'nothing')})")
    assert not missing, (
        "hack/image/requirements.txt does not match pyproject.toml for: "
        + ", ".join(missing)
        + "; run hack/image.sh lock"
    )


def test_every_locked_package_carries_a_hash() -> None:
    text = (ROOT / "hack/image/requirements.txt").read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n\n", 1)[1].strip())
    assert entries and all("--hash=sha256:" in e for e in entries), entries
