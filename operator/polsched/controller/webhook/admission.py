"""The admission check: a SchedulingPolicy is refused at `kubectl apply` with the
loader's field paths (validate_policy), its extenders' CA Secrets that this process can
read are checked (check_ca_secrets), and a shadow must be allowed by the policy it
shadows (check_shadow). register() installs the handler in kopf's registry (kopf's
@kopf.on.validate answers the AdmissionReviews; the route is WEBHOOK_ID).
"""

from __future__ import annotations

import logging
from typing import Any

from polsched.api import GROUP, PLURAL, VERSION, FieldError, Policy, PolicyError, load_policy
from polsched.api.admission import DEFAULT_RULES, AdmissionRules
from polsched.cluster.client import ApiClient, ApiError
from polsched.controller.policies import extender_ca
from polsched.controller.process.kopf_import import kopf
from polsched.controller.webhook.configuration import WEBHOOK_ID
from polsched.plugins import CATALOG

log = logging.getLogger(__name__)


def validate_policy(body: Any, rules: AdmissionRules = DEFAULT_RULES) -> Policy:
    """The loaded policy, or kopf.AdmissionError listing every problem (`path: message`).
    `rules`: the operator's reserved scheduler names and extender destination policy."""
    try:
        return load_policy(plain(body), CATALOG, rules=rules)
    except PolicyError as e:
        raise kopf.AdmissionError(str(e), code=422) from e
    except Exception as e:  # a loader bug: refused with a reason, the webhook stays up
        log.exception("validating a SchedulingPolicy failed")
        raise kopf.AdmissionError(f"SchedulingPolicy could not be validated "
                                  f"({type(e).__name__}); see the operator's log",
                                  code=500) from e


async def check_ca_secrets(client: ApiClient, policy: Policy) -> None:
    """Each caSecretRef Secret this process can read must hold PEM certificates in
    ca.crt; one it cannot read (not there yet, not granted) is left to the operator,
    which reports it as the policy's Valid=False."""
    problems: list[FieldError] = []
    for i, ext in enumerate(policy.extenders):
        if ext.ca_secret_ref is None:
            continue
        namespace, name = ext.ca_secret_ref
        path = f"spec.extenders[{i}].tlsConfig.caSecretRef"
        try:
            secret = await client.get(extender_ca.secret_path(namespace, name))
        except Exception as e:  # noqa: BLE001 - unreadable here: the operator reports it
            log.debug("webhook: Secret %s/%s for %s not read: %r", namespace, name, path, e)
            continue
        try:
            extender_ca.ca_from_secret(secret, namespace, name, path)
        except PolicyError as e:
            problems.extend(e.errors)
    if problems:
        raise kopf.AdmissionError(str(PolicyError(problems, policy.name)), code=422)


async def check_shadow(client: ApiClient, policy: Policy) -> None:
    """spec.shadowOf: refuse it unless the shadowed policy lists this one in its
    spec.allowedShadows. A target that does not exist (yet) or cannot be read is left
    to the operator, which never attaches a shadow its target does not allow."""
    try:
        target = await client.get(f"/apis/{GROUP}/{VERSION}/{PLURAL}/{policy.shadow_of}")
    except ApiError as e:
        if e.status != 404:
            log.warning("reading SchedulingPolicy %s for spec.shadowOf of %s: %s",
                        policy.shadow_of, policy.name, e)
        return
    except Exception as e:  # noqa: BLE001 - unreachable: the operator still enforces
        log.warning("reading SchedulingPolicy %s for spec.shadowOf of %s: %r",
                    policy.shadow_of, policy.name, e)
        return
    allowed = (target.get("spec") or {}).get("allowedShadows") or []
    if not isinstance(allowed, list) or policy.name not in allowed:
        raise kopf.AdmissionError(
            f"SchedulingPolicy {policy.name!r} is invalid: spec.shadowOf: "
            f"SchedulingPolicy {policy.shadow_of!r} does not allow {policy.name!r} to "
            f"shadow it: its spec.allowedShadows must list {policy.name!r} (a shadow sees "
            f"every pod of the policy it shadows, so whoever may edit "
            f"{policy.shadow_of!r} decides)", code=422)


def _container(obj: Any) -> dict[str, Any] | list[Any] | None:
    """An empty dict or list for a mapping or a sequence of kopf's body, else None."""
    if isinstance(obj, str | bytes | int | float | bool) or obj is None:
        return None
    if hasattr(obj, "items"):
        return {}
    if isinstance(obj, list | tuple):
        return []
    return None


def plain(obj: Any) -> Any:
    """kopf's body views as plain dicts and lists (what the loader expects). Iterative:
    a body nested as deep as the API server admits (args under
    x-kubernetes-preserve-unknown-fields, hundreds of levels) must reach the loader, which
    names the field, and not end in a RecursionError answered as a 500."""
    root = _container(obj)
    if root is None:
        return obj
    stack: list[tuple[Any, dict[str, Any] | list[Any]]] = [(obj, root)]
    while stack:
        src, dst = stack.pop()
        pairs = ((str(k), v) for k, v in src.items()) if isinstance(dst, dict) \
            else enumerate(src)
        for key, value in pairs:
            child = _container(value)
            if child is not None:
                stack.append((value, child))
                value = child
            if isinstance(dst, dict):
                dst[str(key)] = value
            else:
                dst.append(value)
    return root


def register(registry: kopf.OperatorRegistry, rules: AdmissionRules = DEFAULT_RULES,
             client: ApiClient | None = None) -> None:
    """The handler (kopf routes /validate-policy to it). With `client`, the CA Secrets
    it can read are checked (check_ca_secrets) and a shadow against the policy it
    shadows (check_shadow)."""
    @kopf.on.validate(GROUP, VERSION, PLURAL, id=WEBHOOK_ID, registry=registry,
                      operations=["CREATE", "UPDATE"], ignore_failures=True)
    async def _validate(body: kopf.Body, **_: Any) -> None:
        policy = validate_policy(body, rules)
        if client is not None:
            await check_ca_secrets(client, policy)
            if policy.shadow_of:
                await check_shadow(client, policy)

