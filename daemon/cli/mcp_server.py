"""`huginn-chat mcp`: the reader's search and window as Model Context Protocol tools, over stdio.

Owns: the MCP surface — one table (``TOOLS``: per tool, its description and its arguments) from
which the tool list and the JSON input schemas are derived, the descriptions an agent reads,
turning a tool call into one reader request, and the reply into structured content (the reader's
JSON result, unchanged) plus the CLI's own text rendering. The reader's status is a resource (``huginn-chat://status``), not a
tool: it takes no arguments and an agent never needs it to read a result (every search says
``degraded`` itself), so it stays out of the tool list the model pays for on every turn, while a
host that shows or attaches resources can still read it.

A tool is a reader operation of the same name and its arguments are that request's fields: they
are checked by the reader's own ``daemon.reader.protocol.parse_request`` before connecting (a
refusal names the field, as a tool error the model can correct), sent as they are with the CLI's
stdlib client (``daemon.cli.client.exchange``), and checked again by the reader. Nothing here
knows a field's meaning, so a field or an operation added to the protocol is one entry in
``TOOLS``. The socket
is ``--socket``, else ``$HUGINN_CHAT_SOCKET``, else the CLI's default.

Must not: hold an index or a credential, read the settings, or import numpy, fastembed, qdrant,
structlog or nio — it is a client of the reader, as ``huginn-chat search`` is, started by an agent
host. Nothing may write to stdout but the MCP transport.
"""

from __future__ import annotations

import argparse
import io
import json
from dataclasses import dataclass
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from daemon.cli.client import (
    DEFAULT_TIMEOUT_S,
    MAX_TIMEOUT_S,
    exchange,
    print_rooms,
    print_search,
    print_thread,
    print_window,
    socket_path,
)
from daemon.errors import EXIT_OK, OperationalError, UsageError
from daemon.reader.protocol import (
    BAD_REQUEST,
    PROTOCOL_VERSION,
    ProtocolError,
    encode_line,
    parse_request,
)
from daemon.reader.search import (
    MAX_RANKED,
    MAX_TEXT_BYTES,
    MAX_TEXTS,
    SORTS,
    TOP_K_DEFAULT,
    TOP_K_MAX,
    WINDOW_CONTEXT_DEFAULT,
    WINDOW_CONTEXT_MAX,
)

SERVER_NAME = "huginn-chat"
STATUS_URI = "huginn-chat://status"
# The code of a tool error when the reader could not be reached or did not answer (the reader's
# own codes are docs/protocol.md's).
READER_UNREACHABLE = "reader_unreachable"


@dataclass(frozen=True, slots=True)
class Arg:
    """One tool argument: its JSON schema (without ``description``) and what an agent reads."""

    schema: dict[str, Any]
    description: str
    required: bool = False


def _render_search(arguments: dict[str, Any], result: dict[str, Any]) -> str:
    out = io.StringIO()
    print_search(result, list(arguments.get("texts") or []), out, out)
    return out.getvalue()


def _render_window(arguments: dict[str, Any], result: dict[str, Any]) -> str:
    out = io.StringIO()
    print_window(result, out)
    return out.getvalue()


def _render_thread(arguments: dict[str, Any], result: dict[str, Any]) -> str:
    out = io.StringIO()
    print_thread(result, out)
    return out.getvalue()


