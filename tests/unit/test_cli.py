"""The command line's front: usage and config errors exit 2 with one line naming the field, and
nothing is written when the input is bad."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.cli.main import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(monkeypatch, tmp_path):
    for key in list(__import__("os").environ):
        if key.startswith("HUGINN_CHAT_") or key == "CREDENTIALS_DIRECTORY":
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HUGINN_CHAT_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def test_purge_records_a_span_the_next_refresh_applies(env, capsys):
    assert main(["purge", "!room:hs", "--from", "2026-11-02T10:00Z", "--to", "1793700000000"]) == 0
    data = json.loads((env / "state" / "purges.json").read_text())
    assert data == {"!room:hs": [[1793613600000, 1793700000000]]}
    assert "recorded" in capsys.readouterr().out
    assert main(["purge", "!room:hs", "--from", "2026-11-02T10:00Z", "--to", "1793700000000"]) == 0
    assert "already recorded" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, field",
    [
        (["purge", "!room:hs", "--from", "yesterday", "--to", "2026-11-02"], "from:"),
        (["purge", "!room:hs", "--from", "2026-11-02", "--to", "soon"], "to:"),
        (["purge", "room", "--from", "2026-11-02", "--to", "2026-11-03"], "room:"),
        (["purge", "#:hs", "--from", "2026-11-02", "--to", "2026-11-03"], "room:"),  # no alias localpart
        (["purge", "#general:", "--from", "2026-11-02", "--to", "2026-11-03"], "room:"),  # no server
        (["purge", "!", "--from", "2026-11-02", "--to", "2026-11-03"], "room:"),
        (["purge", "!room id:hs", "--from", "2026-11-02", "--to", "2026-11-03"], "room:"),
        (["purge", "!room:hs", "--from", "2026-11-03", "--to", "2026-11-02"], "--from"),
    ],
)
def test_bad_purge_input_exits_2_naming_the_field_and_writes_nothing(env, capsys, argv, field):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err
    assert not (env / "state" / "purges.json").exists()


@pytest.mark.parametrize(
    "variables, field",
    [
        ({"HUGINN_CHAT_ROOMS": '["general"]'}, "rooms"),
        ({"HUGINN_CHAT_ROOMS": "not json"}, "rooms"),
        ({"HUGINN_CHAT_BRIDGE_SENDERS": '["@_x_(:hs"]'}, "bridge_senders"),
        ({"HUGINN_CHAT_PAGE_SIZE": "0"}, "page_size"),
        ({"HUGINN_CHAT_HOMESERVER": "matrix.example.org"}, "homeserver"),
    ],
)
def test_bad_config_exits_2_naming_the_field(env, capsys, monkeypatch, variables, field):
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    assert main(["refresh"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err, err


def test_refresh_needs_a_homeserver_and_a_token_file(env, capsys, monkeypatch):
    assert main(["refresh"]) == 2
    assert "homeserver" in capsys.readouterr().err
    monkeypatch.setenv("HUGINN_CHAT_HOMESERVER", "http://127.0.0.1:9")
    monkeypatch.setenv("HUGINN_CHAT_TOKEN_FILE", str(env / "missing-token"))
    assert main(["refresh"]) == 2
    err = capsys.readouterr().err
    assert "token_file" in err
    assert not (env / "state" / "index").exists()


def test_unknown_command_and_bad_option_exit_2():
    for argv in (["frobnicate"], ["search", "--top-k", "many", "x"], []):
        proc = subprocess.run(
            [sys.executable, "-m", "daemon.cli.main", *argv], cwd=REPO, capture_output=True, text=True
        )
        assert proc.returncode == 2, (argv, proc.stderr)


@pytest.mark.slow
def test_a_missing_model_directory_fails_the_refresh_with_one_journal_line(env):
    token = env / "token"
    token.write_text("syt_dGVzdA_NotARealToken_000000\n")
    token.chmod(0o600)
    run_env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("HUGINN_CHAT_")}
    run_env.update(
        HUGINN_CHAT_HOMESERVER="http://127.0.0.1:9",
        HUGINN_CHAT_TOKEN_FILE=str(token),
        HUGINN_CHAT_STATE_DIR=str(env / "state"),
        HUGINN_CHAT_EMBED_MODEL_DIR=str(env / "no-model"),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "refresh"],
        cwd=REPO,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    [line] = [json.loads(raw) for raw in proc.stderr.splitlines()]  # no traceback
    assert line["event"] == "embedder_unavailable" and str(env / "no-model") in line["error"]
    assert not (env / "state" / "index").exists()


@pytest.mark.parametrize("value", ["", "   "])
@pytest.mark.slow
def test_an_empty_state_dir_is_refused_not_taken_for_the_current_directory(env, capsys, monkeypatch, value):
    monkeypatch.setenv("HUGINN_CHAT_STATE_DIR", value)
    monkeypatch.chdir(env)
    assert main(["purge", "!room:hs", "--from", "2026-11-02", "--to", "2026-11-03"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "state_dir" in err
    assert not (env / "purges.json").exists() and not (env / "purges.json.lock").exists()


def test_bare_huginn_chat_prints_the_commands_and_exits_2():
    proc = subprocess.run([sys.executable, "-m", "daemon.cli.main"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("usage: huginn-chat")
    assert all(command in proc.stderr for command in ("search", "rooms", "scope", "refresh", "serve", "mcp"))


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    proc = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "--version"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout == f"huginn-chat {version('huginn-chat')}\n"
