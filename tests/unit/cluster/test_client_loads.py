"""cluster.client.loads: orjson's decode, json's where orjson refuses."""

from __future__ import annotations

import json

import pytest

from polsched.cluster.client import ApiError, _watch_event, loads

pytestmark = pytest.mark.unit


def test_loads_decodes_as_json_does() -> None:
    raw = json.dumps({"type": "MODIFIED", "object": {
        "metadata": {"name": "p", "labels": {"a": "é"}, "generation": 3},
        "spec": {"priority": -5, "overhead": None, "ratio": 0.25, "ok": True,
                 "items": [1, "x", {}]}}}).encode()
    assert loads(raw) == json.loads(raw)
    assert loads(raw.decode()) == json.loads(raw)


def test_loads_falls_back_to_json_where_orjson_refuses() -> None:
    # A lone surrogate escape: json decodes it, orjson does not.
    assert loads(b'{"note":"\\ud800"}') == {"note": "\ud800"}


def test_loads_raises_value_error_on_bad_json() -> None:
    with pytest.raises(ValueError):
        loads(b'{"a":')


def test_watch_event_error_raises_api_error() -> None:
    line = b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired",' \
        b'"message":"too old resource version"}}'
    with pytest.raises(ApiError) as got:
        _watch_event(line)
    assert got.value.status == 410 and got.value.reason == "Expired"
    assert _watch_event(b'{"type":"ADDED","object":{"metadata":{"name":"n"}}}') == (
        "ADDED", {"metadata": {"name": "n"}})
