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


def admits_default_scheduler(rule: dict[str, Any]) -> bool:
    """Whether `rule` (one of the schema's x-kubernetes-validations) is not the one
    that refuses schedulerName default-scheduler."""
    return "!= 'default-scheduler'" not in str(rule.get("rule", ""))


def crd_manifest_replacing_kube_scheduler() -> dict[str, Any]:
    """The CRD without its rule refusing schedulerName default-scheduler, for a cluster
    whose admin runs polsched instead of kube-scheduler (polsched run
    --allow-default-scheduler-name; docs/replacing-kube-scheduler.md). A CRD's CEL rule
    cannot read the operator's flags, so this layer's opt-in is which CRD the admin
    installs; the webhook and the operator still refuse the name without the flag."""
    import copy

    out = copy.deepcopy(crd_manifest())
    for v in out["spec"]["versions"]:
        schema = v["schema"]["openAPIV3Schema"]
        schema["x-kubernetes-validations"] = [
            r for r in schema.get("x-kubernetes-validations", ()) if admits_default_scheduler(r)]
        if not schema["x-kubernetes-validations"]:
            del schema["x-kubernetes-validations"]
    return out
