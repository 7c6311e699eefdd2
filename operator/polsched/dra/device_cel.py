"""The DRA CEL environment: device selectors as Kubernetes evaluates them.

Upstream: k8s.io/dynamic-resource-allocation/cel (compile.go) on top of apiserver's base
environment (k8s.io/apiserver/pkg/cel/environment/base.go, v1.37). A selector sees one
variable, `device`:

- `device.driver`: the driver's name;
- `device.allowMultipleAllocations`: bool (consumable capacity);
- `device.attributes[domain][id]`: the device's attributes by domain (an attribute
  written without a domain gets the driver's name as domain); int, bool, string, or a
  semver for version attributes; a domain the device lacks reads as an empty map;
- `device.capacity[domain][id]`: the device's capacities, as quantities.

CEL itself comes from `common-expression-language` (a Rust core), which has no custom
types, no `cel.bind` macro and no Kubernetes libraries. This module adds them:

- `quantity(s)`, `isQuantity(s)` and the Quantity methods `sign`, `isGreaterThan`,
  `isLessThan`, `compareTo`, `add`, `sub` (quantity or int), `isInteger`, `asInteger`,
  `asApproximateFloat` (library/quantity.go);
- `semver(s)`, `semver(s, normalize)`, `isSemver(s[, normalize])` and `major`, `minor`,
  `patch`, `isGreaterThan`, `isLessThan`, `compareTo` (library/semverlib.go, version 1);
- the Kubernetes list library: `isSorted`, `sum`, `min`, `max`, `indexOf`,
  `lastIndexOf`, `includes` (library/lists.go, version 1);
- regex `find`, `findAll` (library/regex.go), on RE2 as upstream (polsched.cel.regex);
- `ip(s)`, `isIP`, `ip.isCanonical`, `family`, `isUnspecified`, `isLoopback`,
  `isLinkLocalMulticast`, `isLinkLocalUnicast`, `isGlobalUnicast`; `cidr(s)`, `isCIDR`,
  `containsIP`, `containsCIDR`, `ip()`, `prefixLength`, `masked` (library/ip.go, cidr.go);
- cel-go's ext.Strings (v2), ext.Sets and ext.Lists (v3) functions, from the package's
  stdlib where it has them;
- `cel.bind(name, init, body)` (ext.Bindings), by substituting `(init)` for `name` in
  `body` before compiling; CEL has no side effects, so the result is the same;
- optional selection and index (`m.?f`, `m[?k]`, also on an optional), as calls of
  helpers that return the core's OptionalValue; the plain selections and indexes
  chained after one (`m.?a.b` is an optional of the field, as cel-go's applyQualifiers);
  optional elements of list and map literals (`[a, ?b]`, `{?k: v}`) as concatenations
  of what is present; two-variable comprehensions (`all`, `exists`, `existsOne`,
  `transformList`, `transformMap`, `transformMapEntry` with an index or key and a value)
  as one-variable macros over the [key, value] pairs; the macros `sortBy` (ext.Lists),
  `optMap` and `optFlatMap` (the optional library) over the core's map(); `string()` of
  an IP, a CIDR or a bool (selector_syntax.rewrite_syntax); `optional.unwrap` / `unwrapOpt` as
  functions. A helper call evaluates its argument once, so these rewrites do not
  duplicate text; nested ones stay as long as they were written.

Quantities, semvers, IPs and CIDRs travel through CEL as one-key maps holding a
canonical text ({"__quantity__": "1073741824"}, {"__semver__": "1.2.3-rc.1"},
{"__ip__": "::1"}), so `==` between two of them is the semantic equality upstream's types
implement (1Gi == 1024Mi; semver build metadata ignored).

Known differences from cel-go, all outside what DRA drivers' documentation uses:
- no URL, format (`format.named`) and string `format()` libraries;
- a selection on an optional is optional (as cel-go) after a `.?` or `[?` chain, on a
  parenthesized expression or call that can yield one and on a cel.bind variable
  holding one (rewrite_optional_operands), but not on an optional taken out of a list or
  map (`[m.?a][0].b`, an error here);
- the core's map() (so also transformList and transformMap) unwraps an optional.of
  result (`[1].map(x, optional.of(x))` gives [1]);
- no type checker: what cel-go refuses at compile time (a transformMapEntry entry that
  is no map, mixed types in a literal under HomogeneousAggregateLiterals) fails, or
  not, when it runs; a map cannot hold both `true` and `1` as keys (Python's dict has
  them equal); sortBy sorts stably, Go's sort.Slice only for short lists;
- no cost tracking: instead of the runtime cost limit the length and the number of
  rewrites (MAX_REWRITES) are bounded and comprehensions (the rewritten ones too) may
  nest at most MAX_COMPREHENSION_DEPTH deep;
- the empty-map default for an unknown domain is provided for the domains the
  expression spells out (`device.attributes["gpu.example.com"]`, `[?"..."]`, `.?name`),
  which `size(device.attributes)` would notice. Runtime errors (a missing attribute, a type
mismatch) are errors, as upstream: the allocator reports them instead of treating the
device as unsuitable.
Pure data: no I/O.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cache, cmp_to_key
from typing import Any

from polsched.cel import regex as celregex
from polsched.cel import syntax as celsyntax
from polsched.dra.quantity import Quantity, QuantityError
from polsched.dra.selector_syntax import (
    MACROS,
    CELError,
    Token,
    expand_binds,
    rewrite_optional_operands,
    rewrite_syntax,
    tokenize,
)

# resourceapi.CELSelectorExpressionMaxLength
MAX_EXPRESSION_LENGTH = 10 * 1024
# The stand-in for upstream's runtime cost limit (CELSelectorExpressionMaxCost, 1e6): a
# list an expression can walk holds at most 64 values, and 64**3 steps stay below it.
MAX_COMPREHENSION_DEPTH = 3

_Q = "__quantity__"
_S = "__semver__"


@cache
def _cel() -> Any:
    import cel

    return cel


# --- Kubernetes CEL values -------------------------------------------------------------

def quantity_value(q: Quantity) -> dict[str, str]:
    return {_Q: format(q.value.normalize(), "f") if q.value else "0"}


def _as_quantity(v: Any, fn: str) -> Decimal:
    if isinstance(v, Mapping) and _Q in v:
        return Decimal(v[_Q])
    raise CELError(f"no such overload: {fn} applied to {_type_name(v)}")


@dataclass(frozen=True, slots=True)
class Semver:
    major: int
    minor: int
    patch: int
    pre: tuple[str, ...]
    build: str = ""

    def text(self) -> str:
        core = f"{self.major}.{self.minor}.{self.patch}"
        return core + ("-" + ".".join(self.pre) if self.pre else "")


_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$")


def parse_semver(s: str, normalize: bool = False) -> Semver:
    """blang/semver v4 Parse, with semverlib's normalizeAndParse when normalize."""
    if normalize:
        s = s.removeprefix("v")
        parts = s.split(".", 2)
        for i, p in enumerate(parts):
            if len(p) > 1:
                p = p.lstrip("0")
                if not p or not p[0].isdigit():
                    p = "0" + p
                parts[i] = p
        if len(parts) < 3:
            if any(c in parts[-1] for c in "+-"):
                raise CELError("short version cannot contain PreRelease/Build meta data")
            parts += ["0"] * (3 - len(parts))
        s = ".".join(parts)
    m = _SEMVER.match(s)
    if not m:
        raise CELError(f"invalid semantic version {s!r}")
    pre = tuple(m.group(4).split(".")) if m.group(4) else ()
    return Semver(int(m.group(1)), int(m.group(2)), int(m.group(3)), pre, m.group(5) or "")


