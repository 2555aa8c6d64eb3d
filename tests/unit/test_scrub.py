"""The credential scrub: every planted secret vanishes behind a visible marker, ordinary chat and
code stay byte-identical, and scrub is idempotent and total.

Secrets are assembled from pieces at run time so that no scanner mistakes this file for a leak.
"""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import chunker.scrub as scrub_engine
from chunker.scrub import (
    _UNTRIGGERED_ROWS,
    PATTERNS,
    SCRUB_VERSION,
    _one_line_rows as one_line_rows,
    find_secrets,
    may_hold_secrets,
    scrub,
    stays_on_one_line,
    triggered_rows,
)
from tests.scrub_corpus import benign, credentials

A36 = "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1eF3hJ5"  # 36 token chars
GHP = "ghp" + "_" + A36
JWT = (
    "eyJ"
    + "hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    + ".eyJ"
    + "zdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
PEM_BODY = "MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\naHVzdCBzb21lIGJhc2U2NCBmaWxsZXIgdGV4dA=="

# Every row's own examples (the rows carry them; tests/unit/test_scrub_rules.py checks them row by row).
ROW_EXAMPLES = [text for row in PATTERNS for text, _span in row.examples]

# (message, the secret that must vanish, the kind its marker must name)
SECRETS: list[tuple[str, str, str]] = [
    # GitHub
    *[(f"use {p}_{A36} for the api", f"{p}_{A36}", "github_token") for p in ("ghp", "gho", "ghu", "ghs", "ghr")],
    (
        "pat: github" + "_pat_11ABCDEFG0123456789_" + A36 + A36[:23],
        "11ABCDEFG0123456789_" + A36,
        "github_token",
    ),
    ("git clone https://" + GHP + "@github.com/o/r", GHP, "github_token"),
    ("token glpat-" + "xY3z_ab-CD9ef0GHij12", "xY3z_ab-CD9ef0GHij12", "gitlab_token"),
    # AWS
    (f"key id {AWS_ID} in eu-west-1", AWS_ID, "aws_access_key_id"),
    ("ASIA" + "Y34FZKBOKMUTVV7A,", "ASIA" + "Y34FZKBOKMUTVV7A", "aws_access_key_id"),
    (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws_secret_key"),
    (f'AWS_SECRET_ACCESS_KEY="{AWS_SECRET}"', AWS_SECRET, "aws_secret_key"),
    # Slack
    *[
        (
            f"bot uses xox{c}-" + "1234567890-0987654321-AbCdEfGhIjKl",
            "1234567890-0987654321-AbCdEfGhIjKl",
            "slack_token",
        )
        for c in "bpars"
    ],
    (
        "post to https://hooks.slack.com/services/" + "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        "slack_webhook",
    ),
    # Matrix
    ("curl -H 'x' ?access_token=syt" + "_YWxpY2U_HVrjJhCdNhVsrHJhmEZH_2Xqoyw", "HVrjJhCdNhVsrHJhmEZH", "matrix_token"),
    ("my token syt" + "_Ym90_abcdefghijKLMNOPQRST_1a2b3c ok", "abcdefghijKLMNOPQRST", "matrix_token"),
    (
        "compat mct" + "_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5" + "_1Ab2Cd",
        "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5",
        "matrix_token",
    ),
    ("mas mat" + "_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5" + "_1Ab2Cd", "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5", "matrix_token"),
    (
        "old MDAx" + "ZGxvY2F0aW9uIGV4YW1wbGUub3JnCjAwMTNpZGVudGlmaWVyIGtleQo",
        "ZGxvY2F0aW9uIGV4YW1wbGUub3JnCjAwMTNpZGVudGlmaWVyIGtleQo",
        "matrix_token",
    ),
    # JWT
    (f"the id_token was {JWT}.", JWT, "jwt"),
    # PEM
    (
        f"here:\n-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----\nthanks",
        PEM_BODY.split("\n")[0],
        "private_key",
    ),
    (f"-----BEGIN PRIVATE KEY-----\r\n{PEM_BODY}\r\n-----END PRIVATE KEY-----", PEM_BODY[:40], "private_key"),
    (
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}\n-----END OPENSSH PRIVATE KEY-----",
        PEM_BODY[-20:],
        "private_key",
    ),
    (
        f"-----BEGIN ENCRYPTED PRIVATE KEY-----\n{PEM_BODY}\n-----END ENCRYPTED PRIVATE KEY-----",
        PEM_BODY[:40],
        "private_key",
    ),
    (f"oops pasted half\n-----BEGIN EC PRIVATE KEY-----\n{PEM_BODY}\nand more", PEM_BODY[-20:], "private_key"),
    # Authorization and bearer
    ("Authorization: Bearer abc.DEF-ghi_jkl~mno", "abc.DEF-ghi_jkl~mno", "authorization"),
    ('curl -H "authorization: Basic dXNlcjpwYXNzd29yZA==" https://x', "dXNlcjpwYXNzd29yZA==", "authorization"),
    ("Proxy-Authorization: Token 7f3b9c2d1e0a4b5c", "7f3b9c2d1e0a4b5c", "authorization"),
    (
        "send it with Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0 in the header",
        "9f8e7d6c5b4a39281706f5e4d3c2b1a0",
        "bearer",
    ),
    # sk- keys
    (
        "OPENAI_KEY is sk-" + "abcd1234EFGH5678ijkl9012MNOP3456qrst7890UVWXyz12",
        "abcd1234EFGH5678ijkl9012MNOP3456",
        "api_key",
    ),
    ("sk-proj-" + "Ab3_dE5-gH7jK9mN1pQ3sT5vW7yZ9", "Ab3_dE5-gH7jK9mN1pQ3sT5vW7yZ9", "api_key"),
    ("export K=sk-ant-api03-" + "Zx9_Yw8-Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0AA", "Zx9_Yw8-Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0AA", "api_key"),
    # assignments: the value goes, the key stays
    ("password=hunter2", "hunter2", "password"),
    ("db password = 'correct horse battery'", "correct horse battery", "password"),
    ("passwd: s3cr3t!", "s3cr3t!", "password"),
    ('{"user": "bob", "password": "Tr0ub4dor&3"}', "Tr0ub4dor&3", "password"),
    ("DB_PASSWORD=pg_pass_99 ./run.sh", "pg_pass_99", "password"),
    ("Server=db;Uid=sa;Pwd=Zq9xLm2;", "Zq9xLm2", "password"),
    ("ldap passphrase: 'open sesame please'", "open sesame please", "password"),
    ("token=deadbeefcafe", "deadbeefcafe", "secret"),
    ("api_key: 3f9a8b7c6d5e", "3f9a8b7c6d5e", "secret"),
    ('apikey="q8w7e6r5t4"', "q8w7e6r5t4", "secret"),
    ("x-api-key: k3y-v4lu3-here", "k3y-v4lu3-here", "secret"),
    ("secret=mellon", "mellon", "secret"),
    ('"client_secret": "GHk2-vq9Zb"', "GHk2-vq9Zb", "secret"),
    ("HUGINN_CHAT_TOKEN=abc123xyz", "abc123xyz", "secret"),
    ("ACCESS_TOKEN: str = 'tok-998877'", "tok-998877", "secret"),
    ("'api_key' => 'php-k3y-555'", "php-k3y-555", "secret"),
    ("https://api.example.com/v1?user=bob&access_token=qwerty12345&page=2", "qwerty12345", "secret"),
    # URLs with a password
    ("postgres://app:Sup3rS3cret@db.internal:5432/app", "Sup3rS3cret", "url_password"),
    ("https://bob:p@ss@example.com/repo.git", "p@ss", "url_password"),
    # vendor keys
    ("maps key AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", "google_api_key"),
    ("stripe sk_live_" + "51H8xYzAbCdEfGhIjKl", "51H8xYzAbCdEfGhIjKl", "stripe_key"),
    ("restricted rk_live_" + "51H8xYzAbCdEfGhIjKl", "51H8xYzAbCdEfGhIjKl", "stripe_key"),
    ("npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "npm_token"),
    ("twine: pypi-AgEI" + "cHlwaS5vcmcCJGI2ZjE4YjYtYzE3Ni00", "cHlwaS5vcmcCJGI2ZjE4YjYtYzE3Ni00", "pypi_token"),
    ("hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345", "AbCdEfGhIjKlMnOpQrStUvWxYz012345", "huggingface_token"),
    ("discord https://discord.com/api/webhooks/123456/" + "aBcD-eFgH_iJkL", "aBcD-eFgH_iJkL", "discord_webhook"),
    # Cut short at & ) ] , ; } > or a space, names the old key rule missed, a token as the
    # whole URL userinfo
    ("SMTP_PASSWORD=Tr0ub4dor&3xK9", "&3xK9", "password"),
    ("passphrase: correct horse battery staple", " horse battery staple", "password"),
    ('{"dbPass": "pa55-w0rd"}', "pa55-w0rd", "password"),
    ("psql --pass=S3cr3t-x ok", "S3cr3t-x", "password"),
    (
        "events go to https://" + "3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c@o450123.ingest.sentry.io/55",
        "3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c",
        "url_token_user",
    ),
    ("https://bob:pa#ss" + "w0rd@git.example.com/r.git", "ss" + "w0rd", "url_password"),
]


@pytest.mark.parametrize(
    ("message", "secret", "kind"), SECRETS, ids=[f"{k}-{i}" for i, (_, _, k) in enumerate(SECRETS)]
)
def test_secret_vanishes_behind_a_marker(message: str, secret: str, kind: str) -> None:
    assert secret in message  # the corpus itself is right
    out = scrub(message)
    assert secret not in out
    assert f"[redacted:{kind}]" in out


def test_every_row_of_the_table_is_exercised_by_the_corpus() -> None:
    from tests.scrub_corpus import credentials

    markers = set()
    for text in [c.text for c in credentials()] + [m for m, _, _ in SECRETS] + ROW_EXAMPLES:
        markers.update(re.findall(r"\[redacted:([a-z0-9_]+)\]", scrub(text)))
    assert {row.kind for row in PATTERNS} <= markers


@pytest.mark.parametrize("kind", sorted({row.kind for row in PATTERNS}))
def test_a_marker_of_every_kind_is_left_as_it_is(kind: str) -> None:
    # A kind's name can hold a vendor's prefix (rubygems_token starts with rubygems_): the marker
    # was redacted again on each pass, nesting four deep.
    marker = f"[redacted:{kind}]"
    for text in (marker, f"x {marker} y", f"token: {marker}", f"password = {marker}", f"{marker}\n{marker}"):
        assert scrub(text) == text


def test_a_redacted_vendor_token_is_one_marker() -> None:
    token = "rubygems_" + "0123456789abcdef" * 3
    assert scrub(f"my key {token} ok") == "my key [redacted:rubygems_token] ok"


def test_table_rows_are_documented() -> None:
    for row in PATTERNS:
        assert row.why and row.kind == row.kind.lower()
        assert all(trigger == trigger.lower() for trigger in row.triggers), row.kind


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("password=hunter2", "password=[redacted:password]"),
        ('{"password": "x"}', '{"password": "[redacted:password]"}'),
        ("PASSWORD=abc ok", "PASSWORD=[redacted:password] ok"),
        ("https://bob:pw@example.com/x", "https://bob:[redacted:url_password]@example.com/x"),
        ("Authorization: Bearer abcdefgh12", "Authorization: Bearer [redacted:authorization]"),
        ("git remote https://x:y@h", "git remote https://x:[redacted:url_password]@h"),
        ("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\nbye", "[redacted:private_key]\nbye"),
        ("a " + GHP + " b " + GHP, "a [redacted:github_token] b [redacted:github_token]"),
    ],
)
def test_marker_keeps_the_surrounding_text_readable(message: str, expected: str) -> None:
    assert scrub(message) == expected


