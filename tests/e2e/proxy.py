"""A TCP proxy on 127.0.0.1 in front of kube-apiserver that can stall: while stalled it
accepts and reads everything but forwards nothing, in either direction, as a network
path that hangs. What was held is dropped when the stall ends or a side closes, so a
request the client gave up on never reaches the API server later.

TLS passes through untouched (the API server's certificate names 127.0.0.1), so a
kubeconfig pointed at the proxy works as is. Runs its own event loop in a thread, so
that tests driving the engine in asyncio and tests driving processes can both use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from urllib.parse import urlparse

import yaml


class StallingProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._stalled = False
        self._resumed: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections = 0

    @classmethod
    def for_kubeconfig(cls, kubeconfig: str) -> StallingProxy:
        cfg = yaml.safe_load(Path(kubeconfig).read_text())
        url = urlparse(cfg["clusters"][0]["cluster"]["server"])
        return cls(url.hostname or "127.0.0.1", url.port or 443)

    def kubeconfig(self, source: str, dest: Path) -> str:
        """A copy of `source` whose server is this proxy."""
        cfg = yaml.safe_load(Path(source).read_text())
        for c in cfg["clusters"]:
            url = urlparse(c["cluster"]["server"])
            c["cluster"]["server"] = f"{url.scheme}://127.0.0.1:{self.port}"
        dest.write_text(yaml.safe_dump(cfg))
        return str(dest)

    # -- control, from any thread ---------------------------------------------------------
    def start(self) -> StallingProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stall(self) -> None:
        self._call(self._set_stalled, True)

    def resume(self, drop_connections: bool = True) -> None:
        """End the stall; by default the connections that stalled are closed (their held
        bytes dropped), as after a network partition."""
        self._call(self._set_stalled, False, drop_connections)

    def down(self) -> None:
        """An outage: every connection is closed and new ones are refused (the port is
        no longer listened on) until up()."""
        async def go() -> None:
            if self._server is not None:
                self._server.close()
                self._server = None
            for w in list(self._writers):
                w.close()

        asyncio.run_coroutine_threadsafe(go(), self._loop).result(10)

    def up(self) -> None:
        """Listen again, on the same port."""
        async def go() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port,
                                                      reuse_address=True)

        asyncio.run_coroutine_threadsafe(go(), self._loop).result(10)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _call(self, fn: object, *args: object) -> None:
        async def run() -> None:
            fn(*args)  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    # -- inside the loop --------------------------------------------------------------------
    async def _start(self) -> None:
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()

    def _set_stalled(self, stalled: bool, drop: bool = True) -> None:
        assert self._resumed is not None
        self._stalled = stalled
        if stalled:
            self._resumed.clear()
            return
        if drop:
            for w in list(self._writers):
                w.close()
        self._resumed.set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                      ) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            assert self._resumed is not None
            try:
                while True:
                    data = await src.read(65536)
                    if not data:
                        break
                    if self._stalled:
                        # Held: wait for the end of the stall, then drop it (the
                        # connection is closed then).
                        await self._resumed.wait()
                        break
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            self._writers.discard(writer)
            self._writers.discard(up_writer)
            writer.close()
            up_writer.close()
