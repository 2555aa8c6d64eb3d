"""The journal: JSON lines with event/level/ts, bound context, and secrets masked."""

from __future__ import annotations

import io
import json
import logging
from datetime import datetime, timezone
from pathlib import Path

import pytest
import structlog
from hypothesis import given, settings, strategies as st

from daemon import journal

TOKEN = "syt_c2VydmljZQ_SECRETsecretSECRET_1a2b3c"
MAS_TOKEN = "mct_Zk9sVGhpc0lzQVRva2Vu_abc"


@pytest.fixture(autouse=True)
def restore_logging():
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def stream():
    buffer = io.StringIO()
    journal.configure(buffer, "info")
    return buffer


def _lines(stream: io.StringIO) -> list[dict]:
    text = stream.getvalue()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_one_json_object_per_line(stream):
    log = journal.get_logger(room_id="!room:example.org")
    log.info("room_admitted")
    log.warning("room_progress", events_read=3, note="two\nlines")
    log.debug("not_shown_at_info")
    first, second = _lines(stream)

    assert first["event"] == "room_admitted" and first["level"] == "info"
    assert first["room_id"] == "!room:example.org"
    assert second == {
        "event": "room_progress",
        "level": "warning",
        "ts": second["ts"],
        "room_id": "!room:example.org",
        "events_read": 3,
        "note": "two\nlines",
    }
    stamp = datetime.fromisoformat(first["ts"].replace("Z", "+00:00"))
    assert stamp.utcoffset() == timezone.utc.utcoffset(None)
    assert abs((datetime.now(timezone.utc) - stamp).total_seconds()) < 60


def test_level_filter_and_bad_level():
    buffer = io.StringIO()
    journal.configure(buffer, "error")
    journal.get_logger().warning("quiet")
    journal.get_logger().error("loud")
    assert [line["event"] for line in _lines(buffer)] == ["loud"]
    with pytest.raises(ValueError, match="level"):
        journal.configure(buffer, "chatty")


def test_credential_keys_are_masked(stream):
    journal.get_logger().info(
        "login_checked",
        token=TOKEN,
        access_token="anything",
        password="hunter2",
        api_key="k",
        Authorization="Basic dXNlcjpwYXNz",
        client_secret="s",
        token_file="/run/credentials/huginn-chat/matrix-token",
        tokens=42,
    )
    [line] = _lines(stream)
    for key in ("token", "access_token", "password", "api_key", "Authorization", "client_secret"):
        assert line[key] == journal.MASK, key
    assert line["token_file"] == "/run/credentials/huginn-chat/matrix-token"  # a path, not the secret
    assert line["tokens"] == 42  # a count
    assert line["event"] == "login_checked"
    assert "hunter2" not in stream.getvalue() and TOKEN not in stream.getvalue()


def test_token_shaped_values_are_masked_anywhere(stream):
    journal.get_logger().error(
        "request_failed",
        error=f"401 from https://hs/_matrix/client/v3/sync?access_token=abc123&since=s1 (Bearer {TOKEN})",
        evidence={"header": f"Authorization: Bearer {MAS_TOKEN}", "nested": [TOKEN, "keep me"]},
    )
    text = stream.getvalue()
    assert TOKEN not in text and MAS_TOKEN not in text and "abc123" not in text
    [line] = _lines(stream)
    # Query names stay for diagnosis; every value goes, not only the ones named like a token.
    assert "sync?access_token=[redacted]&since=[redacted]" in line["error"] and "Bearer [redacted]" in line["error"]
    assert line["evidence"]["nested"] == [journal.MASK, "keep me"]


def test_exceptions_are_rendered_and_masked(stream):
    try:
        raise RuntimeError(f"server said no to {TOKEN}")
    except RuntimeError:
        journal.get_logger().exception("run_failed")
    [line] = _lines(stream)
    assert line["event"] == "run_failed" and line["level"] == "error"
    assert "RuntimeError" in line["exception"] and TOKEN not in line["exception"]


def test_library_warnings_go_through_the_same_chain(stream):
    logging.getLogger("some.library").warning("retrying %s", f"Bearer {TOKEN}")
    logging.getLogger("some.library").info("chatty request line")
    [line] = _lines(stream)
    assert line["logger"] == "some.library" and line["level"] == "warning"
    assert TOKEN not in line["event"] and line["event"].startswith("retrying")


def test_objects_rendered_as_text_are_masked_too(stream):
    """An exception or a path passed as a value is rendered with str(); its text is masked."""
    journal.get_logger().error(
        "room_failed",
        error=RuntimeError(f"server said no to {TOKEN}"),
        evidence={"where": Path(f"/tmp/{MAS_TOKEN}")},
        count=3,
        ok=True,
        gone=None,
    )
    assert TOKEN not in stream.getvalue() and MAS_TOKEN not in stream.getvalue()
    [line] = _lines(stream)
    assert line["error"] == f"server said no to {journal.MASK}"
    assert line["evidence"]["where"] == f"/tmp/{journal.MASK}"
    assert (line["count"], line["ok"], line["gone"]) == (3, True, None)


# Texts a line may carry: ids, words, timestamps, and what the masking exists for.
_LINE_TEXTS = st.sampled_from(
    [
        "$e4_106_0",
        "c10dde05-8a5d-5672-aa2e-deaa31c5d44b",
        "!room:example.org",
        "dense",
        TOKEN,
        MAS_TOKEN,
        "Bearer abc.def",
        "https://user:pw@matrix.example.org/_matrix?access_token=abc#frag",
        "ghp_" + "A1b2C3d4" * 4 + "Zz9Y",
        "password: hunter2hunter2",
        "2026-12-01T23:00:00Z",
    ]
) | st.text(max_size=30)
_LINE_VALUES = st.recursive(
    st.none() | st.integers() | st.booleans() | _LINE_TEXTS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.frozensets(_LINE_TEXTS, max_size=3)
        | st.dictionaries(
            st.sampled_from(["chunk_id", "event_ids", "token", "api_key", "legs", "x"]), inner, max_size=3
        )
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["op", "returned", "filters", "password", "detail", "ts"]), _LINE_VALUES))
def test_a_line_tested_at_once_is_written_as_masking_each_value_alone_writes_it(fields: dict) -> None:
    # The reference is the per-value masking (every string scrubbed on its own), as rendered.
    reference = {
        key: (
            (journal._mask_value(value) if isinstance(value, str) else value)
            if key in ("event", "level", "ts")
            else journal.MASK
            if journal._is_secret_key(key)
            else journal._mask_value(value)
        )
        for key, value in fields.items()
    }
    got = journal.redact_secrets(None, "info", dict(fields))
    assert journal._render(dict(got)) == journal._render(reference)
