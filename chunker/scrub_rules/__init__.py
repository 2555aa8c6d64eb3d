"""The credential table: every kind the scrubber recognises, as data (a regex, why, triggers).

Owns: ``PATTERNS``, the rows of the family modules in the order the engine runs them (a module per
family; what a row is and the vetoes rows share: ``chunker.scrub_rules.common``). Each row carries
its evidence: the examples it must remove (with the exact span) and the lookalikes it must leave,
checked row by row by tests/unit/test_scrub_rules.py; docs/scrubber.md is generated from them. The
engine that runs the table is ``chunker.scrub``; bump its ``SCRUB_VERSION`` whenever a row changes
what it redacts. A new rule is one row, with its evidence, in its family's module; then rerun
``tools/scrub_catalogue.py``.

Must not: do I/O or keep any text. Every regex must stay linear on any input: a row that can
start anywhere is anchored with a look-behind (``(?<![A-Za-z0-9_-])``) so that a run of
prefix-like text ("eyJeyJeyJ...") is scanned from one start, not from each of its positions;
``bench/scrub_bench.py`` runs each trigger repeated over 60 KB and 600 KB to show it.

How a row redacts: its ``secret*`` group when it has one (the value of ``password=...``, the
password of ``https://user:pass@host``), else the whole match, so keys, schemes and hosts stay
readable. A row's ``refine`` may veto a match (code, not a secret) or move the span (a value
that runs to the end of the line). Rows run only when one of their lowercase triggers occurs
in the lowered text; a row with no triggers always runs (it has no literal to look for).

Decisions (each backed by the corpus in tests/data/scrub/):

- Distinctive vendor prefixes (``ghp_``, ``glrt-``, ``xoxe-``, ``hvs.``, ``dop_v1_``, ...) match
  even when the token is cut short (4+ characters after the prefix): a key pasted in halves, or
  completed by an edit, loses both halves.
- ``key = value`` assignments: the key must *end* with a credential word at a word boundary
  (``DB_PASS``, ``dbPass``, ``smtp-pass``, ``--pass``, ``ADMIN_PWD``, but not ``bypass`` or
  ``token_count``). A bare value is code, not a secret, when it is a call, subscript, template,
  variable, placeholder, path (``/etc/ssl/x.key``, ``PWD=/home/x``), a small count (``pass: 2``,
  ``Pass: 112``), a plain word from a short list (``required``, ``true``) or a dotted attribute
  of lowercase names (``form.password``, ``credentials.token``). A value after ``:`` or after
  ``= `` (a space: YAML, INI, prose) runs to the end of the line, so ``passphrase: correct
  horse battery staple`` goes whole; after ``=`` with no space (shell, query strings) it runs
  to the next space, or to ``&``/``#`` inside a query string, so ``Tr0ub4dor&3xK9`` goes whole.
- Passwords told in prose ("my password is …", "mein Passwort ist …", "mi contraseña es …",
  "пароль: …", "密码是 …") are redacted when the value does not look like a plain word.
- A label without a verb, a colon or an ``=`` ("password hunter2", "mattermost token k3j9…",
  ``ZENDESK_API_TOKEN k3J9…``, "login with admin / S3cr3t!x") and an environment name in capitals
  ending ``_KEY``/``_PAT`` count only with a value shaped like a secret (``refine_secret_shaped``;
  16+ letters and digits after a bare "token"), so "password reset", "SORT_KEY=created_at" and
  "the token count_per_window_2048" stay.
- Which rows a text triggers is one pass of an Aho-Corasick automaton over all triggers
  (``chunker.scrub.triggered_rows``); a row with no literal of its own opens with a rare character
  class (``5``/``K``/``L`` of a Bitcoin key) so that the engine skips to it fast.
- No entropy-only row: a random-looking string is a secret only with a vendor shape or a label.
  Git SHAs, sha256 sums, UUIDs and base64 data URIs stay (see docs/quality.md, "Scrubbing").
"""

from __future__ import annotations

from chunker.scrub_rules import (
    chat_and_mail,
    clouds,
    code_and_tool_output,
    command_lines,
    forges,
    headers_and_urls,
    labelled_values,
    payments_and_ai,
    phrases_and_config,
    private_keys,
    told_passwords,
    told_values,
)
from chunker.scrub_rules.common import SecretPattern, Span, secret_span

__all__ = ["FAMILIES", "PATTERNS", "SecretPattern", "Span", "secret_span"]

# The order is the engine's: a family's rows run after those of the families above it.
FAMILIES = (
    private_keys,
    forges,
    clouds,
    chat_and_mail,
    payments_and_ai,
    headers_and_urls,
    command_lines,
    phrases_and_config,
    told_passwords,
    told_values,
    labelled_values,
    code_and_tool_output,
)
PATTERNS: tuple[SecretPattern, ...] = tuple(row for family in FAMILIES for row in family.ROWS)
