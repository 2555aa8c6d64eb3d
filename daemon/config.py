"""Configuration: every setting the refresher and the reader take, validated in one place.

Owns: ``Settings`` (pydantic-settings; environment variables ``HUGINN_CHAT_<FIELD>``, optionally
a TOML file of the same field names in lower case), ``load_settings()``, ``ConfigError``, and
reading the secret files the settings point at (``read_token``, ``read_secret_file``) and
refusing one that others may read (``refuse_unprotected_secret``).

Must not: hold or log a secret. Secrets live only in files (the Matrix token, the Qdrant API key,
the audit HMAC key); settings hold their paths, so ``repr(settings)`` is safe to log. Errors about
a secret file name the field and the path, never the content; and since an operator may put a
secret where a path or URL belongs (``HUGINN_CHAT_TOKEN_FILE=syt_...``, a ``qdrant_url`` with a
password or an ``?api-key=`` in it), every ``ConfigError`` message passes ``public_text``: URL
userinfo, queries and fragments go, and whatever the chat scrubber would redact goes too.

Precedence, highest first: keyword overrides to ``load_settings``, environment, the TOML file
(``--config PATH``, else ``$HUGINN_CHAT_CONFIG``), the defaults below.

Lists in the environment are JSON: ``HUGINN_CHAT_ROOMS='["#general:example.org"]'``.

Scope lists are the operator's part only; ``scope`` always adds its built-ins on top:
``exclude_rooms`` gains ``#users:*``, ``#members:*``, ``#patrons:*`` and ``bridge_senders`` gains
the Discord puppet patterns (``scope.DEFAULT_BRIDGE_SENDERS``). So both default to empty here and
the operator can add entries, never remove the built-ins.
"""

from __future__ import annotations

import contextvars
import json
import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from chunker.scrub import scrub
from daemon.errors import UsageError
from scope import is_alias, is_room_id

ENV_PREFIX = "HUGINN_CHAT_"
CONFIG_FILE_ENV = "HUGINN_CHAT_CONFIG"
DEFAULT_EMBED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_DIR_NAME = "all-MiniLM-L6-v2"
INSTALLED_MODEL_DIR = Path("/usr/share/huginn-chat/models") / MODEL_DIR_NAME

# systemd LoadCredential= names looked up under $CREDENTIALS_DIRECTORY.
TOKEN_CREDENTIAL = "matrix-token"
QDRANT_KEY_CREDENTIAL = "qdrant-api-key"
AUDIT_KEY_CREDENTIAL = "audit-key"

_COLLECTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
_URL = re.compile(r"https?://(\[[0-9A-Fa-f:.]+\]|[^/\s:?#\[\]]+)(:\d{1,5})?(/[^\s]*)?")  # host, IPv6 literal too


# scheme://[userinfo@]rest[?query][#fragment], as far as a URL in free text goes.
_URL_IN_TEXT = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/?#@'\"]*@)?(?P<rest>[^\s?#'\"]*)"
    r"(?P<query>\?[^\s#'\"]*)?(?P<fragment>#[^\s'\"]*)?"
)
_QUERY_VALUE = re.compile(r"=[^&;]*")  # names stay (they say what was asked), values go
_TOKEN_SHAPED = re.compile(r"(?=[^/\\]*[0-9])(?=[^/\\]*[A-Za-z])[A-Za-z0-9_.~+=-]{16,}")


def _public_url(match: re.Match[str]) -> str:
    return (
        match["scheme"]
        + ("[redacted]@" if match["userinfo"] else "")
        + match["rest"]
        + (_QUERY_VALUE.sub("=[redacted]", match["query"]) if match["query"] else "")
        + ("#[redacted]" if match["fragment"] else "")
    )


def public_text(text: str) -> str:
    """``text`` safe to print or log: URLs lose userinfo, query values and fragment (query names
    stay: they say what was asked), and anything the chat scrubber recognises as a credential
    becomes its marker."""
    return scrub(_URL_IN_TEXT.sub(_public_url, text))


