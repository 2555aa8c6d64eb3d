"""No config error and no journal line echoes a secret an operator put in the wrong place:
the token given where its path belongs, credentials and query strings inside
``homeserver`` and ``qdrant_url``. Checked as the operator sees it: ``str()`` of the error, the
JSON line in the journal."""

from __future__ import annotations

import io
import json

import pytest

from daemon import journal
from daemon.config import ConfigError, load_settings, public_text, read_token, shown_path

# Fake values, assembled so that no scanner takes this file for a leak.
SYT = "syt" + "_c2VydmljZQ_Zk9XbT3qLw8Rp2Vy_0abc12"
BARE = "Zq9xLm2Kp7Tt" + "4wRb8sNc1vGh"  # a token with no known prefix
PASSWORD = "S3cr3t-" + "hunter2"
API_KEY = "k3yV4lu3" + "Xw7Pq2Zm"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("HUGINN_CHAT_") or name == "CREDENTIALS_DIRECTORY":
            monkeypatch.delenv(name)


def pieces(secret: str) -> set[str]:
    return {secret[i : i + 4] for i in range(len(secret) - 3)}


def assert_no_piece(secrets: tuple[str, ...], text: str) -> None:
    for secret in secrets:
        found = [p for p in pieces(secret) if p in text]
        assert not found, (found, text)


@pytest.mark.parametrize("token", [SYT, BARE])
def test_a_token_given_as_the_token_file_path_is_not_echoed(monkeypatch, token: str) -> None:
    monkeypatch.setenv("HUGINN_CHAT_TOKEN_FILE", token)
    settings = load_settings(homeserver="http://127.0.0.1:8008")
    with pytest.raises(ConfigError) as caught:
        read_token(settings)
    assert caught.value.field == "token_file"
    assert "does not exist" in str(caught.value)
    assert_no_piece((token,), str(caught.value))


def test_an_ordinary_path_is_still_named(tmp_path) -> None:
    missing = tmp_path / "matrix-token"
    assert shown_path(missing) == str(missing)
    with pytest.raises(ConfigError) as caught:
        read_token(load_settings(token_file=missing))
    assert str(missing) in str(caught.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("homeserver", f"https://alice:{PASSWORD}@matrix.example.org/?access_token={SYT}"),
        ("homeserver", f"htps://matrix.example.org/_matrix?access_token={BARE}"),
        ("qdrant_url", f"https://admin:{PASSWORD}@qdrant.example.com:6333/?api-key={API_KEY}"),
        ("qdrant_url", f"ftp://qdrant.example.com/?api-key={API_KEY}#{BARE}"),
    ],
)
def test_credentials_inside_a_url_setting_are_not_echoed(monkeypatch, field: str, value: str) -> None:
    monkeypatch.setenv(f"HUGINN_CHAT_{field.upper()}", value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.field == field
    message = str(caught.value)
    assert_no_piece((PASSWORD, API_KEY, SYT, BARE), message)
    assert "example" in message  # the host stays, so the operator can still find the mistake


def test_public_text_keeps_the_shape_of_a_url() -> None:
    url = f"https://admin:{PASSWORD}@qdrant.example.com:6333/c?api-key={API_KEY}&wait=true#frag"
    assert (
        public_text(url) == "https://[redacted]@qdrant.example.com:6333/c?api-key=[redacted]&wait=[redacted]#[redacted]"
    )


def test_journal_lines_carry_no_url_credentials_and_no_token_shaped_path() -> None:
    stream = io.StringIO()
    journal.configure(stream=stream, level="info")
    journal.get_logger(room_id="!r:example.org").warning(
        "index_unreachable",
        qdrant_url=f"https://admin:{PASSWORD}@qdrant.example.com:6333/?api-key={API_KEY}",
        homeserver=f"https://alice:{PASSWORD}@matrix.example.org",
        token_file=SYT,
        error=f"GET https://qdrant.example.com/collections?api-key={API_KEY} failed",
    )
    text = stream.getvalue()
    assert_no_piece((PASSWORD, API_KEY, SYT), text)
    line = json.loads(text)
    assert line["qdrant_url"] == "https://[redacted]@qdrant.example.com:6333/?api-key=[redacted]"
    assert line["room_id"] == "!r:example.org"