def semver_value(v: Semver) -> dict[str, str]:
    return {_S: v.text()}


def _as_semver(v: Any, fn: str) -> Semver:
    if isinstance(v, Mapping) and _S in v:
        return parse_semver(v[_S])
    raise CELError(f"no such overload: {fn} applied to {_type_name(v)}")


def compare_semver(a: Semver, b: Semver) -> int:
    """blang semver Compare: major, minor, patch, then pre-release (none > some)."""
    for x, y in ((a.major, b.major), (a.minor, b.minor), (a.patch, b.patch)):
        if x != y:
            return 1 if x > y else -1
    if not a.pre and not b.pre:
        return 0
    if not a.pre:
        return 1
    if not b.pre:
        return -1
    for px, py in zip(a.pre, b.pre, strict=False):
        xn, yn = px.isdigit(), py.isdigit()
        if xn and yn:
            if int(px) != int(py):
                return 1 if int(px) > int(py) else -1
        elif xn != yn:
            return -1 if xn else 1
        elif px != py:
            return 1 if px > py else -1
    if len(a.pre) != len(b.pre):
        return 1 if len(a.pre) > len(b.pre) else -1
    return 0


def _type_name(v: Any) -> str:
    if isinstance(v, Mapping):
        if _Q in v:
            return "Quantity"
        if _S in v:
            return "Semver"
        return "map"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "double"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list | tuple):
        return "list"
    return type(v).__name__


def _cmp(a: Decimal, b: Decimal) -> int:
    return int(a > b) - int(a < b)


# --- functions ---------------------------------------------------------------------------

def _quantity(s: Any) -> dict[str, str]:
    if not isinstance(s, str):
        raise CELError(f"no such overload: quantity({_type_name(s)})")
    try:
        return quantity_value(Quantity.parse(s))
    except QuantityError as err:
        raise CELError(str(err)) from err


def _is_quantity(s: Any) -> bool:
    if not isinstance(s, str):
        raise CELError(f"no such overload: isQuantity({_type_name(s)})")
    try:
        Quantity.parse(s)
    except QuantityError:
        return False
    return True


def _semver(s: Any, normalize: bool = False) -> dict[str, str]:
    if not isinstance(s, str) or not isinstance(normalize, bool):
        raise CELError("no such overload: semver(string[, bool])")
    return semver_value(parse_semver(s, normalize))


def _is_semver(s: Any, normalize: bool = False) -> bool:
    if not isinstance(s, str) or not isinstance(normalize, bool):
        raise CELError("no such overload: isSemver(string[, bool])")
    try:
        parse_semver(s, normalize)
    except CELError:
        return False
    return True


