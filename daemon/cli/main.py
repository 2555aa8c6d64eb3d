"""`huginn-chat`: the command line entry point.

Owns: the subcommands, their arguments, and turning an error into its exit code — 0 success,
1 a failure the operator must look at (a room failed, the reader is not running), 2 bad usage or
bad configuration, 3 a refresh that SIGTERM or SIGINT stopped at a safe point. This is the one place that prints an error: a command raises a
``daemon.errors.HuginnError`` and ``main`` prints its one line on stderr and returns its
``exit_code`` (the refresher and the reader report in the journal instead and return the code).

Must not: import anything heavy at module level. `search` and `window` are what Personas run from
a shell many times a minute; they go through ``daemon.cli.client`` (standard library only). The
refresher, reader and operator commands import their machinery inside their own functions.
"""

from __future__ import annotations

import argparse
import os
import re  # argparse imports it anyway
import sys

from daemon.cli import client
from daemon.errors import EXIT_FAILED, EXIT_USAGE, HuginnError

# ``typing`` and ``pathlib`` cost milliseconds a start that ``search`` does not need.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Sequence

CLIENT_COMMANDS = ("search", "window", "rooms")
# What a ``-word`` exclusion looks like to argparse: one dash, then not a dash or a space.
_DASH_WORD = re.compile(r"^-[^-\s]")


def _terminal_columns() -> int:
    """What ``shutil.get_terminal_size().columns`` says ($COLUMNS, else stdout's terminal, else
    80), without importing shutil (and with it bz2, lzma and zlib: ~2 ms of every start)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    """argparse's own help layout and width. argparse builds one of these for every argument it
    adds (to check its metavar), so its width is found here the cheap way."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, _terminal_columns() - 2 if width is None else width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """A text written on several lines (examples) keeps its lines; one line is filled."""
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 2 (argparse's own code is 2 as well)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"huginn-chat: {message}\n")

    def _parse_optional(self, arg_string: str) -> tuple[argparse.Action | None, str, str | None] | None:
        """A parser marked ``dash_words`` (``search``) reads ``-word`` as a word of the query, not
        as an unknown flag: people type exclusions unquoted (``search laser -chiller``). Only an
        option string given exactly is an option there, so ``-tx`` is never ``-t x``."""
        if getattr(self, "dash_words", False) and _DASH_WORD.match(arg_string):
            if arg_string.split("=", 1)[0] not in self._option_string_actions:
                return None
        return super()._parse_optional(arg_string)


class _VersionAction(argparse.Action):
    """``--version``: the installed package's version, looked up only when asked (importing
    ``importlib.metadata`` would cost every ``search`` start)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        from importlib.metadata import PackageNotFoundError, version  # the email parser: only for --version

        try:
            found = version("huginn-chat")
        except PackageNotFoundError:
            found = "unknown (not installed)"
        sys.stdout.write(f"huginn-chat {found}\n")
        parser.exit(0)


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="TOML config file (else $HUGINN_CHAT_CONFIG)")