def test_a_token_inside_a_url_user_part_is_caught_with_the_password() -> None:
    out = scrub("https://" + GHP + ":x-oauth-basic@github.com/o/r")
    assert out == "https://[redacted:github_token]:[redacted:url_password]@github.com/o/r"


def test_overlapping_findings_are_merged_into_one_marker() -> None:
    out = scrub(f"Authorization: Bearer {JWT}")
    assert out == "Authorization: Bearer [redacted:jwt]"
    spans = find_secrets(f"token={GHP}")
    assert spans == [("github_token", 6, 6 + len(GHP))]


BENIGN = [
    # code
    "password = input()",
    "password = getpass.getpass('Password: ')",
    'pw = os.environ["PASSWORD"]',
    "token = os.environ.get('TOKEN')",
    "if token == None:",
    "if password != confirm:",
    "assert token is None",
    "token = None",
    "self.token = token",
    "client = Client(token=token, api_key=api_key)",
    "password: str",
    "def login(user: str, password: str) -> bool:",
    "token := next(tokens)",
    "let token = await getToken();",
    "tokens.map(token => token.trim())",
    "std::token::Token",
    "max_tokens: 500",
    "max_tokens=1024, temperature=0.2",
    "tokenizer = AutoTokenizer.from_pretrained(name)",
    "num_tokens = len(tokens)",
    "PASSWORD=$DB_PASSWORD ./run.sh",
    "token: ${{ secrets.GITHUB_TOKEN }}",
    "api_key = <your key here>",
    "password: ********",
    "password=...",
    "pip install scikit-learn  # aka sk-learn",
    "from sklearn import svm  # sk-learn-compatible-estimator",
    "x = {'a': 1, 'b': [1, 2]}",
    "for (int i = 0; i < n; i++) { sum += a[i]; }",
    "SELECT * FROM users WHERE id = 42;",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A\n-----END CERTIFICATE-----",
    "pk_live_" + "51H8xYzAbCdEfGhIjKl is the publishable key, that one is public",
    # ids, hashes, urls
    "fixed in 3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "see https://github.com/matrix-org/synapse/pull/1234#issuecomment-99",
    "https://user@example.com/path and ssh://git@github.com:22/o/r.git",
    "http://localhost:8008/_matrix/client/versions",
    "http://[::1]:8080/x?y=z#frag",
    "mail me at alice@example.org or alice+tag@example.co.uk",
    "@alice:example.org invited @_discord_1234:example.org to !lHWJkLqPL3hFs:example.org",
    "event $abcDEF123_-xyz:example.org in !abc:server",
    "base64 of hi is aGk= and of hello is aGVsbG8=",
    "git log --oneline | head; git rev-parse HEAD",
    # prose
    "I forgot my password again",
    "What's the password for the wifi?",
    "the password is on the fridge",
    "he was the bearer of bad news",
    "Bearer tokens are in the Authorization header, see RFC 6750",
    "the token economy is weird",
    "keep this a secret between us",
    "the API key rotation happens monday",
    "<alice> hi all\n<bob> hey, anyone tried the new release?\n* carol waves",
    "[12:01] <dave> ok: meeting at 3",
    "Note: passwords must be 12+ chars",
    "ratio 3:2, time 10:30, score 2-1",
    "héllo wörld — ünïcode ✓ 日本語のテキスト 🙂",
    "",
    " \n\t ",
]


