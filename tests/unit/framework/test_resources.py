"""Quantities and pod requests, after component-helpers/resource/helpers_test.go."""

from __future__ import annotations

import pytest

from polsched.framework.resources import QuantityError, parse_quantity, pod_requests, to_int


@pytest.mark.parametrize(("q", "cpu", "mem"), [
    ("500m", 500, 1), ("2", 2000, 2), ("1.5", 1500, 2), ("1Gi", 1024**3 * 1000, 1024**3),
    ("100Mi", 100 * 2**20 * 1000, 100 * 2**20), ("1e3", 1_000_000, 1000), ("1k", 1_000_000, 1000),
    ("0.1m", 1, 1),
])
def test_quantity_rounds_up_like_milli_value(q: str, cpu: int, mem: int) -> None:
    assert to_int("cpu", q) == cpu
    assert to_int("memory", q) == mem


@pytest.mark.parametrize("bad", ["", "abc", "1Zi", "--1", "1.2.3"])
def test_bad_quantity_is_refused(bad: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def c(cpu: str | None = None, mem: str | None = None, restart: str | None = None) -> dict:  # type: ignore[type-arg]
    req = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v is not None}
    out: dict = {"name": "c", "resources": {"requests": req}}  # type: ignore[type-arg]
    if restart:
        out["restartPolicy"] = restart
    return out


def test_requests_sum_containers_and_take_max_of_init() -> None:
    spec = {"containers": [c("500m", "1Gi"), c("250m")], "initContainers": [c("1", "100Mi")]}
    assert pod_requests(spec) == {"cpu": 1000, "memory": 1024**3}


def test_sidecars_add_to_containers_and_to_later_init_containers() -> None:
    spec = {"containers": [c("1")],
            "initContainers": [c("200m", restart="Always"), c("1500m")]}
    # app 1 + sidecar 0.2 = 1.2; init 1.5 + sidecar 0.2 = 1.7 -> 1.7
    assert pod_requests(spec)["cpu"] == 1700


def test_overhead_is_added() -> None:
    spec = {"containers": [c("100m")], "overhead": {"cpu": "50m"}}
    assert pod_requests(spec)["cpu"] == 150


def test_non_zero_defaults_apply_only_to_missing_requests() -> None:
    spec = {"containers": [c(), c("0")]}
    got = pod_requests(spec, non_zero=True)
    # first container: defaults 100m / 200Mi; second: cpu explicitly 0, memory default
    assert got == {"cpu": 100, "memory": 2 * 200 * 2**20}


@pytest.mark.parametrize("huge", ["1e999999999", "1E-999999999", "1e1001"])
def test_quantity_beyond_bounds_is_a_quantity_error_not_overflow(huge: str) -> None:
    # decimal.Overflow is an ArithmeticError: callers catching QuantityError missed it.
    with pytest.raises(QuantityError):
        to_int("memory", huge)
