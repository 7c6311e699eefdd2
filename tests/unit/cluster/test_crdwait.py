"""polsched.cluster.crdwait reads kubectl's JSONPath output: a CRD whose conditions are
still null (the moment after it is created) is pending, not an error."""

from polsched.cluster.crdwait import pending


def test_a_crd_without_conditions_yet_is_pending() -> None:
    out = "a.example.com=\nb.example.com=True\n"
    assert pending(out, ["a.example.com", "b.example.com"]) == ["a.example.com"]


def test_a_crd_missing_from_the_list_is_pending() -> None:
    assert pending("b.example.com=True\n", ["a.example.com"]) == ["a.example.com"]


def test_every_listed_crd_counts_when_no_names_are_given() -> None:
    assert pending("a.example.com=True\nb.example.com=False\n", None) == ["b.example.com"]
    assert pending("a.example.com=True\n", None) == []
