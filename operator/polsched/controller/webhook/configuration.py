"""The ValidatingWebhookConfiguration `polsched.io`: how the apiserver finds the webhook.

Two Publishers put the server's client config into it: in-cluster, CABundleInjector writes
the CA bundle into the configuration manifests/ ship (failurePolicy Fail, never managed
by a replica); locally, URLConfiguration points it at this process's URL with
failurePolicy Ignore and empties it when the process stops.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from polsched.api import GROUP, PLURAL, VERSION
from polsched.cluster.client import ApiClient, ApiError
from polsched.controller.process.kopf_import import kopf

log = logging.getLogger(__name__)

CONFIGURATION_NAME = "polsched.io"
WEBHOOK_ID = "validate-policy"
WEBHOOK_NAME = f"{WEBHOOK_ID}.{CONFIGURATION_NAME}"  # kopf's naming, and manifests/'


class Publisher(Protocol):
    """Puts the webhook's client config (its caBundle) into the configuration."""

    client: ApiClient
    configuration: str

    async def __call__(self, config: kopf.WebhookClientConfig) -> None: ...

    async def withdraw(self) -> None: ...

    def current(self, obj: dict[str, Any] | None, config: kopf.WebhookClientConfig) -> bool:
        """Whether the configuration as read (`obj`, None when deleted) carries `config`
        already, or cannot be helped by publishing it again."""
        ...


def _hook(obj: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((h for h in obj.get("webhooks") or () if h.get("name") == name), None)


CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


class URLConfiguration:
    """Locally: keeps the ValidatingWebhookConfiguration CONFIGURATION_NAME pointing at
    this process's URL with failurePolicy Ignore, and empties it when the process stops
    (as kopf's managed mode did)."""

    def __init__(self, client: ApiClient, configuration: str = CONFIGURATION_NAME) -> None:
        self.client = client
        self.configuration = configuration

    def webhooks(self, config: kopf.WebhookClientConfig) -> list[dict[str, Any]]:
        return [{
            "name": WEBHOOK_NAME, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Ignore", "timeoutSeconds": 10, "matchPolicy": "Equivalent",
            "clientConfig": {"url": f"{config.get('url')}/{WEBHOOK_ID}",
                             "caBundle": config.get("caBundle")},
            "rules": [{"apiGroups": [GROUP], "apiVersions": [VERSION],
                       "operations": ["CREATE", "UPDATE"], "resources": [PLURAL],
                       "scope": "Cluster"}],
        }]

    async def __call__(self, config: kopf.WebhookClientConfig) -> None:
        body = {"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": self.configuration}, "webhooks": self.webhooks(config)}
        # Patch first: the operator's role may patch only this configuration and create
        # none (manifests/rbac/operator.yaml); it is created only where it is missing, by a
        # user who may (a developer's admin kubeconfig). A merge patch replaces the list.
        try:
            await self.client.patch(f"{CONFIGURATIONS}/{self.configuration}",
                                    {"webhooks": body["webhooks"]}, "merge")
            return
        except ApiError as e:
            if e.status != 404:
                raise RuntimeError(f"updating ValidatingWebhookConfiguration "
                                   f"{self.configuration}: {e}") from e
        try:
            await self.client.post(CONFIGURATIONS, body)
        except ApiError as e:
            if e.status == 409:  # created meanwhile: patch it
                await self.client.patch(f"{CONFIGURATIONS}/{self.configuration}",
                                        {"webhooks": body["webhooks"]}, "merge")
                return
            raise RuntimeError(f"creating ValidatingWebhookConfiguration "
                               f"{self.configuration}: {e} (install it first, as "
                               f"manifests/operator.yaml does)") from e

    async def withdraw(self) -> None:
        await self.client.patch(f"{CONFIGURATIONS}/{self.configuration}", {"webhooks": []},
                                "merge")

    def current(self, obj: dict[str, Any] | None, config: kopf.WebhookClientConfig) -> bool:
        """Deleted, emptied or pointing elsewhere: not current (it is ours to re-create)."""
        hook = _hook(obj, WEBHOOK_NAME) if obj is not None else None
        if hook is None:
            return False
        cc = hook.get("clientConfig") or {}
        return bool(cc.get("url") == f"{config.get('url')}/{WEBHOOK_ID}"
                    and cc.get("caBundle") == config.get("caBundle"))


class CABundleInjector:
    """In-cluster: writes the CA bundle into the caBundle of webhook WEBHOOK_NAME of the
    ValidatingWebhookConfiguration CONFIGURATION_NAME (manifests/ ship it without one).
    Nothing is withdrawn when a replica stops: the others serve the same CA."""

    def __init__(self, client: ApiClient, configuration: str = CONFIGURATION_NAME,
                 webhook: str = WEBHOOK_NAME) -> None:
        self.client = client
        self.configuration = configuration
        self.webhook = webhook

    async def withdraw(self) -> None:
        return None

    def current(self, obj: dict[str, Any] | None, config: kopf.WebhookClientConfig) -> bool:
        """The caBundle differs: not current. Deleted, or without our webhook: nothing
        to inject into (the configuration is the install's; it is injected again when
        it comes back)."""
        if obj is None:
            log.warning("ValidatingWebhookConfiguration %s was deleted; its caBundle is "
                        "set again once it is re-created", self.configuration)
            return True
        hook = _hook(obj, self.webhook)
        if hook is None:
            return True
        return bool((hook.get("clientConfig") or {}).get("caBundle") == config.get("caBundle"))

    async def __call__(self, config: kopf.WebhookClientConfig) -> None:
        ca_bundle_b64 = config.get("caBundle")
        path = f"{CONFIGURATIONS}/{self.configuration}"
        for _ in range(5):
            try:
                obj = await self.client.get(path)
                hooks = obj.get("webhooks") or []
                i = next((i for i, h in enumerate(hooks) if h.get("name") == self.webhook),
                         None)
                if i is None:
                    raise RuntimeError(f"ValidatingWebhookConfiguration {self.configuration} "
                                       f"has no webhook {self.webhook}")
                if (hooks[i].get("clientConfig") or {}).get("caBundle") == ca_bundle_b64:
                    return
                # The test op pins the index we read: a concurrent edit fails it (422).
                await self.client.patch(path, [
                    {"op": "test", "path": f"/webhooks/{i}/name", "value": self.webhook},
                    {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle",
                     "value": ca_bundle_b64}], "json")
                log.info("caBundle of %s/%s set", self.configuration, self.webhook)
                return
            except ApiError as e:
                if e.status in (409, 422):
                    continue
                raise RuntimeError(f"injecting the webhook's CA into "
                                   f"ValidatingWebhookConfiguration {self.configuration}: "
                                   f"{e}") from e
        raise RuntimeError(f"ValidatingWebhookConfiguration {self.configuration} kept "
                           "changing under us")

