"""The operator's view: `huginn-chat scope` and `huginn-chat status`. Both only look.

Owns: surveying the homeserver as the refresher would see it (``survey_rooms``: the same alias
resolution, the same ``facts_from_state`` + ``decide`` with the same ``Policy``), reading the
newest published index (``read_index``: windows per room, cursors, generation, size), and printing
both as a table or as JSON.

Must not: write anything. No join, no invite accepted, no index write, no file created or touched
under ``STATE_DIR`` (the Edge generation is copied into a throwaway directory under ``$TMPDIR``,
never the reader's private dir). It never opens the working shard, which a running refresher holds.
It never decides scope: ``scope.decide`` does, fed exactly as ``daemon/refresher/run.py`` feeds it.

Theory of operation (rooms): the refresher resolves ``ROOMS`` and takes every room in
``allowed | joined | invited``: a joined room is decided from its state; any other room is first
decided from what shows without a join (invite stripped state, room summary, world-readable
state) and joined only if nothing there refuses it. We take the same steps without the join: a
room refused before joining is shown refused (``pre_join: true``: the next refresh does not join
it); a room nothing refuses is shown undecided, "the next refresh joins it", unless its full state
was readable (world-readable), which decides it. Rooms the index holds that are neither allowed
nor joined are listed too: the next refresh purges them (``not_in_scope``).

The steps that read scope from the homeserver (``daemon/refresher/room_scope.py``) are the refresher's
own, so the two can never drift apart.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit, urlunsplit

from daemon.cli.client import ReaderUnavailable, exchange
from daemon.config import ConfigError, Settings, read_token
from daemon.errors import EXIT_OK, OperationalError
from daemon.index.port import IndexMeta, IndexReader, RoomCursor
from daemon.ports import MatrixError, MatrixSource
from daemon.refresher.last_run import read_last_run
from daemon.refresher.purges import load_purges
from daemon.refresher.room_scope import (
    AliasProblem,
    decide_before_joining,
    decide_room,
    exclusion_aliases,
    read_direct_rooms,
    resolve_allowed,
)
from daemon.wiring import edge_index_root, make_policy, qdrant_client
from scope import Decision, Policy

NO_INDEX = "no index published yet; run huginn-chat refresh"

# What the refresher does with each kind of room, said to the operator.
NOTE_NOT_JOINED = "not joined yet; the next refresh joins it"
NOTE_INVITED = "invited; the next refresh accepts the invite"
NOTE_STATE_UNREADABLE = "room state not readable before joining; decided after the next refresh joins it"
NOTE_PRE_JOIN = "refused before joining: the next refresh does not join it"
NOTE_PURGE_NEXT = "stored, but the next refresh purges it"

DECISION_ADMITTED = "admitted"
DECISION_REFUSED = "refused"
DECISION_UNKNOWN = "unknown"


# --------------------------------------------------------------------------------------------
# Surveying the homeserver


@dataclass(frozen=True)
class RoomView:
    """One room as the next refresh would treat it. ``decision`` is None when it cannot be known
    yet (state unreadable); ``unreadable`` then says why."""

    room_id: str
    membership: str  # "joined" | "invited" | "not_joined"
    decision: Decision | None
    unreadable: str | None = None
    pre_join: bool = False  # decided from what shows without a join


@dataclass
class Survey:
    service_user: str
    rooms: list[RoomView]
    alias_problems: list[AliasProblem]
    warnings: list[str] = field(default_factory=list)


async def survey_rooms(matrix: MatrixSource, policy: Policy) -> Survey:
    """Every allowed or joined room with its decision, read-only: no join, no invite accepted.
    A failure of whoami or joined_rooms propagates as ``MatrixError`` (nothing can be said then)."""
    service_user = await matrix.whoami()
    allowed, alias_problems = await resolve_allowed(matrix, policy)
    allowed_ids = set(allowed)
    joined = set(await matrix.joined_rooms())
    warnings: list[str] = []
    try:
        invites = await matrix.invites()
    except MatrixError as exc:
        invites = {}
        warnings.append(f"invites unreadable ({exc})")
    direct_rooms, direct_error = await read_direct_rooms(matrix)
    if direct_error:
        warnings.append(f"m.direct unreadable ({direct_error}); the other DM signals still apply")

    servers = [service_user.partition(":")[2]] + [e.partition(":")[2] for e in allowed.values() if e.startswith("#")]
    excluded_names = await exclusion_aliases(matrix, policy, [s for s in dict.fromkeys(servers) if s])

    def names_of(room_id: str) -> list[str]:  # as the refresher's RunRooms.names_of
        return ([allowed[room_id]] if room_id in allowed else []) + excluded_names.get(room_id, [])

    views: list[RoomView] = []
    for room_id in sorted(allowed_ids | joined | set(invites)):
        membership = "joined" if room_id in joined else "invited" if room_id in invites else "not_joined"
        if membership != "joined":
            pre = await decide_before_joining(
                matrix,
                room_id,
                entry=allowed.get(room_id),
                invite_state=invites.get(room_id),
                service_user=service_user,
                allowed_ids=allowed_ids,
                direct_rooms=direct_rooms,
                policy=policy,
                named_by=names_of(room_id),
            )
            if pre.decision is None:
                why = "nothing shown before a join refuses it (" + (", ".join(pre.sources) or "nothing shown") + ")"
                views.append(RoomView(room_id, membership, None, unreadable=why, pre_join=True))
            else:
                views.append(RoomView(room_id, membership, pre.decision, pre_join=pre.refusal is not None))
            continue
        try:
            _, decision = await decide_room(
                matrix,
                room_id,
                service_user=service_user,
                allowed_ids=allowed_ids,
                direct_rooms=direct_rooms,
                policy=policy,
                named_by=names_of(room_id),
            )
        except MatrixError as exc:
            views.append(RoomView(room_id, membership, None, unreadable=str(exc)))
            continue
        views.append(RoomView(room_id, membership, decision))
    return Survey(service_user, views, alias_problems, warnings)


# --------------------------------------------------------------------------------------------
# Reading the index (newest published state only)


@dataclass
class IndexSnapshot:
    """What the published index holds. ``generation``/``published_ms``/``bytes_*`` are Edge only."""

    kind: str  # "edge" | "server"
    location: str  # the index root, or the server URL without credentials
    meta: IndexMeta | None
    windows: dict[str, int]  # room_id -> stored windows (empty layout windows included)
    cursors: dict[str, RoomCursor]
    aliases: dict[str, str]
    generation: int | None = None
    published_ms: int | None = None
    bytes_on_disk: int | None = None  # allocated bytes of the whole index root (holes not counted)
    generation_bytes: int | None = None  # allocated bytes of the published generation

    @property
    def rooms(self) -> set[str]:
        return set(self.windows) | set(self.cursors)

    def room_progress(self, room_id: str, now_ms: int) -> tuple[int, int | None, float | None]:
        """(windows stored, when the cursor last moved in unix ms, how many seconds ago)."""
        cursor = self.cursors.get(room_id)
        updated = (cursor.updated_ms or None) if cursor else None
        return self.windows.get(room_id, 0), updated, _age_s(now_ms, updated)


def _allocated_bytes(root: Path) -> int:
    """Bytes the files under ``root`` really occupy: Edge preallocates sparse files, so the
    apparent size would overstate it many times."""
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:  # a generation pruned while we walk
                continue
    return total


def read_edge_index(root: Path) -> IndexSnapshot | None:
    """The newest published Edge generation, loaded from a throwaway copy under ``$TMPDIR``.
    None when nothing is published yet."""
    # qdrant_edge (a few hundred ms to import) loads for `status` only, never for `scope`.
    from daemon.index.edge import CURRENT_FILE, GENERATIONS_DIR, read_current
    from daemon.index.edge_reader import EdgeIndexReader

    root = Path(root)
    if read_current(root) is None:
        return None
    with tempfile.TemporaryDirectory(prefix="huginn-chat-operator-") as private:
        reader = EdgeIndexReader.open_latest(root, Path(private))
        if reader is None:
            return None
        try:
            snapshot = IndexSnapshot(
                kind="edge",
                location=str(root),
                meta=reader.read_meta(),
                windows=reader.window_counts(),
                cursors=reader.cursors(),
                aliases=reader.room_aliases(),
                generation=reader.current_generation,
            )
        finally:
            reader.close()
    generations = root / GENERATIONS_DIR
    try:  # CURRENT is replaced atomically at publish: its mtime is the publish time
        snapshot.published_ms = int((generations / CURRENT_FILE).stat().st_mtime * 1000)
    except FileNotFoundError:
        pass
    snapshot.bytes_on_disk = _allocated_bytes(root)
    snapshot.generation_bytes = _allocated_bytes(generations / str(snapshot.generation))
    return snapshot


def read_server_index(reader: IndexReader, location: str) -> IndexSnapshot | None:
    """The collection behind a ``RemoteIndexReader``. None when it has no index meta yet."""
    meta = reader.read_meta()
    if meta is None:
        return None
    return IndexSnapshot(
        kind="server",
        location=location,
        meta=meta,
        windows=reader.window_counts(),
        cursors=reader.cursors(),
        aliases=reader.room_aliases(),
    )


def public_url(url: str) -> str:
    """``url`` without any user:password part, so it can be printed."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def read_index(settings: Settings) -> IndexSnapshot | None:
    """The published index the settings point at, or None when there is none yet."""
    if settings.qdrant_url:
        from daemon.index.remote_reader import RemoteIndexReader  # qdrant_client: only with a server

        reader = RemoteIndexReader(qdrant_client(settings), settings.qdrant_collection)
        try:
            return read_server_index(
                reader, f"{public_url(settings.qdrant_url)} collection {settings.qdrant_collection}"
            )
        finally:
            reader.close()
    return read_edge_index(edge_index_root(settings))


