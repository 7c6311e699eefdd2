"""An extender's CA from the Secret its policy names (spec.extenders[i].tlsConfig
.caSecretRef): read, and checked as PEM X.509 certificates, as the loader checks an
inline caData. Used by the reconciler (which reports a problem as the policy's
Valid=False, reason BuildFailed) and by the webhook (which refuses the policy when the
Secret it can read holds no certificate).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from polsched.api import FieldError, PolicyError
from polsched.api.loader import ca_bundle_problem
from polsched.cluster.client import ApiClient, ApiError

KEY = "ca.crt"


def ca_from_secret(secret: Mapping[str, Any], namespace: str, name: str, path: str) -> str:
    """The PEM bundle in the Secret's ca.crt, or PolicyError naming `path` and the key."""
    data = (secret.get("data") or {}).get(KEY)
    if not data or not isinstance(data, str):
        raise PolicyError([FieldError(path, f"Secret {namespace}/{name} has no key {KEY}")])
    try:
        pem = base64.b64decode(data, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        pem = ""
    problem = ca_bundle_problem(pem) if pem else "not UTF-8 text"
    if problem:
        raise PolicyError([FieldError(path, f"Secret {namespace}/{name} key {KEY} must be "
                                            f"PEM CA certificates: {problem}")])
    return pem


def secret_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/secrets/{name}"


async def read_ca(client: ApiClient, namespace: str, name: str, path: str) -> str:
    """ca_from_secret of the Secret as the API server has it now; a Secret that cannot
    be read is a PolicyError naming `path` too."""
    try:
        secret = await client.get(secret_path(namespace, name))
    except ApiError as e:
        raise PolicyError([FieldError(path, f"cannot read Secret {namespace}/{name}: "
                                            f"{e.reason or e.status} {e.message}")]) from e
    except Exception as e:  # noqa: BLE001 - the server unreachable: retried later
        why = " ".join((str(e) or type(e).__name__).split())[:200]
        raise PolicyError([FieldError(path, f"cannot read Secret {namespace}/{name}: "
                                            f"{why}")]) from e
    return ca_from_secret(secret, namespace, name, path)
