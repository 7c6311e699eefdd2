"""`make release` (hack/release.sh): the artefacts of a version, with the version stamped
into them and not into the checkout. The image archive is left out here (root, minutes:
make test-install builds the same image with hack/image.sh); everything else is made as
`make release` makes it, with the real helm and the pinned SBOM generator that the
Makefile installs before the tests."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.unit, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.0.0-rc.1"
REPO = "registry.example.com/team/polsched"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "RELEASE_DIST": str(out), "RELEASE_SKIP_IMAGE": "1",
           "IMAGE_REPO": REPO, "PY": sys.executable}
    before = {f: (ROOT / f).read_bytes() for f in ("pyproject.toml", "charts/polsched/Chart.yaml",
                                                  "charts/polsched/values.yaml",
                                                  "operator/polsched/__init__.py")}
    p = subprocess.run([str(ROOT / "hack" / "release.sh"), VERSION], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert Path(p.stdout.strip()) == out / VERSION
    # The version went into a copy of the tree, never into the checkout.
    assert before == {f: (ROOT / f).read_bytes() for f in before}
    return out / VERSION


def render_operator(*args: str) -> list[dict[str, Any]]:
    p = subprocess.run([str(Path(sys.executable).parent / "polsched"), "render", "operator",
                        *args], capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def test_the_one_file_install_is_render_operator_with_the_releases_image(dist: Path) -> None:
    objs = [d for d in yaml.safe_load_all((dist / "polsched.yaml").read_text()) if d]
    assert objs == render_operator("--image", f"{REPO}:{VERSION}")


def test_the_packaged_chart_carries_the_version_the_image_and_the_crd(dist: Path) -> None:
    with tarfile.open(dist / f"polsched-{VERSION}.tgz") as t:
        def read(name: str) -> str:
            f = t.extractfile(f"polsched/{name}")
            assert f is not None, name
            return f.read().decode()
        chart = yaml.safe_load(read("Chart.yaml"))
        values = yaml.safe_load(read("values.yaml"))
        # files/ links to crds/ and manifests/rbac: the archive holds their content.
        assert read("files/schedulingpolicy.yaml") == \
            (ROOT / "crds/schedulingpolicy.yaml").read_text()
        assert read("files/rbac/operator.yaml") == \
            (ROOT / "manifests/rbac/operator.yaml").read_text()
    assert chart["version"] == chart["appVersion"] == VERSION
    assert values["image"]["repository"] == REPO


def requirements() -> dict[str, str]:
    text = (ROOT / "hack/image/requirements.txt").read_text()
    return {m[1].lower().replace("_", "-"): m[2]
            for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)}


def test_the_sbom_lists_polsched_and_every_package_of_the_image(dist: Path) -> None:
    bom = json.loads((dist / f"polsched-{VERSION}.cdx.json").read_text())
    assert bom["bomFormat"] == "CycloneDX"
    root = bom["metadata"]["component"]
    assert root["name"] == "polsched"
    components = {c["name"].lower().replace("_", "-"): c["version"]
                  for c in bom["components"]}
    # Every locked dependency of the image, at its locked version; the generator's own
    # packages are not there (it runs from a virtualenv of its own).
    assert requirements().items() <= components.items()
    assert "cyclonedx-bom" not in components and "pytest" not in components


def test_the_changelog_and_checksums_are_there(dist: Path) -> None:
    assert (dist / "CHANGELOG.md").read_text() == (ROOT / "CHANGELOG.md").read_text()
    sums: dict[str, str] = {}
    for line in (dist / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        sums[name] = digest
    assert set(sums) == {p.name for p in dist.iterdir()} - {"SHA256SUMS"}
    for name, digest in sums.items():
        assert hashlib.sha256((dist / name).read_bytes()).hexdigest() == digest, name


def test_a_version_that_is_not_semver_is_refused(tmp_path: Path) -> None:
    p = subprocess.run([str(ROOT / "hack" / "release.sh"), "v1.2"], capture_output=True,
                       text=True, env={**os.environ, "RELEASE_DIST": str(tmp_path)})
    assert p.returncode != 0 and "is not x.y.z" in p.stderr
    assert not list(tmp_path.iterdir())
