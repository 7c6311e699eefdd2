"""api.validate_files.check_policy: the loader's problems, then the schema's on other
fields, one per field."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.api import PolicyError, crd, load_policy
from polsched.api.validate_files import check_policy, pruned_nulls, schema_errors
from polsched.plugins import CATALOG

pytestmark = pytest.mark.unit


def _overlaps(a: str, b: str) -> bool:
    """The rule, pairwise: one path is the other or contains it."""
    if a == b:
        return True
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return long.startswith(short) and long[len(short)] in ".["


def test_schema_problems_on_the_loaders_fields_or_around_or_inside_them_are_dropped() -> None:
    # 100 scorers past maxItems (the schema, around the loader's per-entry problems),
    # weights of the wrong type (both, on the same field), a filter's unknown args (the
    # loader at args, the schema inside), and a status field only the schema checks.
    obj: dict[str, Any] = {
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "p"},
        "spec": {"scorers": [{"name": "SchedulingGates", "weight": "3"}] * 100,
                 "filters": [{"name": "NodeName", "args": {"x": {"y": 1}}}]},
        "status": {"boundPods": "many"}}
    with pytest.raises(PolicyError) as err:
        load_policy(obj, CATALOG)
    semantic = list(err.value.errors)
    want = semantic + [e for e in schema_errors(obj)
                       if not any(_overlaps(e.path, s.path) for s in semantic)]
    got = check_policy(obj, CATALOG)
    assert got == want
    extra = [e.path for e in got[len(semantic):]]
    assert "status.boundPods" in extra
    assert len(extra) < len(schema_errors(obj))  # some were the loader's, or around them


def test_nulls_in_declared_fields_are_pruned_as_the_api_server_does() -> None:
    # A fuzz finding (seed 2028): `spec: null`, which the API server admits as no spec
    # (it prunes a null of a field that is not nullable) and the loader loads, was a
    # schema error for `polsched validate`.
    obj: dict[str, Any] = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                           "metadata": {"name": "p"}, "spec": None}
    assert check_policy(obj, CATALOG) == []
    obj["spec"] = {"scorers": None, "filters": [
        {"name": "NodeLabel", "args": {"requirements": [], "x": None}}]}
    assert pruned_nulls(obj, crd.openapi_schema())["spec"] == {"filters": [
        {"name": "NodeLabel", "args": {"requirements": [], "x": None}}]}  # args: preserved
    assert [e.path for e in check_policy(obj, CATALOG)] == ["spec.filters[0].args.x"]
