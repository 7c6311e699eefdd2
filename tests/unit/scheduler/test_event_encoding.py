"""The Binding and Event bytes the binder and the recorder post are exactly the compact JSON
of the objects (binder.binding, recorder.event_body), and the time formats match datetime's."""

from __future__ import annotations

import datetime as dt
import json
import random

import pytest

from polsched.framework.types import PodInfo
from polsched.scheduler import binder, recorder
from tests.builders import make_pod

pytestmark = pytest.mark.unit


def pod(name: str, namespace: str = "ns", uid: str = "u-1", rv: str = "42") -> PodInfo:
    return (make_pod().name(name).namespace(namespace).uid(uid).resource_version(rv)
            .container(image="i").info())


@pytest.mark.parametrize("note", [
    "Successfully assigned ns/p to node-1",
    'a "quoted" note with \\ backslash, tab\t and newline\n',
    "unicode: pods ‘p’ → nœud ✓ 🙂",
    "",
])
@pytest.mark.parametrize("related", [False, True])
def test_encoded_event_is_the_compact_json_of_the_event(note: str, related: bool) -> None:
    regarding = pod("p-\u00e9", uid="5f6b", rv="")
    other = pod("preemptor", namespace="other", uid="9", rv="7") if related else None
    record = recorder.EventRecord(
        "p.187a", "ns", "2026-11-23T06:00:00.123456Z", "bench-polsched",
        "bench-polsched-host", "Binding", "Scheduled", regarding, note, "Normal", other)
    want = json.dumps(recorder.event_body(record), separators=(",", ":")).encode()
    assert recorder.encode_event(record) == want
    assert json.loads(recorder.encode_event(record))["note"] == note


def test_micro_time_and_rfc3339_match_datetime() -> None:
    rng = random.Random(7)
    stamps = [0.0, 1.0, 1763877600.0, 1763877600.9999996, 1763877600.0000004,
              *(rng.uniform(1.6e9, 1.9e9) for _ in range(2000))]
    for t in stamps:
        d = dt.datetime.fromtimestamp(t, dt.UTC)
        assert recorder.micro_time(t) == d.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), t
        assert recorder.rfc3339(t) == d.strftime("%Y-%m-%dT%H:%M:%SZ"), t


@pytest.mark.parametrize("annotations", [None, {}, {"polsched.io/x": 'a "b"'}])
def test_encoded_binding_is_the_compact_json_of_the_binding(
        annotations: dict[str, str] | None) -> None:
    p = pod("p-\u00e9\"q", namespace="ns-1", uid="0c2f")
    want = json.dumps(binder.binding(p, "node-\u2713", annotations),
                      separators=(",", ":")).encode()
    assert binder.encode_binding(p, "node-\u2713", annotations) == want
