"""Seeded generators of fuzz cases: SchedulingPolicies, CEL expressions, DRA device
selectors, pods and the small cluster they are decided on.

A case is a plain JSON document (see `generate`): saved to the corpus, it replays exactly.
Each case draws from its own random.Random(f"{seed}:{index}"), so any one case of a
campaign can be regenerated alone from its seed and index.

The generators aim at the edges an attacker would try: the CRD's declared bounds and just
past them, wrong types, deep nesting, odd unicode, CEL near the static cost limit, regex
with counted repetition and nested quantifiers, pods with thousands of terms and
quantities such as 1e999999999. Huge inputs are drawn rarely, so a run of a few hundred
cases stays quick while a long campaign still meets them.
"""

from __future__ import annotations

import random
from typing import Any

from polsched import plugins
from polsched.api.crd import openapi_schema
from tests.fuzz import events, extender

Json = dict[str, Any]

KINDS = ("policy", "cel", "selector", "pod", "extender", "events")

# Strings a person would not type: controls, escapes, bidi overrides, zero-width and
# non-BMP characters, a lone surrogate, lookalikes of ASCII.
ODD_STRINGS = (
    "", " ", "\x00", "\x1b[2J\x1b[31mred", "\u202eevil", "\u200b", "a\nb", "\t",
    "\ud800", "😀" * 3, "ａｂｃ", "İ", "ß", "\u0301", "\\", "'", '"', "${x}", "%s%n",
    "../../etc", "kube-system", "default-scheduler", "a" * 64, "é" * 254,
)

# Quantities of the API server's form (what it admits in a pod, a node or a
# ResourceSlice) past what a float or a Decimal context holds.
HUGE_QUANTITIES = (
    "1e999999999", "1E999999999", "1e-999999999", "9" * 400, "99999999999999999999Ei",
    "0.000000000000000000001", "1m", "123456789012345678901234567890n", "1e18",
)
# And malformed ones, which only a policy (args, runtime resources) or CEL can carry.
ODD_QUANTITIES = HUGE_QUANTITIES + ("1.5.5", "", "NaN", "inf", "-1", "1Ki1", "1ee3",
                                    "0x10", " 1", "-1e999999999")

_REGEX_BOMBS = (
    r"\\w{200}", r"\\w{1000}", r"(\\w{100}){10}", r"(a+)+$", r"(a|a)*$", r"(a*)*b",
    r"(x{1,1000}){1,1000}", r"[\\p{L}]{500}", r"^(([a-z])+.)+[A-Z]([a-z])+$",
    r"(.*a){20}", r"\\d{999}", r"(?i)\\w{300}", r"((((((a*)*)*)*)*)*)*b",
)

_NAMES = plugins.REGISTRY.names()

# The largest size a generator may draw; the short test in `make test` lowers it so that
# its few hundred cases stay quick (the corpus keeps the minimised huge cases).
_LIMIT = [10**6]
# What is left of the case's budget: the sum of the sizes drawn. Sizes multiply (3000
# terms of 500 values of 100 KB), and a case must stay a file one can save and read.
CASE_BUDGET = 2 * 10**6
_BUDGET = [CASE_BUDGET]


def big(rng: random.Random, *sizes: int) -> int:
    """One of `sizes`, capped at the current limit and at what is left of the case's
    budget (then the smallest)."""
    n = min(rng.choice(sizes), _LIMIT[0])
    if n > _BUDGET[0]:
        n = min(sizes)
    _BUDGET[0] -= n
    return n


def _string(rng: random.Random, max_len: int = 40) -> str:
    r = rng.random()
    if r < 0.15:
        return rng.choice(ODD_STRINGS)
    if r < 0.2:
        return rng.choice("ab🙂\u202e") * big(rng, 255, 1000, 70000)
    n = rng.randint(0, max_len)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789-._/") for _ in range(n))


def _label_key(rng: random.Random) -> str:
    return rng.choice(("zone", "tier", "example.com/gpu", "kubernetes.io/hostname",
                       "topology.kubernetes.io/zone", "app", _string(rng, 70)))