def shown_path(path: object) -> str:
    """A path for an error message; a value that looks like a token, not a path (no separator,
    letters and digits, 16+ characters), is not shown at all: the operator put the secret itself
    where its path belongs."""
    text = str(path)
    if _TOKEN_SHAPED.fullmatch(text) or scrub(text) != text:
        return "the value given (not shown: it looks like a secret, not a path)"
    return text


class ConfigError(UsageError, ValueError):
    """A setting is missing or invalid. ``str()`` is one line naming the field, never a secret."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = public_text(" ".join(str(message).split()))
        super().__init__(f"config: {field}: {self.message}")


def _credential(name: str, *, must_exist: bool) -> Path | None:
    directory = os.environ.get("CREDENTIALS_DIRECTORY")
    if not directory:
        return None
    path = Path(directory) / name
    if must_exist and not path.is_file():
        return None
    return path


def default_model_dir() -> Path | None:
    """The offline model directory, if one exists: the checkout's ``.models/`` (made by
    ``make setup``) next to the package, else the installed ``/usr/share/huginn-chat/models/``."""
    checkout = Path(__file__).resolve().parent.parent / ".models" / MODEL_DIR_NAME
    for candidate in (checkout, INSTALLED_MODEL_DIR):
        if (candidate / "model.onnx").is_file():
            return candidate
    return None


def _json_list(value: Any) -> Any:
    """Lists arrive as lists from TOML and overrides, as JSON text from the environment."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"expected a JSON list of strings, got {value!r}") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise ValueError("expected a list of strings")
    return list(value)


