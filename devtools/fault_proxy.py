"""A fault-injecting HTTP proxy on loopback, in front of a real homeserver (tests and demos only).

Owns: ``FaultProxy``, an aiohttp reverse proxy on ``127.0.0.1`` that forwards every request to
``upstream`` unchanged until told to fail, then answers the matching requests with an HTTP error
(502 by default) without forwarding them. ``fail_after(n, path_contains=...)`` lets ``n`` more
matching requests through and fails the rest; ``heal()`` forwards everything again. It runs its
own event loop on a daemon thread, so blocking tests and subprocesses (``huginn-chat refresh``
pointed at ``proxy.url``) can use it alike.

Must not: listen anywhere but 127.0.0.1, change a forwarded request or answer (bodies, status and
headers pass as they are, hop-by-hop headers aside), or log anything: the requests carry the
service user's token.

Why a proxy rather than stopping Synapse: a proxy fails exactly the N-th request of a kind (say
the third ``/messages``), so a run fails half way through a room, the same way every time.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import aiohttp
from aiohttp import web

_HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length",
}


class FaultProxy:
    """``with FaultProxy("http://127.0.0.1:8008") as proxy: ... proxy.url ...``"""

    def __init__(self, upstream: str, *, status: int = 502):
        self.upstream = upstream.rstrip("/")
        self.status = status
        self.url = ""
        self.forwarded = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._budget: int | None = None  # matching requests still let through; None: no fault
        self._path_contains: str | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    # -- control -------------------------------------------------------------------------------

    def fail_after(self, n: int, *, path_contains: str | None = None) -> None:
        """Let ``n`` more requests whose path holds ``path_contains`` (any, if None) through;
        answer every later one with ``status``."""
        with self._lock:
            self._budget, self._path_contains = n, path_contains

    def heal(self) -> None:
        with self._lock:
            self._budget, self._path_contains = None, None

    def _should_fail(self, path: str) -> bool:
        with self._lock:
            if self._budget is None or (self._path_contains and self._path_contains not in path):
                return False
            if self._budget > 0:
                self._budget -= 1
                return False
            self.failed += 1
            return True

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> "FaultProxy":
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def _start(self) -> int:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        sockets = site._server.sockets  # type: ignore[union-attr]
        return int(sockets[0].getsockname()[1])

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- forwarding ----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self._should_fail(request.path):
            return web.json_response(
                {"errcode": "M_UNKNOWN", "error": "injected by devtools.fault_proxy"}, status=self.status
            )
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        body = await request.read()
        async with self._session.request(
            request.method, self.upstream + request.raw_path, headers=headers, data=body or None,
            allow_redirects=False,
        ) as upstream:
            payload = await upstream.read()
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP}
            with self._lock:
                self.forwarded += 1
            return web.Response(status=upstream.status, headers=out_headers, body=payload)