@pytest.mark.parametrize("message", BENIGN)
def test_ordinary_chat_and_code_stay_byte_identical(message: str) -> None:
    assert scrub(message) == message
    assert find_secrets(message) == []


def test_scrub_version_is_a_positive_int() -> None:
    assert isinstance(SCRUB_VERSION, int) and SCRUB_VERSION >= 1


def test_adversarial_inputs_stay_linear() -> None:
    inputs = [
        "a" * 200_000,
        "-----BEGIN RSA PRIVATE KEY-----" * 5_000,
        "password=" * 20_000,
        "http://a:" * 20_000,
        "token: a:" * 20_000,
        "bearer " + "a1" * 100_000,
        "syt_a_" * 30_000,
        "eyJaaaaaaaaa." * 20_000,
        "x://" * 50_000,
    ]
    started = time.perf_counter()
    for text in inputs:
        scrub(text)
    assert time.perf_counter() - started < 5.0


# -- properties -------------------------------------------------------------------------------

FRAGMENTS = [
    GHP,
    JWT,
    AWS_ID,
    AWS_SECRET,
    "password",
    "token",
    "secret",
    "api_key",
    "=",
    ":",
    "==",
    " = ",
    '"',
    "'",
    "@",
    "://",
    "https",
    "user",
    "Bearer ",
    "Authorization: ",
    "sk-",
    "syt_",
    "[redacted:",
    "]",
    "[redacted:secret]",
    "rubygems_",
    "[redacted:rubygems_token]",
    "A" * 20,
    "EAA",
    "secret_",
    "seed phrase ",
    "abandon ",
    "/msg NickServ IDENTIFY ",
    "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVkt",
    "$2b$12$",
    "xprv9s21",
    "Cookie: sid=",
    "backup codes: ",
    "login with ",
    "PIN is 4821",
    "Private-Lines: 1\n",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "\n",
    " ",
    "aB3",
    "9",
    "_",
    "-",
    "xoxb-",
    "AIza",
    ".",
    "$",
    "(",
    ")",
    "{",
    "}",
]
secretish_text = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=8), max_size=30).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text() | secretish_text)
def test_scrub_is_idempotent_and_total(text: str) -> None:
    once = scrub(text)
    assert isinstance(once, str)
    assert scrub(once) == once


