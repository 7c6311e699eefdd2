"""The cost estimate: comprehensions multiply, bounds come from the declared rules, and
the real objects are measured where the estimate read them."""

from __future__ import annotations

import pytest

from polsched.cel import Bounds, Checks, InputBoundError, Measured, estimate, measure, parse, regex
from polsched.cel.cost import ITER, MAX_VIEW_VALUES, render

pytestmark = pytest.mark.unit

L10 = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"


def nested(depth: int, over: str = L10, body: str = "true") -> str:
    e = body
    for i in range(depth):
        e = f"{over}.all(x{i}, {e})"
    return e


def cost(source: str) -> int:
    return estimate(parse(source), Bounds())


def test_nested_comprehensions_multiply() -> None:
    costs = [cost(nested(d)) for d in range(1, 7)]
    for shallow, deep in zip(costs, costs[1:], strict=False):
        assert deep > 9 * shallow
    assert cost(nested(12)) > 10 ** 12


def test_lists_read_from_pod_and_node_count_at_their_declared_bound() -> None:
    b = Bounds()
    one = estimate(parse("pod.spec.containers.all(c, c.image != '')"), b)
    assert ((("pod", "spec", "containers"), "items")) in b.asked
    two = estimate(parse("pod.spec.containers.all(c, c.ports.all(p, p.containerPort > 0))"),
                   Bounds())
    assert two > 50 * one / 2
    # kubelet reports at most 50 images: the images bound is 64, their names 16
    images = cost("node.status.images.exists(i, i.names.exists(n, n == 'x'))")
    assert 64 * 16 <= images < 64 * 64 * 16


def test_map_and_filter_pay_for_copying_their_result() -> None:
    assert cost("pod.spec.containers.map(c, c.name).size() > 0") > \
        cost("pod.spec.containers.all(c, c.name != '')") + 64 * 64 // 2


def test_strings_regexes_and_literals() -> None:
    assert cost("node.metadata.annotations.x.contains('a')") > cost(
        "node.metadata.labels.x.contains('a')")
    assert cost("1 == 1") < 5


def test_a_regex_is_charged_for_its_compiled_program_and_the_subject() -> None:
    """RE2 matches in time linear in subject x program (polsched.cel.regex): a counted
    repetition is dear, a short pattern cheap, and a pattern not known until run time is
    charged its compile and the largest program it may have."""
    small = cost("pod.metadata.name.matches('^a+$')")
    assert 253 <= small < 1_000  # a name has at most 253 characters
    assert cost("pod.metadata.name.matches('\\\\w{200}')") > 100 * small
    assert cost("pod.metadata.labels.x.matches('^a+$')") < small  # a label value: 63 characters
    computed = cost("pod.metadata.labels.x.matches(pod.metadata.name)")
    assert computed > 63 * 0.2 * regex.MAX_PROGRAM_SIZE


def test_a_bomb_behind_comments_costs_what_it_does_without_them() -> None:
    bomb = nested(12)
    hidden = "// don't ' count ( me\n" + bomb.replace(", true", ", // it's ( here\ntrue")
    assert cost(hidden) == cost(bomb)


def test_measure_reads_only_what_the_estimate_asked() -> None:
    b = Bounds()
    tree = parse("pod.spec.containers.all(c, c.image.contains('x'))")
    static = estimate(tree, b)
    pod = {"spec": {"containers": [{"image": "xy"}, {"image": "xyz"}],
                    "volumes": [{}] * 500}}  # not read: not measured, not refused
    sizes, values, chars = measure(pod, Checks.of("pod", b))
    assert values == 1 + 2 + 2 * 2 + 1 + 500
    assert chars == len("spec" "containers" "image" "xy" "image" "xyz" "volumes")
    assert sizes[("pod", "spec", "containers")] == 2
    assert sizes[("pod", "spec", "containers", ITER, "image")] == 3
    actual = estimate(tree, Measured(sizes, {}))
    assert actual < static


def test_measure_counts_the_characters_a_conversion_copies() -> None:
    """Few values can hold megabytes: the CEL library copies every string and key of a
    view, so measure reports the characters beside the values (seed 4040's check)."""
    b = Bounds()
    estimate(parse("size(pod.spec.affinity) > 0"), b)
    view = {"spec": {"affinity": {"k": ["v" * 60_000] * 25}}}
    _, values, chars = measure(view, Checks.of("pod", b))
    assert values == 1 + 1 + 1 + 1 + 25
    assert chars == 25 * 60_000 + len("spec" "affinity" "k")


def test_measure_refuses_inputs_over_their_bound_naming_the_path() -> None:
    b = Bounds()
    estimate(parse("pod.spec.containers.all(c, c.env.all(e, e.name != ''))"), b)
    env = [{"name": "A"}] * 65
    with pytest.raises(InputBoundError) as err:
        measure({"spec": {"containers": [{"env": env}]}}, Checks.of("pod", b))
    assert str(err.value) == "pod.spec.containers[*].env has 65 items; the bound is 64"
    with pytest.raises(InputBoundError) as err:
        measure({"spec": {"x": list(range(MAX_VIEW_VALUES))}}, Checks.of("pod", b))
    assert f"the bound is {MAX_VIEW_VALUES}" in str(err.value)


def test_label_values_have_the_api_bound() -> None:
    b = Bounds()
    estimate(parse("node.metadata.labels.exists(k, node.metadata.labels[k].contains('a'))"),
             b)
    assert b.bound(("node", "metadata", "labels", ITER), "chars") == 317
    assert b.bound(("node", "metadata", "labels", "*"), "chars") == 63
    assert render(("node", "metadata", "labels", ITER)) == "node.metadata.labels[*]"


def test_the_package_imports_neither_the_cel_library_nor_the_scheduler() -> None:
    """polsched.cel is pure data manipulation: loading it alone brings no CEL library
    (its import costs start-up ~80 ms) and nothing of the framework or the API."""
    import subprocess
    import sys

    code = ("import sys, polsched.cel; "
            "print(sorted(m for m in sys.modules if m == 'cel' or m.startswith('cel.') "
            "or (m.startswith('polsched.') and not m.startswith('polsched.cel'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout
