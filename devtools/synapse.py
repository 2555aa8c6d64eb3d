"""A real, throwaway Synapse homeserver and a small client to fill it: for tests and ``make demo``.

Owns: writing a minimal homeserver config (JSON is valid YAML) with rate limits raised, media,
presence and URL previews off, and an appservice registration so Discord-style bridge puppets
(``@_discord_<id>:<server>``) can exist; optionally a second, non-exclusive "history"
appservice that may act as any ordinary user and set ``origin_server_ts`` (``?ts=``), the way
bridges import old history, so seeded chat can carry believable timestamps; starting Synapse as
a child process on 127.0.0.1 and stopping it by PID; registering users (shared-secret admin API)
and puppets (appservice token); ``Actor``, a synchronous client that sends the events the ingest
must cope with.

Must not: import pytest or any other module of this project (``devtools.demo`` runs it from a plain
checkout and the tests import it as it is), reach beyond 127.0.0.1, or
write a token to a log or an exception message. It is a development tool: nothing in the
refresher or the reader may import it.

Sends are bound by the homeserver (~60/s one at a time on tmpfs, ~130/s with 8+ in flight), so
seed with hundreds of events, not thousands; ``Actor.send_many`` runs concurrent sends when their
order does not matter.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import hmac
import itertools
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

PUPPET_PREFIX = "_discord_"
_RAISED_LIMIT = {"per_second": 10000, "burst_count": 100000}
_START_DEADLINE_S = 60.0
_POLL_INTERVAL_S = 0.05
_STOP_GRACE_S = 10.0
_HTTP_TIMEOUT_S = 30.0


class HarnessError(RuntimeError):
    """A homeserver call made by the harness failed. Holds the method, path, HTTP status and the
    server's errcode/error, never a token (tokens travel only in the Authorization header)."""

    def __init__(self, method: str, path: str, status: int | None, body: str):
        self.method = method
        self.path = path
        self.status = status
        self.errcode: str | None = None
        message = body[:500]
        try:
            parsed = json.loads(body)
            self.errcode = parsed.get("errcode")
            message = f"{self.errcode}: {parsed.get('error', '')}"
        except (ValueError, AttributeError):
            pass
        super().__init__(f"{method} {path} -> {status}: {message}")


@dataclass(frozen=True, slots=True)
class Account:
    """A user the harness made. For a puppet, ``access_token`` is the appservice token and
    ``masquerade`` is True: requests carry ``?user_id=`` to act as the puppet."""

    user_id: str
    access_token: str
    masquerade: bool = False

    def __repr__(self) -> str:  # keep tokens out of assertion messages and logs
        return f"Account(user_id={self.user_id!r}, masquerade={self.masquerade})"


def _request(
    base_url: str,
    method: str,
    path: str,
    *,
    token: str | None = None,
    query: dict[str, str] | None = None,
    body: Any = None,
) -> dict[str, Any]:
    """One JSON call to the homeserver; raises HarnessError on any non-2xx answer."""
    url = base_url + path
    if query:
        url += "?" + urllib.parse.urlencode(query)
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=_HTTP_TIMEOUT_S) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as err:
        raise HarnessError(method, path, err.code, err.read().decode(errors="replace")) from None
    except (urllib.error.URLError, OSError) as err:
        raise HarnessError(method, path, None, f"connection failed: {type(err).__name__}") from None
    return json.loads(raw) if raw else {}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _fresh_data_dir() -> Path:
    # SQLite commits on a real disk make sends ~3x slower; tmpfs when the machine has one.
    shm = Path("/dev/shm")
    parent = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="huginn-synapse-", dir=parent))


