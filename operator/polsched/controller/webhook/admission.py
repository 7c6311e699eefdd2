"""The admission check: a SchedulingPolicy is refused at `kubectl apply` with the
loader's field paths (validate_policy); the admin's tenancy configuration must grant the
requesting user the schedulerName (check_grant), which has one owner (check_claim); its
extenders' CA Secrets must be ones the author may read (check_ca_secrets), and a shadow
must be allowed by the policy it shadows (check_shadow). register() installs the handler
in kopf's registry (kopf's @kopf.on.validate answers the AdmissionReviews; the route is
WEBHOOK_ID).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from polsched.api import (
    GROUP,
    PLURAL,
    VERSION,
    FieldError,
    Policy,
    PolicyError,
    claims,
    load_policy,
)
from polsched.api.admission import DEFAULT_RULES, AdmissionRules
from polsched.cluster.client import ApiClient, ApiError
from polsched.controller.policies import extender_ca
from polsched.controller.process.kopf_import import kopf
from polsched.controller.webhook.configuration import WEBHOOK_ID
from polsched.plugins import CATALOG

log = logging.getLogger(__name__)

# Validations (load_policy) run at once, each on a thread of its own; more wait their
# turn, and the API server's webhook timeout refuses what waits too long. Loading a large
# valid policy takes ~1 s: on the event loop, four concurrent requests stalled the
# scheduling of every policy, the Lease's deadline checks and the probes (issue 36).
VALIDATION_CONCURRENCY = 2


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


async def may_read_secret(client: ApiClient, userinfo: Mapping[str, Any], namespace: str,
                          name: str) -> bool | None:
    """Whether the requesting user may get Secret namespace/name (a SubjectAccessReview,
    as kube-scheduler's delegated authorization asks); None when the API server does
    not answer."""
    groups = userinfo.get("groups")
    extra = userinfo.get("extra")
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": str(userinfo.get("username") or ""),
                       "uid": str(userinfo.get("uid") or ""),
                       "groups": [str(g) for g in groups] if isinstance(groups, list) else [],
                       "extra": extra if isinstance(extra, Mapping) else {},
                       "resourceAttributes": {"namespace": namespace, "verb": "get",
                                              "resource": "secrets", "name": name}}}
    try:
        answer = await client.post(SUBJECT_ACCESS_REVIEWS, review)
    except Exception as e:  # noqa: BLE001 - unanswered: refused below, never guessed
        log.warning("webhook: SubjectAccessReview for Secret %s/%s: %r", namespace, name, e)
        return None
    return bool((answer.get("status") or {}).get("allowed"))


async def check_ca_secrets(client: ApiClient, policy: Policy,
                           userinfo: Mapping[str, Any] | None = None) -> None:
    """A caSecretRef Secret must be one the policy's author may read (asked of the API
    server for `userinfo`): else the answer, the same whether or not the Secret exists,
    refuses it, so that a policy cannot probe which Secrets exist. One the author may
    read and this process can read must hold PEM certificates in ca.crt; one this
    process cannot read is left to the operator (Valid=False)."""
    problems: list[FieldError] = []
    for i, ext in enumerate(policy.extenders):
        if ext.ca_secret_ref is None:
            continue
        namespace, name = ext.ca_secret_ref
        path = f"spec.extenders[{i}].tlsConfig.caSecretRef"
        if userinfo is not None and not await may_read_secret(client, userinfo, namespace,
                                                              name):
            problems.append(FieldError(path, (
                f"the author may not read Secret {namespace}/{name} (or it could not be "
                f"asked): a policy names only a CA Secret its author may get")))
            continue
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


# schedulerName -> (the deleted policy it is held for, until when): PolicyBook.held.
Held = Callable[[], Mapping[str, tuple[str, float]]]
# schedulerName -> the policy the operator recorded as its owner: PolicyBook.recorded.
Recorded = Callable[[], Mapping[str, str]]

SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

# A policy being created has no creationTimestamp yet: it is the newest claimant.
NEWEST = "9999-12-31T23:59:59Z"


def check_grant(rules: AdmissionRules, policy: Policy, userinfo: Mapping[str, Any],
                old: Mapping[str, Any] | None = None) -> None:
    """The tenancy configuration grants the requesting user (the webhook's userInfo,
    which the API server fills from authentication) the schedulerName claimed, and on an
    UPDATE (`old`: the object before it) also the name the policy claimed before: a team
    may not take another team's policy over by renaming what it claims."""
    raw_groups = userinfo.get("groups") or []
    username = str(userinfo.get("username") or "")
    groups = [str(g) for g in raw_groups] if isinstance(raw_groups, list) else []
    # (name, shadowOf, what the message adds) of each claim the request must be granted.
    asked = [(policy.scheduler_name, policy.shadow_of, "")]
    before = claims.ObjectClaim.of(old) if old is not None else None
    if before is not None and before.claimed != policy.scheduler_name:
        asked.append((before.claimed, before.shadow_of,
                      " (the name this policy claims before the edit)"))
    for sname, shadow, edited in asked:
        if shadow:
            continue  # a shadow claims no name; its target's allowedShadows decides
        why = rules.tenancy.claim_refusal(sname, username, groups)
        if why:
            raise kopf.AdmissionError(f"SchedulingPolicy {policy.name!r} is invalid: "
                                      f"spec.schedulerName: {why}{edited}", code=403)


SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