def _render_rooms(arguments: dict[str, Any], result: dict[str, Any]) -> str:
    out = io.StringIO()
    print_rooms(result, out)
    return out.getvalue()


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool: what an agent reads about it, its arguments, and the CLI's text rendering of its
    result (without one, the text is the result's JSON)."""

    description: str
    args: dict[str, Arg]
    render: Callable[[dict[str, Any], dict[str, Any]], str] | None = None


_TIME = (
    "an ISO 8601 date or date-time (UTC unless it carries a zone: '2026-11-01', '2026-11-01T07:38:59Z'), "
    "unix milliseconds as digits, or a time before now: '90m', '36h', '2d', '1w', 'today', 'yesterday', "
    "'this week', 'last week' (00:00 UTC, or in an IANA zone given after it: 'yesterday Europe/Berlin')"
)

# Argument shapes more than one tool takes (each tool words its own description).
_EVENT_ID: dict[str, Any] = {"type": "string", "pattern": "^\\$\\S+$"}
_TOP_K: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": TOP_K_MAX, "default": TOP_K_DEFAULT}

# The one table. A tool's name is the reader operation's, its argument names are the request's
# fields (docs/protocol.md); limits come from daemon.reader.search. A field added to the protocol
# is one row here (test_mcp_server checks that the rows are exactly protocol.OP_FIELDS): the
# schema, the forwarding and the validation follow from it and from parse_request.
TOOLS: dict[str, ToolSpec] = {
    "search": ToolSpec(
        description=(
            "Search the team's Matrix chat history (the rooms the operator allowed; credentials scrubbed, "
            "redacted and purged messages removed; as fresh as the last refresh). The index holds windows: short "
            "runs of consecutive messages from one room. Returns up to top_k windows, best first, each with its "
            "room, score and messages (event_id, sender, ts in unix ms, body). A message whose 'matched' list is "
            "not empty is the one that matched the query ('dense' by meaning, 'lexical' by words); the others are "
            "context. Cite a message by its event_id and room, never by a window. Filters (rooms, senders, "
            "after, before, also relative: '2d', 'yesterday') apply before ranking. Without texts it lists "
            "windows oldest first, or newest first with sort 'newest'. A result's 'next' is the cursor for the "
            "following page. 'degraded' is non-null when only word matching could run. Read-only; to see more "
            "around a message, call window with its event_id."
        ),
        render=_render_search,
        args={
            "texts": Arg(
                {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": MAX_TEXTS, "default": []},
                f"What to look for: 1 to {MAX_TEXTS} texts, each at most {MAX_TEXT_BYTES} UTF-8 bytes. One text is "
                "one whole phrasing, all its words together ('the laser cutter is broken'), never one word per "
                "text. Each text is "
                "searched by meaning and by exact words (identifiers, paths and error codes match whole or split), "
                "and the texts' rankings are fused: give several phrasings of one question (a paraphrase, the "
                'likely keywords, an error string) rather than one long text. A text may hold "exact phrase" '
                "(those words in order in one message), '-word' (leave out windows holding it), 'from:@name:server' "
                "and 'in:#room:server' (filters, as senders and rooms). Omit or [] for a listing: windows in time "
                "order, one page at a time.",
            ),
            "rooms": Arg(
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "Only these rooms: room ids ('!abc:server' or '!abc') or aliases ('#name:server'). Omit for every "
                "room; an empty list is refused.",
            ),
            "senders": Arg(
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "Only windows with a message from one of these Matrix user ids ('@name:server'). Omit for everyone; "
                "an empty list is refused.",
            ),
            "after": Arg({"type": "string"}, f"Only windows ending at or after this time: {_TIME}."),
            "before": Arg({"type": "string"}, f"Only windows starting at or before this time: {_TIME}."),
            "sort": Arg(
                {"type": "string", "enum": list(SORTS)},
                "The order: 'relevance' (the default with texts; refused without), 'newest' first (with texts: the "
                "50 best matches, newest first; without: the most recent windows) or 'oldest' first (the default "
                "without texts).",
            ),
            "top_k": Arg(
                _TOP_K,
                f"How many hits per page (of a search or a listing), 1 to {TOP_K_MAX}.",
            ),
            "cursor": Arg(
                {"type": "string"},
                "The 'next' of the previous page, sent back with the same texts, filters and sort, for the next "
                f"page (each window exactly once; a ranked search pages up to {MAX_RANKED} results in all). A "
                "'stale_cursor' error means the index changed since, a 'bad_cursor' error that the cursor is not "
                "one this reader issued (altered, expired, for other texts or filters, or from before a restart): "
                "search again.",
            ),
        },
    ),
    "window": ToolSpec(
        description=(
            "Show a message from the chat index with its neighbours in the same room, oldest first, across "
            "window boundaries: the context of a search hit before citing it. Takes an event_id ('$...') from a "
            "search result. Read from the index alone; an event id the index does not hold (never stored, "
            "redacted or purged) is an error naming event_id. Read-only."
        ),
        render=_render_window,
        args={
            "event_id": Arg(
                _EVENT_ID,
                "The message to show in context: a Matrix event id ('$...') from a search hit.",
                required=True,
            ),
            "before": Arg(
                {"type": "integer", "minimum": 0, "maximum": WINDOW_CONTEXT_MAX, "default": WINDOW_CONTEXT_DEFAULT},
                f"How many messages before it, 0 to {WINDOW_CONTEXT_MAX}.",
            ),
            "after": Arg(
                {"type": "integer", "minimum": 0, "maximum": WINDOW_CONTEXT_MAX, "default": WINDOW_CONTEXT_DEFAULT},
                f"How many messages after it, 0 to {WINDOW_CONTEXT_MAX}.",
            ),
        },
    ),
    "thread": ToolSpec(
        description=(
            "List one Matrix thread in order from the chat index: its root message, then its replies, oldest "
            "first, each with its event_id. Takes the root's event id or the id of any reply in the thread (a "
            "search hit's 'thread_root' names it). Long threads come in pages: send the result's 'next' back as "
            "cursor. Read from the index alone; read-only."
        ),
        render=_render_thread,
        args={
            "event_id": Arg(
                _EVENT_ID,
                "The thread's root, or any message in it: a Matrix event id ('$...').",
                required=True,
            ),
            "top_k": Arg(
                _TOP_K,
                f"How many of the thread's windows per page, 1 to {TOP_K_MAX}.",
            ),
            "cursor": Arg(
                {"type": "string"},
                "The 'next' of the previous page of this thread, for the following page (each reply exactly once).",
            ),
        },
    ),
    "rooms": ToolSpec(
        description=(
            "List the chat rooms this index can search: each room's room_id, name, aliases (any of them, or the "
            "room_id, works in search's 'rooms' filter), how many messages and windows it holds, and the times "
            "of its first and last message (unix ms). Call it to learn which rooms exist and how they are named "
            "before filtering a search by room, or to see how far back the history goes. Takes no arguments; "
            "read-only."
        ),
        render=_render_rooms,
        args={},
    ),
}

INSTRUCTIONS = (
    "huginn-chat is a read-only search index over a team's Matrix chat. Use `search` with one or several "
    "phrasings of what you need, then `window` on an event id to read around it, or `thread` on a hit's "
    "thread_root to read a whole thread in order. `rooms` lists the rooms you can search and their names. "
    "Cite messages by their event_id (and room). A reply's 'warnings' say when a filter named nothing the "
    "index holds. A tool error names the argument at fault; correct it and call again."
)


def input_schema(tool: str) -> dict[str, Any]:
    """The tool's JSON schema, derived from ``TOOLS``. No other properties are allowed: the
    reader refuses them by name."""
    args = TOOLS[tool].args
    return {
        "type": "object",
        "properties": {name: {**arg.schema, "description": arg.description} for name, arg in args.items()},
        "required": [name for name, arg in args.items() if arg.required],
        "additionalProperties": False,
    }


def tools() -> list[types.Tool]:
    return [
        types.Tool(
            name=name,
            title=f"Chat {name}",
            description=spec.description,
            input_schema=input_schema(name),
            annotations=types.ToolAnnotations(
                read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
            ),
        )
        for name, spec in TOOLS.items()
    ]


def reader_request(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call's arguments as one reader request, checked exactly as the reader checks it.
    Raises ``ProtocolError`` naming the field (an argument the tool does not take included)."""
    for name in arguments:
        if name not in TOOLS[tool].args:
            takes = ", ".join(TOOLS[tool].args)
            raise ProtocolError(BAD_REQUEST, f"is not an argument of {tool} (it takes {takes})", str(name)[:64])
    request = {"v": PROTOCOL_VERSION, "op": tool, **arguments}
    # As bytes, so parse_request holds the call to the reader's line limit too. The request goes
    # as it came: the reader parses it with the same function.
    parse_request(encode_line(request).rstrip(b"\n"))
    return request


def error_result(code: str, field: str | None, message: str) -> types.CallToolResult:
    """A tool error: one line naming the field (what the CLI prints), and the reader's error
    object as structured content."""
    text = f"{field}: {message}" if field else str(message)
    return types.CallToolResult(
        content=[types.TextContent(text=f"{code}: {text}")],
        structured_content={"error": {"code": code, "field": field, "message": message}},
        is_error=True,
    )


def render(tool: str, arguments: dict[str, Any], result: dict[str, Any]) -> str:
    """The CLI's human rendering of a result (marked messages carry their event ids)."""
    spec = TOOLS[tool]
    text = spec.render(arguments, result) if spec.render else json.dumps(result, ensure_ascii=False, indent=1)
    return text.rstrip("\n") or "(empty)"


def build_server(path: str, timeout: float = DEFAULT_TIMEOUT_S) -> Server[Any]:
    """The MCP server over the reader socket at ``path``; every call opens its own connection,
    so the server starts (and lists its tools) whether or not the reader is up."""

    async def ask(request: dict[str, Any]) -> dict[str, Any]:
        # The client blocks (socket, brief jittered retries): a worker thread keeps the session
        # answering pings and other calls meanwhile.
        return await anyio.to_thread.run_sync(partial(exchange, path, request, timeout=timeout), abandon_on_cancel=True)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools())

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in TOOLS:
            raise MCPError(
                types.INVALID_PARAMS, f"unknown tool {params.name[:64]!r}: this server has {', '.join(TOOLS)}"
            )
        arguments = dict(params.arguments or {})
        try:
            request = reader_request(params.name, arguments)
        except ProtocolError as exc:
            return error_result(exc.code, exc.field, exc.message)
        try:
            reply = await ask(request)
        except OperationalError as exc:
            return error_result(READER_UNREACHABLE, None, str(exc))
        if not reply["ok"]:
            error = reply["error"]
            return error_result(str(error.get("code")), error.get("field"), str(error.get("message")))
        result = reply["result"]
        return types.CallToolResult(
            content=[types.TextContent(text=render(params.name, arguments, result))], structured_content=result
        )

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=STATUS_URI,
                    name="status",
                    title="Reader status",
                    description=(
                        "The reader's state as JSON: index_ready, generation, model, embedder "
                        "(loaded, lexical_only or failed) and degraded."
                    ),
                    mime_type="application/json",
                )
            ]
        )

    async def list_resource_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        # None: every resource is listed by its own URI. Answered all the same, since hosts that
        # see the resources capability ask, and "method not found" reads to them as a broken server.
        return types.ListResourceTemplatesResult(resource_templates=[])

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        if str(params.uri) != STATUS_URI:
            raise MCPError(types.INVALID_PARAMS, f"unknown resource: this server has {STATUS_URI}")
        try:
            reply = await ask({"v": PROTOCOL_VERSION, "op": "status"})
        except OperationalError as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None
        if not reply["ok"]:
            raise MCPError(types.INTERNAL_ERROR, f"{reply['error'].get('code')}: {reply['error'].get('message')}")
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=STATUS_URI, mime_type="application/json", text=json.dumps(reply["result"], ensure_ascii=False)
                )
            ]
        )

    try:
        server_version = version("huginn-chat")
    except PackageNotFoundError:
        server_version = "unknown"
    return Server(
        SERVER_NAME,
        version=server_version,
        title="huginn-chat",
        description="Read-only search over a team's Matrix chat history",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_list_resource_templates=list_resource_templates,
    )


def run_mcp(args: argparse.Namespace) -> int:
    """Serve until the host closes stdin."""
    if not 0 < args.timeout <= MAX_TIMEOUT_S:  # also refuses nan
        raise UsageError(f"--timeout: must be a number of seconds above 0, at most {MAX_TIMEOUT_S:g}")
    server = build_server(socket_path(args), args.timeout)

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(serve)
    return EXIT_OK
