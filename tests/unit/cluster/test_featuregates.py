"""polsched.cluster.featuregates: the gate list the oracle kube-scheduler gets."""

from __future__ import annotations

import pytest

from polsched.cluster import featuregates as fg


def test_unset_adds_nothing() -> None:
    assert fg.kube_scheduler_args({}) == []
    assert fg.kube_scheduler_args({fg.ENV: ""}) == []
    assert not fg.enabled("GenericWorkload", {})


def test_list_passes_through() -> None:
    env = {fg.ENV: "GenericWorkload=true,PodGroupPreemptionPolicy=false"}
    assert fg.kube_scheduler_args(env) == [
        "--feature-gates", "GenericWorkload=true,PodGroupPreemptionPolicy=false"]
    assert fg.enabled("GenericWorkload", env)
    assert not fg.enabled("PodGroupPreemptionPolicy", env)


def test_last_setting_wins() -> None:
    assert not fg.enabled("GenericWorkload", {fg.ENV: "GenericWorkload=true,GenericWorkload=false"})


@pytest.mark.parametrize("bad", ["GenericWorkload", "GenericWorkload=yes", "=true",
                                 "A=true,,B=true", "A=true;rm -rf /", "A B=true"])
def test_bad_item_named(bad: str) -> None:
    with pytest.raises(ValueError, match=fg.ENV):
        fg.kube_scheduler_args({fg.ENV: bad})


def test_bounded() -> None:
    with pytest.raises(ValueError, match="longer than"):
        fg.parse("A=true," * 1000)
