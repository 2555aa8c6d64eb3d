"""Credential scrubbing: every message body passes through ``scrub`` before it is chunked.

Owns: the table of credential patterns (``PATTERNS``), ``find_secrets``, ``scrub`` and
``SCRUB_VERSION``. Bump ``SCRUB_VERSION`` whenever the table changes what it redacts: it is part
of the chat version, so a change forces a rebuild and no point keeps text an older table missed.

Must not: do I/O, log, or keep the text it was given. It never raises on any ``str``.

How it works. Each row of ``PATTERNS`` is a kind, a regex and why it exists (the table is the
documentation). A row runs only when one of its lowercase trigger strings occurs in the lowered
text, so ordinary chat costs a few substring tests. A row's match redacts its ``secret*`` group
when it has one (the value of ``password=...``, the password of ``https://user:pass@host``, the
credential after ``Authorization: Bearer``), else the whole match; the key, scheme and host stay,
so the chat stays readable. Overlapping spans are merged (a secret is never half-redacted); the
earlier row names the merged span. Each span becomes ``[redacted:<kind>]``.

Decisions worth knowing:

- ``key = value`` assignments redact quoted values always, and bare values unless they look like
  code rather than a secret: ``password = input()``, ``token = os.environ["T"]``,
  ``token = None``, ``token = self.token``, ``token=token``, ``$TOKEN``, ``<your-token>``,
  ``****``. Comparisons (``if token == None:``) are not assignments. The key must *end* with
  the keyword, so ``max_tokens: 500`` and ``tokenizer = ...`` stay. ``key: Type = "value"``
  (annotated code) redacts the value.
- Over-redaction of prose is accepted where the text is shaped like an assignment
  (``password: forgotten``); secrets told in plain words (``the password is hunter2``) are
  not recognisable and stay.
- Distinctive prefixes (``ghp_``, ``AKIA``, ``xoxb-``, ...) match even glued to other text, so
  tokens pasted back to back all go. Prefixes that also occur inside words (``sk-`` in "risk-",
  ``mat_`` in "format_") must start a token.
- Rows for bare prefixes that prose can also start with (``sk-``, ``Bearer``) require a digit
  in the token, so ``sk-learn`` and "bearer of bad news" stay.
- ``scrub`` is idempotent: a marker never matches a row, and a second pass runs only when the
  first redacted something (it catches secrets that a redaction exposed, e.g. nested keys).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

SCRUB_VERSION: int = 1

@dataclass(frozen=True, slots=True)
class SecretPattern:
    kind: str
    pattern: re.Pattern[str]
    why: str
    triggers: tuple[str, ...]  # lowercase; the row runs only if one occurs in the lowered text
    accept: Callable[[re.Match[str], str], bool] | None = None  # veto: code, not a secret


def _rx(source: str, flags: int = 0) -> re.Pattern[str]:
    # ASCII: a token glued to a non-ASCII letter ("éghp_...") must still count as a token start.
    return re.compile(source, flags | re.ASCII)


# Values of an assignment that are code or placeholders, not secrets.
_CODE_WORDS = frozenset(
    "none null nil true false undefined str string bytes int optional secretstr any self"
    " await new yield lambda not async function typeof".split()
)


_CODE_OWNERS = re.compile(r"(?:self|this|cls|os|env|process|config|settings|args|opts|options)\.")


def _looks_like_a_value(match: re.Match[str], value: str) -> bool:
    if match.group("secret_bare") is None:
        return not value.isspace()  # anything quoted is a value, however it looks
    if any(c in value for c in "([{"):
        return False  # a call, subscript or template: input(), os.environ["X"], {{ secrets.T }}
    if value[0] in "$%<@*":
        return False  # a variable ($TOKEN), a placeholder (<token>), already masked (****)
    if value.lower() in _CODE_WORDS:
        return False
    if set(value) <= set(".*xX-_#"):
        return False  # ..., xxxx, ----: a visible placeholder
    if _CODE_OWNERS.match(value):
        return False  # self.token, os.environ, process.env.TOKEN
    if value.lower() == match.group("key").lower().rsplit(".", 1)[-1]:
        return False  # token=token, self.password = password: passing a variable on
    return True


def _assignment(keys: str) -> re.Pattern[str]:
    """``<key><sep><value>`` where the key ends with one of ``keys``: password=x, "password": "x",
    PASSWORD=x, password: x, token: str = "x", 'api_key' => 'x'. The value is the secret."""
    return _rx(
        r"(?<![\w.-])"
        rf"(?P<key>{keys})"
        r"[\"']?[ \t]*"  # the closing quote of a JSON or dict key
        r"(?:"
        r":[ \t]*[A-Za-z_][\w.\[\]|, ]*?[ \t]*(?:=>|=(?!=))"  # annotated: token: str = ...
        r"|=>|=(?!=)|:(?![:/=])"  # not ==, not a::b, not scheme://, not :=
        r")[ \t]*"
        r"(?:\"(?P<secret_dq>(?:[^\"\\\n]|\\.)+)\""
        r"|'(?P<secret_sq>(?:[^'\\\n]|\\.)+)'"
        r"|`(?P<secret_bq>[^`\n]+)`"
        r"|(?P<secret_bare>[^\s\"'`,;&)\]}>]+))",
        re.IGNORECASE,
    )


_PASSWORD_KEYS = r"[\w.-]*(?:password|passwd|passphrase)|pass|pwd"
_SECRET_KEYS = r"[\w.-]*(?:secret|token|api[_-]?key|apikey|private[_-]?key|secret[_-]?key|access[_-]?key)"


PATTERNS: tuple[SecretPattern, ...] = (
    SecretPattern(
        "private_key",
        _rx(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
            r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|.*\Z)",
            re.DOTALL,
        ),
        "PEM/OpenSSH/PGP private keys, whole block; a BEGIN without END redacts to the end of text",
        ("-----begin",),
    ),
    SecretPattern(
        "github_token",
        _rx(r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
        "GitHub classic (ghp_/gho_/ghu_/ghs_/ghr_) and fine-grained (github_pat_) tokens",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    SecretPattern(
        "gitlab_token",
        _rx(r"glpat-[A-Za-z0-9_-]{20,}"),
        "GitLab personal access tokens",
        ("glpat-",),
    ),
    SecretPattern(
        "aws_access_key_id",
        _rx(r"(?:AKIA|ASIA)[A-Z0-9]{16}"),
        "AWS access key ids (long-term AKIA, temporary ASIA)",
        ("akia", "asia"),
    ),
    SecretPattern(
        "aws_secret_key",
        _rx(
            r"(?i:aws_?secret_?(?:access_?)?key)[\"']?[ \t]*(?:=>|=|:)[ \t]*[\"']?"
            r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
        ),
        "AWS secret access keys when labelled (40 base64 chars alone are too common to redact)",
        ("secret",),
    ),
    SecretPattern(
        "slack_token",
        _rx(r"(?:xox[abposr]-[A-Za-z0-9-]{10,}|xapp-[0-9]-[A-Za-z0-9-]{10,})"),
        "Slack bot/user/app/refresh tokens",
        ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-", "xapp-"),
    ),
    SecretPattern(
        "slack_webhook",
        _rx(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9/_-]+)"),
        "Slack incoming webhook URLs: the path is the credential",
        ("hooks.slack.com/",),
    ),
    SecretPattern(
        "discord_webhook",
        _rx(r"discord(?:app)?\.com/api/webhooks/[0-9]+/(?P<secret>[A-Za-z0-9_-]+)"),
        "Discord webhook URLs: the last path segment is the credential",
        ("/api/webhooks/",),
    ),
    SecretPattern(
        "matrix_token",
        _rx(
            r"(?:(?:syt|syr|mct|mcr)_[A-Za-z0-9_-]{16,}"
            r"|(?<![A-Za-z0-9])(?:mat|mar)_[A-Za-z0-9]{30}_[A-Za-z0-9]{6}"  # 'format_...' is code
            r"|(?<![A-Za-z0-9+/])MDAx[A-Za-z0-9+/_-]{40,}=*)"  # not inside a longer base64 blob
        ),
        "Matrix access/refresh tokens: Synapse syt_/syr_, MAS mat_/mar_/mct_, old macaroons (MDAx)",
        ("syt_", "syr_", "mct_", "mcr_", "mat_", "mar_", "mdax"),
    ),
    SecretPattern(
        "jwt",
        _rx(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
        "JSON Web Tokens (base64url header starting {\", payload, signature)",
        ("eyj",),
    ),
    SecretPattern(
        "authorization",
        _rx(
            r"(?i:\b(?:proxy-)?authorization)[\"']?[ \t]*[:=][ \t]*[\"']?"
            r"(?:(?i:bearer|basic|token|digest|negotiate|mac)[ \t]+(?P<secret>[^\s\"',;\[\]]{8,})"
            r"|(?P<secret_bare>[A-Za-z0-9._~+/=-]{16,}))"
        ),
        "Authorization headers: the credential after the scheme (the scheme stays)",
        ("authorization",),
    ),
    SecretPattern(
        "bearer",
        _rx(r"(?i:\bbearer)[ \t]+(?=[A-Za-z0-9._~+/-]*[0-9])(?P<secret>[A-Za-z0-9._~+/-]{20,}=*)"),
        "Bearer <token> outside a header; needs 20+ chars with a digit, so prose stays",
        ("bearer",),
    ),
    SecretPattern(
        "api_key",
        _rx(r"(?<![A-Za-z0-9_-])sk-(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{20,}"),
        "OpenAI/Anthropic style keys (sk-, sk-proj-, sk-ant-api03-); needs a digit, so sk-learn stays",
        ("sk-",),
    ),
    SecretPattern(
        "stripe_key",
        _rx(r"(?:(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9]{20,})"),
        "Stripe secret and restricted keys, webhook secrets (pk_ publishable keys are public)",
        ("sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"),
    ),
    SecretPattern(
        "google_api_key",
        _rx(r"(?:AIza[A-Za-z0-9_-]{30,}|GOCSPX-[A-Za-z0-9_-]{20,}|(?<![A-Za-z0-9])ya29\.[A-Za-z0-9_-]{20,})"),
        "Google API keys (AIza), OAuth client secrets (GOCSPX-), OAuth access tokens (ya29.)",
        ("aiza", "gocspx-", "ya29."),
    ),
    SecretPattern(
        "npm_token",
        _rx(r"npm_[A-Za-z0-9]{30,}"),
        "npm access tokens",
        ("npm_",),
    ),
    SecretPattern(
        "pypi_token",
        _rx(r"pypi-Ag[A-Za-z0-9_-]{30,}"),
        "PyPI API tokens (macaroons, pypi-AgEI... / pypi-AgEN... for TestPyPI)",
        ("pypi-ag",),
    ),
    SecretPattern(
        "huggingface_token",
        _rx(r"hf_[A-Za-z0-9]{30,}"),
        "Hugging Face access tokens",
        ("hf_",),
    ),
    SecretPattern(
        "url_password",
        _rx(
            r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://"
            r"[^\s:/?#@\[\]]*:(?P<secret>[^\s/?#]+)@"
        ),
        "user:password@ in URLs: only the password goes; scheme, user and host stay",
        ("://",),
    ),
    SecretPattern(
        "password",
        _assignment(_PASSWORD_KEYS),
        "password/passwd/passphrase/pass/pwd assignments (JSON, YAML, env, code, query strings)",
        ("pass", "pwd"),
        _looks_like_a_value,
    ),
    SecretPattern(
        "secret",
        _assignment(_SECRET_KEYS),
        "token/secret/api_key/apikey/client_secret/private_key assignments; key must end with it",
        ("secret", "token", "key"),
        _looks_like_a_value,
    ),
)


def _secret_span(match: re.Match[str]) -> tuple[int, int]:
    for name in match.re.groupindex:
        if name.startswith("secret") and match.group(name) is not None:
            return match.span(name)
    return match.span()


def find_secrets(text: str) -> list[tuple[str, int, int]]:
    """Spans to redact as ``(kind, start, end)``, sorted, non-overlapping (overlaps merged)."""
    lowered = text.lower()
    found: list[tuple[int, int, int, str]] = []  # start, row order, end, kind
    for order, row in enumerate(PATTERNS):
        if not any(trigger in lowered for trigger in row.triggers):
            continue
        for match in row.pattern.finditer(text):
            start, end = _secret_span(match)
            secret = text[start:end]
            if start == end or secret.startswith("[redacted:"):
                continue
            if row.accept is not None and not row.accept(match, secret):
                continue
            found.append((start, order, end, row.kind))
    found.sort()
    merged: list[tuple[str, int, int]] = []
    for start, _order, end, kind in found:
        if merged and start < merged[-1][2]:
            last_kind, last_start, last_end = merged[-1]
            merged[-1] = (last_kind, last_start, max(last_end, end))
        else:
            merged.append((kind, start, end))
    return merged


def _redact_once(text: str) -> str | None:
    spans = find_secrets(text)
    if not spans:
        return None
    pieces: list[str] = []
    position = 0
    for kind, start, end in spans:
        pieces.append(text[position:start])
        pieces.append(f"[redacted:{kind}]")
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


_MAX_PASSES = 4


def scrub(text: str) -> str:
    """``text`` with every recognised credential replaced by ``[redacted:<kind>]``."""
    for _ in range(_MAX_PASSES):
        redacted = _redact_once(text)
        if redacted is None:
            return text
        text = redacted
    return text