# --------------------------------------------------------------------------------------------
# The rows


def _age_s(now_ms: int, then_ms: int | None) -> float | None:
    if not then_ms:
        return None
    return round(max(0, now_ms - then_ms) / 1000, 3)


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    for unit, size, smaller, smaller_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if s >= size:
            rest = (s % size) // smaller_size
            return f"{s // size}{unit}{f' {rest}{smaller}' if rest else ''}"
    return f"{s}s"


def summarize_evidence(evidence: dict[str, Any] | None) -> str:
    """One short line naming the signals that fired, e.g. ``is_direct @a:hs, m_direct``."""
    if not evidence:
        return "-"
    signals = evidence.get("signals") or [evidence]
    parts = []
    for signal in signals:
        name = signal.get("signal")
        if name == "not_listed":
            aliases = signal.get("aliases") or []
            parts.append(f"not in ROOMS ({', '.join(aliases) if aliases else 'no alias'})")
            continue
        detail = next(
            (
                signal[k]
                for k in ("member", "event_type", "value", "entry", "algorithm", "room_type", "why", "error", "seen")
                if signal.get(k)
            ),
            None,
        )
        if name == "bridge_state" and signal.get("state_key"):
            detail = f"{detail}/{signal['state_key']}"
        if signal.get("builtin"):
            detail = f"{detail} (built-in)"
        parts.append(" ".join(str(part) for part in (name, detail) if part) or "-")
    text = ", ".join(parts)
    count = evidence.get("puppet_count")
    return f"{text} ({count} puppets)" if count and count > 1 else text