@settings(max_examples=200, deadline=None)
@given(secretish_text)
def test_planted_tokens_never_survive(text: str) -> None:
    out = scrub(text + " " + GHP + " " + JWT)
    assert GHP not in out and JWT not in out


# Texts made of pieces of triggers: overlapping, nested, glued and cut-short ones.
_TRIGGER_PIECES = sorted(
    {trigger[:cut] for row in PATTERNS for trigger in row.triggers for cut in range(1, len(trigger) + 1)}
)
trigger_text = st.lists(st.sampled_from(_TRIGGER_PIECES) | st.sampled_from(["", " ", "x", ":", "é"]), max_size=12).map(
    "".join
)


@settings(max_examples=500, deadline=None)
@given(trigger_text | st.text(max_size=40))
def test_the_one_pass_trigger_scan_picks_the_rows_a_search_per_trigger_would(text: str) -> None:
    lowered = text.lower()
    by_search = {
        order for order, row in enumerate(PATTERNS) if not row.triggers or any(t in lowered for t in row.triggers)
    }
    assert triggered_rows(lowered) == by_search


@pytest.mark.slow
def test_a_trigger_that_starts_inside_another_still_picks_its_rows() -> None:
    # "sk-" then "-us" in "sk-us": a scan that resumed after each match would miss the second.
    triggers = sorted({t for row in PATTERNS for t in row.triggers})
    glued = [a + b[n:] for a in triggers for b in triggers for n in range(1, min(len(a), len(b))) if a.endswith(b[:n])]
    assert "sk-us" in glued
    for text in glued:
        by_search = {
            order for order, row in enumerate(PATTERNS) if not row.triggers or any(t in text for t in row.triggers)
        }
        assert triggered_rows(text) == by_search, text


