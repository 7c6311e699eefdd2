"""The SchedulingPolicy CRD manifest and its OpenAPI schema, read from the package.

One source of truth: crds/schedulingpolicy.yaml at the repository root. The package
reaches it through the symlink operator/polsched/crds -> ../../crds, which serves an
editable install directly; for a wheel, pyproject's package-data ("crds/*.yaml") makes
setuptools copy the file it points to into the package. So `polsched validate` checks
files against exactly the schema that `kubectl apply -f crds/` installs.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any, cast

import yaml

from polsched.api.model import GROUP, PLURAL, VERSION

CRD_FILE = "schedulingpolicy.yaml"
CRD_NAME = f"{PLURAL}.{GROUP}"


@functools.cache
def crd_manifest() -> dict[str, Any]:
    """The CustomResourceDefinition as a plain dict (cached; do not mutate)."""
    text = (resources.files("polsched") / "crds" / CRD_FILE).read_text(encoding="utf-8")
    return cast(dict[str, Any], yaml.safe_load(text))


def openapi_schema(version: str = VERSION) -> dict[str, Any]:
    """The structural openAPIV3Schema of `version`, a JSON Schema draft 4 subset plus
    x-kubernetes-* keys (which JSON Schema validators ignore)."""
    for v in crd_manifest()["spec"]["versions"]:
        if v["name"] == version:
            return cast(dict[str, Any], v["schema"]["openAPIV3Schema"])
    raise KeyError(f"{CRD_NAME} has no version {version!r}")
