"""The errors huginn-chat raises on purpose, under one root, and the exit codes they map to.

Owns: the exit codes (defined here and nowhere else), ``HuginnError`` and its two families —
``UsageError`` (the operator's input or configuration is wrong: exit 2, the message names the
field) and ``OperationalError`` (something the command depends on failed: the homeserver, the
index, the model, the reader: exit 1). Each error class lives next to the code that raises it and
derives from one of these, so ``exit_code`` is a class attribute it inherits.

``str()`` of every ``HuginnError`` is one line that is safe to print: it never holds a token,
a key or a query text. ``daemon.cli.main`` is the one place that prints it and exits.

Must not: import anything but the standard library — the stdlib-only CLI client
(``daemon.cli.client``) and the pure core (``scope``) import it.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # a failure the operator must look at (a room failed, the reader is not running)
EXIT_USAGE = 2  # bad usage or bad configuration (argparse's own code for usage errors, too)
# A refresh stopped by SIGTERM or SIGINT at a safe point (journal: ``run_interrupted``): what it
# wrote is consistent and the next run goes on from there. Not 128 + the signal: a shell reports
# that for a process the signal killed, and this one was not.
EXIT_INTERRUPTED = 3


class HuginnError(Exception):
    """The root. Catch this where any of huginn-chat's own errors will do."""

    exit_code: int = EXIT_FAILED


class UsageError(HuginnError):
    """Bad input: a refused argument, setting or request field. The message names the field."""

    exit_code = EXIT_USAGE


class OperationalError(HuginnError):
    """The input was fine, but something the command needs failed or is missing."""

    exit_code = EXIT_FAILED