@pytest.mark.parametrize(
    ("pattern", "one_line"),
    [
        (r"pw[ \t]*=[ \t]*(?P<secret>[^\s\"']+)", True),
        (r"curl\b[^\n]{0,300}?-u", True),  # [^\n] is the usual way to stay on the line
        (r"(?:a|b)\d{4}(?![0-9])", True),
        (r"(?m)key$", True),
        (r"key\s+is", False),  # \s holds a newline
        (r"key[^x]", False),
        (r"key\W", False),
        (r"key\D", False),
        (r"key[^\S]", False),
        (r"key[\w\n]", False),
        (r"key(?:=|\r?\n)", False),
        (r"(?s)key.", False),
        (r"key(?s:.)", False),
        (r"key$", False),  # without MULTILINE, $ also matches before a final newline
        (r"key\Z", False),
        (r"key(?=\n)", False),  # a look-ahead examining the next line
        (r"(?<=\n)key", False),
    ],
)
def test_a_row_stays_on_one_line_only_when_its_parsed_regex_proves_it(pattern: str, one_line: bool) -> None:
    assert stays_on_one_line(re.compile(pattern)) is one_line


def test_most_rows_are_searched_by_line_and_the_costly_ones_among_them() -> None:
    kinds = {PATTERNS[order].kind for order in one_line_rows()}
    assert len(one_line_rows()) > 100
    assert {"seed_phrase", "cli_password", "door_code", "password", "secret"} <= kinds
    # A PEM block spans lines: the row that starts at its BEGIN is never searched by line.
    assert not any("-----begin" in PATTERNS[order].triggers for order in one_line_rows())


