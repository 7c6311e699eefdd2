"""Everything that talks to the API server about pods and nodes: an asyncio API client
(client.py) and the watched, in-memory cache of nodes, pods and namespaces (cache.py).

Nothing outside this package reads pods or nodes from the API server; the scheduler reads
the cache's Snapshot and writes only bindings, events and pod conditions through the
client.
"""

from polsched.cluster import lazyssl

lazyssl.import_aiohttp()  # before anything here imports aiohttp (cluster.lazyssl)

from polsched.cluster.cache import CacheListener, ClusterCache  # noqa: E402
from polsched.cluster.client import ApiClient, ApiError  # noqa: E402

__all__ = ["ApiClient", "ApiError", "CacheListener", "ClusterCache"]
