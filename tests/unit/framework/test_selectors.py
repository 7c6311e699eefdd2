"""Label selectors and node selector requirements, after apimachinery labels/selector_test.go
and component-helpers nodeaffinity_test.go."""

from __future__ import annotations

import pytest

from polsched.framework.selectors import (
    SelectorError,
    compile_label_selector,
    compile_requirements,
)


def test_operators() -> None:
    m = compile_requirements([
        {"key": "a", "operator": "In", "values": ["1", "2"]},
        {"key": "b", "operator": "NotIn", "values": ["x"]},
        {"key": "c", "operator": "Exists"},
        {"key": "d", "operator": "DoesNotExist"},
        {"key": "e", "operator": "Gt", "values": ["5"]},
        {"key": "f", "operator": "Lt", "values": ["5"]},
    ])
    good = {"a": "2", "b": "y", "c": "", "e": "6", "f": "-1"}
    assert m(good)
    for key, value in [("a", "3"), ("b", "x"), ("e", "5"), ("f", "5"), ("e", "six")]:
        assert not m({**good, key: value}), (key, value)
    assert not m({k: v for k, v in good.items() if k != "c"})
    assert not m({**good, "d": "1"})


@pytest.mark.parametrize(("req", "path"), [
    ({"key": "a", "operator": "Is"}, "x[0].operator"),
    ({"key": "a", "operator": "In"}, "x[0].values"),
    ({"key": "a", "operator": "Exists", "values": ["1"]}, "x[0].values"),
    ({"key": "a", "operator": "Gt", "values": ["one"]}, "x[0].values"),
    ({"operator": "Exists"}, "x[0].key"),
])
def test_errors_name_the_field(req: dict, path: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(SelectorError) as err:
        compile_requirements([req], "x")
    assert err.value.path == path


def test_label_selector_empty_matches_all_and_none_matches_nothing() -> None:
    assert compile_label_selector({})({"any": "thing"})
    assert not compile_label_selector(None)({"any": "thing"})
    sel = compile_label_selector({"matchLabels": {"app": "web"},
                                  "matchExpressions": [{"key": "tier", "operator": "Exists"}]})
    assert sel({"app": "web", "tier": "1"})
    assert not sel({"app": "web"})
    with pytest.raises(SelectorError) as err:
        compile_label_selector({"matchExpressions": [{"key": "a", "operator": "Gt",
                                                      "values": ["1"]}]}, "when.podSelector")
    assert err.value.path == "when.podSelector.matchExpressions[0].operator"