def test_every_match_of_a_line_searched_row_holds_one_of_its_triggers_on_its_line() -> None:
    # The line search looks only at lines holding a trigger, so a match on a line without one
    # would be lost. Every row's trigger is a literal its matches contain; this checks it on the
    # whole corpus and this file's cases (each alone, then all of them in one paste).
    texts = [c.text for c in credentials()] + [t for _, t in benign()] + [m for m, _, _ in SECRETS] + ROW_EXAMPLES
    checked = 0
    for text in [*texts, "\n".join(texts)]:
        lowered = text.lower()
        if len(lowered) != len(text):
            continue
        for order in one_line_rows():
            row = PATTERNS[order]
            for match in row.pattern.finditer(lowered if row.folded else text):
                line_start = lowered.rfind("\n", 0, match.start()) + 1
                line_end = lowered.find("\n", match.end())
                line = lowered[line_start : None if line_end < 0 else line_end]
                assert any(t in line for t in row.triggers), (row.kind, match.group(0)[:40])
                checked += 1
    assert checked > 1000


def _pastes() -> list[str]:
    texts = [c.text for c in credentials()] + [t for _, t in benign()] + [m for m, _, _ in SECRETS] + ROW_EXAMPLES
    return ["\n".join(texts[start::stride]) for start, stride in ((0, 1), (3, 7), (5, 11), (1, 40))]


def test_the_line_search_finds_what_a_whole_text_search_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    pastes = _pastes()
    used = [
        order
        for order in one_line_rows()
        if scrub_engine._trigger_lines(pastes[3], PATTERNS[order], scrub_engine._trigger_ends(pastes[3].lower()))
    ]
    assert len(used) > 20  # the check below is not vacuous: most rows did search by line
    by_lines = [find_secrets(paste) for paste in pastes]
    monkeypatch.setattr(scrub_engine, "_one_line_rows", lambda: frozenset())
    assert [find_secrets(paste) for paste in pastes] == by_lines


_FILLER = ["", "ok", "see the logs above for what broke", "the build passed on the second try, thanks all"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(trigger_text | secretish_text | st.text(max_size=40) | st.sampled_from(_FILLER), min_size=2, max_size=30)
)
def test_the_line_search_finds_what_a_whole_text_search_finds_on_any_lines(lines: list[str]) -> None:
    text = "\n".join(lines)
    by_lines = find_secrets(text)
    saved = scrub_engine._one_line_rows
    scrub_engine._one_line_rows = lambda: frozenset()  # type: ignore[assignment]
    try:
        assert find_secrets(text) == by_lines
    finally:
        scrub_engine._one_line_rows = saved


# Lowercase prose with digits and light punctuation has none of the separators, prefixes or
# shapes a row needs (no ':', '=', '_', '-', '@', uppercase), except the word "bearer" and a value
# told after its label in words ("the api key is 9f8e2a1c", "my pin is 4821", "pass is 0000",
# "backup code 38492017"): those are secrets by design, so text naming such a label is left out.
_TOLD_LABEL = re.compile(r"\b(?:pass|passcode|password|pw|pwd|pin|puk|code|key|token|secret)\b")
plain_text = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 .,!?'\n", max_size=200).filter(
    lambda text: "bearer" not in text and not _TOLD_LABEL.search(text)
)


@settings(max_examples=300, deadline=None)
@given(plain_text)
def test_text_without_secret_shapes_is_unchanged(text: str) -> None:
    assert scrub(text) == text


def test_a_run_of_jwt_prefixes_is_one_match_not_one_scan_per_prefix() -> None:
    # A rule that rescanned a run of "eyJ" from each eyJ was quadratic in the run's length. A match
    # always takes the whole run, so the search resumes after it: one scan, whatever the length.
    [row] = [row for row in PATTERNS if row.kind == "jwt"]
    run = "eyJ" * 20_000
    assert [m.span() for m in row.pattern.finditer(run)] == [(0, len(run))]
    assert scrub(run) == run  # and it is no token
    assert scrub("x" + JWT) == "x[redacted:jwt]"  # glued to a word, still a token


