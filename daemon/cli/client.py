"""The client side of ``huginn-chat search``, ``window`` and ``rooms``: standard library only.

Owns: the two subcommands' arguments, sent to the reader as typed (the reader checks them), one
request/reply exchange over the reader's Unix socket, the same checks run here (``daemon.reader.search``)
only when that went wrong, so a refused argument reads the same with or without a reader,
and printing the reply as text for people, as JSON (``--format json``, ``--json``) or as Markdown
citation lines (``--format md``, through ``daemon.reader.citations``). Exit codes: 0 answered; a
refused argument raises a ``UsageError`` naming the field (exit 2), a reader that is not running or
could not answer raises ``ReaderUnavailable`` naming the socket path or the reason (exit 1);
``daemon.cli.main`` prints that line.

Must not: import numpy, fastembed, qdrant, pydantic, structlog or nio, directly or through
another module, nor, on an answered search, the reader's modules or heavy standard ones (typing,
dataclasses, pathlib): Personas run these commands many times a minute and the start-up must stay
fast (``tests/unit/test_client_startup.py``). The socket path is ``--socket``, else
``$HUGINN_CHAT_SOCKET``, else the default; never read from the pydantic settings.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import stat
import sys
import time

from daemon.errors import EXIT_OK, OperationalError, UsageError

# The reader's limits, shown in --help and used as argparse defaults, from the protocol's own page
# of names (importing ``daemon.reader.search`` instead would double the command's start-up).
from daemon.reader.wire import (
    MAX_TEXTS,
    PROTOCOL_VERSION,
    SORTS,
    TOP_K_DEFAULT,
    TOP_K_MAX,
    USAGE_ERRORS,
    WINDOW_CONTEXT_DEFAULT,
    WINDOW_CONTEXT_MAX,
)

# ``typing`` costs a few ms a start: the annotations are strings, read by mypy only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any, TextIO


DEFAULT_SOCKET = "/run/huginn-chat/reader.sock"
FORMATS = ("text", "json", "md")
SOCKET_ENV = "HUGINN_CHAT_SOCKET"
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 86_400.0
# A full listen backlog (EAGAIN, or ECONNREFUSED while the socket file is there) or a ``busy``
# reply is retried, with full jitter so a crowd of clients does not come back in step, for at
# most this long (and never past --timeout).
RETRY_FOR_S = 10.0
RETRY_FIRST_S = 0.01
RETRY_MAX_S = 0.5
REFUSED_RETRY_S = 1.0

# The request field a refusal names, and the argument a shell user typed for it.
FLAG_OF_FIELD = {
    "texts": "TEXT",
    "rooms": "--room",
    "senders": "--sender",
    "after": "--after",
    "before": "--before",
    "top_k": "--top-k",
    "cursor": "--cursor",
    "sort": "--sort",
    "event_id": "EVENT_ID",
}
# A thread listing names its event id with --thread.
THREAD_FLAG_OF_FIELD = {**FLAG_OF_FIELD, "event_id": "--thread"}

# Words too common to mark a message as matching.
_STOPWORDS = frozenset(
    "the and for are but not you all any can had her was one our out has him his how its may new now "
    "old see two way who did get got let say she too use this that with have from they will what when "
    "your been were which their there then them some would about into than could".split()
)
_WORD = r"\w+"  # compiled on first use: only the text output needs it


class ReaderUnavailable(OperationalError):
    """The reader could not be reached or did not answer; the message names the socket."""


class ReaderRefused(OperationalError):
    """The reader answered with an error that is not the request's fault (it failed, or has no
    index yet)."""


def add_client_parsers(subparsers: Any) -> None:
    """Add ``search``, ``window`` and ``rooms`` to the entry point's subparsers."""
    search = subparsers.add_parser(
        "search",
        help="search the chat index by meaning and words, or list windows oldest first",
        description=(
            "The words typed are one query text, as in a search box: `huginn-chat search the laser cutter is "
            "broken`. Each --text adds another phrasing of the same question, searched on its own and fused "
            f"with the first (1..{MAX_TEXTS} texts in all, each at most 1000 bytes): "
            "`huginn-chat search laser cutter broken --text 'engraver out of order'`. "
            'A text may hold "exact phrase" (quoted for the shell: \'"exact phrase"\'), -word (unquoted is fine: '
            "`search laser -chiller`), from:@user:server and in:#room:server. "
            "Without a text: windows oldest first (or --sort newest), one page at a time."
        ),
        epilog=(
            "examples:  huginn-chat search the laser cutter is broken\n"
            "           huginn-chat search laser -chiller --room '#workshop:example.org'\n"
            "           huginn-chat search kettle broken --text 'appliance needs repair' --text 'no tea'"
        ),
    )
    search.dash_words = True  # ``-word`` is a word of the query (the entry point's parser honours it)
    search.add_argument("words", nargs="*", metavar="WORD", help="the query text, as typed (one text)")
    search.add_argument(
        "-t",
        "--text",
        dest="more_texts",
        action="append",
        metavar="TEXT",
        help="one more phrasing of the question, fused with the first (repeatable)",
    )
    search.add_argument("--room", dest="rooms", action="append", metavar="ROOM", help="room id or alias (repeatable)")
    search.add_argument("--sender", dest="senders", action="append", metavar="MXID", help="sender user id (repeatable)")
    when = "ISO 8601, unix ms, 90m/36h/2d/1w ago, or today/yesterday/this week/last week [ZONE] (UTC by default)"
    search.add_argument("--after", help=f"only windows ending at or after this time: {when}")
    search.add_argument("--before", help=f"only windows starting at or before this time: {when}")
    search.add_argument(
        "--sort",
        choices=SORTS,
        help="relevance (the default with TEXT), newest or oldest (the default without TEXT)",
    )
    search.add_argument(
        "--top-k", dest="top_k", type=int, default=TOP_K_DEFAULT, help=f"hits or page size, 1..{TOP_K_MAX}"
    )
    search.add_argument(
        "--cursor", metavar="NEXT", help="continue a search or listing with the 'next' token it printed"
    )
    search.add_argument(
        "--thread",
        metavar="EVENT_ID",
        help="list the thread of this root (or of any message in it) in order; takes only --top-k and --cursor",
    )
    _add_common(search)
    search.set_defaults(client_command="search")

    window = subparsers.add_parser(
        "window", help="a cited message and its neighbours in the same room, from the index alone"
    )
    window.add_argument("event_id", metavar="EVENT_ID", help="the message's event id ($...)")
    window.add_argument(
        "--before", type=int, default=WINDOW_CONTEXT_DEFAULT, help=f"messages before it, 0..{WINDOW_CONTEXT_MAX}"
    )
    window.add_argument(
        "--after", type=int, default=WINDOW_CONTEXT_DEFAULT, help=f"messages after it, 0..{WINDOW_CONTEXT_MAX}"
    )
    _add_common(window)
    window.set_defaults(client_command="window")

    rooms = subparsers.add_parser(
        "rooms",
        help="the rooms you can search: names, aliases, how many messages, first and last message",
        description="The rooms the index holds, from the reader (no homeserver token needed). "
        "Any name shown works with search --room. The operator's scope decisions are `huginn-chat scope`.",
    )
    rooms.add_argument("--json", action="store_true", help="the reader's reply as JSON")
    _add_connection(rooms)
    rooms.set_defaults(client_command="rooms")


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text for people, json (the reply as the reader sent it), or md: one citation line per "
        "matched message, ready to paste into an answer",
    )
    parser.add_argument("--json", action="store_true", help="the same as --format json")
    _add_connection(parser)


