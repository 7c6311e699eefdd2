"""Replacing kube-scheduler (docs/replacing-kube-scheduler.md): default-scheduler stays
refused by the operator, the webhook and the CRD unless the cluster admin opts in with
`polsched run --allow-default-scheduler-name` (and installs the CRD variant without
its rule); the opt-in admits only that name."""

from __future__ import annotations

import argparse
from typing import Any

import kopf
import pytest

from polsched.api import PolicyError, load_policy
from polsched.api.admission import DEFAULT_SCHEDULER
from polsched.api.crd import (
    admits_default_scheduler,
    crd_manifest,
    crd_manifest_replacing_kube_scheduler,
)
from polsched.controller.operator import admission_flags
from polsched.controller.process import options
from polsched.controller.process.server import admission_rules
from polsched.controller.webhook.admission import validate_policy
from polsched.plugins import CATALOG

pytestmark = pytest.mark.unit

API_SERVER = "https://127.0.0.1:6443"


def run_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="polsched run")
    options.add_run_arguments(p)
    return p.parse_args(argv)


def policy(name: str = "default-scheduler", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": name}, "spec": spec}


def test_by_default_the_operator_and_the_webhook_refuse_default_scheduler() -> None:
    rules = admission_rules(run_args(), API_SERVER)
    assert DEFAULT_SCHEDULER in rules.reserved_scheduler_names
    with pytest.raises(PolicyError) as err:
        load_policy(policy("p", schedulerName=DEFAULT_SCHEDULER), CATALOG, rules=rules)
    [item] = err.value.errors
    assert item.path == "spec.schedulerName"
    assert "--allow-default-scheduler-name" in item.message
    with pytest.raises(kopf.AdmissionError, match="spec.schedulerName: schedulerName "
                                                  "'default-scheduler'"):
        validate_policy(policy("p", schedulerName=DEFAULT_SCHEDULER), rules)
    # Named default-scheduler, schedulerName defaulted from the name: refused too.
    with pytest.raises(kopf.AdmissionError, match="metadata.name"):
        validate_policy(policy(), rules)


def test_the_flag_admits_default_scheduler_in_the_operator_and_the_webhook() -> None:
    rules = admission_rules(run_args("--allow-default-scheduler-name"), API_SERVER)
    assert DEFAULT_SCHEDULER not in rules.reserved_scheduler_names
    loaded = load_policy(policy(schedulerName=DEFAULT_SCHEDULER), CATALOG, rules=rules)
    assert loaded.scheduler_name == DEFAULT_SCHEDULER
    assert validate_policy(policy(), rules).scheduler_name == DEFAULT_SCHEDULER


def test_the_flag_admits_only_default_scheduler() -> None:
    rules = admission_rules(run_args("--allow-default-scheduler-name",
                                     "--reserved-scheduler-names", "volcano"), API_SERVER)
    with pytest.raises(kopf.AdmissionError, match="reserved by the cluster admin"):
        validate_policy(policy("p", schedulerName="volcano"), rules)


def test_dedicated_schedulers_get_the_opt_in_of_the_operator() -> None:
    assert "--allow-default-scheduler-name" not in admission_flags(run_args())
    flags = admission_flags(run_args("--allow-default-scheduler-name"))
    assert "--allow-default-scheduler-name" in flags
    p = argparse.ArgumentParser(prog="polsched scheduler")
    options.add_scheduler_arguments(p)
    assert p.parse_args(["--policy", "p", *flags]).allow_default_scheduler_name


def test_the_crd_refuses_default_scheduler_and_its_variant_does_not() -> None:
    [stock] = crd_manifest()["spec"]["versions"]
    rules = stock["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    assert [r for r in rules if not admits_default_scheduler(r)]
    [variant] = crd_manifest_replacing_kube_scheduler()["spec"]["versions"]
    schema = variant["schema"]["openAPIV3Schema"]
    assert all(admits_default_scheduler(r)
               for r in schema.get("x-kubernetes-validations", ()))
    # Only that rule goes: the rest of the schema is the stock one.
    assert schema["properties"] == stock["schema"]["openAPIV3Schema"]["properties"]
    assert crd_manifest()["spec"]["versions"][0] == stock  # the cached manifest is untouched
