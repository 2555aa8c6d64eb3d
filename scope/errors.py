"""The errors the pure core raises.

Owns: ``PolicyError``, a bad entry in the operator's scope lists, carrying the field and the entry
so the shell can name its own setting.

Must not: import anything from ``daemon/`` (the core never imports the shell) or carry an exit
code. The shell maps these to its own errors (``daemon.wiring.make_policy`` turns a
``PolicyError`` into a ``ConfigError``, exit 2), so the exit codes stay defined in one place.
"""

from __future__ import annotations


class PolicyError(ValueError):
    """A bad scope list entry. ``field`` is the Policy field with the entry's position
    (``bridge_sender_patterns[1]``), ``entry`` the offending value, so config can name its own key."""

    def __init__(self, field: str, entry: str | None, problem: str):
        shown = f" {entry!r}" if entry is not None else ""
        super().__init__(f"{field}{shown}: {problem}")
        self.field = field
        self.entry = entry
        self.problem = problem