def _add_connection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--socket", help=f"reader socket (else ${SOCKET_ENV}, else {DEFAULT_SOCKET})")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds to wait for the reader")


def socket_path(args: argparse.Namespace) -> str:
    return getattr(args, "socket", None) or os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


def run_client(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run ``search`` or ``window`` as parsed by ``add_client_parsers``; returns 0, or raises a
    ``HuginnError`` whose one line (without the ``huginn-chat search:`` prefix) names the field or
    the reason."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    command = args.client_command
    if command == "search" and getattr(args, "thread", None) is not None:
        command = "thread"
        given = [flag for flag, value in _THREAD_EXCLUDES if getattr(args, value, None)]
        if given:
            raise UsageError(f"--thread: lists one whole thread; it does not take {', '.join(given)}")
    if command == "rooms":
        return _run_rooms(args, out)
    labels = THREAD_FLAG_OF_FIELD if command == "thread" else FLAG_OF_FIELD
    # The arguments travel as typed; the reader checks them with the very functions the local
    # check below uses (``daemon.reader.search``), and answers a refusal naming the field. The
    # local check runs only when something went wrong (a bad --timeout, no reader, a refusal),
    # so a bad argument reads the same line and exit 2 as ever, with or without a reader, and an
    # answered search never pays for importing the reader's validation.
    request = _request(command, args)
    if not 0 < args.timeout <= MAX_TIMEOUT_S:  # also refuses nan
        check_arguments(command, args, labels)
        raise UsageError(f"--timeout: must be a number of seconds above 0, at most {MAX_TIMEOUT_S:g}")

    try:
        reply = exchange(socket_path(args), request, timeout=args.timeout)
    except ReaderUnavailable:
        check_arguments(command, args, labels)
        raise
    if not reply["ok"]:
        check_arguments(command, args, labels)
        error = reply["error"]
        field = error.get("field")
        label = f"{_field_label(field, labels)}: " if field else ""
        refusal = UsageError if error.get("code") in USAGE_ERRORS else ReaderRefused
        raise refusal(f"{label}{error.get('message')}")

    result = reply["result"]
    output = "json" if args.json else getattr(args, "format", "text")
    if output == "json":
        json.dump(result, out, ensure_ascii=False)
        out.write("\n")
    elif output == "md":
        print_markdown(result, command, out, err)
    elif command == "search":
        print_search(result, typed_texts(args), out, err)
    elif command == "thread":
        print_thread(result, out)
    else:
        print_window(result, out)
    return EXIT_OK


def _run_rooms(args: argparse.Namespace, out: TextIO) -> int:
    """``huginn-chat rooms``: the reader's ``rooms`` reply, as a table or as JSON."""
    if not 0 < args.timeout <= MAX_TIMEOUT_S:  # also refuses nan
        raise UsageError(f"--timeout: must be a number of seconds above 0, at most {MAX_TIMEOUT_S:g}")
    reply = exchange(socket_path(args), {"v": PROTOCOL_VERSION, "op": "rooms"}, timeout=args.timeout)
    if not reply["ok"]:
        error = reply["error"]
        raise ReaderRefused(f"{error.get('code')}: {error.get('message')}")
    if args.json:
        json.dump(reply["result"], out, ensure_ascii=False)
        out.write("\n")
    else:
        print_rooms(reply["result"], out)
    return EXIT_OK


def typed_texts(args: argparse.Namespace) -> list[str]:
    """The search's texts: the words typed, joined with spaces into one text (as a search box
    reads them), then each ``--text`` as typed. Several words are never several texts: fusing
    "the", "laser" and "cutter" as separate questions ranks by whichever word is rarest."""
    words = list(getattr(args, "words", None) or ())
    return ([" ".join(words)] if words else []) + list(getattr(args, "more_texts", None) or ())


def _request(command: str, args: argparse.Namespace) -> dict[str, Any]:
    """The request line's object, the arguments as typed (``docs/protocol.md``): the reader's
    ``parse_request`` turns it into the same query ``check_arguments`` builds here."""
    if command == "thread":
        body: dict[str, Any] = {"v": PROTOCOL_VERSION, "op": "thread", "event_id": args.thread, "top_k": args.top_k}
    elif command == "window":
        return {
            "v": PROTOCOL_VERSION,
            "op": "window",
            "event_id": args.event_id,
            "before": args.before,
            "after": args.after,
        }
    else:
        body = {"v": PROTOCOL_VERSION, "op": "search", "texts": typed_texts(args), "top_k": args.top_k}
        for name in ("rooms", "senders", "after", "before", "sort"):
            if getattr(args, name) is not None:
                body[name] = getattr(args, name)
    if args.cursor is not None:
        body["cursor"] = args.cursor
    return body


def check_arguments(command: str, args: argparse.Namespace, labels: dict[str, str]) -> None:
    """The reader's own checks, run here (raises the ``UsageError`` naming the first refused
    field, as the reader would). Only on a path that already failed: it imports the reader's
    query module."""
    from daemon.reader.search import QueryError, make_query, make_thread_query, make_window_query  # failed path only

    try:
        if command == "thread":
            make_thread_query(args.thread, args.top_k, args.cursor)
        elif command == "search":
            make_query(
                typed_texts(args),
                rooms=args.rooms,
                senders=args.senders,
                after=args.after,
                before=args.before,
                top_k=args.top_k,
                cursor=args.cursor,
                sort=args.sort,
            )
        else:
            make_window_query(args.event_id, args.before, args.after)
    except QueryError as exc:
        raise UsageError(f"{_field_label(exc.field, labels)}: {exc.message}") from None


# What --thread refuses beside it: (flag, argparse destination).
_THREAD_EXCLUDES = (
    ("WORD", "words"),
    ("--text", "more_texts"),
    ("--room", "rooms"),
    ("--sender", "senders"),
    ("--after", "after"),
    ("--before", "before"),
    ("--sort", "sort"),
)


def _field_label(field: str | None, labels: dict[str, str] = FLAG_OF_FIELD) -> str:
    if not field:
        return "request"
    flag = labels.get(field)
    return f"{field} ({flag})" if flag and flag != field else field


def exchange(path: str, request: dict[str, Any], *, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Send one request line, read one reply line. A full backlog or a ``busy`` reply is
    retried briefly (bounded, jittered); every other failure is final at once."""
    started = time.monotonic()
    give_up = started + min(timeout, RETRY_FOR_S)
    attempt = 0
    while True:
        try:
            reply = _exchange_once(path, request, timeout)
        except _Refused:
            # Refused with the socket file present: a reader restarting, or one that died and
            # left its socket behind. Worth a moment, not the whole budget of a full backlog.
            if time.monotonic() >= min(give_up, started + REFUSED_RETRY_S):
                raise ReaderUnavailable(f"the reader is not running (no reader listening on {path})") from None
        except _Overloaded as overloaded:
            if time.monotonic() >= give_up:
                raise ReaderUnavailable(f"the reader on {path} is overloaded ({overloaded}); try again later") from None
        else:
            if reply.get("ok") or (reply.get("error") or {}).get("code") != "busy" or time.monotonic() >= give_up:
                return reply
        attempt += 1
        import random  # only a retry needs it

        time.sleep(random.uniform(0, min(RETRY_MAX_S, RETRY_FIRST_S * 2**attempt)))


class _Overloaded(OperationalError):
    """The reader's listen backlog is full: worth a brief retry."""


class _Refused(_Overloaded):
    """ECONNREFUSED although the socket file is there: retried for ``REFUSED_RETRY_S`` only."""


def _socket_present(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def _exchange_once(path: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    try:
        _connect(conn, path, timeout)
        line = _send_and_read_line(conn, path, request, timeout)
    finally:
        conn.close()
    if not line:
        raise ReaderUnavailable(f"the reader on {path} closed the connection without answering")
    try:
        return _parse_reply(line)
    except ValueError:
        raise ReaderUnavailable(f"the reader on {path} sent a reply this client cannot read") from None


def _connect(conn: socket.socket, path: str, timeout: float) -> None:
    """``conn`` connected to the reader on ``path``; each way it can fail, said as the reader's state."""
    try:
        conn.connect(path)
    except BlockingIOError:
        raise _Overloaded("its listen backlog is full") from None
    except ConnectionRefusedError:
        # A socket file with nobody accepting: a full backlog on some kernels, or a reader
        # restarting under systemd. Without the file nobody is there at all.
        if _socket_present(path):
            raise _Refused("it refused the connection") from None
        raise ReaderUnavailable(f"the reader is not running (no reader listening on {path})") from None
    except FileNotFoundError:
        raise ReaderUnavailable(f"the reader is not running (no reader listening on {path})") from None
    except PermissionError:
        raise ReaderUnavailable(f"permission denied on the reader socket {path}") from None
    except socket.timeout:
        raise ReaderUnavailable(f"the reader on {path} did not accept the connection in {timeout:g}s") from None
    except OSError as exc:
        if exc.errno == errno.EAGAIN:
            raise _Overloaded("its listen backlog is full") from None
        raise ReaderUnavailable(f"cannot connect to the reader on {path}: {exc.strerror or exc}") from None


def _send_and_read_line(conn: socket.socket, path: str, request: dict[str, Any], timeout: float) -> bytes:
    """Send ``request`` on ``conn`` and read the reply line (empty: the reader said nothing)."""
    line = b""
    try:
        try:
            conn.sendall(_encode_line(request))
            conn.shutdown(socket.SHUT_WR)  # one request per connection: the reader may close after it
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader closed first (a refusal): its one line may still be there to read
        with conn.makefile("rb") as stream:
            line = stream.readline()
    except socket.timeout:
        raise ReaderUnavailable(f"the reader on {path} did not answer in {timeout:g}s") from None
    except ConnectionResetError:
        if not line:
            raise ReaderUnavailable(f"the connection to the reader on {path} was reset") from None
    except OSError as exc:
        raise ReaderUnavailable(f"the connection to the reader on {path} failed: {exc.strerror or exc}") from None
    return line


def _encode_line(request: dict[str, Any]) -> bytes:
    """One line of JSON. ASCII escapes throughout: a lone surrogate from an undecodable argument
    travels as its escape, and the reader refuses it naming the field."""
    return json.dumps(request, separators=(",", ":")).encode("ascii") + b"\n"


def _parse_reply(line: bytes) -> dict[str, Any]:
    """A reply line (``docs/protocol.md``); ValueError if it is not a version-1 reply."""
    data = json.loads(line)
    if not isinstance(data, dict) or data.get("v") != PROTOCOL_VERSION or not isinstance(data.get("ok"), bool):
        raise ValueError("not a version 1 reply")
    if not isinstance(data.get("result" if data["ok"] else "error"), dict):
        raise ValueError("reply without a result or an error")
    return data


# ---------------------------------------------------------------------------------------------
# Human output


def format_ts(ts: Any) -> str:
    if isinstance(ts, bool) or not isinstance(ts, int):
        return "????-??-?? ??:??:??"
    from datetime import datetime, timezone  # the text output only: --json loads no datetime

    return datetime.fromtimestamp(ts / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def query_words(texts: list[str]) -> set[str]:
    return {w for text in texts for w in re.findall(_WORD, text.casefold()) if len(w) >= 3 and w not in _STOPWORDS}


def matches(body: Any, words: set[str]) -> bool:
    return bool(words) and isinstance(body, str) and not words.isdisjoint(re.findall(_WORD, body.casefold()))


def _message_line(message: dict[str, Any], marked: bool, how: str = "", words: set[str] | None = None) -> str:
    """A message for people: time, who (display name and user id), body, how it matched; then,
    indented, its event id and permalink (every message's, marked or not, so any can be cited).
    In a search (``words`` given) a very long body shows a snippet; ``window`` shows it whole."""
    body = str(message.get("body") or "")
    if words is not None and len(body) > SNIPPET_CHARS:
        whole = len(body)
        body = snippet(body, words) + f"  [{whole} characters: huginn-chat window '{message.get('event_id')}']"
    lines = body.splitlines() or [""]
    text = lines[0] + "".join("\n      " + more for more in lines[1:])
    sender = str(message.get("sender") or "")
    name = message.get("display_name")
    who = f"{name} ({sender})" if name and name != sender else sender
    line = f"{'>' if marked else ' '} {format_ts(message.get('ts'))}  {who}: {text}"
    if how:
        line += f"  ({how})"
    cite = "  ".join(str(part) for part in (message.get("event_id"), message.get("permalink")) if part)
    return line + (f"\n      {cite}" if cite else "")


def _room_header(holder: dict[str, Any]) -> str:
    """The room as people name it, then its alias and id: ``Hackspace lobby (#lobby:hs, !id)``."""
    room_id, alias, name = holder.get("room_id"), holder.get("room_alias"), holder.get("room_name")
    label = name or alias or room_id
    rest = [str(part) for part in (alias, room_id) if part and part != label]
    return f"{label} ({', '.join(rest)})" if rest else str(label)


def context_text(line: Any) -> str | None:
    """A ``reply_to`` / ``thread_root`` object of a reply as one line, or None when absent."""
    if not isinstance(line, dict) or not line.get("event_id"):
        return None
    if line.get("sender") is None:
        return f"(not in the index)  [{line.get('event_id')}]"
    return f"{line.get('sender')} ({format_ts(line.get('ts'))}): {line.get('body')}  [{line.get('event_id')}]"


def _print_message(message: dict[str, Any], line: str, out: TextIO) -> None:
    print(line, file=out)
    reply = context_text(message.get("reply_to"))
    if reply is not None:
        print(f"      \u21aa in reply to {reply}", file=out)


def print_search(result: dict[str, Any], texts: list[str], out: TextIO, err: TextIO) -> None:
    """Each hit: a header with the room (name, alias, id) and score, then its messages with
    their senders' display names, event ids and permalinks; the messages the reader says
    matched (``matched``: by meaning, by words or both) are marked with ``>`` and say how. A
    reply without ``matched`` (an older reader) falls back to marking messages that contain a
    query word."""
    if result.get("degraded") == "lexical_only":
        print("huginn-chat search: embedder unavailable, lexical matches only", file=err)
    print_warnings(result, err)
    hits = result.get("hits") or []
    if not hits:
        print("no matching windows", file=err)
    words = query_words(texts)
    for number, hit in enumerate(hits, 1):
        print(_hit_header(number, hit), file=out)
        root = context_text(hit.get("thread_root"))
        if root is not None:
            print(f"  in the thread of {root}", file=out)
        for message in hit.get("messages") or []:
            if "matched" in message:
                how = "+".join(str(leg) for leg in message.get("matched") or ())
                _print_message(message, _message_line(message, bool(how), how, words), out)
            else:
                marked = matches(message.get("body"), words)
                _print_message(message, _message_line(message, marked, "", words), out)
        print(file=out)
    if hits and any(h.get("score") is not None for h in hits):
        print(LEGEND, file=out)
    if result.get("next"):
        print(f"more: repeat with --cursor {result['next']}", file=out)


# What the markers of a ranked search's output mean, printed once below its hits.
LEGEND = (
    "legend: > the message that matched (dense: by meaning, lexical: by its words); relevance 0-1 is the "
    "better of the best message's similarity and the share of query words it holds"
)
# A message longer than this shows only the part around its first query word.
SNIPPET_CHARS = 480


def _hit_header(number: int, hit: dict[str, Any]) -> str:
    """``[n] room  relevance 0.82  similarity 0.71  words: laser, cutter`` (a ranked hit) or
    ``[n] room`` (a listing). The fused score ranks but means nothing to a reader: JSON keeps it."""
    header = f"[{number}] {_room_header(hit)}"
    if hit.get("relevance") is not None:
        header += f"  relevance {hit['relevance']:.2f}"
    elif hit.get("score") is not None:  # an older reader
        header += f"  score {hit['score']:.4f}"
    if hit.get("similarity") is not None:
        header += f"  similarity {hit['similarity']:.2f}"
    if hit.get("matched_words"):
        header += f"  words: {', '.join(str(w) for w in hit['matched_words'])}"
    return header


def snippet(body: str, words: set[str], limit: int = SNIPPET_CHARS) -> str:
    """``body`` when it is at most ``limit`` characters; else about ``limit`` characters around
    the first query word it holds (its start when none), cut with ``…`` on each cut side."""
    if len(body) <= limit:
        return body
    start = 0
    for found in re.finditer(_WORD, body.casefold()):
        if found.group() in words:
            start = max(0, found.start() - limit // 3)
            break
    end = min(len(body), start + limit)
    start = max(0, end - limit)
    return ("\u2026" if start else "") + body[start:end] + ("\u2026" if end < len(body) else "")


def print_rooms(result: dict[str, Any], out: TextIO) -> None:
    """One block per room: its name and id, then every name ``--room`` accepts, then how much the
    index holds and over what time."""
    rooms = result.get("rooms") or []
    if not rooms:
        print("no searchable rooms yet (the index holds no message)", file=out)
    for room in rooms:
        label = room.get("name") or room.get("canonical_alias") or room.get("room_id")
        print(f"{label}  {room.get('room_id')}", file=out)
        if room.get("aliases"):
            print(f"  aliases   {', '.join(str(a) for a in room['aliases'])}", file=out)
        print(f"  messages  {room.get('messages')} in {room.get('windows')} windows", file=out)
        print(f"  from      {format_ts(room.get('first_ts'))}  to  {format_ts(room.get('last_ts'))}", file=out)


def print_warnings(result: dict[str, Any], err: TextIO) -> None:
    """Each of the reply's ``warnings`` on its own line: what a filter named that the index does
    not hold (``docs/protocol.md``)."""
    for warning in result.get("warnings") or ():
        if isinstance(warning, dict):
            print(f"huginn-chat search: warning: {warning.get('message')} ({warning.get('code')})", file=err)


def print_window(result: dict[str, Any], out: TextIO) -> None:
    print(_room_header(result), file=out)
    root = context_text(result.get("thread_root"))
    if root is not None:
        print(f"  in the thread of {root}", file=out)
    for message in result.get("messages") or []:
        _print_message(message, _message_line(message, message.get("event_id") == result.get("event_id")), out)


def print_thread(result: dict[str, Any], out: TextIO) -> None:
    """The root, then the thread's messages in order (one page), each with its event id."""
    print(f"{_room_header(result)}  thread {result.get('root_id')}", file=out)
    root = result.get("root")
    if root is not None:
        _print_message(root, _message_line(root, True, "root"), out)
    else:
        print(f"  root {result.get('root_id')}: not in the index (redacted, or not a text message)", file=out)
    for message in result.get("messages") or []:
        _print_message(message, _message_line(message, True), out)
    if result.get("next"):
        print(f"more: repeat with --cursor {result['next']}", file=out)


def cited_messages(result: dict[str, Any], command: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(message, the hit or window holding it) for each message ``--format md`` cites: the cited
    message of a window; every message of a thread page (its root first); the messages the reader
    marked as matched in each search hit (all of a hit's messages when it marked none, or for a
    listing, which matches no text)."""
    if command == "window":
        return [(m, result) for m in result.get("messages") or () if m.get("event_id") == result.get("event_id")]
    if command == "thread":
        root = [result["root"]] if isinstance(result.get("root"), dict) else []
        return [(m, result) for m in root + list(result.get("messages") or ())]
    chosen: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for hit in result.get("hits") or ():
        messages = list(hit.get("messages") or ())
        marked = [m for m in messages if m.get("matched")]
        chosen += [(m, hit) for m in (marked or messages)]
    return chosen


def print_markdown(result: dict[str, Any], command: str, out: TextIO, err: TextIO) -> None:
    """One Markdown citation line per cited message (``daemon.reader.citations``), a blank line
    between them so each stays its own quote."""
    if command == "search" and result.get("degraded") == "lexical_only":
        print("huginn-chat search: embedder unavailable, lexical matches only", file=err)
    print_warnings(result, err)
    from daemon.reader.citations import markdown_citation  # --format md only: it loads the index port

    chosen = cited_messages(result, command)
    if not chosen:
        print("no matching windows" if command == "search" else "nothing to cite", file=err)
    lines = [
        markdown_citation(message, str(holder.get("room_name") or holder.get("room_alias") or holder.get("room_id")))
        for message, holder in chosen
    ]
    if lines:
        print("\n\n".join(lines), file=out)
    if command in ("search", "thread") and result.get("next"):
        print(f"more: repeat with --cursor {result['next']}", file=err)
