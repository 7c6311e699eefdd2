"""The k8s.io/kube-scheduler/extender/v1 wire format: Go field names when encoding,
case-insensitive decoding, and a clear ExtenderError for anything malformed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from polsched.extender import wire
from polsched.framework.interfaces import ExtenderError

pytestmark = pytest.mark.unit

POD = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}, "spec": {}}
NODE_A = {"metadata": {"name": "a"}}
NODE_B = {"metadata": {"name": "b"}}


def encoded(value: Any) -> Any:
    """What the extender receives: the encoded bytes, parsed back."""
    return json.loads(wire.dumps(value))


# -- encoding: the Go field names, in order, nil as null --------------------------------


def test_extender_args_node_names_mode_sends_all_three_keys_with_nodes_null() -> None:
    got = encoded(wire.ExtenderArgs(POD, node_names=["a", "b"]).to_json())
    assert list(got) == ["Pod", "Nodes", "NodeNames"]
    assert got == {"Pod": POD, "Nodes": None, "NodeNames": ["a", "b"]}


def test_extender_args_nodes_mode_sends_a_node_list() -> None:
    got = encoded(wire.ExtenderArgs(POD, nodes=[NODE_A, NODE_B]).to_json())
    assert got == {"Pod": POD, "Nodes": {"metadata": {}, "items": [NODE_A, NODE_B]},
                   "NodeNames": None}


@pytest.mark.parametrize("nodes,names", [(None, ["a"]), ([NODE_A, NODE_B], None)])
def test_encode_args_from_fragments_equals_the_struct_encoding(
        nodes: list[dict[str, Any]] | None, names: list[str] | None) -> None:
    fragments = None if nodes is None else [wire.dumps(n) for n in nodes]
    fast = wire.encode_args(wire.dumps(POD), fragments, names)
    assert fast == wire.dumps(wire.ExtenderArgs(POD, nodes, names).to_json())


def test_filter_result_keys() -> None:
    got = encoded(wire.ExtenderFilterResult(node_names=["a"], failed_nodes={"b": "no"}).to_json())
    assert list(got) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes",
                         "Error"]


def test_host_priority_list_is_a_bare_list_of_host_and_score() -> None:
    got = encoded(wire.encode_host_priority_list([wire.HostPriority("a", 3)]))
    assert got == [{"Host": "a", "Score": 3}]


def test_binding_args_and_result_keys() -> None:
    got = encoded(wire.ExtenderBindingArgs("p", "default", "u1", "a").to_json())
    assert got == {"PodName": "p", "PodNamespace": "default", "PodUID": "u1", "Node": "a"}
    assert encoded(wire.ExtenderBindingResult().to_json()) == {"Error": ""}


def test_preemption_args_keys_in_both_modes() -> None:
    victims = {"a": wire.Victims(({"metadata": {"uid": "v1"}},), 1)}
    full = encoded(wire.ExtenderPreemptionArgs(POD, node_name_to_victims=victims).to_json())
    assert full == {
        "Pod": POD,
        "NodeNameToVictims": {"a": {"Pods": [{"metadata": {"uid": "v1"}}],
                                    "NumPDBViolations": 1}},
        "NodeNameToMetaVictims": None,
    }
    meta = {n: v.to_meta() for n, v in victims.items()}
    got = encoded(wire.ExtenderPreemptionArgs(POD, node_name_to_meta_victims=meta).to_json())
    assert got == {
        "Pod": POD,
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {"a": {"Pods": [{"UID": "v1"}], "NumPDBViolations": 1}},
    }


def test_preemption_result_round_trips() -> None:
    result = wire.ExtenderPreemptionResult({"a": wire.MetaVictims((wire.MetaPod("v1"),), 2)})
    assert encoded(result.to_json()) == {
        "NodeNameToMetaVictims": {"a": {"Pods": [{"UID": "v1"}], "NumPDBViolations": 2}}}
    assert wire.ExtenderPreemptionResult.from_json(encoded(result.to_json())) == result


def test_args_decode_back_to_what_was_encoded() -> None:
    args = wire.ExtenderArgs(POD, nodes=[NODE_A])
    assert wire.ExtenderArgs.from_json(encoded(args.to_json())) == args
    bind = wire.ExtenderBindingArgs("p", "ns", "u", "a")
    assert wire.ExtenderBindingArgs.from_json(encoded(bind.to_json())) == bind


# -- decoding: case-insensitive keys, as Go's encoding/json ---------------------------


def test_filter_result_with_pre_1_18_lowercase_tags() -> None:
    got = wire.ExtenderFilterResult.from_json({
        "nodenames": ["a"], "failedNodes": {"b": "busy"}, "error": "",
        "failedandunresolvablenodes": {"c": "gone"}})
    assert got == wire.ExtenderFilterResult(
        node_names=["a"], failed_nodes={"b": "busy"},
        failed_and_unresolvable_nodes={"c": "gone"})


def test_filter_result_nodes_list_with_lowercase_keys() -> None:
    got = wire.ExtenderFilterResult.from_json({"nodes": {"Items": [NODE_A]}})
    assert got.nodes == [NODE_A]
    assert wire.node_name({"METADATA": {"Name": "a"}}) == "a"


def test_host_priority_list_with_lowercase_keys() -> None:
    got = wire.decode_host_priority_list([{"host": "a", "score": 7}, {"HOST": "b"}])
    assert got == [wire.HostPriority("a", 7), wire.HostPriority("b", 0)]


def test_unknown_keys_are_ignored_and_null_fields_are_zero() -> None:
    got = wire.ExtenderFilterResult.from_json(
        {"NodeNames": None, "FailedNodes": None, "Error": None, "Extra": [1, 2]})
    assert got == wire.ExtenderFilterResult()
    assert wire.ExtenderFilterResult.from_json(None) == wire.ExtenderFilterResult()
    assert wire.decode_host_priority_list(None) == []


def test_later_duplicate_key_wins_as_in_go() -> None:
    got = wire.ExtenderFilterResult.from_json({"NodeNames": ["a"], "nodeNames": ["b"]})
    assert got.node_names == ["b"]


def test_binding_result_error_lowercase() -> None:
    assert wire.ExtenderBindingResult.from_json({"error": "nope"}).error == "nope"


# -- garbage ----------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [b"", b"   ", b"not json", b"{\"NodeNames\": [", b"<html>"])
def test_loads_garbage_is_an_extender_error_saying_where(payload: bytes) -> None:
    with pytest.raises(ExtenderError, match="the filter answer"):
        wire.loads(payload, "the filter answer")


def test_loads_reads_the_first_value_like_a_go_decoder() -> None:
    assert wire.loads(b' {"Error": ""}\ntrailing', "x") == {"Error": ""}


def test_loads_deep_nesting_is_an_error_not_a_crash() -> None:
    with pytest.raises(ExtenderError):
        wire.loads(b"[" * 100_000, "x")


@pytest.mark.parametrize("value,field", [
    ([], "ExtenderFilterResult"),
    ("ok", "ExtenderFilterResult"),
    ({"NodeNames": "a"}, "ExtenderFilterResult.NodeNames"),
    ({"NodeNames": ["a", 1]}, "ExtenderFilterResult.NodeNames[1]"),
    ({"FailedNodes": ["a"]}, "ExtenderFilterResult.FailedNodes"),
    ({"FailedNodes": {"a": 1}}, "ExtenderFilterResult.FailedNodes['a']"),
    ({"Error": 42}, "ExtenderFilterResult.Error"),
    ({"Nodes": {"items": "a"}}, "ExtenderFilterResult.Nodes.items"),
    ({"Nodes": {"items": [1]}}, "ExtenderFilterResult.Nodes.items[0]"),
])
def test_filter_result_wrong_shapes_name_the_field(value: Any, field: str) -> None:
    with pytest.raises(ExtenderError) as err:
        wire.ExtenderFilterResult.from_json(value)
    assert field in str(err.value)


@pytest.mark.parametrize("value,field", [
    ({"Host": "a", "Score": 1}, "HostPriorityList"),
    ([{"Host": "a", "Score": "10"}], "HostPriorityList[0].Score"),
    ([{"Host": "a", "Score": 5.0}], "HostPriorityList[0].Score"),
    ([{"Host": "a", "Score": True}], "HostPriorityList[0].Score"),
    ([{"Host": "a", "Score": 2 ** 63}], "HostPriorityList[0].Score"),
    ([{"Host": 1, "Score": 1}], "HostPriorityList[0].Host"),
    (["a"], "HostPriorityList[0]"),
])
def test_host_priority_list_wrong_shapes_name_the_field(value: Any, field: str) -> None:
    with pytest.raises(ExtenderError) as err:
        wire.decode_host_priority_list(value)
    assert field in str(err.value)
    # host_scores (what the client reads prioritize answers with) fails the same way.
    with pytest.raises(ExtenderError) as err2:
        wire.host_scores(value)
    assert str(err2.value) == str(err.value)


def summed(value: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for hp in wire.decode_host_priority_list(value):
        out[hp.host] = out.get(hp.host, 0) + hp.score
    return out


@pytest.mark.parametrize("value", [
    None,
    [],
    [{"Host": "a", "Score": 3}, {"Host": "b", "Score": -2}],
    [{"Host": "a", "Score": 3}, {"Host": "a", "Score": 4}],          # listed twice: summed
    [{"Host": "a", "Score": 3}, {"host": "b", "score": 4}],          # then pre-1.18 tags
    [{"Host": "a", "Score": 3}, None, {"Host": "b", "Score": 1}],    # null: ("", 0)
    [{"Host": "a", "Score": 3}, {"Host": "b", "Score": 1, "x": 0}],  # unknown key
    [{"Host": "a", "Score": 3}, {"Host": "b"}],                      # no Score: 0
    [{"Host": "a", "Score": 2 ** 63 - 1}, {"Host": "b", "Score": -(2 ** 63)}],
])
def test_host_scores_equals_the_general_decoder_summed(value: Any) -> None:
    assert wire.host_scores(value) == summed(value)


def test_filter_result_of_strings_only_reads_the_same() -> None:
    value = {"NodeNames": ["a", "b"], "FailedNodes": {"c": "busy"},
             "FailedAndUnresolvableNodes": None, "Error": ""}
    result = wire.ExtenderFilterResult.from_json(value)
    assert result.node_names == ["a", "b"]
    assert result.failed_nodes == {"c": "busy"}
    assert result.failed_and_unresolvable_nodes == {}


def test_preemption_result_wrong_shapes() -> None:
    with pytest.raises(ExtenderError, match=r"NodeNameToMetaVictims\['a'\].Pods"):
        wire.ExtenderPreemptionResult.from_json({"NodeNameToMetaVictims": {"a": {"Pods": 1}}})
    with pytest.raises(ExtenderError, match="NumPDBViolations"):
        wire.ExtenderPreemptionResult.from_json(
            {"NodeNameToMetaVictims": {"a": {"NumPDBViolations": "x"}}})