class Myself:
    """Who this process is to the API server (a SelfSubjectReview, asked once it is
    needed and kept once answered)."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client
        self.username: str | None = None

    async def is_me(self, userinfo: Mapping[str, Any]) -> bool:
        if self.username is None:
            try:
                answer = await self.client.post(SELF_SUBJECT_REVIEWS, {
                    "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
            except Exception as e:  # noqa: BLE001 - unknown: not treated as this process
                log.warning("webhook: SelfSubjectReview: %r", e)
                return False
            name = ((answer.get("status") or {}).get("userInfo") or {}).get("username")
            if not isinstance(name, str) or not name:
                return False
            self.username = name
        return bool(self.username) and userinfo.get("username") == self.username


async def check_claim(client: ApiClient, policy: Policy, body: Mapping[str, Any],
                      held: Held | None = None, recorded: Recorded | None = None) -> None:
    """One owner per schedulerName: refuse a policy whose name another existing policy
    owns (api.claims.owners, as the operator decides), and a name held for a deleted
    owner within the grace period (controller.policies.book) for anyone but a policy of
    that owner's name. An UPDATE of the owner itself is never refused."""
    if policy.shadow_of:
        return
    sname = policy.scheduler_name
    if held is not None:
        former = held().get(sname)
        if former is not None and former[0] != policy.name:
            raise kopf.AdmissionError(
                f"SchedulingPolicy {policy.name!r} is invalid: spec.schedulerName: "
                f"{sname!r} is held for SchedulingPolicy {former[0]!r}, deleted a moment ago, "
                f"so that re-creating it gets its name back; try again after the grace "
                f"period, or choose another schedulerName", code=409)
        if former is not None:
            return  # the deleted owner re-created: its name comes back, whoever else claims it
    try:
        listed = await client.get(f"/apis/{GROUP}/{VERSION}/{PLURAL}")
    except Exception as e:  # noqa: BLE001 - unreadable: the operator still decides owners
        log.warning("webhook: listing SchedulingPolicies for %s: %r", policy.name, e)
        return
    meta = body.get("metadata") or {}
    this = claims.ObjectClaim(policy.name, str(meta.get("creationTimestamp") or NEWEST),
                              sname, "")
    others = [c for item in _items(listed)
              if (c := claims.ObjectClaim.of(item)).name != policy.name]
    owner = claims.owners([*others, this], recorded() if recorded is not None else None
                          ).get(sname)
    if owner is not None and owner != policy.name:
        raise kopf.AdmissionError(
            f"SchedulingPolicy {policy.name!r} is invalid: spec.schedulerName: {sname!r} is "
            f"already claimed by SchedulingPolicy {owner!r}; a schedulerName has one owner: "
            f"choose another, or edit {owner!r}", code=409)


def _items(listed: Any) -> Iterable[Mapping[str, Any]]:
    items = listed.get("items") if isinstance(listed, Mapping) else None
    return [i for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []


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


def same_spec(body: Mapping[str, Any], old: Mapping[str, Any] | None) -> bool:
    """An UPDATE that leaves the spec as it was (labels, annotations, finalizers, the
    operator's last-good record): it names nothing new."""
    return old is not None and old.get("spec") == body.get("spec")


def register(registry: kopf.OperatorRegistry, rules: AdmissionRules = DEFAULT_RULES,
             client: ApiClient | None = None,
             held: Held | None = None,
             recorded: Recorded | None = None) -> Callable[..., Coroutine[Any, Any, None]]:
    """Install the handler (kopf routes /validate-policy to it) and return it. The policy
    is loaded off the scheduling loop, VALIDATION_CONCURRENCY at a time. The requesting
    user must be granted the schedulerName, and on an UPDATE the one claimed before
    (check_grant), except this process itself writing metadata (its last-good record).
    With `client`, a CREATE or an UPDATE of the spec is checked against the other
    claimants and `held` (check_claim), its CA Secrets (check_ca_secrets) and, for a
    shadow, the policy it shadows (check_shadow); an UPDATE that leaves the spec as it
    was names nothing new and skips those."""
    myself = Myself(client) if client is not None else None
    validators = ThreadPoolExecutor(VALIDATION_CONCURRENCY,
                                    thread_name_prefix="polsched-webhook-validate")

    async def _validate(body: kopf.Body, userinfo: kopf.UserInfo | None = None,
                        **kwargs: Any) -> None:
        # Off the scheduling loop (VALIDATION_CONCURRENCY): the loader is pure and reads
        # nothing the loop writes; kopf's body is not changed while the request runs.
        policy = await asyncio.get_running_loop().run_in_executor(
            validators, validate_policy, body, rules)
        # kopf's `old`: the object before an UPDATE (None on CREATE).
        new, before, user = plain(body), plain(kwargs.get("old")), plain(userinfo) or {}
        unchanged = same_spec(new, before)
        if not (unchanged and myself is not None and await myself.is_me(user)):
            check_grant(rules, policy, user, before)
        if client is None or unchanged:
            return
        await check_claim(client, policy, new, held, recorded)
        await check_ca_secrets(client, policy, user)
        if policy.shadow_of:
            await check_shadow(client, policy)

    kopf.on.validate(GROUP, VERSION, PLURAL, id=WEBHOOK_ID, registry=registry,
                     operations=["CREATE", "UPDATE"], ignore_failures=True)(_validate)
    return _validate
