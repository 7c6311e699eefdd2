"""The client budget flags of `polsched run` and `polsched scheduler`: kube-scheduler's
defaults, a clear error for a value that means nothing, and a negative QPS for none."""

from __future__ import annotations

import argparse

import pytest

from polsched.cluster.client import ClientLimits
from polsched.controller.process import credentials, options

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="polsched run")
    options.add_run_arguments(p)
    return p.parse_args(argv)


def test_defaults_are_kube_schedulers() -> None:
    args = parse()
    assert (args.kube_api_qps, args.kube_api_burst) == (50.0, 100)
    assert credentials.budget(args) == {"limits": ClientLimits(qps=50.0, burst=100)}


def test_a_negative_qps_turns_the_client_side_limit_off() -> None:
    assert credentials.budget(parse("--kube-api-qps", "-1")) == {}


@pytest.mark.parametrize("flag, value, message", [
    ("--kube-api-qps", "0", "a negative value for no client-side limit"),
    ("--kube-api-qps", "fast", "is not a number"),
    ("--kube-api-burst", "0", "the burst must be at least 1"),
    ("--kube-api-burst", "1.5", "is not a whole number"),
])
def test_bad_values_are_refused_naming_the_flag(capsys: pytest.CaptureFixture[str],
                                                flag: str, value: str, message: str) -> None:
    with pytest.raises(SystemExit):
        parse(flag, value)
    err = capsys.readouterr().err
    assert flag in err and message in err


def test_the_scheduler_command_has_the_same_flags() -> None:
    p = argparse.ArgumentParser(prog="polsched scheduler")
    options.add_scheduler_arguments(p)
    args = p.parse_args(["--policy", "x", "--kube-api-qps", "20", "--kube-api-burst", "40",
                         "--health-listen", "0.0.0.0:8081"])
    assert credentials.budget(args) == {"limits": ClientLimits(qps=20.0, burst=40)}
    assert args.health_listen == "0.0.0.0:8081"