def build_parser(only_client: bool = False) -> argparse.ArgumentParser:
    """Every subcommand; with ``only_client``, only ``search`` and ``window`` (what a Persona's
    ``huginn-chat search ...`` needs: the other parsers cost time to build and are never used)."""
    parser = _Parser(prog="huginn-chat", description="Matrix chat ingest and read-only search.")
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        help="the journal on stderr: json lines, console lines for people, or auto (console on a terminal, "
        "else json; the default)",
    )
    # ``prog`` given: argparse would otherwise build a help formatter to work it out (importing
    # shutil for the terminal width); this is the same string.
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, prog="huginn-chat")
    if only_client:
        client.add_client_parsers(sub)
        return parser

    p = sub.add_parser("refresh", help="read the homeserver once and bring the index up to date")
    _add_config(p)

    p = sub.add_parser(
        "follow",
        help="stay running beside the timer: long-poll the homeserver and refresh as soon as something arrives",
    )
    _add_config(p)

    p = sub.add_parser("serve", help="run the read-only search reader on its Unix socket")
    _add_config(p)

    p = sub.add_parser("purge", help="record a purge window for a room, applied by the next refresh")
    _add_config(p)
    p.add_argument("room", help="room id (!…) or alias (#…:server)")
    p.add_argument("--from", dest="ts_from", required=True, help="ISO 8601 time or unix ms")
    p.add_argument("--to", dest="ts_to", required=True, help="ISO 8601 time or unix ms")

    p = sub.add_parser(
        "scope",
        help="the operator's dry run: every allowed or joined room with its scope decision (writes nothing)",
    )
    _add_config(p)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("status", help="index kind and size, generation, last run, per-room lag")
    _add_config(p)
    p.add_argument("--json", action="store_true")

    client.add_client_parsers(sub)

    # The MCP server's parser is argparse only: the SDK is imported when `mcp` runs, never by `search`.
    p = sub.add_parser(
        "mcp",
        help="serve search, window, thread and rooms as MCP tools on stdin/stdout, for an agent host",
        description="A stdio Model Context Protocol server over the reader socket. It holds no index and no credential.",
    )
    p.add_argument("--socket", help=f"reader socket (else ${client.SOCKET_ENV}, else {client.DEFAULT_SOCKET})")
    p.add_argument(
        "--timeout", type=float, default=client.DEFAULT_TIMEOUT_S, help="seconds to wait for the reader on each call"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # inside the try: a closed pipe is found here, not at interpreter exit
        return code
    except BrokenPipeError:
        # Whoever read our output stopped early (`search --json | head`): no traceback, nothing
        # more to say. Point stdout at /dev/null so the flush at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED


def _main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if not words:
        # Nothing asked: the commands and what each does, not one line of error.
        build_parser().print_help(sys.stderr)
        return EXIT_USAGE
    parser = build_parser(only_client=words[:1] in (["search"], ["window"], ["rooms"]))
    args = parser.parse_args(words)
    # The client's lines name their command ("huginn-chat search: top_k: ..."), as they always have.
    prefix = f"huginn-chat {args.command}" if args.command in CLIENT_COMMANDS else "huginn-chat"
    try:
        return _run(args)
    except HuginnError as exc:
        print(f"{prefix}: {exc}", file=sys.stderr)
        return exc.exit_code


def _run(args: argparse.Namespace) -> int:
    if getattr(args, "log_format", None) and args.command not in CLIENT_COMMANDS:
        from daemon import journal  # structlog: never on a client command's start

        journal.chosen_format = args.log_format  # read by journal.configure, wherever it runs
    if args.command in CLIENT_COMMANDS:
        return client.run_client(args)
    if args.command == "mcp":
        from daemon.cli.mcp_server import run_mcp  # the MCP SDK (pydantic, anyio): only for `mcp`

        return run_mcp(args)

    # The settings commands' machinery (pathlib, pydantic, and each command's own below) stays
    # off the start of `search`, `window` and `rooms`, which Personas run many times a minute.
    from pathlib import Path

    from daemon.config import load_settings
    from daemon.safe_files import restrict_umask

    # Before anything is read or written: every file and directory these commands make is the
    # product's mode (0640 / 0750 at the widest), whatever umask the shell or unit handed over.
    restrict_umask()
    settings = load_settings(None if args.config is None else Path(args.config))
    if args.command == "refresh":
        from daemon.wiring import refresh_main

        return refresh_main(settings)
    if args.command == "follow":
        from daemon.wiring import follow_main

        return follow_main(settings, None if args.config is None else Path(args.config))
    if args.command == "serve":
        from daemon.wiring import serve_main

        return serve_main(settings)
    if args.command == "purge":
        from daemon.wiring import purge_main

        return purge_main(settings, args.room, args.ts_from, args.ts_to)
    if args.command == "scope":
        from daemon.cli.operator_view import rooms_main

        return rooms_main(settings, as_json=args.json)
    if args.command == "status":
        from daemon.cli.operator_view import status_main

        return status_main(settings, as_json=args.json)
    raise AssertionError(f"a subcommand without a handler: {args.command!r}")  # argparse allows only these


if __name__ == "__main__":
    sys.exit(main())
