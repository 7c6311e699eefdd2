"""polsched.controller.webhook.admission: the admission check is the loader's, with field paths."""

from __future__ import annotations

from pathlib import Path

import kopf
import pytest

from polsched.controller.webhook.admission import validate_policy

pytestmark = pytest.mark.unit


def test_an_invalid_policy_is_refused_with_its_field_path() -> None:
    body = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": "p"},
            "spec": {"filters": [{"name": "NodeLabel", "args": {"requirements": [
                {"key": "zone", "operator": "Near", "values": ["a"]}]}}]}}
    with pytest.raises(kopf.AdmissionError) as err:
        validate_policy(body)
    assert "spec.filters[0].args.requirements[0].operator" in str(err.value)
    assert err.value.code == 422


def test_a_valid_policy_is_admitted() -> None:
    validate_policy({"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
                     "metadata": {"name": "p"}, "spec": {}})


def test_webhook_service_without_listen_is_refused_before_connecting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`polsched run --webhook-service` without --webhook-listen stops at the flags: no
    kubeconfig is read (this one does not exist), nothing is imported or sent by boot."""
    from polsched.commands import cli
    from polsched.controller.process import boot

    def never(*_a: object, **_k: object) -> int:
        raise AssertionError("boot.run reached")

    monkeypatch.setattr(boot, "run", never)
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--kubeconfig", str(tmp_path / "missing"),
                  "--webhook-service", "polsched-system/polsched"])
    assert str(exc.value) == "polsched: --webhook-service needs --webhook-listen (where to serve)"


@pytest.mark.parametrize("content, words", [
    (None, "not a PEM file of CA certificates"),
    ("not a certificate", "not a PEM file of CA certificates"),
])
def test_a_webhook_client_ca_it_cannot_verify_with_stops_the_operator_at_start(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: str | None,
        words: str) -> None:
    from polsched.commands import cli
    from polsched.controller.process import boot

    def never(*_a: object, **_k: object) -> int:
        raise AssertionError("boot.run reached")

    monkeypatch.setattr(boot, "run", never)
    ca = tmp_path / "ca.crt"
    if content is not None:
        ca.write_text(content)
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--kubeconfig", str(tmp_path / "missing"),
                  "--webhook-listen", "127.0.0.1:9443", "--webhook-client-ca", str(ca)])
    assert str(exc.value).startswith(f"polsched: --webhook-client-ca {ca}: {words}")
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--kubeconfig", str(tmp_path / "missing"),
                  "--webhook-client-ca", str(ca)])
    assert str(exc.value) == "polsched: --webhook-client-ca needs --webhook-listen"


def test_default_scheduler_and_reserved_names_are_refused_with_the_field() -> None:
    from polsched.api.admission import AdmissionRules

    body = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": "p"}, "spec": {"schedulerName": "default-scheduler"}}
    with pytest.raises(kopf.AdmissionError, match="spec.schedulerName: schedulerName "
                                                  "'default-scheduler'"):
        validate_policy(body)
    body["spec"] = {"schedulerName": "volcano"}
    validate_policy(body)
    with pytest.raises(kopf.AdmissionError, match="spec.schedulerName: .*reserved"):
        validate_policy(body, AdmissionRules.make(["volcano"]))


def test_args_nested_hundreds_deep_are_refused_with_their_field_not_a_500() -> None:
    """The API server admits args nested ~900 deep (x-kubernetes-preserve-unknown-fields);
    converting kopf's body must not recurse past Python's limit (a 500, found by make
    fuzz: tests/fuzz/corpus/webhook-deep-args.json)."""
    args: object = "leaf"
    for i in range(900):
        args = {"x": args} if i % 2 else [args]
    body = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": "p"}, "spec": {"filters": [{"name": "NodeLabel",
                                                             "args": {"x": args}}]}}
    with pytest.raises(kopf.AdmissionError) as err:
        validate_policy(body)
    assert err.value.code == 422
    assert "spec.filters[0].args.x: unknown field" in str(err.value)


def test_the_webhook_validates_off_the_event_loop() -> None:
    """load_policy runs on the webhook's validation threads: while a policy is being
    validated, the event loop (the scheduling loop, the probes' deadlines) turns. Run
    synchronously, the handler would have finished before any other task got a turn."""
    import asyncio

    from polsched.controller.webhook import admission

    handler = admission.register(kopf.OperatorRegistry())
    body = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": "p"}, "spec": {}}

    async def main() -> bool:
        validating = asyncio.get_running_loop().create_task(handler(body=body))
        await asyncio.sleep(0)  # one turn of the loop: the handler's first step ran
        turned_while_validating = not validating.done()
        await validating
        return turned_while_validating

    assert asyncio.run(main())
