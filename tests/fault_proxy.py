"""A fault-injecting HTTP proxy on 127.0.0.1, for tests that put it between the refresher and a
real Synapse.

Owns: forwarding every request to the upstream homeserver, and answering the requests a rule
matches with a fault instead: a status (429 with ``retry_after_ms``, 502, 503), a slow answer, a
connection cut mid-answer, a malformed or a truncated JSON body. Each rule fires for the first
``times`` requests (after the first ``after``) whose decoded path contains ``path``; ``hits``
records what fired.

Must not: listen anywhere but loopback, or change an answer no rule matched.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

_HOP = {"host", "content-length", "transfer-encoding", "connection", "content-encoding"}


@dataclass
class Rule:
    path: str  # substring of the request path (and query) the rule applies to
    fault: str  # "429", "502", "503", "slow", "reset", "malformed", "truncated"
    times: int = 1
    after: int = 0  # let this many matching requests through first
    retry_after_ms: int = 50
    delay_s: float = 0.0
    fired: int = 0
    seen: int = 0


@dataclass
class FaultProxy:
    upstream: str
    rules: list[Rule] = field(default_factory=list)
    hits: list[tuple[str, str]] = field(default_factory=list)  # (fault, path) as fired
    port: int = 0

    async def start(self) -> str:
        self._session = aiohttp.ClientSession(auto_decompress=True)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        await self._runner.cleanup()
        await self._session.close()

    def _rule(self, path: str) -> Rule | None:
        for rule in self.rules:
            if rule.path not in path:
                continue
            rule.seen += 1
            if rule.seen > rule.after and rule.fired < rule.times:
                rule.fired += 1
                self.hits.append((rule.fault, path))
                return rule
        return None

    async def _forward(self, request: web.Request) -> tuple[int, dict[str, str], bytes]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self._session.request(
            request.method, self.upstream.rstrip("/") + request.raw_path, headers=headers, data=await request.read()
        ) as resp:
            body = await resp.read()
            out = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP}
            return resp.status, out, body

    async def _handle(self, request: web.Request) -> web.StreamResponse:
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
        status, headers, body = await self._forward(request)
        if fault == "malformed":
            return web.Response(status=200, body=b'{"chunk": [}{ not json', content_type="application/json")
        if fault == "truncated":  # a complete HTTP answer whose JSON stops half way
            return web.Response(status=200, body=body[: len(body) // 2], content_type="application/json")
        if fault == "reset":  # headers promise the whole body; the connection dies half way
            resp = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
            resp.content_length = len(body)
            await resp.prepare(request)
            await resp.write(body[: len(body) // 2])
            assert request.transport is not None
            request.transport.abort()
            return resp
        return web.Response(status=status, headers=headers, body=body)
