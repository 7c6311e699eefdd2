"""The wire format of k8s.io/kube-scheduler/extender/v1, as kube-scheduler speaks it.

Encoding follows Go's encoding/json applied to the upstream structs
(staging/src/k8s.io/kube-scheduler/extender/v1/types.go): the JSON keys are the Go field
names (the structs carry no json tags), fields appear in declaration order, and a nil
pointer or map is `null`. So ExtenderArgs always carries Pod, Nodes and NodeNames, one of
the last two null depending on nodeCacheCapable.

Decoding is what encoding/json does with those structs: keys match case-insensitively
(extenders built on the pre-1.18 tags answer `nodenames`, `failedNodes`, `host`, `score`,
`error`), unknown keys are ignored, `null` leaves a field at its zero value, and a value of
the wrong JSON type is an error. Every decoding problem raises ExtenderError naming the
type and field, never anything else.

Purely data: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polsched.framework.pipeline import MAX_EXTENDER_PRIORITY, ExtenderError
from polsched.objects import Json

# k8s.io/kube-scheduler/extender/v1: MinExtenderPriority, MaxExtenderPriority.
MIN_EXTENDER_PRIORITY = 0
__all__ = [
    "MAX_EXTENDER_PRIORITY", "MIN_EXTENDER_PRIORITY", "ExtenderArgs", "ExtenderBindingArgs",
    "ExtenderBindingResult", "ExtenderFilterResult", "ExtenderPreemptionArgs",
    "ExtenderPreemptionResult", "HostPriority", "MetaPod", "MetaVictims", "Victims",
    "decode_host_priority_list", "dumps", "encode_args", "encode_host_priority_list",
    "host_scores", "loads", "node_list", "node_name",
]

_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1


# -- JSON text ------------------------------------------------------------------------


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON, as Go's json.Marshal writes it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


_DECODER = json.JSONDecoder()


def loads(payload: bytes, where: str) -> Any:
    """The first JSON value in `payload`, as Go's json.Decoder.Decode reads it (trailing
    bytes are not looked at). Raises ExtenderError saying `where` the text came from."""
    text = payload.decode("utf-8", errors="replace").lstrip(" \t\r\n")
    if not text:
        raise ExtenderError(f"{where}: empty body, want a JSON value")
    try:
        value, _ = _DECODER.raw_decode(text)
    except (ValueError, RecursionError) as exc:
        # Never the body itself: it ends up in events and may be anything.
        why = str(exc)[:120] if not isinstance(exc, RecursionError) else "nested too deeply"
        raise ExtenderError(f"{where}: invalid JSON ({why})") from None
    return value


# -- decoding helpers: Go encoding/json semantics ---------------------------------------


# names -> {lower-cased name: name}, for _fields.
_FOLDED: dict[tuple[str, ...], dict[str, str]] = {}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _wrong(value: Any, where: str, want: str) -> ExtenderError:
    return ExtenderError(f"cannot decode a JSON {_kind(value)} into {where}: want {want}")


def _fields(value: Any, where: str, names: tuple[str, ...]) -> dict[str, Any]:
    """The members of a JSON object that name one of `names`, matched case-insensitively
    and keyed by the canonical name; a later duplicate wins, as in encoding/json."""
    if not isinstance(value, dict):
        raise _wrong(value, where, "an object")
    folded = _FOLDED.get(names)
    if folded is None:
        folded = _FOLDED[names] = {n.lower(): n for n in names}
    out: dict[str, Any] = {}
    for key, v in value.items():
        name = folded.get(key.lower())
        if name is not None:
            out[name] = v
    return out


def _str(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _wrong(value, where, "a string")
    return value


def _int64(value: Any, where: str) -> int:
    if value is None:
        return 0
    # Go refuses 5.0 and 1e1 for an int64 field; Python's json makes those floats.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong(value, where, "an integer")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ExtenderError(f"cannot decode {str(value)[:40]} into {where}: out of int64 range")
    return value


def _str_list(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _wrong(value, where, "an array of strings")
    # Fast path, the answer of every extender that works: all strings, no null. The list
    # json.loads made is ours, so it is returned as it is.
    if all(type(v) is str for v in value):
        return value
    return [_str(v, f"{where}[{i}]") for i, v in enumerate(value)]


def _str_map(value: Any, where: str) -> dict[str, str]:
    """FailedNodesMap (map[string]string); null is an empty map."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _wrong(value, where, "an object of strings")
    if all(type(v) is str for v in value.values()):
        return value
    return {k: _str(v, f"{where}[{k!r}]") for k, v in value.items()}


