"""aiohttp's default SSLContexts: not loaded with the system's CA bundle when `polsched
run` imports its modules (cluster.lazyssl), loaded as before when a connection uses them."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys

import pytest

# In a fresh interpreter: this test process may have imported aiohttp already.
_PROBE = r"""
import asyncio, json, socket
import polsched.commands.cli
from polsched.controller.process import boot  # what `polsched run` imports, in boot's order
from polsched.controller import operator
from polsched.scheduler import metrics
metrics.import_server()
import aiohttp, aiohttp.connector as c

def cas():
    return [c._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"],
            c._SSL_CONTEXT_UNVERIFIED.cert_store_stats()["x509_ca"]]

at_import = cas()
with socket.socket() as s:  # a port nothing listens on
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]

async def get(verify):
    async with aiohttp.ClientSession() as session:
        try:
            await session.get(f"https://127.0.0.1:{port}/", ssl=None if verify else False)
        except aiohttp.ClientConnectorError:
            pass

asyncio.run(get(True))
after_verified = cas()
asyncio.run(get(False))
print(json.dumps({"import": at_import, "verified": after_verified, "both": cas()}))
"""


def _system_cas() -> int:
    return int(ssl.create_default_context().cert_store_stats()["x509_ca"])


def test_run_imports_load_no_ca_bundle_and_a_default_context_is_loaded_on_use() -> None:
    if _system_cas() == 0:
        pytest.skip("no system CA bundle to load")
    out = subprocess.run([sys.executable, "-c", _PROBE], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["import"] == [0, 0]  # neither default context read the bundle at import
    verified, unverified = got["verified"]
    assert verified == _system_cas() and unverified == 0  # the one used, loaded
    assert got["both"] == [_system_cas(), _system_cas()]
