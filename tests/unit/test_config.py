"""Settings: sources and precedence, one-line errors naming the field, secret files."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.config import ConfigError, Settings, load_settings, read_secret_file, read_token

FAKE_TOKEN = "syt_c2VydmljZQ_FAKEtokenVALUE_0abc12"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("HUGINN_CHAT_") or name == "CREDENTIALS_DIRECTORY":
            monkeypatch.delenv(name)


def _config_error(**kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_settings(**kwargs)
    return caught.value


def test_defaults():
    settings = load_settings()
    assert settings.homeserver is None
    assert settings.token_file is None
    assert settings.rooms == [] and settings.exclude_rooms == [] and settings.bridge_senders == []
    assert settings.state_dir == Path("/var/lib/huginn-chat")
    assert settings.socket == Path("/run/huginn-chat/reader.sock")
    assert settings.qdrant_collection == "huginn_chat"
    assert (settings.embed_batch_size, settings.window_max_bytes, settings.window_max_gap_s, settings.page_size) == (
        16,
        700,
        900,
        200,
    )


def test_environment_prefix(monkeypatch):
    monkeypatch.setenv("HUGINN_CHAT_HOMESERVER", "http://127.0.0.1:8008/")
    monkeypatch.setenv("HUGINN_CHAT_ROOMS", '["#general:example.org", "!abc:example.org"]')
    monkeypatch.setenv("HUGINN_CHAT_PAGE_SIZE", "50")
    monkeypatch.setenv("HUGINN_CHAT_STATE_DIR", "/srv/huginn")
    monkeypatch.setenv("PAGE_SIZE", "999")  # no prefix: ignored
    settings = load_settings()
    assert settings.homeserver == "http://127.0.0.1:8008"
    assert settings.rooms == ["#general:example.org", "!abc:example.org"]
    assert settings.page_size == 50
    assert settings.state_dir == Path("/srv/huginn")


def test_toml_file_and_environment_override(tmp_path, monkeypatch):
    config = tmp_path / "huginn-chat.toml"
    config.write_text(
        'homeserver = "https://matrix.example.org"\n'
        'rooms = ["#general:example.org"]\n'
        "page_size = 40\n"
        "window_max_bytes = 900\n"
    )
    monkeypatch.setenv("HUGINN_CHAT_PAGE_SIZE", "60")
    settings = load_settings(config)
    assert settings.homeserver == "https://matrix.example.org"
    assert settings.rooms == ["#general:example.org"]
    assert settings.window_max_bytes == 900  # from the file
    assert settings.page_size == 60  # the environment wins over the file

    assert load_settings(config, page_size=7).page_size == 7  # explicit overrides win over both


def test_config_file_from_environment(tmp_path, monkeypatch):
    config = tmp_path / "c.toml"
    config.write_text("window_max_gap_s = 60\n")
    monkeypatch.setenv("HUGINN_CHAT_CONFIG", str(config))
    assert load_settings().window_max_gap_s == 60


def test_unknown_key_in_file_is_named(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("romos = []\n")
    error = _config_error(config_file=config)
    assert error.field == "romos"
    assert str(error) == "config: romos: unknown setting"


def test_missing_or_broken_config_file(tmp_path):
    missing = tmp_path / "nope.toml"
    assert str(_config_error(config_file=missing)) == f"config: config: file {missing} does not exist"
    broken = tmp_path / "broken.toml"
    broken.write_text("rooms = [\n")
    error = _config_error(config_file=broken)
    assert error.field == "config" and str(broken) in str(error) and "\n" not in str(error)


def test_bad_room_is_named(monkeypatch):
    error = _config_error(rooms=["#general:example.org", "#bad"])
    assert error.field == "rooms"
    assert str(error) == "config: rooms: '#bad' is not a room id (!…), an alias (#name:server) or '*'"
    assert _config_error(exclude_rooms=["general"]).field == "exclude_rooms"
    assert load_settings(rooms=["*"], exclude_rooms=["#users:*", "!x:y"]).exclude_rooms == ["#users:*", "!x:y"]

    monkeypatch.setenv("HUGINN_CHAT_ROOMS", "#general:example.org")  # not JSON
    error = _config_error()
    assert error.field == "rooms" and "JSON list" in str(error)


def test_bad_regex_is_named():
    error = _config_error(bridge_senders=["@irc_.*:.*", "@(unclosed"])
    assert error.field == "bridge_senders"
    assert "'@(unclosed'" in str(error) and "\n" not in str(error)


@pytest.mark.parametrize(
    ("env_name", "value", "field"),
    [
        ("HUGINN_CHAT_PAGE_SIZE", "0", "page_size"),
        ("HUGINN_CHAT_PAGE_SIZE", "1001", "page_size"),
        ("HUGINN_CHAT_WINDOW_MAX_BYTES", "99", "window_max_bytes"),
        ("HUGINN_CHAT_WINDOW_MAX_GAP_S", "0", "window_max_gap_s"),
        ("HUGINN_CHAT_EMBED_BATCH_SIZE", "7", "embed_batch_size"),
        ("HUGINN_CHAT_EMBED_BATCH_SIZE", "many", "embed_batch_size"),
        ("HUGINN_CHAT_EMBED_THREADS", "0", "embed_threads"),
        ("HUGINN_CHAT_HOMESERVER", "matrix.example.org", "homeserver"),
        ("HUGINN_CHAT_QDRANT_URL", "ftp://q", "qdrant_url"),
        ("HUGINN_CHAT_QDRANT_COLLECTION", "bad name", "qdrant_collection"),
    ],
)
def test_bad_values_name_the_field(monkeypatch, env_name, value, field):
    monkeypatch.setenv(env_name, value)
    error = _config_error()
    assert error.field == field
    assert str(error).startswith(f"config: {field}: ")
    assert "\n" not in str(error)


def test_refresh_requirements():
    settings = load_settings()
    with pytest.raises(ConfigError) as caught:
        settings.require_refresh()
    assert caught.value.field == "homeserver"
    with pytest.raises(ConfigError) as caught:
        load_settings(homeserver="http://127.0.0.1:8008").require_refresh()
    assert caught.value.field == "token_file"
    load_settings(homeserver="http://127.0.0.1:8008", token_file="/run/t").require_refresh()


def test_token_from_credentials_directory(tmp_path, monkeypatch):
    (tmp_path / "matrix-token").write_text(FAKE_TOKEN + "\n")
    (tmp_path / "matrix-token").chmod(0o600)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    settings = load_settings()
    assert settings.token_file == tmp_path / "matrix-token"
    assert read_token(settings) == FAKE_TOKEN
    assert FAKE_TOKEN not in repr(settings) and FAKE_TOKEN not in str(settings.model_dump())


def test_explicit_token_file_wins_over_credentials(tmp_path, monkeypatch):
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    other = tmp_path / "elsewhere"
    other.write_text("syt_other_token_value")
    other.chmod(0o600)
    monkeypatch.setenv("HUGINN_CHAT_TOKEN_FILE", str(other))
    assert read_token(load_settings()) == "syt_other_token_value"


def test_missing_token_file_names_field(tmp_path, monkeypatch):
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    with pytest.raises(ConfigError) as caught:
        read_token(load_settings())
    assert caught.value.field == "token_file"
    assert str(tmp_path / "matrix-token") in str(caught.value)

    monkeypatch.delenv("CREDENTIALS_DIRECTORY")
    with pytest.raises(ConfigError) as caught:
        read_token(load_settings())
    assert caught.value.field == "token_file" and "not set" in str(caught.value)


@pytest.mark.parametrize(
    "content", [b"", b"  \n", b"syt_first line\nsecond " + FAKE_TOKEN.encode(), b"\xff\xfe" + FAKE_TOKEN.encode()]
)
def test_bad_token_file_errors_never_show_content(tmp_path, content):
    token_file = tmp_path / "matrix-token"
    token_file.write_bytes(content)
    token_file.chmod(0o600)
    with pytest.raises(ConfigError) as caught:
        read_token(load_settings(token_file=token_file))
    message = str(caught.value)
    assert caught.value.field == "token_file" and str(token_file) in message
    assert "syt_" not in message and FAKE_TOKEN not in message


def test_secret_file_generic(tmp_path):
    key = tmp_path / "qdrant-key"
    key.write_text("  k3y-value \n")
    key.chmod(0o600)
    assert read_secret_file(key, "qdrant_api_key_file") == "k3y-value"
    with pytest.raises(ConfigError) as caught:
        read_secret_file(tmp_path, "qdrant_api_key_file")
    assert str(caught.value).startswith("config: qdrant_api_key_file: ")


def test_default_model_dir_only_for_default_model(tmp_path):
    settings = load_settings()
    repo_models = Path(__file__).resolve().parents[2] / ".models" / "all-MiniLM-L6-v2"
    assert settings.embed_model_dir == repo_models  # made by `make setup`
    assert load_settings(embed_model="BAAI/bge-small-en-v1.5").embed_model_dir is None
    assert load_settings(embed_model_dir=tmp_path).embed_model_dir == tmp_path


def test_settings_is_a_settings():
    assert isinstance(load_settings(), Settings)


def test_an_ipv6_literal_homeserver_is_a_url(monkeypatch):
    from daemon.config import load_settings

    monkeypatch.setenv("HUGINN_CHAT_HOMESERVER", "http://[::1]:8008/")
    assert load_settings().homeserver == "http://[::1]:8008"
    monkeypatch.setenv("HUGINN_CHAT_HOMESERVER", "http://[::1:8008")
    with pytest.raises(ConfigError, match="homeserver"):
        load_settings()