def room_rows(survey: Survey, index: IndexSnapshot | None, now_ms: int) -> list[dict[str, Any]]:
    """The `rooms --json` objects: one per allowed or joined room, one per unresolvable ``ROOMS``
    alias, one per stored room the next refresh will purge."""
    aliases = index.aliases if index else {}
    stored_rooms = index.rooms if index else set()

    def stored(room_id: str) -> dict[str, Any]:
        windows, updated, age = index.room_progress(room_id, now_ms) if index else (0, None, None)
        return {"windows": windows, "cursor_updated_ms": updated, "cursor_age_s": age}

    rows: list[dict[str, Any]] = []
    for view in survey.rooms:
        notes = []
        d = view.decision
        if d is not None and not d.admitted and view.pre_join:
            notes.append(NOTE_PRE_JOIN)
        elif view.membership == "not_joined":
            notes.append(NOTE_NOT_JOINED)
        elif view.membership == "invited":
            notes.append(NOTE_INVITED)
        if d is None:
            notes.append(NOTE_STATE_UNREADABLE if view.membership != "joined" else "room state unreadable")
            reason, evidence = (
                ("decided_after_join", {"seen": view.unreadable})
                if view.pre_join
                else ("room_state_unreadable", {"error": view.unreadable})
            )
            row: dict[str, Any] = {
                "room_id": view.room_id,
                "alias": aliases.get(view.room_id),
                "membership": view.membership,
                "decision": DECISION_UNKNOWN,
                "reason": reason,
                "evidence": evidence,
                "also": [],
            }
        else:
            if not d.admitted and view.room_id in stored_rooms:  # windows or a cursor, as the refresher counts
                notes.append(NOTE_PURGE_NEXT)
            row = {
                "room_id": view.room_id,
                "alias": d.alias or aliases.get(view.room_id),
                "membership": view.membership,
                "decision": DECISION_ADMITTED if d.admitted else DECISION_REFUSED,
                "reason": d.reason,
                "evidence": d.evidence,
                "also": list(d.also),
            }
        row["pre_join"] = view.pre_join
        rows.append({**row, **stored(view.room_id), "note": "; ".join(notes) or None})

    for problem in survey.alias_problems:
        evidence = {"alias": problem.alias, **({"error": problem.error} if problem.error else {})}
        rows.append(
            {
                "room_id": None,
                "alias": problem.alias,
                "membership": "unknown",
                "decision": DECISION_UNKNOWN,
                "reason": problem.why,
                "evidence": evidence,
                "also": [],
                "pre_join": False,
                "windows": 0,
                "cursor_updated_ms": None,
                "cursor_age_s": None,
                "note": "listed in ROOMS but the homeserver has no such alias"
                if problem.why == "alias_unknown"
                else "alias lookup failed",
            }
        )

    surveyed = {view.room_id for view in survey.rooms}
    for room_id in sorted(stored_rooms - surveyed):
        rows.append(
            {
                "room_id": room_id,
                "alias": aliases.get(room_id),
                "membership": "not_joined",
                "decision": DECISION_REFUSED,
                "reason": "not_in_scope",
                "evidence": {"why": "neither allowed nor joined"},
                "also": [],
                "pre_join": False,
                **stored(room_id),
                "note": NOTE_PURGE_NEXT,
            }
        )
    return rows


