"""Fixtures for the extender tests: real HTTP extenders on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.unit.extender.fake_extender import FakeExtender, Route

StartExtender = Callable[..., FakeExtender]


@pytest.fixture
def start_extender() -> Iterator[StartExtender]:
    """start_extender({"/filter": fn, ...}, port=0) -> a running FakeExtender, stopped
    (and its hanging handlers released) when the test ends."""
    started: list[FakeExtender] = []

    def start(routes: dict[str, Route], port: int = 0, **_: Any) -> FakeExtender:
        ext = FakeExtender(routes, port=port).start()
        started.append(ext)
        return ext

    yield start
    for ext in started:
        ext.stop()
