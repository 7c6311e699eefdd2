"""ApiClient's TLS on a real kube-apiserver: connections after the first resume its
session (cluster.tls), on both write paths, as the same user."""

from __future__ import annotations

import asyncio

import pytest

from polsched.cluster.client import ApiClient
from tests.conftest import Cluster

pytestmark = pytest.mark.e2e

REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
BODY = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}


def test_new_connections_resume_the_first_session_as_the_same_user(cluster: Cluster) -> None:
    async def go() -> tuple[str, set[str], tuple[int, int], list[int]]:
        client = ApiClient.from_kubeconfig(cluster.kubeconfig)
        try:
            first = await client.post(REVIEW, BODY)  # the one full handshake
            # Eight at once: new connections (aiohttp's pool has one idle), each a
            # handshake that can resume the first one's session; then the lean write
            # path's own connections (http1.Http1Writer).
            answers = await asyncio.gather(*(client.post(REVIEW, BODY) for _ in range(8)))
            sent = await asyncio.gather(*(client.send("POST", REVIEW, b'{"apiVersion":'
                                                      b'"authentication.k8s.io/v1","kind":'
                                                      b'"SelfSubjectReview"}')
                                          for _ in range(4)))
            users = {a["status"]["userInfo"]["username"] for a in answers}
            return (first["status"]["userInfo"]["username"], users,
                    client.tls_handshakes(), sent)
        finally:
            await client.close()

    user, users, (resumed, full), sent = asyncio.run(go())
    assert users == {user}  # a resumed session authenticates as the first did
    assert all(200 <= s < 300 for s in sent)
    assert full == 1, (resumed, full)
    assert resumed >= 8, (resumed, full)  # 7+ new aiohttp connections, 4 writer ones
