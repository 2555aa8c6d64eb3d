"""Rough edges found by trying: each gets one clear line and the documented
exit code, never a traceback, and no request is read more loosely than it was meant."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.config import ConfigError, load_settings
from daemon.reader import cursors
from daemon.reader.search import QueryError, make_query
from tests.reader_fakes import FakeIndex, Running, corpus
from tests.reader_sockets import ask, service_over

REPO = Path(__file__).resolve().parents[2]


def cli(
    *args: str, env: dict[str, str] | None = None, stdout: int | None = subprocess.PIPE
) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")}
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", *args],
        cwd=REPO,
        env={**base, **(env or {})},
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )


def test_search_json_into_a_closed_pipe_ends_quietly(sock_dir: Path) -> None:
    """`search --json | head`: the reader of stdout is gone. Was a BrokenPipeError traceback."""
    path = sock_dir / "r.sock"
    with Running(service_over(FakeIndex(corpus())), path):
        read_end, write_end = os.pipe()
        os.close(read_end)  # like head that has already exited
        try:
            proc = cli("search", "database migration", "--json", "--socket", str(path), stdout=write_end)
        finally:
            os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 1


@pytest.mark.parametrize("how", ["not_a_directory", "proc"])
@pytest.mark.slow
def test_purge_with_an_unwritable_state_dir_is_one_line_exit_1(tmp_path: Path, how: str) -> None:
    """An environment the operator must fix (exit 1), not a usage error. Was a traceback."""
    if how == "not_a_directory":
        (tmp_path / "file").write_text("x")
        state_dir = tmp_path / "file" / "state"
    else:
        state_dir = Path("/proc/self/huginn-chat-state")  # not writable even for root
    proc = cli("purge", "!room:hs.test", "--from", "0", "--to", "1000", env={"HUGINN_CHAT_STATE_DIR": str(state_dir)})
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("huginn-chat: purge: cannot record it under"), lines


@pytest.mark.slow
def test_status_on_an_unreadable_index_exits_1_and_a_config_fault_exits_2(tmp_path: Path) -> None:
    """The documented convention: 1 a failure the operator must look at (the index cannot be
    read), 2 bad usage or configuration. One line each."""
    (tmp_path / "index").write_text("not a directory")
    unreadable = cli("status", env={"HUGINN_CHAT_STATE_DIR": str(tmp_path)})
    assert unreadable.returncode == 1 and "Traceback" not in unreadable.stderr
    assert unreadable.stderr.strip().splitlines() == [unreadable.stderr.strip()]
    assert "index unreadable" in unreadable.stderr
    bad_config = cli("status", env={"HUGINN_CHAT_STATE_DIR": str(tmp_path), "HUGINN_CHAT_PAGE_SIZE": "0"})
    assert bad_config.returncode == 2 and "page_size" in bad_config.stderr


def test_an_unknown_huginn_chat_variable_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Was silently ignored while an unknown TOML key was refused."""
    for name in [n for n in os.environ if n.startswith("HUGINN_CHAT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HUGINN_CHAT_HOMESERVR", "https://typo.example")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.field == "HUGINN_CHAT_HOMESERVR" and "unknown setting" in str(caught.value)
    monkeypatch.delenv("HUGINN_CHAT_HOMESERVR")
    monkeypatch.setenv("HUGINN_CHAT_SOCKET", "/tmp/x.sock")  # the client's variable, and a setting
    monkeypatch.setenv("HUGINN_CHAT_READER_LINE_TIMEOUT_S", "2")
    settings = load_settings()
    assert settings.socket == Path("/tmp/x.sock") and settings.reader_line_timeout_s == 2


def test_an_unknown_variable_exits_2_from_the_cli(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'state_dir = "{tmp_path}"\n')
    proc = cli("status", env={"HUGINN_CHAT_CONFIG": str(config), "HUGINN_CHAT_STATEDIR": "/x"})
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == "huginn-chat: config: HUGINN_CHAT_STATEDIR: unknown setting (not a HUGINN_CHAT_* variable this program reads)"
    )


def test_refresh_checks_the_token_before_it_resets_anything() -> None:
    """A refused token must leave the index as it was. Was: reset first (a model change, a new
    chat version), then whoami failed."""
    from daemon.refresher.run import Refresher, RefreshOptions
    from scope import Policy
    from tests.fakes import FakeEmbedder, FakeMatrix

    class TokenRefused(Exception):
        pass

    class RefusingMatrix(FakeMatrix):
        async def whoami(self) -> str:
            raise TokenRefused("M_UNKNOWN_TOKEN")

    class RecordingIndex:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def __getattr__(self, name: str):
            def record(*args, **kwargs):
                self.calls.append(name)
                return None if name == "read_meta" else []

            return record

    index = RecordingIndex()
    refresher = Refresher(
        matrix=RefusingMatrix(),
        index=index,
        embedder=FakeEmbedder(),
        policy=Policy.build(allowed=("*",), exclude=(), bridge_sender_patterns=()),
        log=type(
            "L",
            (),
            {
                "info": lambda *a, **k: None,
                "warning": lambda *a, **k: None,
                "error": lambda *a, **k: None,
                "bind": lambda self, **k: self,
            },
        )(),
        options=RefreshOptions(),
    )
    with pytest.raises(TokenRefused):
        asyncio.run(refresher.run())
    assert "reset" not in index.calls and index.calls == []


def _cursor(ts: object, chunk_id: str, digest: str) -> str:
    """A token sealed by this process (so it passes the MAC) whose time no listing can reach."""
    return cursors.seal({"k": "l", "ts": ts, "id": chunk_id, "n": 0, "f": digest})


@pytest.mark.parametrize("ts", [10**30, -1, 10**16])
def test_a_cursor_whose_time_is_out_of_range_is_a_cursor_error(ts: int) -> None:
    query = make_query([])
    with pytest.raises(cursors.CursorError) as caught:
        cursors.decode(_cursor(ts, "c", query.digest()), query.digest())
    assert "cursor" in str(caught.value)


def test_a_cursor_whose_time_is_too_large_is_bad_cursor_over_the_socket(sock_dir: Path) -> None:
    """Was `internal`: the index refused the range."""

    class StrictRanges(FakeIndex):
        def listing(self, flt, after, limit, descending=False):
            if after is not None and not 0 <= after[0] < 2**63:
                raise OverflowError("int too big to convert")
            return super().listing(flt, after, limit, descending)

    path = sock_dir / "r.sock"
    digest = make_query([]).digest()
    with Running(service_over(StrictRanges(corpus())), path):
        reply = ask(path, {"v": 1, "op": "search", "cursor": _cursor(10**30, "c", digest)})
    assert reply["ok"] is False
    assert reply["error"]["code"] == "bad_cursor" and reply["error"]["field"] == "cursor"


@pytest.mark.parametrize("field", ["rooms", "senders"])
def test_an_empty_room_or_sender_list_is_refused_naming_the_field(sock_dir: Path, field: str) -> None:
    """Fail closed: `rooms: []` used to mean no filter at all, i.e. every room."""
    with pytest.raises(QueryError) as caught:
        make_query(["x"], **{field: []})
    assert caught.value.field == field
    path = sock_dir / "r.sock"
    with Running(service_over(FakeIndex(corpus())), path):
        for texts in (["database migration"], []):
            reply = ask(path, {"v": 1, "op": "search", "texts": texts, field: []})
            assert reply["ok"] is False and reply["error"]["field"] == field, reply
            assert reply["error"]["code"] == "bad_request"