@settings(max_examples=400, deadline=None)
@given(st.lists(trigger_text | secretish_text | st.text(max_size=40), max_size=10))
def test_texts_tested_together_are_flagged_as_each_one_alone_needs(texts: list[str]) -> None:
    # Sound: a text let through unflagged is one scrub leaves as it is. Complete on triggers: a
    # text holding any trigger is flagged, whatever the texts joined beside it (a scan of the
    # joined texts that lost a trigger inside another, or across a separator, would fail here).
    flags = may_hold_secrets(texts)
    assert len(flags) == len(texts)
    for text, flagged in zip(texts, flags):
        if not flagged:
            assert scrub(text) == text
        if triggered_rows(text.lower()) - _UNTRIGGERED_ROWS:
            assert flagged, text


def test_ids_and_words_need_no_scrub_and_a_token_among_them_does() -> None:
    ids = [f"$e{n}_604_{n % 7}" for n in range(40)] + ["c10dde05-8a5d-5672-aa2e-deaa31c5d44b", "dense", "lexical"]
    assert not any(may_hold_secrets(ids))
    assert may_hold_secrets([*ids[:5], "ok " + GHP, *ids[5:10]]) == [False] * 5 + [True] + [False] * 5


# Code and logs that only name a credential, in the shapes real sources have them (the standard
# library, Twisted, Pygments, Synapse, PyCryptodome, OAuth logs): a developer's paste of these
# must reach the index whole.
REAL_CODE_LOOKALIKES = [
    "password = getpass.getpass('Password: ')\nif not password:\n    sys.exit(1)\n",
    "client.access_token = token",
    "login(access_token=token)",
    "token = x",
    "if password == confirm:",
    "pw = getpass()",
    "INFO oauth: exchanged auth code, token_type=bearer expires_in=3600",
    "the gate code service answered expires_in=3600",
    "synapse listening on port 8448",
    "2024-05-01 12:34:56,789 - synapse.access.http.8008 - 200 GET /_matrix/client/v3/sync",
    "self.user, self.password = user, password",
    "userid = passwd = acct = ''",
    'sig = "at least %d" % (atleast,)',
    "def Client(address, family=None, authkey=None):",
    "out = pbkdf2(hash_name='sha1', password=b'password', salt=b'salt',",
    "with self.subTest(f'token {token:02x}'):",
    "ctx.load_cert_chain(CERTFILE, password=getpass_bytes)",
    "ctx.load_cert_chain(CERTFILE_PROTECTED, password=KEY_PASSWORD)",
    "            self.token = nextchar",
    "RC2_KEY = rc2_key_st",
    "cache_token = current_token",
    "__all__ = ('Context', 'ContextVar', 'Token', 'copy_context')",
    "if hasattr(self.passwd, 'is_authenticated'):",
    "if user or passwd: self.auth_cache[key] = (user, passwd)",
    'pw = pytree.WildcardPattern([[pn], [pl, pl]], name="pw")',
    "    @param password: The password with which to log in.",
    "    :arg token: the Characters token to work on",
    "    stream_token: The token to wait for. We assume the token has already been",
    "    client_secret: ClientSecretStr,",
    "    native_token: object",
    "        token = Comment.Preproc",
    "        if token is Name.Tag and m and m.group(1) in self.EXTRA_KEYWORDS:",
    "    --username and --password options instead of via the URL.",
    "    password (bool): Enable password entry.",
    "e2:41:f4:2d:c8:54:90:66:28:dc:de:7b:04:06:ef:",
    'it says "accesskey="&allowpopups.accesskey;"',
    '        self.assertEqual(b"-----BEGIN OPENSSH PRIVATE KEY-----", new_key_data.splitlines()[0])',
    'HEADER = "-----BEGIN MEGOLM SESSION DATA-----"',
    "    def test_KEXDH_INIT_GROUP14_rsa_sha2_512(self):",
    "        self._listeners[token] = listener",
    'EXPIRED_TOKEN = "expired_token"',
    '    PASSWORD: Final = "m.login.password"',
    "    password: Union[str, Buffer],",
    '"token": i,',
    "token = EXCLUDED.token,",
    "sign(private_key=caKey, algorithm=SHA256())",
    "    api_key: API key of the serverless space,",
    "# Cache for the OIDC-exchanged token: re-exchanging on every call would be wasteful",
    '    Token:                     "#cccccc",',
    '    pad_token: Optional[str] = "[PAD]",',
    "  _token = rf'(?:[{_punct}]+|{_core_token})'",
    'MISSING_TOKEN = "M_MISSING_TOKEN"',
    '_SEND_STATUS_FROM_SERVER_TOKEN = "send_status_from_server"',
    'namespace = self.whoami(token=token)["name"]',
    "def count_positional_required_params(sig: Signature) -> int:",
    "        self.authClient.getPassword = lambda: None",
    "TOKEN = CHAR ^ CTL ^ SEPARATORS",
    "    upto_token: Latest point to return events from. If",
]


