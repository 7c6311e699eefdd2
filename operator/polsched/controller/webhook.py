"""The validating admission webhook for SchedulingPolicy: the loader's validation at
`kubectl apply` time, so an invalid policy is refused with its field paths instead of
being accepted and then reported as Valid=False.

Served by kopf (@kopf.on.validate) over HTTPS with a self-signed CA made here with the
openssl command (kopf's own generator needs the certbuilder package, which we do not
ship); kopf keeps a ValidatingWebhookConfiguration named `polsched.io` pointing at
https://HOST:PORT with that CA. failurePolicy is Ignore: when the operator is down,
policies can still be edited, and the operator reports a bad one as Valid=False.
"""

from __future__ import annotations

import ipaddress
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import kopf

from polsched.api import GROUP, PLURAL, VERSION, PolicyError, load_policy

CONFIGURATION_NAME = "polsched.io"


def validate_policy(body: Any) -> None:
    """Raise kopf.AdmissionError listing every problem (`path: message`)."""
    try:
        load_policy(plain(body))
    except PolicyError as e:
        raise kopf.AdmissionError(str(e), code=422) from e


def plain(obj: Any) -> Any:
    """kopf's body views as plain dicts and lists (what the loader expects)."""
    if isinstance(obj, str | bytes | int | float | bool) or obj is None:
        return obj
    if hasattr(obj, "items"):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    return obj


def register(registry: kopf.OperatorRegistry) -> None:
    @kopf.on.validate(GROUP, VERSION, PLURAL, id="validate-policy", registry=registry,
                      operations=["CREATE", "UPDATE"], ignore_failures=True)
    def _validate(body: kopf.Body, **_: Any) -> None:
        validate_policy(body)


def self_signed(directory: Path, host: str) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for `host` (IP or DNS name) in `directory`:
    (ca.crt, tls.crt, tls.key)."""
    try:
        ipaddress.ip_address(host)
        san = f"IP:{host}"
    except ValueError:
        san = f"DNS:{host}"
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt = directory / "tls.key", directory / "tls.csr", directory / "tls.crt"
    ext = directory / "san.ext"
    ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
                   "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    run = [
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
         "-out", str(ca_crt), "-days", "365", "-subj", "/CN=polsched-webhook-ca"],
        ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
         str(csr), "-subj", f"/CN={host}"],
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
         "-CAcreateserial", "-out", str(crt), "-days", "365", "-extfile", str(ext)],
    ]
    for cmd in run:
        subprocess.run(cmd, check=True, capture_output=True)
    return ca_crt, crt, key


def server(listen: str, cert_dir: str | None = None) -> kopf.WebhookServer:
    """A kopf WebhookServer on `listen` (HOST:PORT) with a fresh self-signed CA."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--webhook-listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:9443")
    directory = Path(cert_dir or tempfile.mkdtemp(prefix="polsched-webhook-"))
    directory.mkdir(parents=True, exist_ok=True)
    ca, crt, key = self_signed(directory, host)
    return kopf.WebhookServer(addr=host, port=int(port), host=host, certfile=str(crt),
                              pkeyfile=str(key), cafile=str(ca))
