"""An in-memory stand-in for ApiClient: GET/POST/PUT with resourceVersion conflicts and
merge PATCH, enough for the lease elector and the status writer."""

from __future__ import annotations

import copy
from typing import Any

from polsched.cluster.client import ApiError

Json = dict[str, Any]


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[str, Json] = {}
        self.patches: list[tuple[str, Json]] = []
        self.rv = 0

    def _bump(self, obj: Json) -> Json:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return obj

    async def get(self, path: str, params: Any = None) -> Json:
        if path not in self.objects:
            raise ApiError(404, "NotFound", path)
        return copy.deepcopy(self.objects[path])

    async def post(self, collection: str, body: Json, params: Any = None) -> Json:
        path = f"{collection}/{body['metadata']['name']}"
        if path in self.objects:
            raise ApiError(409, "AlreadyExists", path)
        self.objects[path] = self._bump(copy.deepcopy(body))
        return copy.deepcopy(self.objects[path])

    async def put(self, path: str, body: Json, params: Any = None) -> Json:
        current = self.objects.get(path)
        if current is None:
            raise ApiError(404, "NotFound", path)
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        self.objects[path] = self._bump(copy.deepcopy(body))
        return copy.deepcopy(self.objects[path])

    async def patch(self, path: str, body: Json, patch_type: str = "merge", **_: Any) -> Json:
        self.patches.append((path, copy.deepcopy(body)))
        return {}