StrList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    """All settings. Paths, not secrets; see the module docstring for sources and precedence."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", validate_default=True)

    # Matrix. Optional here because the reader never talks to the homeserver; refresh checks them.
    homeserver: str | None = None
    token_file: Path | None = Field(default_factory=lambda: _credential(TOKEN_CREDENTIAL, must_exist=False))

    # Scope (operator additions; scope adds the built-ins).
    rooms: StrList = Field(default_factory=list)
    exclude_rooms: StrList = Field(default_factory=list)
    bridge_senders: StrList = Field(default_factory=list)

    # Storage.
    state_dir: Path = Path("/var/lib/huginn-chat")
    qdrant_url: str | None = None
    qdrant_api_key_file: Path | None = Field(
        default_factory=lambda: _credential(QDRANT_KEY_CREDENTIAL, must_exist=True)
    )
    qdrant_collection: str = "huginn_chat"
    # A Qdrant cluster: how the collection is sharded and copied when the refresher creates it.
    qdrant_shard_number: int | None = Field(default=None, ge=1)
    qdrant_replication_factor: int | None = Field(default=None, ge=1)

    # Reader.
    socket: Path = Path("/run/huginn-chat/reader.sock")
    reader_max_connections: int = Field(default=1024, ge=1, le=65536)
    reader_line_timeout_s: float = Field(default=5.0, gt=0, le=300)
    audit_key_file: Path | None = Field(default_factory=lambda: _credential(AUDIT_KEY_CREDENTIAL, must_exist=True))
    reader_private_dir: Path | None = None

    # Embedding. embed_model_dir defaults to the offline model dir when embed_model is the default.
    embed_model: str = DEFAULT_EMBED_MODEL
    embed_model_dir: Path | None = None
    embed_batch_size: int = Field(default=16, ge=8, le=64)
    embed_threads: int | None = Field(default=None, ge=1)

    # Chunking and paging.
    window_max_bytes: int = Field(default=700, ge=100)
    window_max_gap_s: int = Field(default=900, ge=1)
    page_size: int = Field(default=200, ge=1, le=1000)

    # Refresh cadence. A run whose one /sync shows nothing new ends there, unless the last full
    # run (which re-reads every room's state) is this many seconds old; 0: every run is full.
    scope_recheck_s: int = Field(default=300, ge=0, le=86400)
    # `huginn-chat follow`: how long the homeserver holds each /sync open while nothing arrives.
    follow_poll_s: int = Field(default=30, ge=1, le=300)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _TomlValues(settings_cls, _toml_values.get({})))

    @field_validator(
        "token_file", "qdrant_api_key_file", "audit_key_file", "reader_private_dir", "embed_model_dir", mode="before"
    )
    @classmethod
    def _empty_path_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("state_dir", mode="before")
    @classmethod
    def _state_dir_named(cls, value: Any) -> Any:
        # Path("") is ".": an empty setting would silently put the index and purges.json in
        # whatever directory the command happened to run from.
        if isinstance(value, str) and not value.strip():
            raise ValueError("must name a directory (it is empty)")
        return value

    @field_validator("homeserver", "qdrant_url", mode="before")
    @classmethod
    def _http_url(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if not isinstance(value, str) or not _URL.fullmatch(value.strip()):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.strip().rstrip("/")

    @field_validator("rooms", mode="before")
    @classmethod
    def _rooms(cls, value: Any) -> list[str]:
        rooms = _json_list(value)
        for entry in rooms:
            if entry != "*" and not is_room_id(entry) and not is_alias(entry):
                raise ValueError(f"{entry!r} is not a room id (!…), an alias (#name:server) or '*'")
        return rooms

    @field_validator("exclude_rooms", mode="before")
    @classmethod
    def _exclude_rooms(cls, value: Any) -> list[str]:
        rooms = _json_list(value)
        for entry in rooms:
            if not is_room_id(entry) and not is_alias(entry):
                raise ValueError(f"{entry!r} is not a room id (!…), an alias (#name:server) or '#name:*'")
        return rooms

    @field_validator("bridge_senders", mode="before")
    @classmethod
    def _bridge_senders(cls, value: Any) -> list[str]:
        patterns = _json_list(value)
        for pattern in patterns:
            if not pattern:
                raise ValueError("an empty pattern would match nothing useful")
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"{pattern!r} is not a valid regular expression ({error})") from None
        return patterns

    @field_validator("qdrant_collection")
    @classmethod
    def _collection(cls, value: str) -> str:
        if not _COLLECTION_NAME.fullmatch(value):
            raise ValueError(f"{value!r} must be 1-128 letters, digits, '_' or '-'")
        return value

    @field_validator("embed_model")
    @classmethod
    def _model_name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name a model")
        return value.strip()

    @model_validator(mode="after")
    def _offline_model_by_default(self) -> Settings:
        # Only for the default model: pairing another model's name with MiniLM files would load
        # the wrong weights under the right name.
        if "embed_model_dir" not in self.model_fields_set and self.embed_model == DEFAULT_EMBED_MODEL:
            self.embed_model_dir = default_model_dir()
        return self

    def require_refresh(self) -> None:
        """The settings only ``refresh`` needs. Raises ``ConfigError`` naming the first one missing."""
        if not self.homeserver:
            raise ConfigError(
                "homeserver", f"required for refresh; set {ENV_PREFIX}HOMESERVER or homeserver in the config file"
            )
        if self.token_file is None:
            raise ConfigError(
                "token_file",
                f"required for refresh; set {ENV_PREFIX}TOKEN_FILE, or run under systemd with "
                f"LoadCredential={TOKEN_CREDENTIAL}:<path>",
            )


class _TomlValues(PydanticBaseSettingsSource):
    """The already-parsed TOML table, lowest priority. Unknown keys pass through so that
    ``extra="forbid"`` reports them by name."""

    def __init__(self, settings_cls: type[BaseSettings], values: dict[str, Any]):
        super().__init__(settings_cls)
        self._values = values

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._values)


# No default: a default {} would be one dict shared by every context; readers ask ``.get({})``.
_toml_values: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("huginn_chat_toml_values")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            values = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError("config", f"file {path} does not exist") from None
    except PermissionError:
        raise ConfigError("config", f"file {path} cannot be read (permission denied)") from None
    except IsADirectoryError:
        raise ConfigError("config", f"{path} is a directory, not a TOML file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError("config", f"file {path} is not valid TOML ({error})") from None
    return values


# Variables with the prefix that are not settings but still ours (read before the settings are).
KNOWN_NON_SETTING_ENV = frozenset({CONFIG_FILE_ENV})


def check_environment(environ: Any = None) -> None:
    """Refuse an unknown ``HUGINN_CHAT_*`` variable as an unknown TOML key is refused: a typo
    (``HUGINN_CHAT_HOMESERVR``) must not silently fall back to a default."""
    environ = os.environ if environ is None else environ
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields} | KNOWN_NON_SETTING_ENV
    for name in sorted(environ):
        if name.upper().startswith(ENV_PREFIX) and name.upper() not in known:
            raise ConfigError(name, "unknown setting (not a HUGINN_CHAT_* variable this program reads)")


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Settings from overrides, environment and the TOML file. Any problem is a ``ConfigError``."""
    check_environment()
    if config_file is None and os.environ.get(CONFIG_FILE_ENV):
        config_file = Path(os.environ[CONFIG_FILE_ENV])
    toml_values = _read_toml(Path(config_file)) if config_file is not None else {}
    marker = _toml_values.set(toml_values)
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise _first_problem(error) from None
    except SettingsError as error:
        field = re.search(r'field "?(\w+)"?', str(error))
        raise ConfigError(field.group(1) if field else "config", "could not parse its value") from None
    finally:
        _toml_values.reset(marker)


