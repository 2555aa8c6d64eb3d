"""A fault-injecting HTTP proxy on loopback, in front of a real homeserver (tests and demos only).

Owns: ``FaultProxy``, an aiohttp reverse proxy on ``127.0.0.1`` that forwards every request to
``upstream`` unchanged until told to fail, then answers the matching requests with an HTTP error
(502 by default) without forwarding them. ``fail_after(n, path_contains=...)`` lets ``n`` more
matching requests through and fails the rest; ``heal()`` forwards everything again. ``Rule``s
inject one kind of fault each into the requests whose path holds ``Rule.path``: a status (429
with ``retry_after_ms``, 502, 503), a slow answer, a connection cut mid-answer, a malformed or a
truncated JSON body; each fires for ``times`` requests after letting ``after`` through, and
``hits`` records what fired. It runs its own event loop on a daemon thread, so blocking tests and
subprocesses (``huginn-chat refresh`` pointed at ``proxy.url``) can use it alike.

Must not: listen anywhere but 127.0.0.1, change a forwarded request or answer (bodies, status and
headers pass as they are, hop-by-hop headers aside), or log anything: the requests carry the
service user's token.

Why a proxy rather than stopping Synapse: a proxy fails exactly the N-th request of a kind (say
the third ``/messages``), so a run fails half way through a room, the same way every time.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}


@dataclass
class Rule:
    """One injected fault for the requests whose (decoded) path holds ``path``."""

    path: str
    fault: str  # "429", "502", "503", "slow", "reset", "malformed", "truncated"
    times: int = 1
    after: int = 0  # let this many matching requests through first
    retry_after_ms: int = 50
    delay_s: float = 0.0
    fired: int = 0
    seen: int = 0


class FaultProxy:
    """``with FaultProxy("http://127.0.0.1:8008") as proxy: ... proxy.url ...``"""

    def __init__(self, upstream: str, *, status: int = 502, rules: list[Rule] | None = None):
        self.upstream = upstream.rstrip("/")
        self.status = status
        self.rules = list(rules or [])
        self.hits: list[tuple[str, str]] = []  # (fault, path) as each rule fired
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

    def _rule(self, path: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.path not in path:
                    continue
                rule.seen += 1
                if rule.seen > rule.after and rule.fired < rule.times:
                    rule.fired += 1
                    self.hits.append((rule.fault, path))
                    return rule
        return None

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
        rule = self._rule(request.path)  # decoded: rules name rooms as !id:server
        fault = rule.fault if rule else None
        if rule and fault == "429":
            return web.json_response(
                {"errcode": "M_LIMIT_EXCEEDED", "error": "Too Many Requests", "retry_after_ms": rule.retry_after_ms},
                status=429,
            )
        if fault in ("502", "503"):
            return web.Response(
                status=int(fault or 0), text="<html>upstream unavailable</html>", content_type="text/html"
            )
        if rule and fault == "slow":
            await asyncio.sleep(rule.delay_s)
        status, out_headers, payload = await self._forward(request)
        if fault == "malformed":
            return web.Response(status=200, body=b'{"chunk": [}{ not json', content_type="application/json")
        if fault == "truncated":  # a complete HTTP answer whose JSON stops half way
            return web.Response(status=200, body=payload[: len(payload) // 2], content_type="application/json")
        if fault == "reset":  # the headers promise the whole body; the connection dies half way
            resp = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
            resp.content_length = len(payload)
            await resp.prepare(request)
            await resp.write(payload[: len(payload) // 2])
            assert request.transport is not None
            request.transport.abort()
            return resp
        return web.Response(status=status, headers=out_headers, body=payload)

    async def _forward(self, request: web.Request) -> tuple[int, dict[str, str], bytes]:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        body = await request.read()
        async with self._session.request(
            request.method,
            self.upstream + request.raw_path,
            headers=headers,
            data=body or None,
            allow_redirects=False,
        ) as upstream:
            payload = await upstream.read()
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP}
            with self._lock:
                self.forwarded += 1
            return upstream.status, out_headers, payload
