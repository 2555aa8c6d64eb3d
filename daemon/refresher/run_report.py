"""The end of a refresh as an operator reads it on a terminal: what was admitted, what was refused
and why, what failed, and the run's totals.

Owns: ``RunReport``, which watches the journal's events as they are written (a journal observer,
after the secret masking) and keeps only the decisions a summary needs, and ``render_run``, which
turns such events into readable lines. ``devtools.demo`` renders its run with the same function.

Must not: write anything itself (the caller prints the lines, and only on a terminal: under
systemd the journal is the record), keep any message text (events carry none), or change what the
journal writes.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

# The events a summary reads; every other journal line is left alone.
_KEPT = frozenset({"room_joined", "room_admitted", "room_refused", "room_left", "room_current", "room_failed"})
_ENDS = frozenset({"run_finished", "run_interrupted"})


def describe_evidence(reason: str, evidence: dict[str, Any]) -> str:
    """One readable phrase for a refusal's evidence (the journal keeps the full object)."""
    signal_name = evidence.get("signal", "?")
    if reason == "dm":
        detail = {
            "is_direct": "a member was invited with is_direct",
            "m_direct": "the service user's m.direct lists it",
            "two_party_private": "private, unnamed, two people",
            "unnamed_private": "private, with no name and no alias",
        }.get(signal_name, "")
    elif reason == "bridged":
        if signal_name == "bridge_state":
            detail = f"{evidence.get('event_type')} state event"
        elif signal_name == "puppet_member":
            detail = f"bridge puppet {evidence.get('member')} is a member"
        else:
            detail = ""
    elif reason == "encrypted":
        detail = str(evidence.get("algorithm") or "")
    elif reason == "excluded":
        origin = "built-in" if evidence.get("builtin") else "operator"
        detail = f"{evidence.get('value')} matches {origin} entry {evidence.get('entry')}"
    elif reason == "not_allowed":
        detail = "not listed in rooms"
    else:
        detail = ""
    return f"signal {signal_name}" + (f": {detail}" if detail else "")


def render_run(events: Iterable[dict[str, Any]], name_of: Callable[[dict[str, Any]], str] | None = None) -> list[str]:
    """Readable lines for a run's decisions and, when the run ended, its totals. ``name_of`` names
    a room from its event (default: the alias the event carries, else the room id)."""
    name = name_of or (lambda line: str(line.get("alias") or line.get("room_id") or ""))
    out: list[str] = []
    end: dict[str, Any] | None = None
    for line in events:
        event = line.get("event")
        if event in _ENDS:
            end = line
            continue
        if event == "room_joined":
            out.append(f"joined   {name(line)} (via {line.get('via')})")
        elif event == "room_admitted":
            out.append(f"admitted {name(line)}")
        elif event == "room_refused":
            reason = line.get("reason")
            how = (
                "before joining: never joined"
                if line.get("pre_join")
                else "the operator's room: not left"
                if line.get("joined_by") == "operator"
                else ""
            )
            out.append(
                f"refused  {name(line)} (reason: {reason} — {describe_evidence(str(reason), line.get('evidence') or {})})"
                + (f" — {how}" if how else "")
            )
        elif event == "room_left":
            out.append(f"left     {name(line)} (reason: {line.get('reason')})")
        elif event == "room_current":
            out.append(f"read     {name(line)}: {line.get('events_read')} events")
        elif event == "room_failed":
            out.append(f"FAILED   {name(line)}: {line.get('why', '')} {line.get('error', '')}".rstrip())
    if end is not None and "rooms_admitted" in end:
        stopped = f" (stopped by {end.get('signal')})" if end.get("event") == "run_interrupted" else ""
        out.append("")
        out.append(
            f"run summary{stopped}: {end['rooms_admitted']} rooms admitted, {end.get('rooms_refused', 0)} refused, "
            f"{end.get('rooms_failed', 0)} failed; {end.get('events_read', 0)} events read, "
            f"{end.get('windows_written', 0)} windows written, {end.get('texts_embedded', 0)} texts embedded "
            f"in {float(end.get('seconds') or 0):.1f} s"
        )
    return out


class RunReport:
    """Keeps the decisions of the run being journalled, for ``render_run`` at its end."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def observe(self, event: dict[str, Any]) -> None:
        if event.get("event") in _KEPT or event.get("event") in _ENDS:
            self.events.append(dict(event))

    def lines(self) -> list[str]:
        return render_run(self.events)
