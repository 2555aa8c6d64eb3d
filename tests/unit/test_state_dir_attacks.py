"""Attacks on the state directory, run through the real commands (``huginn-chat refresh``,
``purge``, ``status`` in this process, over an in-memory homeserver and the real Edge index) and the
real reader: links planted where the product writes or reads, a shell umask of 022, secret files
others can read, a state directory that cannot be written, a corrupt published generation.

A victim file outside the state directory stands for whatever an attacker points a link at; its
bytes (or its absence) are compared before and after.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

from daemon.cli.main import main
from daemon.config import ConfigError, Settings, load_settings, read_secret_file
from daemon.index.edge_reader import EdgeIndexReader
from daemon.index.port import IndexUnreadableError
from daemon.reader.service import ReaderService
from daemon.refresher.own_joins import OWN_JOINS_FILE, OwnJoins
from daemon.wiring import make_index_opener
from tests.fakes import FakeEmbedder, FakeMatrix
from tests.reader_fakes import RecordingLogger, Running
from tests.reader_sockets import ask

ROOM = "!pub:hs.test"
VICTIM_BYTES = b'{"victim": "bytes an attacker wants overwritten or shown"}\n'
TOKEN = "syt_dGVzdA_NotARealToken_000000"


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The careless operator's shell; the process umask is put back after the test (the commands
    under test change it, as they should)."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.fixture
def hs() -> FakeMatrix:
    hs = FakeMatrix()
    hs.add_room(ROOM, alias="#town:hs.test")
    for i in range(6):
        hs.send(ROOM, "@alice:hs.test", f"message number {i} about the garden shed")
    return hs


@pytest.fixture
def state(monkeypatch, tmp_path, hs, umask_022) -> Path:
    """The environment of ``huginn-chat refresh``/``purge``/``status`` over ``hs``, the fake
    embedder in place of the model; returns the state directory (not created yet)."""
    for key in list(os.environ):
        if key.startswith("HUGINN_CHAT_") or key == "CREDENTIALS_DIRECTORY":
            monkeypatch.delenv(key, raising=False)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    state_dir = tmp_path / "state"
    monkeypatch.setenv("HUGINN_CHAT_STATE_DIR", str(state_dir))
    monkeypatch.setenv("HUGINN_CHAT_HOMESERVER", "http://127.0.0.1:9")
    monkeypatch.setenv("HUGINN_CHAT_TOKEN_FILE", str(token))
    monkeypatch.setenv("HUGINN_CHAT_ROOMS", json.dumps([ROOM]))
    monkeypatch.setattr("daemon.refresher.matrix.NioMatrixSource", lambda url, token: hs)
    monkeypatch.setattr("daemon.wiring.open_embedder", lambda settings, **kw: FakeEmbedder())
    return state_dir


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "outside" / "victim"
    path.parent.mkdir()
    path.write_bytes(VICTIM_BYTES)
    return path


def journal(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def refresh(capsys) -> tuple[int, list[dict[str, Any]]]:
    code = main(["refresh"])
    return code, journal(capsys.readouterr().err)


def purge(capsys) -> tuple[int, str]:
    code = main(["purge", ROOM, "--from", "2026-11-02T10:00Z", "--to", "2026-11-03T10:00Z"])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def plant(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(target)


# ---------------------------------------------------------------------------------------------
# Planted links


def test_a_link_at_the_run_summarys_former_temporary_name_is_never_written_through(state, victim, capsys, hs):
    assert refresh(capsys)[0] == 0
    plant(state / "last_run.tmp", victim)
    hs.send(ROOM, "@bob:hs.test", "something new, so the run publishes a generation")
    code, lines = refresh(capsys)
    assert code == 0, lines
    assert victim.read_bytes() == VICTIM_BYTES
    assert json.loads((state / "last_run.json").read_text())["windows_written"] >= 1


def test_a_link_at_the_index_lock_is_refused_naming_it_and_nothing_is_truncated(state, victim, capsys):
    plant(state / "index" / "work.lock", victim)
    code, lines = refresh(capsys)
    assert code == 1
    [line] = [x for x in lines if x["event"] == "index_unavailable"]
    assert str(state / "index" / "work.lock") in line["error"] and "symbolic link" in line["error"]
    assert victim.read_bytes() == VICTIM_BYTES


def test_a_link_at_the_refresh_lock_is_refused_naming_it_and_creates_nothing(state, tmp_path, capsys):
    absent = tmp_path / "outside-absent"
    plant(state / "refresh.lock", absent)
    code = main(["refresh"])
    err = capsys.readouterr().err
    assert code == 1 and str(state / "refresh.lock") in err and "symbolic link" in err
    assert not os.path.lexists(absent) and not (state / "sync.json").exists()


def test_a_link_at_the_unpublished_marker_is_refused_and_creates_nothing(state, tmp_path, capsys):
    absent = tmp_path / "outside-absent"
    plant(state / "index" / "work.unpublished", absent)
    code, lines = refresh(capsys)
    assert code == 1 and any(str(state / "index" / "work.unpublished") in x.get("error", "") for x in lines)
    assert not os.path.lexists(absent)


def test_purge_writes_through_no_link_at_its_temporary_name(state, victim, capsys):
    plant(state / "purges.json.tmp", victim)
    code, out = purge(capsys)
    assert code == 0, out
    assert victim.read_bytes() == VICTIM_BYTES
    assert list(json.loads((state / "purges.json").read_text())) == [ROOM]


def test_purge_refuses_a_link_at_its_lock_and_creates_nothing_outside(state, tmp_path, capsys):
    absent = tmp_path / "outside-absent"
    plant(state / "purges.json.lock", absent)
    code, out = purge(capsys)
    assert code == 1
    [line] = out.strip().splitlines()
    assert str(state / "purges.json.lock") in line and "symbolic link" in line
    assert not os.path.lexists(absent)


def test_purge_refuses_a_link_at_its_file_and_neither_reads_nor_replaces_the_target(state, victim, capsys):
    plant(state / "purges.json", victim)
    code, out = purge(capsys)
    assert code == 1 and str(state / "purges.json") in out
    assert VICTIM_BYTES.decode().strip() not in out
    assert victim.read_bytes() == VICTIM_BYTES and (state / "purges.json").is_symlink()


def test_a_state_dir_that_is_itself_a_link_is_the_operators_choice(state, tmp_path, capsys):
    moved = tmp_path / "on-another-disk"
    moved.mkdir()
    state.symlink_to(moved)
    assert purge(capsys)[0] == 0
    assert list(json.loads((moved / "purges.json").read_text())) == [ROOM]


def test_status_shows_nothing_of_a_file_linked_as_the_last_run(state, victim, capsys):
    assert refresh(capsys)[0] == 0
    plant(state / "last_run.json", victim)
    assert main(["status", "--json"]) == 0
    out = capsys.readouterr().out
    assert "victim" not in out and "symbolic link" in out


def test_the_own_joins_file_is_written_through_no_link(tmp_path, victim):
    plant(tmp_path / (OWN_JOINS_FILE + ".tmp"), victim)
    OwnJoins(tmp_path).add("!joined:hs.test")
    assert victim.read_bytes() == VICTIM_BYTES
    assert OwnJoins(tmp_path).rooms == {"!joined:hs.test"}
    plant(tmp_path / OWN_JOINS_FILE, victim)
    with pytest.raises(Exception, match="symbolic link"):
        OwnJoins(tmp_path)


def test_a_link_inside_the_working_shard_is_never_published(state, victim, capsys, hs):
    assert refresh(capsys)[0] == 0
    plant(state / "index" / "work" / "planted.dat", victim)
    hs.send(ROOM, "@bob:hs.test", "something new, so the run publishes a generation")
    code, lines = refresh(capsys)
    assert code == 1
    assert any(str(state / "index" / "work" / "planted.dat") in x.get("error", "") for x in lines)
    published = [p for p in (state / "index" / "generations").rglob("*") if p.is_file()]
    assert published and all(p.read_bytes() != VICTIM_BYTES for p in published)


def test_the_reader_copies_no_link_out_of_a_generation(state, victim, capsys, tmp_path):
    assert refresh(capsys)[0] == 0
    generation = state / "index" / "generations" / "1"
    plant(generation / "wal" / "planted", victim)
    private = tmp_path / "private"
    with pytest.raises(IndexUnreadableError) as caught:
        EdgeIndexReader.open_latest(state / "index", private)
    assert caught.value.generation == 1 and "symbolic link" in str(caught.value)
    copied = [p for p in private.rglob("*") if p.is_file() and not p.is_symlink()]
    assert all(p.read_bytes() != VICTIM_BYTES for p in copied)


def test_a_link_at_current_is_read_as_an_unreadable_index_not_followed(state, tmp_path, capsys):
    assert refresh(capsys)[0] == 0
    current = state / "index" / "generations" / "CURRENT"
    elsewhere = tmp_path / "elsewhere-current"
    elsewhere.write_text("1\n")
    current.unlink()
    current.symlink_to(elsewhere)
    with pytest.raises(IndexUnreadableError) as caught:
        EdgeIndexReader.open_latest(state / "index", tmp_path / "private")
    assert str(current) in str(caught.value)


# ---------------------------------------------------------------------------------------------
# Modes


def _too_wide(root: Path) -> list[str]:
    wide = []
    for path in [root, *root.rglob("*")]:
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            # An open Qdrant Edge shard allocates and renames WAL segments
            # (`wal/tmp-open-N`) on its own thread while the walk runs.
            continue
        allowed = 0o750 if stat.S_ISDIR(mode) else 0o640
        if stat.S_IMODE(mode) & ~allowed:
            wide.append(f"{oct(stat.S_IMODE(mode))} {path}")
    return wide


@pytest.mark.slow
def test_under_umask_022_every_file_is_0640_and_every_directory_0750_at_most(state, capsys, hs, sock_dir):
    assert refresh(capsys)[0] == 0
    assert purge(capsys)[0] == 0
    hs.send(ROOM, "@bob:hs.test", "a second generation")
    assert refresh(capsys)[0] == 0
    assert main(["status"]) == 0
    # The reader's private copy, under the state dir by default.
    settings = load_settings()
    reader = make_index_opener(settings)()
    assert reader is not None and reader.copy_dir.is_relative_to(state)
    try:
        assert _too_wide(state) == []
    finally:
        reader.close()


def test_a_generation_published_with_wider_modes_is_copied_with_the_products(state, capsys, tmp_path):
    assert refresh(capsys)[0] == 0
    generation = state / "index" / "generations" / "1"
    for path in [generation, *generation.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    reader = EdgeIndexReader.open_latest(state / "index", tmp_path / "private")
    assert reader is not None
    try:
        assert _too_wide(reader.copy_dir) == []
    finally:
        reader.close()


@pytest.mark.parametrize("mode", [0o644, 0o604])
def test_a_token_file_others_can_read_is_refused_with_exit_2_and_never_shown(state, tmp_path, capsys, mode):
    token = tmp_path / "token"
    token.chmod(mode)
    assert main(["refresh"]) == 2
    err = capsys.readouterr().err
    [line] = err.strip().splitlines()
    assert "token_file" in line and "readable by others" in line and "chmod o-r" in line and TOKEN not in err
    assert not state.exists()  # refused before anything was made


def test_a_group_readable_token_file_is_allowed(tmp_path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o640)
    assert read_secret_file(token, "token_file") == TOKEN


@pytest.mark.parametrize("field", ["qdrant_api_key_file", "audit_key_file"])
def test_a_key_file_others_can_read_is_refused_naming_the_setting(tmp_path, field) -> None:
    key = tmp_path / "key"
    secret = "k3yV4lu3-Xw7Pq2Zm-never-shown"
    key.write_text(secret + "\n")
    key.chmod(0o644)
    with pytest.raises(ConfigError) as caught:
        if field == "audit_key_file":
            ReaderService(lambda: None, FakeEmbedder, SimpleNamespace(audit_key_file=key), logger=RecordingLogger())
        else:
            read_secret_file(key, field)
    assert caught.value.exit_code == 2 and caught.value.field == field
    assert secret not in str(caught.value) and "readable by others" in str(caught.value)


# ---------------------------------------------------------------------------------------------
# Errors that name the real fault


def _others_may_read(path: Path) -> bool:
    """Whether a user with no group in common can reach ``path`` and read what is in it."""
    return all(os.stat(p).st_mode & 0o005 == 0o005 for p in (path, *path.parents))


def _refresh_as(uid: int | None, log: Path) -> int:
    """``huginn-chat refresh`` in this process, or (``uid`` given: root writes through any mode
    bits) in a fork of it that drops to ``uid`` first; its journal goes to ``log``."""
    # Everything refresh imports, imported before the fork: the child may not read the stdlib.
    import daemon.embedder
    import daemon.journal
    import daemon.refresher.idle
    import daemon.refresher.matrix
    import daemon.refresher.progress
    import daemon.refresher.purges
    import daemon.refresher.retry
    import daemon.refresher.run
    import daemon.refresher.run_report
    import daemon.refresher.stopping
    import daemon.refresher.sync_probe
    import daemon.refresher.sync_state  # noqa: F401

    with open(log, "w") as out:
        if uid is None:
            saved, sys.stderr = sys.stderr, out
            try:
                return main(["refresh"])
            finally:
                sys.stderr = saved
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 98
            try:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                sys.stderr = out
                code = main(["refresh"])
            finally:
                out.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)


def test_a_state_dir_that_cannot_be_written_is_named_before_any_model_is_loaded(state, monkeypatch) -> None:
    loaded: list[str] = []
    monkeypatch.setattr("daemon.wiring.open_embedder", lambda settings, **kw: loaded.append("model") or FakeEmbedder())
    base = Path(tempfile.mkdtemp(prefix="hc-ro-", dir="/tmp"))
    try:
        base.chmod(0o755)
        state_dir = base / "state"
        state_dir.mkdir()
        state_dir.chmod(0o555)
        monkeypatch.setenv("HUGINN_CHAT_STATE_DIR", str(state_dir))
        nobody = 65534 if os.geteuid() == 0 else None
        if nobody is not None and not _others_may_read(Path(__file__).resolve().parents[2]):
            pytest.skip("the checkout is not readable by others: the refresh run as nobody cannot import it")
        if nobody is not None:
            token = Path(os.environ["HUGINN_CHAT_TOKEN_FILE"])
            moved = base / "token"
            shutil.copy(token, moved)
            os.chown(moved, nobody, nobody)
            monkeypatch.setenv("HUGINN_CHAT_TOKEN_FILE", str(moved))
        code = _refresh_as(nobody, base / "journal")
        lines = journal((base / "journal").read_text())
        assert code == 1, lines
        [line] = lines  # one line, no traceback, nothing about a model
        assert line["event"] == "state_dir_unwritable" and line["path"] == str(state_dir), line
        assert "ermission denied" in line["error"]
        assert loaded == [] and list(state_dir.iterdir()) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _corrupt(generation: Path) -> None:
    (generation / "edge_config.json").write_text("not json {")


def _reader(state: Path, logger: RecordingLogger) -> ReaderService:
    settings = Settings(state_dir=state, qdrant_api_key_file=None, audit_key_file=None)
    return ReaderService(make_index_opener(settings), FakeEmbedder, None, logger=logger)


@pytest.mark.slow
def test_a_corrupt_new_generation_is_named_and_the_last_good_one_still_served(state, capsys, hs, sock_dir):
    assert refresh(capsys)[0] == 0
    logger = RecordingLogger()
    path = sock_dir / "r.sock"
    search = {"v": 1, "op": "search", "texts": ["garden shed"]}
    with Running(_reader(state, logger), path) as running:
        assert ask(path, search)["ok"]
        hs.send(ROOM, "@bob:hs.test", "a second generation about the garden shed")
        assert refresh(capsys)[0] == 0
        _corrupt(state / "index" / "generations" / "2")
        for _ in range(3):  # checked again and again: named once
            asyncio.run_coroutine_threadsafe(running.service.check_index(), running.loop).result(60)
        reply = ask(path, search)
        assert reply["ok"] and reply["result"]["hits"], reply
        assert ask(path, {"v": 1, "op": "status"})["result"]["generation"] == 1
    unreadable = [fields for _, event, fields in logger.lines if event == "index_unreadable"]
    assert len(unreadable) == 1
    assert unreadable[0]["generation"] == 2 and unreadable[0]["serving"] == 1
    assert str(state / "index" / "generations" / "2") == unreadable[0]["path"]


def test_a_reader_started_on_a_corrupt_generation_says_none_is_readable(state, capsys, sock_dir):
    assert refresh(capsys)[0] == 0
    _corrupt(state / "index" / "generations" / "1")
    logger = RecordingLogger()
    path = sock_dir / "r.sock"
    with Running(_reader(state, logger), path):
        reply = ask(path, {"v": 1, "op": "search", "texts": ["garden shed"]})
    assert not reply["ok"]
    message = reply["error"]["message"]
    assert "no readable index generation" in message and "generation 1" in message
    assert "published yet" not in message
    assert [f["generation"] for _, e, f in logger.lines if e == "index_unreadable"] == [1]
