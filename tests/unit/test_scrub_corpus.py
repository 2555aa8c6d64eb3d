"""The scrubber's targets on its corpus (tests/data/scrub/, written by make_corpus.py there):
every credential removed (no piece of 4+ characters of a secret survives, tests/scrub_corpus.py
says exactly what a piece is), at least 98% of benign developer chat byte-identical, and the
corpus itself large and varied (its size and kinds are asserted below)."""

from __future__ import annotations

import json

import pytest

from chunker.scrub import scrub
from tests.scrub_corpus import DATA, Credential, benign, credentials, leaked_pieces, score

CREDENTIALS = credentials()
BENIGN = benign()


def test_the_corpus_is_as_large_and_varied_as_asked() -> None:
    assert len(CREDENTIALS) >= 300
    assert len({c.kind for c in CREDENTIALS}) >= 60
    assert len(BENIGN) >= 300
    for item in CREDENTIALS:
        assert item.secrets and all(s in item.text for s in item.secrets), item.kind


def test_the_committed_corpus_is_what_the_generator_writes(tmp_path, monkeypatch) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_corpus", DATA / "make_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert [json.loads(json.dumps(c)) for c in module.CREDENTIALS] == [
        json.loads(line) for line in (DATA / "credentials.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert len(module.BENIGN) == len(BENIGN)


def test_every_credential_is_removed() -> None:
    result = score(scrub)
    assert result.leaks == [], f"{len(result.leaks)} leaked, first: {result.leaks[:3]}"


def test_benign_chat_survives_byte_for_byte() -> None:
    result = score(scrub)
    assert result.intact_pct >= 98.0, result.eaten[:5]
    # Today every one survives; a regression shows here before it costs the 98%.
    assert result.eaten == []


@pytest.mark.parametrize(
    "kind",
    ["issue_false_positive", "git_sha", "sha256", "uuid", "data_uri", "matrix_ids", "non_latin", "math", "emoji"],
)
def test_shapes_an_entropy_rule_would_eat_survive(kind: str) -> None:
    texts = [text for k, text in BENIGN if k == kind]
    assert texts
    assert [t for t in texts if scrub(t) != t] == []


def test_a_leak_is_a_surviving_piece_of_four_characters_not_in_the_context() -> None:
    item = Credential("env_password", "SMTP_PASS=Tr0ub4dor&3xK9", ("Tr0ub4dor&3xK9",))
    assert leaked_pieces(item, "SMTP_PASS=[redacted:password]") == []
    assert leaked_pieces(item, "SMTP_PASS=[redacted:password]&3xK9") == ["&3xK", "3xK9"]
    # "PASS" is the key's, not a piece of the secret that survived.
    item = Credential("env_password", "DB_PASS=PASSxyz9", ("PASSxyz9",))
    assert leaked_pieces(item, "DB_PASS=[redacted:password]") == []
