"""Quantities keep resource.Quantity's canonical text, which is what we write back as
consumed capacity."""

from __future__ import annotations

import pytest

from polsched.dra.quantity import Quantity

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("raw, text", [
    ("1Gi", "1Gi"), ("1024Mi", "1Gi"), ("1.5Gi", "1536Mi"), ("1023", "1023"),
    ("200m", "200m"), ("0.2", "200m"), ("1000", "1k"), ("1500", "1500"), ("1e3", "1e3"),
    ("0", "0"), ("1n", "1n"), ("-2Ki", "-2Ki"), ("0.1Gi", "107374182400m"),
])
def test_canonical_text(raw: str, text: str) -> None:
    assert str(Quantity.parse(raw)) == text


def test_arithmetic_is_exact() -> None:
    a, b = Quantity.parse("100m"), Quantity.parse("200m")
    assert a.add(b).cmp(Quantity.parse("300m")) == 0
    assert Quantity.parse("1Gi").cmp(Quantity.parse("1073741824")) == 0
    assert Quantity.parse("1001m").int_value() == 2
