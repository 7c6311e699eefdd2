"""Kubernetes resource.Quantity for DRA: exact values, comparison and the canonical text.

Capacities, counters and capacity requests in ResourceSlices and ResourceClaims are
quantities. The allocator compares and adds them exactly (Decimal, as apimachinery's
inf.Dec does) and writes consumed capacity back in the canonical form that
resource.Quantity.String() produces (CanonicalizeBytes), so a result we write reads the
same as one kube-scheduler writes. Pure data: no I/O.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from polsched.framework.resources import QuantityError, parse_quantity

# Enough digits for any quantity the API server accepts (int64 scaled by 10^-9..10^18).
_CTX = decimal.Context(prec=60)

BINARY_SI = "BinarySI"
DECIMAL_SI = "DecimalSI"
DECIMAL_EXPONENT = "DecimalExponent"

_BINARY = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


def _format_of(text: str) -> str:
    t = text.strip()
    if t.endswith("i"):
        return BINARY_SI
    if any(c in "eE" for c in t.lstrip("+-")):
        return DECIMAL_EXPONENT
    return DECIMAL_SI


@dataclass(frozen=True, slots=True)
class Quantity:
    """An exact quantity and the format (suffix family) it was written in."""

    value: Decimal
    format: str = DECIMAL_SI

    @staticmethod
    def parse(raw: Any) -> Quantity:
        """A quantity from its wire form ("1Gi", "500m", 2); QuantityError when malformed."""
        if isinstance(raw, Quantity):
            return raw
        text = str(raw)
        with decimal.localcontext(_CTX):
            return Quantity(+parse_quantity(text), _format_of(text))

    def __str__(self) -> str:
        return canonical(self.value, self.format)

    def cmp(self, other: Quantity) -> int:
        return (self.value > other.value) - (self.value < other.value)

    def add(self, other: Quantity) -> Quantity:
        with decimal.localcontext(_CTX):
            return Quantity(self.value + other.value, self.format)

    def sub(self, other: Quantity) -> Quantity:
        with decimal.localcontext(_CTX):
            return Quantity(self.value - other.value, self.format)

    def sign(self) -> int:
        return (self.value > 0) - (self.value < 0)

    def milli(self) -> int:
        """MilliValue(): rounded up (away from zero for positive, as apimachinery)."""
        with decimal.localcontext(_CTX):
            return int((self.value * 1000).to_integral_value(rounding=decimal.ROUND_CEILING))

    def int_value(self) -> int:
        """Value(): rounded up to an integer."""
        with decimal.localcontext(_CTX):
            return int(self.value.to_integral_value(rounding=decimal.ROUND_CEILING))


ZERO = Quantity(Decimal(0))


def canonical(value: Decimal, fmt: str) -> str:
    """resource.Quantity.String(): CanonicalizeBytes for the value and format."""
    with decimal.localcontext(_CTX):
        if value == 0:
            return "0"
        if fmt == BINARY_SI:
            if -1024 < value < 1024 or value != value.to_integral_value():
                fmt = DECIMAL_SI
            else:
                n = int(value)
                neg = n < 0
                n = abs(n)
                suffix = ""
                for s in _BINARY:
                    if n % 1024 or n < 1024:
                        break
                    n //= 1024
                    suffix = s
                return f"{'-' if neg else ''}{n}{suffix}"
        # Decimal: mantissa * 10^exp with exp a multiple of 3, the mantissa an integer;
        # values finer than nano round up to nano, as apimachinery does.
        sign, digits, exponent = value.as_tuple()
        assert isinstance(exponent, int)
        mantissa = int("".join(map(str, digits)) or "0")
        exp = exponent
        if exp < -9:
            scaled = (Decimal(mantissa).scaleb(exp + 9)).to_integral_value(
                rounding=decimal.ROUND_CEILING if not sign else decimal.ROUND_FLOOR)
            mantissa, exp = int(abs(scaled)), -9
        while mantissa and mantissa % 10 == 0:
            mantissa //= 10
            exp += 1
        # Bring the exponent down to a multiple of 3.
        while exp % 3:
            mantissa *= 10
            exp -= 1
        if fmt == DECIMAL_EXPONENT:
            text = f"{mantissa}" if exp == 0 else f"{mantissa}e{exp}"
        else:
            while exp > 18:
                mantissa *= 1000
                exp -= 3
            text = f"{mantissa}{_DECIMAL[exp]}"
        return f"-{text}" if sign else text


__all__ = ["Quantity", "QuantityError", "ZERO", "canonical", "BINARY_SI", "DECIMAL_SI",
           "DECIMAL_EXPONENT"]
