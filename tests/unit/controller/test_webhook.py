"""polsched.controller.webhook: the admission check is the loader's, with field paths."""

from __future__ import annotations

import kopf
import pytest

from polsched.controller.webhook import validate_policy

pytestmark = pytest.mark.unit


def test_an_invalid_policy_is_refused_with_its_field_path() -> None:
    body = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": "p"},
            "spec": {"filters": [{"name": "NodeLabel", "args": {"requirements": [
                {"key": "zone", "operator": "Near", "values": ["a"]}]}}]}}
    with pytest.raises(kopf.AdmissionError) as err:
        validate_policy(body)
    assert "spec.filters[0].args.requirements[0].operator" in str(err.value)
    assert err.value.code == 422


def test_a_valid_policy_is_admitted() -> None:
    validate_policy({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                     "metadata": {"name": "p"}, "spec": {}})