def stop_process(process: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL. Safe on a process that already exited."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class SynapseServer:
    """One Synapse process with SQLite in ``data_dir`` (a fresh tempdir, on /dev/shm when it
    exists, if None; removed again on ``stop``). Use as a context manager or start()/stop()."""

    def __init__(
        self,
        data_dir: Path | None = None,
        port: int | None = None,
        *,
        server_name: str = "huginn.test",
        history_appservice: bool = False,
    ):
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else _fresh_data_dir()
        self.port = port
        self.server_name = server_name
        self._shared_secret = secrets.token_hex(16)
        self._as_token = secrets.token_hex(16)
        self._history_token = secrets.token_hex(16) if history_appservice else None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("SynapseServer.base_url: server not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The homeserver's process id (the bench counts its CPU time)."""
        if self._process is None:
            raise RuntimeError("SynapseServer.pid: server not started")
        return self._process.pid

    @property
    def log_path(self) -> Path:
        return self.data_dir / "homeserver.log"

    def start(self) -> "SynapseServer":
        if self._process is not None:
            raise RuntimeError("SynapseServer.start: already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.port is None:
            self.port = _free_port()
        config_path = self._write_config()
        self._log_file = open(self.log_path, "ab")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "synapse.app.homeserver", "-c", str(config_path)],
            cwd=self.data_dir,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the terminal must not reach it before we stop it
        )
        atexit.register(self.stop)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + _START_DEADLINE_S
        url = self.base_url + "/_matrix/client/versions"
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"Synapse exited with code {self._process.returncode} before it was ready; "
                    f"log tail:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"Synapse not ready after {_START_DEADLINE_S:.0f} s; log tail:\n{self.log_tail()}")
            time.sleep(_POLL_INTERVAL_S)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            atexit.unregister(self.stop)
            stop_process(process, _STOP_GRACE_S)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._owns_dir and process is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def detach(self) -> int | None:
        """Leave the server running past this process (``make try``): it is no longer stopped at
        exit. Returns its pid, or None when it is not running."""
        process, self._process = self._process, None
        if process is None:
            return None
        atexit.unregister(self.stop)
        return process.pid

    def __enter__(self) -> "SynapseServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _write_config(self) -> Path:
        appservice_path = self.data_dir / "discord-appservice.json"
        appservice_path.write_text(json.dumps(self._appservice_registration(), indent=2))
        appservice_files = [str(appservice_path)]
        if self._history_token is not None:
            history_path = self.data_dir / "history-appservice.json"
            history_path.write_text(json.dumps(self._history_registration(), indent=2))
            appservice_files.append(str(history_path))
        config = {
            "server_name": self.server_name,
            "pid_file": str(self.data_dir / "homeserver.pid"),
            "listeners": [
                {
                    "port": self.port,
                    "bind_addresses": ["127.0.0.1"],
                    "type": "http",
                    "tls": False,
                    "x_forwarded": False,
                    "resources": [{"names": ["client"], "compress": False}],
                }
            ],
            "database": {"name": "sqlite3", "args": {"database": str(self.data_dir / "homeserver.db")}},
            "signing_key_path": str(self.data_dir / "signing.key"),
            "registration_shared_secret": self._shared_secret,
            "macaroon_secret_key": secrets.token_hex(16),
            "form_secret": secrets.token_hex(16),
            "report_stats": False,
            "trusted_key_servers": [],
            "suppress_key_server_warning": True,
            "enable_media_repo": False,
            "presence": {"enabled": False},
            "url_preview_enabled": False,
            "bcrypt_rounds": 4,
            "app_service_config_files": appservice_files,
            "rc_message": _RAISED_LIMIT,
            "rc_registration": _RAISED_LIMIT,
            "rc_room_creation": _RAISED_LIMIT,
            "rc_joins_per_room": _RAISED_LIMIT,
            "rc_admin_redaction": _RAISED_LIMIT,
            "rc_login": {"address": _RAISED_LIMIT, "account": _RAISED_LIMIT, "failed_attempts": _RAISED_LIMIT},
            "rc_joins": {"local": _RAISED_LIMIT, "remote": _RAISED_LIMIT},
            "rc_invites": {"per_room": _RAISED_LIMIT, "per_user": _RAISED_LIMIT, "per_issuer": _RAISED_LIMIT},
        }
        config_path = self.data_dir / "homeserver.yaml"
        config_path.write_text(json.dumps(config, indent=2))
        return config_path

    def _appservice_registration(self) -> dict[str, Any]:
        return {
            "id": "huginn-test-discord",
            "url": None,  # nothing to push transactions to: puppets are driven from the harness
            "as_token": self._as_token,
            "hs_token": secrets.token_hex(16),
            "sender_localpart": "discordbot",
            "namespaces": {
                "users": [{"exclusive": True, "regex": f"@{PUPPET_PREFIX}.*:{re.escape(self.server_name)}"}],
                "aliases": [],
                "rooms": [],
            },
            "rate_limited": False,
        }

    def _history_registration(self) -> dict[str, Any]:
        assert self._history_token is not None
        return {
            "id": "huginn-dev-history",
            "url": None,
            "as_token": self._history_token,
            "hs_token": secrets.token_hex(16),
            "sender_localpart": "historian",
            # Not exclusive: users still register normally; this only lets it speak for them.
            # Localparts starting with "_" (the puppets) stay with the Discord appservice.
            "namespaces": {
                "users": [{"exclusive": False, "regex": f"@[^_].*:{re.escape(self.server_name)}"}],
                "aliases": [],
                "rooms": [],
            },
            "rate_limited": False,
        }

    # -- users -------------------------------------------------------------------------------

    def register(self, localpart: str, admin: bool = False) -> Account:
        """A normal user via shared-secret registration (works with open registration off)."""
        if not localpart or localpart.startswith("_"):
            raise ValueError(f"register: localpart {localpart!r} must be non-empty and not start with '_'")
        path = "/_synapse/admin/v1/register"
        nonce = _request(self.base_url, "GET", path)["nonce"]
        password = secrets.token_hex(12)
        mac = hmac.new(self._shared_secret.encode(), digestmod=hashlib.sha1)
        mac.update(
            b"\x00".join([nonce.encode(), localpart.encode(), password.encode(), b"admin" if admin else b"notadmin"])
        )
        answer = _request(
            self.base_url,
            "POST",
            path,
            body={"nonce": nonce, "username": localpart, "password": password, "admin": admin, "mac": mac.hexdigest()},
        )
        return Account(answer["user_id"], answer["access_token"])

    def puppet(self, localpart: str) -> Account:
        """A bridge puppet such as ``_discord_1234``, owned by the test appservice."""
        if not localpart.startswith(PUPPET_PREFIX) or len(localpart) == len(PUPPET_PREFIX):
            raise ValueError(f"puppet: localpart {localpart!r} must start with {PUPPET_PREFIX!r} and name an id")
        answer = _request(
            self.base_url,
            "POST",
            "/_matrix/client/v3/register",
            token=self._as_token,
            body={"type": "m.login.application_service", "username": localpart, "inhibit_login": True},
        )
        return Account(answer["user_id"], self._as_token, masquerade=True)

    def actor(self, account: Account) -> "Actor":
        return Actor(self.base_url, account)

    def history_actor(self, account: Account) -> "Actor":
        """An ``Actor`` for an ordinary user that sends through the history appservice, so its
        sends may pass ``ts=`` (unix ms) to set ``origin_server_ts``. Needs
        ``SynapseServer(history_appservice=True)``."""
        if self._history_token is None:
            raise RuntimeError("SynapseServer.history_actor: start the server with history_appservice=True")
        if account.masquerade:
            raise ValueError(f"history_actor: {account.user_id} is already an appservice user")
        return Actor(self.base_url, Account(account.user_id, self._history_token, masquerade=True))

    def new_actor(self, prefix: str = "user", admin: bool = False) -> "Actor":
        """Register a user with a unique localpart (``<prefix>_<hex>``) and return its client."""
        return self.actor(self.register(f"{prefix}_{uuid.uuid4().hex[:10]}", admin=admin))


_txn_counter = itertools.count()


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


class Actor:
    """A synchronous Matrix client acting as one user (or one puppet, via ``?user_id=``).
    Thread-safe: each call is an independent HTTP request with its own transaction id."""

    def __init__(self, base_url: str, account: Account):
        self.base_url = base_url
        self.account = account
        self.user_id = account.user_id
        self.server_name = account.user_id.split(":", 1)[1]

    def __repr__(self) -> str:
        return f"Actor({self.user_id!r})"

    def call(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None) -> dict[str, Any]:
        """A raw client-server API call as this user (``path`` starts with /_matrix)."""
        query = dict(query or {})
        if self.account.masquerade:
            query["user_id"] = self.user_id
        return _request(self.base_url, method, path, token=self.account.access_token, query=query, body=body)

    @staticmethod
    def _txn() -> str:
        return f"h{next(_txn_counter)}-{uuid.uuid4().hex[:12]}"

    def full_alias(self, alias: str) -> str:
        """``name`` -> ``#name:<server>``; a full alias is returned as is."""
        if alias.startswith("#"):
            return alias
        return f"#{alias}:{self.server_name}"

    # -- rooms -------------------------------------------------------------------------------

    def create_room(
        self,
        name: str | None = None,
        alias_localpart: str | None = None,
        preset: str = "public_chat",
        invite: Sequence[str] = (),
        is_direct: bool = False,
        encrypted: bool = False,
        initial_state: Iterable[dict[str, Any]] = (),
    ) -> str:
        body: dict[str, Any] = {"preset": preset, "invite": list(invite), "is_direct": is_direct}
        if name is not None:
            body["name"] = name
        if alias_localpart is not None:
            body["room_alias_name"] = alias_localpart
        state = list(initial_state)
        if encrypted:
            state.append(
                {"type": "m.room.encryption", "state_key": "", "content": {"algorithm": "m.megolm.v1.aes-sha2"}}
            )
        if state:
            body["initial_state"] = state
        return self.call("POST", "/_matrix/client/v3/createRoom", body)["room_id"]

    def join(self, room: str) -> str:
        """Join by room id or alias; returns the room id."""
        return self.call("POST", f"/_matrix/client/v3/join/{_quote(room)}", {})["room_id"]

    def leave(self, room: str) -> None:
        self.call("POST", f"/_matrix/client/v3/rooms/{_quote(room)}/leave", {})

    def invite(self, room: str, user_id: str, is_direct: bool = False) -> None:
        if is_direct:
            # /invite takes no is_direct; the flag lives in the invite membership's content.
            self.send_state(room, "m.room.member", user_id, {"membership": "invite", "is_direct": True})
        else:
            self.call("POST", f"/_matrix/client/v3/rooms/{_quote(room)}/invite", {"user_id": user_id})

    def set_canonical_alias(self, room: str, alias: str, alt_aliases: Sequence[str] = ()) -> str:
        """Point the alias (and alt aliases) at the room in the directory, then set the state.
        Aliases may be given as ``name`` or ``#name:server``. Returns the state event id."""
        alias = self.full_alias(alias)
        alts = [self.full_alias(a) for a in alt_aliases]
        for each in [alias, *alts]:
            self._ensure_alias(room, each)
        content: dict[str, Any] = {"alias": alias}
        if alts:
            content["alt_aliases"] = alts
        return self.send_state(room, "m.room.canonical_alias", "", content)

    def _ensure_alias(self, room: str, alias: str) -> None:
        path = f"/_matrix/client/v3/directory/room/{_quote(alias)}"
        try:
            self.call("PUT", path, {"room_id": room})
        except HarnessError as err:
            # Already mapped (e.g. made by createRoom): fine only if it points at this room.
            if err.status != 409 or self.call("GET", path)["room_id"] != room:
                raise

    # -- events ------------------------------------------------------------------------------

    def send_event(self, room: str, event_type: str, content: dict[str, Any], *, ts: int | None = None) -> str:
        """Send one event. ``ts`` (unix ms) sets its ``origin_server_ts``; Synapse honours it only
        for appservice senders (``SynapseServer.puppet``/``history_actor``), so it is refused here
        for anyone else rather than silently ignored."""
        path = f"/_matrix/client/v3/rooms/{_quote(room)}/send/{_quote(event_type)}/{self._txn()}"
        query = None
        if ts is not None:
            if not self.account.masquerade:
                raise ValueError(f"send_event: ts needs an appservice actor, {self.user_id} is not one")
            query = {"ts": str(int(ts))}
        return self.call("PUT", path, content, query=query)["event_id"]

    def send_text(self, room: str, body: str, msgtype: str = "m.text", *, ts: int | None = None) -> str:
        return self.send_event(room, "m.room.message", {"msgtype": msgtype, "body": body}, ts=ts)

    def send_many(self, room: str, bodies: Sequence[str], concurrency: int = 1) -> list[str]:
        """Send texts; returns their event ids in ``bodies`` order. With ``concurrency`` > 1 the
        timeline order is NOT the list order (about twice the throughput)."""
        if concurrency <= 1:
            return [self.send_text(room, body) for body in bodies]
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            return list(pool.map(lambda body: self.send_text(room, body), bodies))

    def send_edit(self, room: str, target_id: str, new_body: str, *, ts: int | None = None) -> str:
        return self.send_event(
            room,
            "m.room.message",
            {
                "msgtype": "m.text",
                "body": f"* {new_body}",
                "m.new_content": {"msgtype": "m.text", "body": new_body},
                "m.relates_to": {"rel_type": "m.replace", "event_id": target_id},
            },
            ts=ts,
        )

    def send_reply(
        self,
        room: str,
        target_id: str,
        body: str,
        *,
        quoted_sender: str | None = None,
        quoted_body: str | None = None,
    ) -> str:
        """A rich reply. With ``quoted_sender``/``quoted_body`` the body carries the legacy reply
        fallback (``> <@sender> quoted`` lines, a blank line, then the reply) as older clients send."""
        text = body
        if quoted_body is not None:
            first, *rest = quoted_body.splitlines() or [""]
            quote = [f"> <{quoted_sender or '@unknown:invalid'}> {first}", *(f"> {line}" for line in rest)]
            text = "\n".join(quote) + "\n\n" + body
        return self.send_event(
            room,
            "m.room.message",
            {
                "msgtype": "m.text",
                "body": text,
                "m.relates_to": {"m.in_reply_to": {"event_id": target_id}},
            },
        )

    def send_reaction(self, room: str, target_id: str, key: str) -> str:
        return self.send_event(
            room,
            "m.reaction",
            {
                "m.relates_to": {"rel_type": "m.annotation", "event_id": target_id, "key": key},
            },
        )

    def send_image(self, room: str, body: str = "image.png") -> str:
        return self.send_event(
            room,
            "m.room.message",
            {
                "msgtype": "m.image",
                "body": body,
                "url": f"mxc://{self.server_name}/{uuid.uuid4().hex}",
                "info": {"mimetype": "image/png", "size": 1234, "w": 16, "h": 16},
            },
        )

    def send_encrypted(self, room: str, *, ts: int | None = None) -> str:
        """A megolm-shaped event with random ciphertext (Synapse accepts any)."""
        return self.send_event(
            room,
            "m.room.encrypted",
            {
                "algorithm": "m.megolm.v1.aes-sha2",
                "ciphertext": base64.b64encode(os.urandom(96)).decode().rstrip("="),
                "sender_key": base64.b64encode(os.urandom(32)).decode().rstrip("="),
                "device_id": "HARNESSDEV",
                "session_id": base64.b64encode(os.urandom(32)).decode().rstrip("="),
            },
            ts=ts,
        )

    def redact(self, room: str, event_id: str, reason: str | None = None) -> str:
        path = f"/_matrix/client/v3/rooms/{_quote(room)}/redact/{_quote(event_id)}/{self._txn()}"
        return self.call("PUT", path, {} if reason is None else {"reason": reason})["event_id"]

    def send_state(self, room: str, event_type: str, state_key: str, content: dict[str, Any]) -> str:
        path = f"/_matrix/client/v3/rooms/{_quote(room)}/state/{_quote(event_type)}/{_quote(state_key)}"
        return self.call("PUT", path, content)["event_id"]

    def set_account_data(self, event_type: str, content: dict[str, Any]) -> None:
        path = f"/_matrix/client/v3/user/{_quote(self.user_id)}/account_data/{_quote(event_type)}"
        self.call("PUT", path, content)