def _label_value(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.05:
        return "v" * big(rng, 64, 5000, 100000)  # huge selector values
    if r < 0.1:
        return rng.choice(ODD_STRINGS)
    return rng.choice(("a", "b", "z0", "z1", "gold", "1", ""))


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth > 3 or r < 0.4:
        return rng.choice((None, True, False, 0, -1, 2**63, 2**64 + 1, 1.5, float("1e308"),
                           _string(rng), rng.choice(ODD_QUANTITIES)))
    if r < 0.7:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {_string(rng, 12): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _deep(rng: random.Random, depth: int) -> Any:
    """`depth` nested lists or maps (what recursion in a validator would trip on)."""
    value: Any = "leaf"
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"x": value}
    return value


# -- from the CRD's schema ----------------------------------------------------------------
def from_schema(rng: random.Random, schema: Json, depth: int = 0) -> Any:
    """A value the schema mostly accepts: every type at its declared bounds, sometimes
    just past them (the loader and the CRD must then agree)."""
    past = rng.random() < 0.05  # one step past a declared bound
    if "enum" in schema:
        return rng.choice(list(schema["enum"]) + ([_string(rng)] if past else []))
    kind = schema.get("type")
    if kind == "object":
        props: Json = schema.get("properties") or {}
        if not props:
            if schema.get("additionalProperties"):
                return {_label_key(rng): _label_value(rng) for _ in range(rng.randint(0, 3))}
            return {} if depth > 4 else _random_json(rng, 2) if past else {}
        out: Json = {}
        for key, sub in props.items():
            if key in schema.get("required", ()) or rng.random() < 0.35:
                out[key] = from_schema(rng, sub, depth + 1)
        return out
    if kind == "array":
        cap = int(schema.get("maxItems", 8))
        n = rng.choice((0, 1, 2, 3, cap, cap + 1)) if past or rng.random() < 0.1 \
            else rng.randint(0, min(cap, 3))
        return [from_schema(rng, schema.get("items", {}), depth + 1) for _ in range(n)]
    if kind == "string":
        cap = int(schema.get("maxLength", 64))
        if past or rng.random() < 0.05:
            return "x" * rng.choice((cap, cap + 1))
        return _string(rng, min(cap, 40))
    if kind == "integer":
        lo, hi = schema.get("minimum", -5), schema.get("maximum", 1000)
        return rng.choice((lo, hi, lo - 1, hi + 1)) if past else rng.randint(lo, hi)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "number":
        return rng.uniform(-1, 1e6)
    return _random_json(rng, 2)


def _plugin_entry(rng: random.Random, scorer: bool) -> Json:
    name = rng.choice(_NAMES) if rng.random() < 0.9 else _string(rng, 70)
    entry: Json = {"name": name}
    if name == "Expression" or rng.random() < 0.05:
        entry["args"] = {"expression": cel_expression(rng, scorer)}
    elif rng.random() < 0.3:
        entry["args"] = _random_json(rng, 1)
    if scorer and rng.random() < 0.8:
        entry["weight"] = rng.choice((1, 2, 5, 100, 0, 101, -1, "3"))
    return entry


def _corrupt(rng: random.Random, doc: Any, depth: int = 0) -> Any:
    """`doc` with one value somewhere replaced by a wrong type, a huge list, deep nesting
    or an odd string."""
    if isinstance(doc, dict) and doc and depth < 6 and rng.random() < 0.7:
        key = rng.choice(sorted(doc, key=str))
        doc[key] = _corrupt(rng, doc[key], depth + 1)
        return doc
    if isinstance(doc, list) and doc and depth < 6 and rng.random() < 0.7:
        i = rng.randrange(len(doc))
        doc[i] = _corrupt(rng, doc[i], depth + 1)
        return doc
    r = rng.random()
    if r < 0.3:
        return _random_json(rng, 1)
    if r < 0.5:
        item = doc[0] if isinstance(doc, list) and doc else doc
        if isinstance(item, dict | list | str) and len(str(item)) > 100:
            item = "x"  # a copy per element: the budget counts elements, not their size
        return [item] * big(rng, 65, 1000, 20000)
    if r < 0.65:
        return _deep(rng, big(rng, 50, 400, 900))  # json nests at most ~990 deep
    return rng.choice(ODD_STRINGS)


def policy(rng: random.Random) -> Json:
    spec: Json = from_schema(rng, openapi_schema()["properties"]["spec"])
    spec.pop("extenders", None) if rng.random() < 0.7 else None
    if rng.random() < 0.6:
        spec["filters"] = [_plugin_entry(rng, False) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.7:
        spec["scorers"] = [_plugin_entry(rng, True) for _ in range(rng.randint(0, 3))]
    doc: Json = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                 "metadata": {"name": rng.choice(("fuzz", "a", _string(rng, 80)))},
                 "spec": spec}
    if rng.random() < 0.35:
        doc = _corrupt(rng, doc)
        if not isinstance(doc, dict):
            doc = {"spec": doc}
    return doc


# -- CEL ------------------------------------------------------------------------------------
_STRINGS = ("pod.metadata.name", "node.metadata.name", "pod.metadata.namespace",
            "node.metadata.labels['zone']", "pod.metadata.labels['app']")
_MAPS = ("pod.metadata.labels", "node.metadata.labels", "pod.metadata.annotations",
         "node.metadata.annotations")
_LISTS = ("pod.spec.containers", "node.spec.taints", "pod.spec.tolerations",
          "node.status.images")


def cel_bool(rng: random.Random, depth: int = 0) -> str:
    """A boolean CEL expression over pod and node, biased to the cost boundary."""
    r = rng.random()
    s = rng.choice(_STRINGS)
    if depth > 2 or r < 0.15:
        return rng.choice((f"{s}.matches('{rng.choice(_REGEX_BOMBS)}')",
                           f"{s}.contains('{'a' * big(rng, 1, 100, 5000)}')",
                           f"{s}.startsWith({s})", f"size({s}) > {rng.randint(0, 300)}",
                           f"'zone' in {rng.choice(_MAPS)}", "true"))
    if r < 0.35:  # nested comprehensions over the biggest declared inputs
        m = rng.choice(_MAPS + _LISTS)
        var = f"x{depth}"
        body = cel_bool(rng, depth + 1)
        return f"{m}.{rng.choice(('all', 'exists', 'exists_one'))}({var}, {body})"
    if r < 0.5:  # a long chain
        n = big(rng, 2, 10, 100, 400)
        return " && ".join(f"size({rng.choice(_STRINGS)}) >= {i % 7}" for i in range(n))
    if r < 0.6:
        n = big(rng, 10, 200, 1000)
        return f"[{', '.join(str(i) for i in range(n))}].map(i, i * 2).exists(i, i == 7)"
    if r < 0.7:
        return f"({s} + {s} + {s} + {s}).matches('{rng.choice(_REGEX_BOMBS)}')"
    if r < 0.8:
        return f"{cel_bool(rng, depth + 1)} {rng.choice(('&&', '||'))} {cel_bool(rng, depth + 1)}"
    if r < 0.9:
        return rng.choice((f"{s}.matches({s})", f"{s}.matches({s} + '{{99}}')",
                           "has(pod.spec.nodeSelector) && pod.spec.nodeSelector.all(k, "
                           "node.metadata.labels.exists(j, j.matches(k)))"))
    return _string(rng, 30)  # not CEL at all


def cel_expression(rng: random.Random, scorer: bool) -> str:
    body = cel_bool(rng)
    if scorer and rng.random() < 0.8:
        return f"({body}) ? {rng.choice((1, 10, 100, 1000, -5))} : 0"
    return body


def cel_policy(rng: random.Random) -> Json:
    scorer = rng.random() < 0.6
    entry: Json = {"name": "Expression",
                   "args": {"expression": cel_expression(rng, scorer)}}
    key = "scorers" if scorer else "filters"
    if scorer:
        entry["weight"] = rng.randint(1, 10)
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": "fuzz-cel"}, "spec": {key: [entry]}}


# -- DRA device selectors ------------------------------------------------------------------
def selector(rng: random.Random) -> str:
    attr = "device.attributes['dra.example.com'].model"
    r = rng.random()
    bomb = rng.choice(_REGEX_BOMBS)
    if r < 0.3:
        return f"{attr}.find('{bomb}') != ''"
    if r < 0.5:
        return f"size({attr}.findAll('{bomb}')) > 0"
    if r < 0.6:
        return f"{attr}.matches('{bomb}')"
    if r < 0.7:
        return ("device.capacity['dra.example.com'].memory.compareTo(quantity('"
                f"{rng.choice(ODD_QUANTITIES)}')) >= 0")
    if r < 0.8:
        return f"{attr}.findAll({attr}).size() {rng.choice(('>', '=='))} 0"
    if r < 0.9:
        n = big(rng, 3, 50, 300)
        return " || ".join(f"{attr} == 'm{i}'" for i in range(n))
    return _string(rng, 30)


def device(rng: random.Random) -> Json:
    model = rng.choice(("a100", "a" * big(rng, 10, 30, 1000, 50000) + "!",
                        rng.choice(ODD_STRINGS)))
    memory = rng.choice(("40Gi", "1", rng.choice(HUGE_QUANTITIES)))
    return {"driver": "dra.example.com", "attributes": {"model": {"string": model}},
            "capacity": {"memory": {"value": memory}}}


# -- pods and nodes --------------------------------------------------------------------------
def _quantity(rng: random.Random) -> str:
    if rng.random() < 0.04:
        return rng.choice(HUGE_QUANTITIES)
    return rng.choice(("100m", "1", "250m", "64Mi", "1Gi", "0"))


def _selector_term(rng: random.Random) -> Json:
    op = rng.choice(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"))
    req: Json = {"key": _label_key(rng), "operator": op}
    if op not in ("Exists", "DoesNotExist") or rng.random() < 0.1:
        req["values"] = [_label_value(rng) for _ in range(big(rng, 1, 2, 1, 500))]
    return req


def _many(rng: random.Random) -> int:
    """How many terms: mostly a few, sometimes the thousands finding 4 was about."""
    r = rng.random()
    if r < 0.02:
        return big(rng, 1000, 3000)
    if r < 0.1:
        return big(rng, 64, 200)
    return rng.randint(0, 3)


def _pod_affinity_term(rng: random.Random) -> Json:
    return {"labelSelector": {"matchLabels": {_label_key(rng): _label_value(rng)},
                              "matchExpressions": [_selector_term(rng)]},
            "topologyKey": rng.choice(("zone", "kubernetes.io/hostname", "", "nope"))}


def pod(rng: random.Random, i: int) -> Json:
    spec: Json = {
        "schedulerName": "fuzz",
        "containers": [{"name": f"c{c}", "image": "x",
                        "resources": {"requests": {"cpu": _quantity(rng),
                                                   "memory": _quantity(rng)}}}
                       for c in range(big(rng, 1, 1, 2, 50))],
    }
    if rng.random() < 0.4:
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [_selector_term(rng)]}
                                      for _ in range(max(1, _many(rng)))]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": rng.choice((1, 100, 0, 101)),
                     "preference": {"matchExpressions": [_selector_term(rng)]}}
                    for _ in range(_many(rng))]},
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                _pod_affinity_term(rng) for _ in range(_many(rng))]},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": _pod_affinity_term(rng)}
                for _ in range(_many(rng))]},
        }
    if rng.random() < 0.3:
        spec["topologySpreadConstraints"] = [
            {"maxSkew": rng.choice((1, 2, 0, 2**31)), "topologyKey": _label_key(rng),
             "whenUnsatisfiable": rng.choice(("DoNotSchedule", "ScheduleAnyway", "x")),
             "labelSelector": {"matchLabels": {"app": _label_value(rng)}}}
            for _ in range(_many(rng))]
    if rng.random() < 0.3:
        spec["tolerations"] = [{"key": _label_key(rng), "operator": "Equal",
                                "value": _label_value(rng), "effect": "NoSchedule"}
                               for _ in range(_many(rng))]
    if rng.random() < 0.2:
        spec["nodeSelector"] = {_label_key(rng): _label_value(rng)
                                for _ in range(rng.randint(1, 3))}
    if rng.random() < 0.05:
        spec["priority"] = rng.choice((2**31, -2**31, 2000000000))
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"uid-{i}",
                         "resourceVersion": str(100 + i),
                         "labels": {"app": _label_value(rng)}},
            "spec": spec, "status": {"phase": "Pending"}}