def _first_problem(error: ValidationError) -> ConfigError:
    problem = error.errors(include_url=False)[0]
    location = problem.get("loc") or ("config",)
    field = str(location[0])
    message = problem.get("msg", "invalid value")
    if problem.get("type") == "extra_forbidden":
        return ConfigError(field, "unknown setting")
    if message.startswith("Value error, "):
        return ConfigError(field, message[len("Value error, ") :])
    shown = problem.get("input")
    if isinstance(shown, (str, int, float)) and not isinstance(shown, bool):
        message = f"{message} (got {public_text(repr(shown))[:80]})"  # cut after masking, not before
    return ConfigError(field, message)


def read_secret_file(path: Path | None, field: str) -> str:
    """The stripped content of a one-line secret file. Errors name ``field`` and the path only."""
    if path is None:
        raise ConfigError(field, "not set")
    path = Path(path)
    where = shown_path(path)
    try:
        with path.open("rb") as handle:
            refuse_unprotected_secret(os.fstat(handle.fileno()), field, path)
            raw = handle.read()
    except FileNotFoundError:
        raise ConfigError(field, f"{where} does not exist") from None
    except PermissionError:
        raise ConfigError(field, f"{where} cannot be read (permission denied)") from None
    except IsADirectoryError:
        raise ConfigError(field, f"{where} is a directory, not a file") from None
    except OSError as error:
        raise ConfigError(field, f"{where} cannot be read ({error.strerror})") from None
    try:
        secret = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(field, f"{where} is not UTF-8 text") from None
    if not secret:
        raise ConfigError(field, f"{where} is empty")
    if any(ch.isspace() for ch in secret):
        raise ConfigError(field, f"{where} must hold one value on one line (found whitespace inside it)")
    return secret


def refuse_unprotected_secret(status: os.stat_result, field: str, path: Path | str) -> None:
    """Refuse a secret file others may read, as ssh refuses an unprotected key: whoever else can
    read it has the secret already, and using it without a word would hide that. Group-readable
    stays allowed (a credentials group is how a deployment shares one). ``status`` is the opened
    file's ``fstat``, so the file checked is the file read."""
    if status.st_mode & stat.S_IROTH:
        raise ConfigError(
            field,
            f"{shown_path(path)} is readable by others (mode {stat.S_IMODE(status.st_mode):04o}); "
            "refused as an unprotected secret file (run chmod o-r on it)",
        )


def read_token(settings: Settings) -> str:
    """The Matrix access token from ``settings.token_file``."""
    if settings.token_file is None:
        raise ConfigError(
            "token_file",
            f"not set; set {ENV_PREFIX}TOKEN_FILE or run under systemd with LoadCredential={TOKEN_CREDENTIAL}:<path>",
        )
    return read_secret_file(settings.token_file, "token_file")
