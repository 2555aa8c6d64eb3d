"""The official MCP SDK's own client driving `huginn-chat mcp` as an agent host would: the server
launched as a subprocess over stdio (``mcp.client.stdio``), one ``ClientSession`` on its own
event-loop thread so plain (sync) tests can call it. Shared by tests/unit/test_mcp_server.py and
the Synapse integration test."""

from __future__ import annotations

import sys
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

# Seconds an answer may take before a test calls it a hang (the server's own --timeout is lower).
CALL_LIMIT_S = 30.0


def server_command() -> tuple[str, list[str]]:
    """`huginn-chat mcp` as an agent host would start it: the venv's console script."""
    script = Path(sys.executable).parent / "huginn-chat"
    if script.is_file():
        return str(script), ["mcp"]
    return sys.executable, ["-m", "daemon.cli.main", "mcp"]


@asynccontextmanager
async def connected(socket_path: str, *extra: str) -> AsyncIterator[ClientSession]:
    command, args = server_command()
    # The SDK passes the server only a few safe variables of ours; the socket goes in env, as a
    # host's config writes it.
    params = StdioServerParameters(command=command, args=[*args, *extra], env={"HUGINN_CHAT_SOCKET": socket_path})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        with anyio.fail_after(60):  # the SDK's import takes a second or two on a loaded machine
            await session.initialize()
        yield session


class Mcp:
    """One MCP session on its own event-loop thread, called from plain (sync) tests."""

    def __init__(self, portal: BlockingPortal, session: ClientSession):
        self.portal = portal
        self.session = session

    def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        async def bounded() -> Any:
            with anyio.fail_after(CALL_LIMIT_S):
                return await getattr(self.session, method)(*args, **kwargs)

        return self.portal.call(bounded)

    def tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return self("call_tool", name, arguments)


@contextmanager
def session_over(socket_path: str, *extra: str) -> Iterator[Mcp]:
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(connected(socket_path, *extra)) as session,
    ):
        yield Mcp(portal, session)


def text_of(result: Any) -> str:
    """A tool result's text blocks, joined."""
    return "\n".join(block.text for block in result.content)