def purge_rows(recorded: dict[str, Any], last_run: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every recorded purge span with its state: ``applied`` / ``unmatched`` as the last run
    left it, ``pending`` when no run has taken it up yet (recorded since, or its room failed)."""
    seen = {
        (p.get("room"), p.get("ts_from"), p.get("ts_to")): p
        for p in (last_run or {}).get("purges") or []
        if isinstance(p, dict)
    }
    rows = []
    for room in sorted(recorded):
        for span in recorded[room]:
            last = seen.get((room, span.ts_from, span.ts_to)) or {}
            state = last.get("state") if last.get("state") in ("applied", "unmatched") else "pending"
            rows.append(
                {
                    "room": room,
                    "room_id": last.get("room_id"),
                    "ts_from": span.ts_from,
                    "ts_to": span.ts_to,
                    "state": state,
                    "why": last.get("why"),
                }
            )
    return rows


def status_report(
    index: IndexSnapshot, last_run: dict[str, Any] | None, now_ms: int, purges: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The `status --json` object."""
    rooms = []
    for room_id in sorted(index.rooms):
        windows, updated, lag = index.room_progress(room_id, now_ms)
        rooms.append(
            {
                "room_id": room_id,
                "alias": index.aliases.get(room_id),
                "windows": windows,
                "cursor_updated_ms": updated,
                "lag_s": lag,
            }
        )
    run = None
    if last_run is not None:
        run = {
            **last_run,
            "age_s": _age_s(now_ms, last_run.get("finished_ms"))
            if isinstance(last_run.get("finished_ms"), int)
            else None,
        }
    return {
        "index": {
            "kind": index.kind,
            "location": index.location,
            "meta": asdict(index.meta) if index.meta else None,
            "windows": sum(index.windows.values()),
            "rooms": len(index.rooms),
            "bytes_on_disk": index.bytes_on_disk,
            "generation_bytes": index.generation_bytes,
        },
        "generation": None
        if index.generation is None
        else {
            "number": index.generation,
            "published_ms": index.published_ms,
            "age_s": _age_s(now_ms, index.published_ms),
        },
        "last_run": run,
        "rooms": rooms,
        "purges": purges or [],
    }


# --------------------------------------------------------------------------------------------
# Printing


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def render_rooms(rows: Sequence[dict[str, Any]], survey: Survey) -> str:
    table = _table(
        ("ROOM", "ALIAS", "DECISION", "REASON", "EVIDENCE", "WINDOWS", "CURSOR AGE", "NOTE"),
        [
            (
                row["room_id"] or "-",
                row["alias"] or "-",
                row["decision"],
                row["reason"] + (f" (also: {', '.join(row['also'])})" if row["also"] else ""),
                summarize_evidence(row["evidence"]),
                str(row["windows"]),
                format_age(row["cursor_age_s"]),
                row["note"] or "",
            )
            for row in rows
        ],
    )
    admitted = sum(1 for r in rows if r["decision"] == DECISION_ADMITTED)
    refused = sum(1 for r in rows if r["decision"] == DECISION_REFUSED)
    footer = [
        f"{len(rows)} rooms as {survey.service_user}: {admitted} admitted, {refused} refused, "
        f"{len(rows) - admitted - refused} undecided"
    ]
    footer += [f"warning: {w}" for w in survey.warnings]
    return table + "\n\n" + "\n".join(footer)


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            break
        size /= 1024
    return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"


def render_status(report: dict[str, Any]) -> str:
    idx = report["index"]
    meta = idx["meta"] or {}
    lines = [f"index       {idx['kind']} at {idx['location']}"]
    lines.append(
        f"size        {idx['windows']} windows in {idx['rooms']} rooms"
        + (
            f", {_bytes(idx['bytes_on_disk'])} on disk (published generation {_bytes(idx['generation_bytes'])})"
            if idx["bytes_on_disk"] is not None
            else ""
        )
    )
    if meta:
        lines.append(f"model       {meta.get('model')} (dim {meta.get('dim')}), chat {meta.get('chat_version')}")
    gen = report["generation"]
    if gen is not None:
        lines.append(f"generation  {gen['number']}, published {format_age(gen['age_s'])} ago")
    run = report["last_run"]
    if run is None:
        lines.append("last run    none recorded")
    elif "unreadable" in run:
        lines.append(f"last run    unreadable: {run['unreadable']}")
    else:
        when = f"{format_age(run['age_s'])} ago" if run.get("age_s") is not None else "at an unknown time"
        failed = run.get("failed_rooms") or []
        lines.append(
            f"last run    {when}, {run.get('seconds', '?')} s: {run.get('rooms_admitted', '?')} admitted, "
            f"{run.get('rooms_refused', '?')} refused, {run.get('rooms_failed', '?')} failed"
            + (f" ({', '.join(failed)})" if failed else "")
            + f"; {run.get('events_read', '?')} events read, {run.get('windows_written', '?')} windows written"
        )
    lines.append("")
    lines.append(
        _table(
            ("ROOM", "ALIAS", "WINDOWS", "LAG"),
            [(r["room_id"], r["alias"] or "-", str(r["windows"]), format_age(r["lag_s"])) for r in report["rooms"]],
        )
    )
    purges = report.get("purges") or []
    if purges:
        lines.append("")
        lines.append(
            _table(
                ("PURGE", "ROOM ID", "FROM (ms)", "TO (ms)", "STATE"),
                [
                    (
                        p["room"],
                        p["room_id"] or "-",
                        str(p["ts_from"]),
                        str(p["ts_to"]),
                        p["state"] + (f" ({p['why']})" if p.get("why") else ""),
                    )
                    for p in purges
                ],
            )
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Entry points (called from daemon/cli/main.py)


def _now_ms(clock: Callable[[], float]) -> int:
    return int(clock() * 1000)


async def _survey_with(settings: Settings, token: str, policy: Policy) -> Survey:
    from daemon.refresher.matrix import NioMatrixSource  # nio (about 1 s to import): `scope` only

    matrix = NioMatrixSource(str(settings.homeserver), token, timeout=15)
    try:
        return await survey_rooms(matrix, policy)
    finally:
        await matrix.close()


def rooms_main(
    settings: Settings,
    *,
    as_json: bool,
    matrix: MatrixSource | None = None,
    clock: Callable[[], float] = time.time,
    out: Any = None,
) -> int:
    """`huginn-chat scope`: returns 0 when shown; raises ``ConfigError`` (exit 2) for bad
    configuration or a refused token, ``OperationalError`` (exit 1) when the homeserver is
    unreachable or failed. ``matrix`` replaces the homeserver (tests); the token is then not read."""
    out = out or sys.stdout
    policy = make_policy(settings)
    try:
        if matrix is None:
            if not settings.homeserver:
                raise ConfigError(
                    "homeserver", "required for scope; set HUGINN_CHAT_HOMESERVER or homeserver in the config file"
                )
            token = read_token(settings)
            survey = asyncio.run(_survey_with(settings, token, policy))
        else:
            survey = asyncio.run(survey_rooms(matrix, policy))
    except MatrixError as exc:
        where = public_url(settings.homeserver) if settings.homeserver else "the homeserver"
        if exc.status is None:
            raise OperationalError(f"homeserver {where} is unreachable: {exc}") from exc
        if exc.status in (401, 403) and exc.what == "whoami":
            raise ConfigError("token_file", f"the homeserver refused the token ({exc})") from exc
        raise OperationalError(f"homeserver {where} failed: {exc}") from exc

    try:
        index = read_index(settings)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - decisions are still worth showing without the index
        index = None
        survey.warnings.append(f"index unreadable ({type(exc).__name__}: {exc}); windows and cursors not shown")
    else:
        if index is None:
            survey.warnings.append(NO_INDEX)

    rows = room_rows(survey, index, _now_ms(clock))
    if as_json:
        json.dump(rows, out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        out.write(render_rooms(rows, survey) + "\n")
    return EXIT_OK


def _status_from_reader(settings: Settings, as_json: bool, out: Any) -> int:
    """No index under this state dir (a Persona without the operator's config, typically): ask the
    reader, which may well be serving one; when none answers, say where both were looked for."""
    socket_path = str(settings.socket)
    try:
        reply = exchange(socket_path, {"v": 1, "op": "status"}, timeout=5.0)
    except ReaderUnavailable:
        reply = None
    if reply is None or not reply.get("ok"):
        raise OperationalError(
            f"{NO_INDEX} (looked in the state dir {settings.state_dir}; no reader answered on {socket_path})"
        )
    status = {"source": f"the reader on {socket_path}", **reply["result"]}
    if as_json:
        json.dump(status, out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        out.write(f"no index under {settings.state_dir}; the reader on {socket_path} answered:\n")
        for key in ("index_ready", "generation", "model", "embedder", "degraded"):
            out.write(f"  {key:<12} {status.get(key)}\n")
    return EXIT_OK


def status_main(
    settings: Settings,
    *,
    as_json: bool,
    clock: Callable[[], float] = time.time,
    out: Any = None,
) -> int:
    """`huginn-chat status`: returns 0 when shown; raises ``OperationalError`` (exit 1) when no
    index is published yet or the index is unreadable, ``ConfigError`` (exit 2) for bad
    configuration. Needs no homeserver."""
    out = out or sys.stdout
    try:
        index = read_index(settings)
    except ConfigError:
        raise
    except Exception as exc:  # e.g. the Qdrant server is down: any failure is "unreadable"
        raise OperationalError(f"index unreadable: {type(exc).__name__}: {exc}") from exc
    if index is None:
        return _status_from_reader(settings, as_json, out)
    last_run = read_last_run(Path(settings.state_dir))
    recorded = load_purges(Path(settings.state_dir))  # a PurgeFileError reaches main as its one line
    report = status_report(index, last_run, _now_ms(clock), purge_rows(recorded, last_run))
    if as_json:
        json.dump(report, out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        out.write(render_status(report) + "\n")
    return EXIT_OK