def _object(value: Any, where: str) -> Json | None:
    """An embedded Kubernetes object (v1.Pod, v1.Node), kept as plain JSON."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _wrong(value, where, "an object")
    return value


def _node_list(value: Any, where: str) -> list[Json] | None:
    """A v1.NodeList: its items."""
    if value is None:
        return None
    items = _fields(value, where, ("items",)).get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise _wrong(items, f"{where}.items", "an array of nodes")
    out: list[Json] = []
    for i, item in enumerate(items):
        node = _object(item, f"{where}.items[{i}]")
        out.append(node if node is not None else {})
    return out


def node_list(nodes: Sequence[Json]) -> Json:
    """A v1.NodeList as json.Marshal writes it (ListMeta is a struct: always present)."""
    return {"metadata": {}, "items": list(nodes)}


def node_name(node: Json) -> str:
    """metadata.name of a node in a NodeList an extender returned (keys case-insensitive,
    as Go decodes v1.Node)."""
    meta = _fields(node, "v1.Node", ("metadata",)).get("metadata")
    if meta is None:
        return ""
    return _str(_fields(meta, "v1.Node.metadata", ("name",)).get("name"),
                "v1.Node.metadata.name")


# -- ExtenderArgs ------------------------------------------------------------------------


@dataclass(frozen=True)
class ExtenderArgs:
    """What filter and prioritize receive. Nodes is set only when the extender is not
    nodeCacheCapable, NodeNames only when it is."""

    pod: Json
    nodes: list[Json] | None = None
    node_names: list[str] | None = None

    def to_json(self) -> Json:
        return {
            "Pod": self.pod,
            "Nodes": None if self.nodes is None else node_list(self.nodes),
            "NodeNames": self.node_names,
        }

    @classmethod
    def from_json(cls, value: Any) -> ExtenderArgs:
        w = "ExtenderArgs"
        f = _fields(value, w, ("Pod", "Nodes", "NodeNames"))
        return cls(
            pod=_object(f.get("Pod"), f"{w}.Pod") or {},
            nodes=_node_list(f.get("Nodes"), f"{w}.Nodes"),
            node_names=_str_list(f.get("NodeNames"), f"{w}.NodeNames"),
        )


def encode_args(pod: bytes, nodes: Sequence[bytes] | None,
                node_names: Sequence[str] | None) -> bytes:
    """ExtenderArgs from already-encoded JSON of the pod and of each node, so that the
    client encodes a node once per node version rather than once per pod. Produces the
    same JSON as dumps(ExtenderArgs(...).to_json())."""
    if nodes is None:
        nodes_json = b"null"
    else:
        nodes_json = b'{"metadata":{},"items":[' + b",".join(nodes) + b"]}"
    names_json = b"null" if node_names is None else dumps(list(node_names))
    return b'{"Pod":' + pod + b',"Nodes":' + nodes_json + b',"NodeNames":' + names_json + b"}"


# -- ExtenderFilterResult ----------------------------------------------------------------


@dataclass(frozen=True)
class ExtenderFilterResult:
    """A filter answer. FailedAndUnresolvableNodes takes precedence over FailedNodes."""

    nodes: list[Json] | None = None
    node_names: list[str] | None = None
    failed_nodes: dict[str, str] = field(default_factory=dict)
    failed_and_unresolvable_nodes: dict[str, str] = field(default_factory=dict)
    error: str = ""

    def to_json(self) -> Json:
        return {
            "Nodes": None if self.nodes is None else node_list(self.nodes),
            "NodeNames": self.node_names,
            "FailedNodes": self.failed_nodes,
            "FailedAndUnresolvableNodes": self.failed_and_unresolvable_nodes,
            "Error": self.error,
        }

    @classmethod
    def from_json(cls, value: Any) -> ExtenderFilterResult:
        w = "ExtenderFilterResult"
        if value is None:  # json.Unmarshal of null into a struct leaves it zero
            return cls()
        f = _fields(value, w, ("Nodes", "NodeNames", "FailedNodes",
                               "FailedAndUnresolvableNodes", "Error"))
        return cls(
            nodes=_node_list(f.get("Nodes"), f"{w}.Nodes"),
            node_names=_str_list(f.get("NodeNames"), f"{w}.NodeNames"),
            failed_nodes=_str_map(f.get("FailedNodes"), f"{w}.FailedNodes"),
            failed_and_unresolvable_nodes=_str_map(
                f.get("FailedAndUnresolvableNodes"), f"{w}.FailedAndUnresolvableNodes"),
            error=_str(f.get("Error"), f"{w}.Error"),
        )


# -- HostPriorityList --------------------------------------------------------------------


@dataclass(frozen=True)
class HostPriority:
    host: str
    score: int

    def to_json(self) -> Json:
        return {"Host": self.host, "Score": self.score}


def encode_host_priority_list(items: Sequence[HostPriority]) -> list[Json]:
    return [hp.to_json() for hp in items]


def host_scores(value: Any) -> dict[str, int]:
    """A prioritize answer as host -> score, a host listed twice getting the sum (upstream
    adds every entry). The same checks and errors as decode_host_priority_list, without
    an object per entry: an entry that is exactly {"Host": string, "Score": int64} (what
    extenders send) is read in place, anything else goes through the general decoder."""
    if type(value) is list:
        scores: dict[str, int] = {}
        get = scores.get
        for item in value:
            if type(item) is dict and len(item) == 2:
                host = item.get("Host")
                score = item.get("Score")
                if (type(host) is str and type(score) is int
                        and _INT64_MIN <= score <= _INT64_MAX):
                    scores[host] = get(host, 0) + score
                    continue
            break
        else:
            return scores
    scores = {}
    for hp in decode_host_priority_list(value):
        scores[hp.host] = scores.get(hp.host, 0) + hp.score
    return scores


def decode_host_priority_list(value: Any) -> list[HostPriority]:
    """A prioritize answer: a bare JSON array of {Host, Score}; null is an empty list."""
    w = "HostPriorityList"
    if value is None:
        return []
    if not isinstance(value, list):
        raise _wrong(value, w, "an array of {Host, Score}")
    out: list[HostPriority] = []
    for i, item in enumerate(value):
        where = f"{w}[{i}]"
        if item is None:
            out.append(HostPriority("", 0))
            continue
        f = _fields(item, where, ("Host", "Score"))
        out.append(HostPriority(_str(f.get("Host"), f"{where}.Host"),
                                _int64(f.get("Score"), f"{where}.Score")))
    return out


# -- binding -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ExtenderBindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str

    def to_json(self) -> Json:
        return {"PodName": self.pod_name, "PodNamespace": self.pod_namespace,
                "PodUID": self.pod_uid, "Node": self.node}

    @classmethod
    def from_json(cls, value: Any) -> ExtenderBindingArgs:
        w = "ExtenderBindingArgs"
        f = _fields(value, w, ("PodName", "PodNamespace", "PodUID", "Node"))
        return cls(*(_str(f.get(k), f"{w}.{k}")
                     for k in ("PodName", "PodNamespace", "PodUID", "Node")))


@dataclass(frozen=True)
class ExtenderBindingResult:
    error: str = ""

    def to_json(self) -> Json:
        return {"Error": self.error}

    @classmethod
    def from_json(cls, value: Any) -> ExtenderBindingResult:
        if value is None:
            return cls()
        w = "ExtenderBindingResult"
        return cls(_str(_fields(value, w, ("Error",)).get("Error"), f"{w}.Error"))


# -- preemption --------------------------------------------------------------------------


@dataclass(frozen=True)
class MetaPod:
    """A pod identified by its UID only."""

    uid: str

    def to_json(self) -> Json:
        return {"UID": self.uid}


@dataclass(frozen=True)
class MetaVictims:
    pods: tuple[MetaPod, ...] = ()
    num_pdb_violations: int = 0

    def to_json(self) -> Json:
        return {"Pods": [p.to_json() for p in self.pods],
                "NumPDBViolations": self.num_pdb_violations}

    @classmethod
    def from_json(cls, value: Any, where: str = "MetaVictims") -> MetaVictims:
        if value is None:
            return cls()
        f = _fields(value, where, ("Pods", "NumPDBViolations"))
        raw_pods = f.get("Pods")
        if raw_pods is not None and not isinstance(raw_pods, list):
            raise _wrong(raw_pods, f"{where}.Pods", "an array of {UID}")
        pods: list[MetaPod] = []
        for i, p in enumerate(raw_pods or ()):
            pw = f"{where}.Pods[{i}]"
            uid = "" if p is None else _fields(p, pw, ("UID",)).get("UID")
            pods.append(MetaPod(_str(uid, f"{pw}.UID")))
        return cls(tuple(pods), _int64(f.get("NumPDBViolations"),
                                       f"{where}.NumPDBViolations"))


@dataclass(frozen=True)
class Victims:
    """Pods (full v1.Pod JSON) that preemption would evict from one node."""

    pods: tuple[Json, ...] = ()
    num_pdb_violations: int = 0

    def to_json(self) -> Json:
        return {"Pods": list(self.pods), "NumPDBViolations": self.num_pdb_violations}

    def to_meta(self) -> MetaVictims:
        return MetaVictims(
            tuple(MetaPod(str((p.get("metadata") or {}).get("uid") or "")) for p in self.pods),
            self.num_pdb_violations)

    @classmethod
    def from_json(cls, value: Any, where: str = "Victims") -> Victims:
        if value is None:
            return cls()
        f = _fields(value, where, ("Pods", "NumPDBViolations"))
        raw_pods = f.get("Pods")
        if raw_pods is not None and not isinstance(raw_pods, list):
            raise _wrong(raw_pods, f"{where}.Pods", "an array of pods")
        pods = tuple(_object(p, f"{where}.Pods[{i}]") or {}
                     for i, p in enumerate(raw_pods or ()))
        return cls(pods, _int64(f.get("NumPDBViolations"), f"{where}.NumPDBViolations"))


@dataclass(frozen=True)
class ExtenderPreemptionArgs:
    """Only NodeNameToMetaVictims is set for a nodeCacheCapable extender, otherwise only
    NodeNameToVictims."""

    pod: Json
    node_name_to_victims: Mapping[str, Victims] | None = None
    node_name_to_meta_victims: Mapping[str, MetaVictims] | None = None

    def to_json(self) -> Json:
        v, mv = self.node_name_to_victims, self.node_name_to_meta_victims
        return {
            "Pod": self.pod,
            "NodeNameToVictims": None if v is None else {n: x.to_json() for n, x in v.items()},
            "NodeNameToMetaVictims": (None if mv is None
                                      else {n: x.to_json() for n, x in mv.items()}),
        }

    @classmethod
    def from_json(cls, value: Any) -> ExtenderPreemptionArgs:
        w = "ExtenderPreemptionArgs"
        f = _fields(value, w, ("Pod", "NodeNameToVictims", "NodeNameToMetaVictims"))
        victims = f.get("NodeNameToVictims")
        meta = f.get("NodeNameToMetaVictims")
        if victims is not None and not isinstance(victims, dict):
            raise _wrong(victims, f"{w}.NodeNameToVictims", "an object")
        if meta is not None and not isinstance(meta, dict):
            raise _wrong(meta, f"{w}.NodeNameToMetaVictims", "an object")
        return cls(
            pod=_object(f.get("Pod"), f"{w}.Pod") or {},
            node_name_to_victims=None if victims is None else {
                n: Victims.from_json(x, f"{w}.NodeNameToVictims[{n!r}]")
                for n, x in victims.items()},
            node_name_to_meta_victims=None if meta is None else {
                n: MetaVictims.from_json(x, f"{w}.NodeNameToMetaVictims[{n!r}]")
                for n, x in meta.items()},
        )


@dataclass(frozen=True)
class ExtenderPreemptionResult:
    node_name_to_meta_victims: dict[str, MetaVictims] = field(default_factory=dict)

    def to_json(self) -> Json:
        return {"NodeNameToMetaVictims": {n: x.to_json()
                                          for n, x in self.node_name_to_meta_victims.items()}}

    @classmethod
    def from_json(cls, value: Any) -> ExtenderPreemptionResult:
        w = "ExtenderPreemptionResult"
        if value is None:
            return cls()
        meta = _fields(value, w, ("NodeNameToMetaVictims",)).get("NodeNameToMetaVictims")
        if meta is None:
            return cls()
        if not isinstance(meta, dict):
            raise _wrong(meta, f"{w}.NodeNameToMetaVictims", "an object")
        return cls({n: MetaVictims.from_json(x, f"{w}.NodeNameToMetaVictims[{n!r}]")
                    for n, x in meta.items()})