def node(rng: random.Random, i: int) -> Json:
    out: Json = {"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": f"n{i}", "resourceVersion": str(i + 1),
                              "labels": {"zone": f"z{i % 3}", "kubernetes.io/hostname": f"n{i}",
                                         _label_key(rng): _label_value(rng)}},
                 "spec": {},
                 "status": {"capacity": {"cpu": rng.choice(("4", "4", _quantity(rng))),
                                         "memory": "8Gi", "pods": "110"}}}
    out["status"]["allocatable"] = dict(out["status"]["capacity"])
    if rng.random() < 0.2:
        out["spec"]["taints"] = [{"key": _label_key(rng), "value": _label_value(rng),
                                  "effect": rng.choice(("NoSchedule", "PreferNoSchedule"))}]
    return out


def _cluster(rng: random.Random, case: Json) -> None:
    case["nodes"] = [node(rng, i) for i in range(rng.randint(1, 6))]
    case["pods"] = [pod(rng, i) for i in range(rng.randint(1, 3))]


SIMPLE_POLICY: Json = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                       "metadata": {"name": "fuzz"}, "spec": {}}


def generate(seed: int, index: int, limit: int = 10**6) -> Json:
    """Case `index` of the campaign seeded `seed`: {"kind", "seed", "index"} and the
    inputs of its kind: "policy" (a SchedulingPolicy document), "nodes" and "pods" to
    decide with it, "selector" and "devices" for a DRA selector, and for an extender
    case what tests.fuzz.extender.generate draws (its policy, cluster and behaviours),
    for an events case tests.fuzz.events.generate's stream of policy events.
    `limit` caps the sizes of lists, strings and nesting drawn (the case records it)."""
    _LIMIT[0] = limit
    _BUDGET[0] = CASE_BUDGET
    rng = random.Random(f"{seed}:{index}")
    kind = KINDS[index % len(KINDS)]
    case: Json = {"kind": kind, "seed": seed, "index": index, "limit": limit}
    if kind == "policy":
        case["policy"] = policy(rng)
        if rng.random() < 0.5:
            _cluster(rng, case)
    elif kind == "cel":
        case["policy"] = cel_policy(rng)
        _cluster(rng, case)
    elif kind == "selector":
        case["selector"] = selector(rng)
        case["devices"] = [device(rng) for _ in range(rng.randint(1, 3))]
    elif kind == "extender":
        case.update(extender.generate(rng))
    elif kind == "events":
        case.update(events.generate(rng))
    else:
        case["policy"] = SIMPLE_POLICY
        _cluster(rng, case)
    return case