def _compare_to(a: Any, b: Any) -> int:
    if isinstance(a, Mapping) and _S in a:
        return compare_semver(_as_semver(a, "compareTo"), _as_semver(b, "compareTo"))
    return _cmp(_as_quantity(a, "compareTo"), _as_quantity(b, "compareTo"))


def _is_greater_than(a: Any, b: Any) -> bool:
    return _compare_to(a, b) > 0


def _is_less_than(a: Any, b: Any) -> bool:
    return _compare_to(a, b) < 0


def _qarith(a: Any, b: Any, sign: int, fn: str) -> dict[str, str]:
    x = _as_quantity(a, fn)
    if isinstance(b, int) and not isinstance(b, bool):
        y = Decimal(b)
    else:
        y = _as_quantity(b, fn)
    return quantity_value(Quantity(x + sign * y))


def _add(a: Any, b: Any) -> dict[str, str]:
    return _qarith(a, b, 1, "add")


def _sub(a: Any, b: Any) -> dict[str, str]:
    return _qarith(a, b, -1, "sub")


def _sign(a: Any) -> int:
    v = _as_quantity(a, "sign")
    return (v > 0) - (v < 0)


def _is_integer(a: Any) -> bool:
    v = _as_quantity(a, "isInteger")
    return v == v.to_integral_value() and -(2 ** 63) <= v < 2 ** 63


def _as_integer(a: Any) -> int:
    v = _as_quantity(a, "asInteger")
    if not _is_integer(a):
        raise CELError("cannot convert value to integer")
    return int(v)


def _as_approximate_float(a: Any) -> float:
    return float(_as_quantity(a, "asApproximateFloat"))


def _version_part(a: Any, fn: str) -> Semver:
    return _as_semver(a, fn)


def _major(a: Any) -> int:
    return _version_part(a, "major").major


def _minor(a: Any) -> int:
    return _version_part(a, "minor").minor


def _patch(a: Any) -> int:
    return _version_part(a, "patch").patch


def _ordering_key(v: Any) -> Any:
    if isinstance(v, Mapping) and _S in v:
        return cmp_to_key(compare_semver)(parse_semver(v[_S]))
    if isinstance(v, Mapping) and _Q in v:
        return Decimal(v[_Q])
    if isinstance(v, Mapping | list):
        raise CELError(f"no such overload: values of type {_type_name(v)} are not ordered")
    return v


def _list(v: Any, fn: str) -> list[Any]:
    if not isinstance(v, list | tuple):
        raise CELError(f"no such overload: {fn} applied to {_type_name(v)}")
    return list(v)


def _is_sorted(items: Any) -> bool:
    xs = [_ordering_key(x) for x in _list(items, "isSorted")]
    return all(not (xs[i + 1] < xs[i]) for i in range(len(xs) - 1))


def _sum(items: Any) -> Any:
    xs = _list(items, "sum")
    if not xs:
        return 0
    if all(isinstance(x, Mapping) and _Q in x for x in xs):
        return quantity_value(Quantity(sum((Decimal(x[_Q]) for x in xs), Decimal(0))))
    if any(isinstance(x, bool) or not isinstance(x, int | float) for x in xs):
        raise CELError("no such overload: sum() of a list that is not numbers")
    return sum(xs)


def _extreme(items: Any, fn: str, pick: Callable[..., Any]) -> Any:
    xs = _list(items, fn)
    if not xs:
        raise CELError(f"{fn}(list) called on an empty list")
    return pick(xs, key=_ordering_key)


def _min(items: Any) -> Any:
    return _extreme(items, "min", min)


def _max(items: Any) -> Any:
    return _extreme(items, "max", max)


def _index_of(container: Any, item: Any, *rest: Any) -> int:
    if isinstance(container, str):
        from cel.stdlib import index_of

        return int(index_of(container, item, *rest))
    xs = _list(container, "indexOf")
    for i, x in enumerate(xs):
        if x == item and type(x) is type(item):
            return i
    return -1


def _last_index_of(container: Any, item: Any, *rest: Any) -> int:
    if isinstance(container, str):
        from cel.stdlib import last_index_of

        return int(last_index_of(container, item, *rest))
    xs = _list(container, "lastIndexOf")
    for i in range(len(xs) - 1, -1, -1):
        if xs[i] == item and type(xs[i]) is type(item):
            return i
    return -1


def _includes(container: Any, item: Any) -> bool:
    if isinstance(container, list | tuple):
        return any(x == item and type(x) is type(item) for x in container)
    return bool(container == item)


def _regex(pattern: Any) -> celregex.Regex:
    """The pattern on RE2 (Go's regexp, as upstream: linear in the subject, never
    backtracking), compiled once while it stays in polsched.cel.regex's bounded cache."""
    if not isinstance(pattern, str):
        raise CELError("no such overload: regex pattern must be a string")
    try:
        return celregex.compile_regex(pattern)
    except celregex.RegexError as err:
        raise CELError(str(err)) from err


def _find(s: Any, pattern: Any) -> str:
    if not isinstance(s, str):
        raise CELError("no such overload: find applied to a non-string")
    return _regex(pattern).find(s)


