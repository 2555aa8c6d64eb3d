"""A real Synapse holding an eval corpus, seeded once and cached by the corpus hash.

Owns: seeding (one room per corpus room with a public alias, one user per nick with its
notifications muted, every message sent through the dev server's history appservice with its
original ``ts`` as its original sender; the rooms are sent side by side, each room in order), the
cache of the seeded data directory
(``.cache/eval/synapse-<hash>/``, gitignored), and ``seeded_synapse``, which starts a throwaway
copy of that directory and yields what the eval needs: the server, the service user's token, the
room aliases and the corpus key -> event id map.

Must not: modify the cached directory (a run works on a copy, so the refresher's joins never leak
into the next run), or print a token.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from bench.corpus import REPO, CorpusMessage, alias_localpart, corpus_hash, nick_localparts
from devtools.synapse import SynapseServer

SERVER_NAME = "eval.test"
SERVICE_USER = "huginn-service"
CACHE_ROOT = REPO / ".cache" / "eval"
SEEDED_FILE = "seeded.json"


@dataclass
class Seeded:
    server: SynapseServer
    service_token: str
    aliases: dict[str, str]  # corpus room -> "#alias:server"
    room_ids: dict[str, str]  # corpus room -> room id
    event_ids: dict[str, str]  # corpus key -> event id
    seed_seconds: float
    from_cache: bool

    @property
    def key_of_event(self) -> dict[str, str]:
        return {v: k for k, v in self.event_ids.items()}


def _scratch_dir(prefix: str) -> Path:
    shm = Path("/dev/shm")
    parent = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


# The push rule that, enabled, silences every notification of its user (the spec's master rule).
MASTER_RULE = "/_matrix/client/v3/pushrules/global/override/.m.rule.master/enabled"


def mute(actor) -> None:
    """Turn the user's master push rule on. Otherwise Synapse stores a notification row for every
    room member with every message (``event_push_actions``), and a corpus whose rooms have
    hundreds of members slows to under one message a second as that table grows; no reader of
    the seeded server uses notifications."""
    actor.call("PUT", MASTER_RULE, {"enabled": True})


def seed(server: SynapseServer, messages: list[CorpusMessage], *, log=print) -> dict:
    """Fill a running server (``history_appservice=True``) with ``messages``. Returns the record
    ``seeded_synapse`` caches: the service token, aliases, room ids, event ids."""
    started = time.monotonic()
    localparts = nick_localparts([m.sender for m in messages])
    with ThreadPoolExecutor(max_workers=8) as pool:
        names = sorted(set(localparts.values()))
        accounts = dict(zip(names, pool.map(server.register, names)))
        seeder = server.register("seeder")
        service = server.register(SERVICE_USER)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda account: mute(server.actor(account)), [*accounts.values(), seeder]))
    log(f"seed: {len(accounts)} users registered in {time.monotonic() - started:.0f} s")
    owner = server.actor(seeder)
    speakers = {name: server.history_actor(account) for name, account in accounts.items()}
    rooms: dict[str, list[CorpusMessage]] = {}
    for m in messages:
        rooms.setdefault(m.room, []).append(m)

    def make_room(room: str) -> tuple[str, str]:
        alias = alias_localpart(room)
        room_id = owner.create_room(name=room, alias_localpart=alias, preset="public_chat")
        # Everyone who speaks in the room joins it before its first message (they were there).
        for name in sorted({localparts[m.sender] for m in rooms[room]}):
            speakers[name].join(room_id)
        return room, room_id

    room_ids: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        for room, room_id in pool.map(make_room, sorted(rooms)):
            room_ids[room] = room_id
    log(f"seed: {len(room_ids)} rooms made and joined at {time.monotonic() - started:.0f} s")

    event_ids: dict[str, str] = {}
    sent = [0]

    def send_room(room: str) -> dict[str, str]:
        out = {}
        for m in rooms[room]:
            out[m.key] = speakers[localparts[m.sender]].send_text(room_ids[room], m.body, ts=m.ts)
            sent[0] += 1
        return out

    with ThreadPoolExecutor(max_workers=len(rooms)) as pool:
        futures = [pool.submit(send_room, room) for room in sorted(rooms)]
        # Progress every 10 s, but return as soon as the last room is sent.
        while wait(futures, timeout=10).not_done:
            log(f"seed: {sent[0]}/{len(messages)} sent at {time.monotonic() - started:.0f} s")
        for future in futures:
            event_ids.update(future.result())
    return {
        "service_token": service.access_token,
        "aliases": {room: f"#{alias_localpart(room)}:{server.server_name}" for room in rooms},
        "room_ids": room_ids,
        "event_ids": event_ids,
        "seed_seconds": round(time.monotonic() - started, 1),
    }


@contextlib.contextmanager
def seeded_synapse(messages: list[CorpusMessage], *, cache_root: Path = CACHE_ROOT, log=print) -> Iterator[Seeded]:
    """A running throwaway Synapse holding ``messages``. The first call for a corpus seeds it and
    caches the stopped data directory; later calls copy the cache and start in seconds."""
    cache = cache_root / f"synapse-{corpus_hash(messages)}"
    from_cache = (cache / SEEDED_FILE).is_file()
    if not from_cache:
        build = _scratch_dir("huginn-eval-seed-")
        try:
            with SynapseServer(data_dir=build, server_name=SERVER_NAME, history_appservice=True) as server:
                record = seed(server, messages, log=log)
            (build / SEEDED_FILE).write_text(json.dumps(record))
            (build / SEEDED_FILE).chmod(0o600)  # holds the service token
            cache.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(cache, ignore_errors=True)
            shutil.copytree(build, cache, ignore=shutil.ignore_patterns("homeserver.log", "*.pid"))
        finally:
            shutil.rmtree(build, ignore_errors=True)
    record = json.loads((cache / SEEDED_FILE).read_text())
    work = _scratch_dir("huginn-eval-synapse-")
    try:
        shutil.copytree(cache, work, dirs_exist_ok=True)
        with SynapseServer(data_dir=work, server_name=SERVER_NAME, history_appservice=True) as server:
            yield Seeded(
                server=server,
                service_token=record["service_token"],
                aliases=record["aliases"],
                room_ids=record["room_ids"],
                event_ids=record["event_ids"],
                seed_seconds=record["seed_seconds"],
                from_cache=from_cache,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":  # seed (or reuse) the full corpus and stop: `python -m bench.seed`
    from bench.corpus import load_messages

    msgs = load_messages()
    with seeded_synapse(msgs, log=lambda s: print(s, file=sys.stderr, flush=True)) as s:
        print(
            f"seeded {len(s.event_ids)} messages in {len(s.room_ids)} rooms; cache={'hit' if s.from_cache else 'new'}; "
            f"seeding took {s.seed_seconds} s"
        )