@pytest.mark.parametrize("message", REAL_CODE_LOOKALIKES)
def test_code_that_only_names_a_credential_stays(message: str) -> None:
    assert scrub(message) == message


# The same shapes holding a real value still lose it.
REAL_CODE_SECRETS = [
    ('password = "Tr0ub4dor&3xK9"', "Tr0ub4dor&3xK9"),
    ("client.access_token = 'syt_dGVzdA_aBcDeFgHiJkLmNoPqRsT_1a2b3c'", "syt_dGVzdA_aBcDeFgHiJkLmNoPqRsT_1a2b3c"),
    ("login(access_token=Xk9pQ2mZr7Lw4TbN)", "Xk9pQ2mZr7Lw4TbN"),
    ("the gate code is 48291", "48291"),
    ("db = os.getenv('DB_PASSWORD', 'S3cret!x')", "S3cret!x"),
    ("password:\n    Hunter2Hunter2!\n", "Hunter2Hunter2!"),
    (
        'KEY = """-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq9\n-----END RSA PRIVATE KEY-----"""',
        "MIIEpAIBAAKCAQEA7bq9",
    ),
    ('api_key = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"', "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    (
        "app.config['SECRET_KEY'] = 'itzyrgvycqwo6v0o7unk9q1mptd6r_d3y_jwjpe2'",
        "itzyrgvycqwo6v0o7unk9q1mptd6r_d3y_jwjpe2",
    ),
]


@pytest.mark.parametrize(("message", "secret"), REAL_CODE_SECRETS)
def test_real_values_in_code_shapes_still_go(message: str, secret: str) -> None:
    assert secret not in scrub(message)


# -- rows tried only where a trigger starts ----------------------------------------------------


def test_a_row_tried_at_its_triggers_finds_what_a_whole_text_search_finds() -> None:
    # starts_at_trigger rows skip the regex everywhere but where one of their triggers starts; the
    # result must be finditer's, on the corpus, this file's cases and the probes' texts.
    from bench.scrub_probes import WRITERS, probes

    anchored = [row for row in PATTERNS if row.starts_at_trigger]
    assert anchored
    texts = _pastes() + [p.text for writer in WRITERS for p in probes(writer)]
    texts += ["Пароль: Zh7!kLp2qR", "PASSWORD passwort pass pw p/w pin code", "wifi密码是X140m1ng*05", "passpassword"]
    compared = 0
    for text in texts:
        lowered = text.lower()
        if len(lowered) != len(text):
            continue
        ends = scrub_engine._trigger_ends(lowered)
        for row in anchored:
            searched = lowered if row.folded else text
            expected = [m.span() for m in row.pattern.finditer(searched)]
            assert [m.span() for m in scrub_engine._matches_at_triggers(row, searched, ends)] == expected
            compared += len(expected)
    assert compared > 100


def test_a_row_tried_at_its_triggers_opens_every_match_with_one() -> None:
    for row in PATTERNS:
        if not row.starts_at_trigger:
            continue
        for text, _span in row.examples:
            searched = text.lower() if row.folded else text
            for match in row.pattern.finditer(searched):
                assert any(text.lower().startswith(t, match.start()) for t in row.triggers), match.group()