def _find_all(s: Any, pattern: Any, limit: int = -1) -> list[str]:
    if not isinstance(s, str):
        raise CELError("no such overload: findAll applied to a non-string")
    found = _regex(pattern).find_all(s)
    return list(found) if limit < 0 else list(itertools.islice(found, limit))


# -- IP and CIDR (library/ip.go, library/cidr.go) -------------------------------------------
_IP = "__ip__"
_CIDR = "__cidr__"


def _parse_ip(raw: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """parseIPAddr: netip.ParseAddr, without zones or IPv4-mapped IPv6 addresses."""
    if not isinstance(raw, str):
        raise CELError(f"no such overload: ip({_type_name(raw)})")
    try:
        addr = ipaddress.ip_address(raw)
    except ValueError as e:
        raise CELError(f"IP Address {raw!r} parse error during conversion from string: "
                       f"{e}") from e
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.scope_id:
            raise CELError(f"IP address {raw!r} with zone value is not allowed")
        if addr.ipv4_mapped is not None:
            raise CELError(f"IPv4-mapped IPv6 address {raw!r} is not allowed")
    return addr


def _parse_cidr(raw: Any) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """parseCIDR: netip.ParsePrefix (the address keeps its host bits)."""
    if not isinstance(raw, str):
        raise CELError(f"no such overload: cidr({_type_name(raw)})")
    addr, sep, bits = raw.partition("/")
    if not sep or not bits.isdigit() or (len(bits) > 1 and bits[0] == "0"):
        raise CELError(f"network address parse error during conversion from string: "
                       f"bad prefix {raw!r}")
    ip = _parse_ip(addr)
    if int(bits) > ip.max_prefixlen:
        raise CELError(f"network address parse error during conversion from string: "
                       f"prefix length out of range in {raw!r}")
    return ipaddress.ip_interface(raw)


def _as_ip(v: Any, fn: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(v, Mapping) and _IP in v:
        return ipaddress.ip_address(v[_IP])
    if isinstance(v, str) and fn in ("containsIP",):
        return _parse_ip(v)
    raise CELError(f"no such overload: {fn} applied to {_type_name(v)}")


def _as_cidr(v: Any, fn: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    if isinstance(v, Mapping) and _CIDR in v:
        return ipaddress.ip_interface(v[_CIDR])
    if isinstance(v, str) and fn in ("containsCIDR",):
        return _parse_cidr(v)
    raise CELError(f"no such overload: {fn} applied to {_type_name(v)}")


def _ip_value(a: ipaddress.IPv4Address | ipaddress.IPv6Address) -> dict[str, str]:
    return {_IP: str(a)}


def _cidr_value(c: ipaddress.IPv4Interface | ipaddress.IPv6Interface) -> dict[str, str]:
    return {_CIDR: f"{c.ip}/{c.network.prefixlen}"}


def _ip(v: Any) -> dict[str, str]:
    if isinstance(v, Mapping) and _CIDR in v:  # cidr.ip()
        return _ip_value(_as_cidr(v, "ip").ip)
    return _ip_value(_parse_ip(v))


def _cidr(v: Any) -> dict[str, str]:
    return _cidr_value(_parse_cidr(v))


def _is_ip(v: Any) -> bool:
    try:
        _parse_ip(v)
    except CELError:
        if not isinstance(v, str):
            raise
        return False
    return True


def _is_cidr(v: Any) -> bool:
    try:
        _parse_cidr(v)
    except CELError:
        if not isinstance(v, str):
            raise
        return False
    return True


def _ip_is_canonical(v: Any) -> bool:
    return bool(str(_parse_ip(v)) == v)


def _family(v: Any) -> int:
    return _as_ip(v, "family").version


def _is_unspecified(v: Any) -> bool:
    return _as_ip(v, "isUnspecified").is_unspecified


def _is_loopback(v: Any) -> bool:
    return _as_ip(v, "isLoopback").is_loopback


def _is_link_local_multicast(v: Any) -> bool:
    a = _as_ip(v, "isLinkLocalMulticast")
    if a.version == 4:
        return a in ipaddress.ip_network("224.0.0.0/24")
    return a in ipaddress.ip_network("ff02::/16")


def _is_link_local_unicast(v: Any) -> bool:
    a = _as_ip(v, "isLinkLocalUnicast")
    net = "169.254.0.0/16" if a.version == 4 else "fe80::/10"
    return a in ipaddress.ip_network(net)


def _is_global_unicast(v: Any) -> bool:
    """netip.Addr.IsGlobalUnicast: not unspecified, loopback, multicast, link-local
    unicast, nor the IPv4 broadcast address (private ranges count as global)."""
    a = _as_ip(v, "isGlobalUnicast")
    if a.version == 4 and a == ipaddress.IPv4Address("255.255.255.255"):
        return False
    return not (a.is_unspecified or a.is_loopback or a.is_multicast
                or _is_link_local_unicast(v))


def _contains_ip(c: Any, v: Any) -> bool:
    cidr, ip = _as_cidr(c, "containsIP"), _as_ip(v, "containsIP")
    return ip.version == cidr.version and ip in cidr.network


def _contains_cidr(c: Any, v: Any) -> bool:
    outer, inner = _as_cidr(c, "containsCIDR"), _as_cidr(v, "containsCIDR")
    return (outer.version == inner.version
            and outer.network.prefixlen <= inner.network.prefixlen
            and inner.ip in outer.network)


def _prefix_length(c: Any) -> int:
    return _as_cidr(c, "prefixLength").network.prefixlen


def _masked(c: Any) -> dict[str, str]:
    net = _as_cidr(c, "masked").network
    return {_CIDR: f"{net.network_address}/{net.prefixlen}"}


def _functions() -> dict[str, Callable[..., Any]]:
    from cel import stdlib

    fns: dict[str, Callable[..., Any]] = {}
    # cel-go ext.Strings v2, ext.Sets, ext.Lists v3 (as far as the package has them).
    for lib in ("strings", "sets"):
        fns.update(stdlib.EXTENSIONS[lib])
    for name in ("distinct", "flatten", "slice", "sort", "first", "last", "lists.range"):
        fns[name] = stdlib.EXTENSIONS["lists"][name]
    fns.pop("reverse", None)  # strings v3 / lists v2 reverse: both exist upstream
    fns["reverse"] = _reverse
    fns.update({
        "quantity": _quantity, "isQuantity": _is_quantity, "sign": _sign,
        "isGreaterThan": _is_greater_than, "isLessThan": _is_less_than,
        "compareTo": _compare_to, "add": _add, "sub": _sub, "isInteger": _is_integer,
        "asInteger": _as_integer, "asApproximateFloat": _as_approximate_float,
        "semver": _semver, "isSemver": _is_semver, "major": _major, "minor": _minor,
        "patch": _patch,
        "isSorted": _is_sorted, "sum": _sum, "min": _min, "max": _max,
        "indexOf": _index_of, "lastIndexOf": _last_index_of, "includes": _includes,
        "find": _find, "findAll": _find_all,
        "ip": _ip, "cidr": _cidr, "isIP": _is_ip, "isCIDR": _is_cidr,
        "ip.isCanonical": _ip_is_canonical, "family": _family,
        "isUnspecified": _is_unspecified, "isLoopback": _is_loopback,
        "isLinkLocalMulticast": _is_link_local_multicast,
        "isLinkLocalUnicast": _is_link_local_unicast, "isGlobalUnicast": _is_global_unicast,
        "containsIP": _contains_ip, "containsCIDR": _contains_cidr,
        "prefixLength": _prefix_length, "masked": _masked,
        # for rewrite_syntax
        "__pairs": _pairs, "__from_pairs": _from_pairs, "__is_address": _is_address,
        "__address_text": _address_text, "__merge_entries": _merge_entries,
        "__map_entries": _map_entries, "__optional_element": _optional_element,
        "__optional_entry": _optional_entry, "__optional_field": _optional_field,
        "__optional_index": _optional_index, "__select": _select,
        "__optional_values": _optional_values, "__optional_first": _optional_first,
        "__optional_flat": _optional_flat, "__optional_box": _optional_box,
        "__sort_by": _sort_by,
        "optional.unwrap": _unwrap_optionals, "unwrapOpt": _unwrap_optionals,
    })
    return fns


def _pairs(v: Any) -> list[list[Any]]:
    """[key, value] pairs of a map, [index, value] pairs of a list."""
    if isinstance(v, Mapping) and not _is_value_map(v):
        return [[k, x] for k, x in v.items()]
    if isinstance(v, list | tuple):
        return [[i, x] for i, x in enumerate(v)]
    raise CELError(f"no such overload: comprehension over {_type_name(v)}")


def _is_value_map(v: Mapping[Any, Any]) -> bool:
    """A quantity, semver, IP or CIDR (a one-key map standing for a value)."""
    return len(v) == 1 and next(iter(v)) in (_Q, _S, _IP, _CIDR)


def _from_pairs(pairs: Any) -> dict[Any, Any]:
    return {p[0]: p[1] for p in _list(pairs, "transformMap")}


def _go_text(v: Any) -> str:
    """A value as cel-go's %v prints it in an error (close enough for the common
    types)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_go_text(x) for x in v) + "]"
    return str(v)


def _key(k: Any) -> tuple[bool, Any]:
    """A map key under CEL equality: 0 and 0u are one key, true and 1 are not."""
    return (isinstance(k, bool), k)


def _merge_entries(entries: Any) -> dict[Any, Any]:
    """transformMapEntry's accumulation: each entry (a map) inserted into the result,
    a key already there an error (cel.@mapInsert, types.InsertMapKeyValue)."""
    out: dict[tuple[bool, Any], tuple[Any, Any]] = {}
    for entry in _list(entries, "transformMapEntry"):
        if not isinstance(entry, Mapping) or _is_value_map(entry):
            raise CELError(f"no matching overload for 'cel.@mapInsert' applied to "
                           f"'(map, {_type_name(entry)})'")
        for k, v in entry.items():
            if _key(k) in out:
                raise CELError(f"insert failed: key {_go_text(k)} already exists")
            out[_key(k)] = (k, v)
    return dict(out.values())


def _map_entries(entries: Any) -> dict[Any, Any]:
    """A map literal with optional entries: [key, value] sets a key, [key] (an absent
    optional entry) removes it (evalMap)."""
    out: dict[tuple[bool, Any], tuple[Any, Any]] = {}
    for entry in _list(entries, "map literal"):
        if len(entry) == 2:
            out[_key(entry[0])] = (entry[0], entry[1])
        else:
            out.pop(_key(entry[0]), None)
    return dict(out.values())


def _is_optional_value(v: Any) -> bool:
    return isinstance(v, _cel().OptionalValue)


def _optional_element(v: Any) -> list[Any]:
    """`?v` in a list literal: [the value], or [] when v is an absent optional (evalList;
    a value that is no optional is invalidOptionalElementInit's error)."""
    if not _is_optional_value(v):
        raise CELError(f"cannot initialize optional list element from non-optional value "
                       f"{_go_text(v)}")
    return [v.value()] if v.has_value() else []


def _optional_entry(k: Any, v: Any) -> list[list[Any]]:
    """`?k: v` in a map literal: [[k, value]], or [[k]] (remove k) when v is an absent
    optional (evalMap; invalidOptionalEntryInit's error for a value that is no
    optional)."""
    if not _is_optional_value(v):
        raise CELError(f"cannot initialize optional entry '{_go_text(k)}' from "
                       f"non-optional value {_go_text(v)}")
    return [[k, v.value()]] if v.has_value() else [[k]]


def _select(v: Any, k: Any, field: bool) -> Any:
    """`v.k` (field) or `v[k]` where v may be an optional: on an optional, an optional
    selection (applyQualifiers); on a value, the plain one with its errors."""
    if _is_optional_value(v):
        return _optional_field(v, k) if field else _optional_index(v, k)
    if isinstance(v, list | tuple) and not field:
        if isinstance(k, bool) or not isinstance(k, int):
            raise CELError(f"unsupported index type '{_type_name(k)}' in list")
        if not 0 <= k < len(v):
            raise CELError(f"index out of bounds: {k}")
        return v[k]
    if not isinstance(v, Mapping) or _is_value_map(v):
        raise CELError(f"no such overload: selection of {_go_text(k)!r} on "
                       f"{_type_name(v)}")
    found, value = _find_key(v, k)
    if not found:
        raise CELError(f"no such key: {_go_text(k)}")
    return value


def _optional_values(v: Any) -> list[Any]:
    """The value an optional holds, as a list of zero or one (optMap's target)."""
    if not _is_optional_value(v):
        raise CELError(f"no such overload: optMap / optFlatMap applied to "
                       f"{_type_name(v)}")
    return [v.value()] if v.has_value() else []


def _optional_first(values: Any) -> Any:
    opt = _cel().OptionalValue
    return opt.of(values[0]) if values else opt.none()


_BOX = "__optional_box__"


def _optional_box(v: Any) -> dict[str, list[Any]]:
    """optFlatMap's expression value, which must be an optional, boxed as a map (the
    core's map() would unwrap an optional)."""
    if not _is_optional_value(v):
        raise CELError(f"no such overload: optFlatMap expression of type "
                       f"{_type_name(v)}, want an optional")
    return {_BOX: [v.value()] if v.has_value() else []}


def _optional_flat(values: Any) -> Any:
    """optFlatMap: the expression's own optional (boxed), or none for an absent
    target."""
    opt = _cel().OptionalValue
    if not values or not values[0][_BOX]:
        return opt.none()
    return opt.of(values[0][_BOX][0])


def _unwrap_optionals(v: Any) -> list[Any]:
    """optional.unwrap(list) and list.unwrapOpt() (optUnwrap, optional library v2)."""
    out = []
    for x in _list(v, "optional.unwrap"):
        if not _is_optional_value(x):
            raise CELError(f"value {_go_text(x)} is not optional")
        if x.has_value():
            out.append(x.value())
    return out


_SORTABLE = (int, float, str, bytes)


def _sort_by(pairs: Any) -> list[Any]:
    """@sortByAssociatedKeys (ext/lists.go): the elements ordered by their keys, which
    must share one comparable type (Python's sort is stable; Go's sort.Slice is for
    the short lists insertion sort handles)."""
    items = _list(pairs, "sortBy")
    if not items:
        return []
    first = items[0][1]
    if not isinstance(first, _SORTABLE + (bool,)) or isinstance(first, Mapping):
        raise CELError("list elements must be comparable")
    kind = type(first)
    if any(type(p[1]) is not kind for p in items):
        raise CELError("list elements must have the same type")
    return [p[0] for p in sorted(items, key=lambda p: p[1])]


def _find_key(m: Mapping[Any, Any], k: Any) -> tuple[bool, Any]:
    """A map lookup under CEL equality (true is no key 1)."""
    if k in m:
        for kk in m:
            if _key(kk) == _key(k):
                return True, m[kk]
    return False, None


def _optional_field(v: Any, field: str) -> Any:
    """`v.?field`: optional.of the field when v (a map, or an optional of one) has it,
    optional.none() otherwise (cel-go's optional selection, QualifyIfPresent)."""
    opt = _cel().OptionalValue
    if _is_optional_value(v):
        if not v.has_value():
            return opt.none()
        v = v.value()
    if not isinstance(v, Mapping) or _is_value_map(v):
        raise CELError(f"no such overload: optional field selection '.?{field}' on "
                       f"{_type_name(v)}")
    found, value = _find_key(v, field)
    return opt.of(value) if found else opt.none()


def _optional_index(v: Any, k: Any) -> Any:
    """`v[?k]`: optional.of the element or entry when it exists, optional.none()
    otherwise; on a list an int index (cel-go's optional index, QualifyIfPresent)."""
    opt = _cel().OptionalValue
    if _is_optional_value(v):
        if not v.has_value():
            return opt.none()
        v = v.value()
    if isinstance(v, list | tuple):
        if isinstance(k, bool) or not isinstance(k, int):
            raise CELError(f"unsupported index type '{_type_name(k)}' in list")
        return opt.of(v[k]) if 0 <= k < len(v) else opt.none()
    if not isinstance(v, Mapping) or _is_value_map(v):
        raise CELError(f"no such overload: optional index on {_type_name(v)}")
    found, value = _find_key(v, k)
    return opt.of(value) if found else opt.none()


def _is_address(v: Any) -> bool:
    return isinstance(v, Mapping) and len(v) == 1 and next(iter(v)) in (_IP, _CIDR)


def _address_text(v: Any) -> str:
    return str(next(iter(v.values())))


def _reverse(v: Any) -> Any:
    if isinstance(v, str):
        return v[::-1]
    return list(reversed(_list(v, "reverse")))


@cache
def functions() -> dict[str, Callable[..., Any]]:
    return _functions()


# --- the device variable ---------------------------------------------------------------

@dataclass(frozen=True)
class DeviceInput:
    """What a selector sees of one device (cel.Device upstream): attributes and capacity
    as on the wire (`{"int": 1}`, `{"version": "1.0.0"}`, `{"value": "1Gi"}`)."""

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, Any]]
    allow_multiple_allocations: bool = False


def _split(name: str, default_domain: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (default_domain, name)


def attribute_value(attr: Mapping[str, Any]) -> Any:
    """getAttributeValue: the CEL value of one wire attribute."""
    if "ints" in attr and attr["ints"] is not None:
        return list(attr["ints"])
    if "bools" in attr and attr["bools"] is not None:
        return list(attr["bools"])
    if "strings" in attr and attr["strings"] is not None:
        return list(attr["strings"])
    if "versions" in attr and attr["versions"] is not None:
        return [semver_value(parse_semver(v)) for v in attr["versions"]]
    if attr.get("int") is not None:
        return int(attr["int"])
    if attr.get("bool") is not None:
        return bool(attr["bool"])
    if attr.get("string") is not None:
        return str(attr["string"])
    if attr.get("version") is not None:
        return semver_value(parse_semver(str(attr["version"])))
    raise CELError("unsupported attribute value")


# --- compiled selectors --------------------------------------------------------------------

# Qualified function names (`ip.isCanonical(s)`, `sets.contains(a, b)`): the Rust core
# lists their first part among an expression's variables.
_NAMESPACES = frozenset({"ip", "sets", "lists", "strings", "math", "base64", "optional"})


def _macro_variables(tokens: Sequence[Token]) -> set[str]:
    """The variables comprehension macros bind (`.all(x, ...)`): the CEL library lists
    them among an expression's variables. From the tokens, so a string literal holding
    such text binds nothing."""
    code = [t for t in tokens if t.kind != "ws"]
    return {code[k + 3].text for k in range(len(code) - 4)
            if code[k].text == "." and code[k + 1].kind == "ident"
            and code[k + 1].text in MACROS and code[k + 2].text == "("
            and code[k + 3].kind == "ident" and code[k + 4].text == ","}


def comprehension_depth(tokens: Sequence[Token]) -> int:
    """The deepest nesting of comprehension macros (all, exists, exists_one, map,
    filter)."""
    code = [t for t in tokens if t.kind != "ws"]
    stack: list[bool] = []
    depth = deepest = 0
    for k, t in enumerate(code):
        if t.kind != "op":
            continue
        if t.text == "(":
            is_macro = k >= 2 and code[k - 2].text == "." and code[k - 1].text in MACROS
            stack.append(is_macro)
            if is_macro:
                depth += 1
                deepest = max(deepest, depth)
        elif t.text == ")" and stack and stack.pop():
            depth -= 1
    return deepest


def _constant_patterns(tokens: Sequence[Token]) -> Iterator[str]:
    """The patterns of `find` and `findAll` calls written as one string literal: upstream
    compiles those with the program (cel.OptimizeRegex in library/regex.go), so a bad one
    fails the compilation, wherever the call stands; here RE2 compiles them once now."""
    code = [t for t in tokens if t.kind != "ws"]
    for k in range(1, len(code) - 3):
        if (code[k].text in ("find", "findAll") and code[k].kind == "ident"
                and code[k - 1].text == "." and code[k + 1].text == "("
                and code[k + 2].kind == "str" and code[k + 3].text in (",", ")")):
            yield code[k + 2].value


def _indexed_domains(tokens: Sequence[Token]) -> frozenset[str]:
    """The domains an expression names literally after `attributes` or `capacity`
    (`["..."]`, `[?"..."]`, `.?name`): those that must read as an empty map when the
    device lacks them. Upstream's maps find every key (mapper.Find in compile.go), so
    `device.attributes[?"x.example.com"]` holds a value there too."""
    code = [t for t in tokens if t.kind != "ws"]
    out = set()
    for k in range(len(code) - 3):
        a, b, c, d = code[k:k + 4]
        if a.kind != "ident" or a.text not in ("attributes", "capacity"):
            continue
        if b.text == "[" and c.text == "?" and k + 4 < len(code):
            c, d = code[k + 3], code[k + 4]
        if b.text == "[" and c.kind == "str" and d.text == "]":
            out.add(c.value)
        elif b.text == "." and c.text == "?" and d.kind == "ident":
            out.add(d.text)
    return frozenset(out)


class Selector:
    """One compiled selector expression. `matches` raises CELError on a runtime error."""

    def __init__(self, source: str) -> None:
        if len(source) > MAX_EXPRESSION_LENGTH:
            raise CELError(f"the expression is {len(source)} characters long; the limit "
                           f"is {MAX_EXPRESSION_LENGTH}")
        self.source = source
        expanded = rewrite_optional_operands(expand_binds(rewrite_syntax(source)))
        try:
            self._program = _cel().compile(expanded)
        except Exception as err:  # the library raises ValueError with the parser's text
            raise CELError(f"compilation failed: {err}") from err
        tokens = tokenize(expanded)
        names = set(self._program.variables())
        unknown = sorted(names - {"device"} - _macro_variables(tokens) - celsyntax.TYPE_NAMES
                         - _NAMESPACES)
        if unknown:
            raise CELError(f"compilation failed: undeclared reference to "
                           f"{', '.join(map(repr, unknown))}")
        for pattern in _constant_patterns(tokens):
            try:
                celregex.compile_regex(pattern)
            except celregex.RegexError as err:
                raise CELError(f"compilation failed: {err}") from err
        depth = comprehension_depth(tokens)
        if depth > MAX_COMPREHENSION_DEPTH:
            raise CELError(f"cost limit exceeded: comprehensions nest {depth} deep; the "
                           f"limit is {MAX_COMPREHENSION_DEPTH}")
        self._domains = _indexed_domains(tokens) | _indexed_domains(tokenize(source))
        self._context = _cel().Context({}, functions())

    def _maps(self, device: DeviceInput) -> tuple[dict[str, Any], dict[str, Any]]:
        attributes: dict[str, dict[str, Any]] = {}
        for name, attr in device.attributes.items():
            domain, ident = _split(name, device.driver)
            try:
                attributes.setdefault(domain, {})[ident] = attribute_value(attr)
            except CELError as err:
                raise CELError(f"attribute {name}: {err}") from err
        capacity: dict[str, dict[str, Any]] = {}
        for name, cap in device.capacity.items():
            domain, ident = _split(name, device.driver)
            raw = cap.get("value") if isinstance(cap, Mapping) else cap
            try:
                capacity.setdefault(domain, {})[ident] = quantity_value(Quantity.parse(raw))
            except QuantityError as err:  # "1e999999999": past what a Decimal holds
                raise CELError(f"capacity {name}: {err}") from err
        for domain in self._domains:
            attributes.setdefault(domain, {})
            capacity.setdefault(domain, {})
        return attributes, capacity

    def matches(self, device: DeviceInput) -> bool:
        attributes, capacity = self._maps(device)
        try:
            # Converting a value the Rust core cannot hold (a string with a lone
            # surrogate) raises here, not in execute.
            self._context.add_variable("device", {
                "driver": device.driver,
                "allowMultipleAllocations": device.allow_multiple_allocations,
                "attributes": attributes,
                "capacity": capacity,
            })
            result = self._program.execute(self._context)
        except BaseException as err:  # the Rust core may raise pyo3's PanicException
            if isinstance(err, KeyboardInterrupt | SystemExit):
                raise
            text = str(err) or type(err).__name__
            if isinstance(err, KeyError) and err.args:
                text = f"no such key: {err.args[0]}"
            raise CELError(text) from err
        if not isinstance(result, bool):
            raise CELError(f"CEL result of type {_type_name(result)} could not be "
                           "converted to bool")
        return result


_SELECTORS: dict[str, Selector | CELError] = {}
_MAX_CACHED = 4096


def compile_selector(source: str) -> Selector:
    """A compiled selector, cached by its text (cel.Cache upstream); CELError when it
    does not compile."""
    hit = _SELECTORS.get(source)
    if hit is None:
        try:
            hit = Selector(source)
        except CELError as err:
            hit = err
        if len(_SELECTORS) >= _MAX_CACHED:
            _SELECTORS.clear()
        _SELECTORS[source] = hit
    if isinstance(hit, CELError):
        raise hit
    return hit


def iter_string_literals(source: str) -> Iterator[str]:
    for t in tokenize(source):
        if t.kind == "str":
            yield t.value


__all__ = ["DeviceInput", "Selector", "compile_selector", "parse_semver", "compare_semver"]
