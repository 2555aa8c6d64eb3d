"""The credential table: every kind the scrubber recognises, as data (a regex, why, triggers).

Owns: ``SecretPattern`` and ``PATTERNS`` (one row per kind), and the vetoes that tell code and
placeholders from secrets (``refine_assignment`` and friends). The engine that runs the table is
``chunker.scrub``; bump its ``SCRUB_VERSION`` whenever a row changes what it redacts.

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

import base64
import hashlib
import re
from dataclasses import dataclass
from typing import Callable

Span = tuple[int, int]


@dataclass(frozen=True, slots=True)
class SecretPattern:
    kind: str
    pattern: re.Pattern[str]
    why: str
    triggers: tuple[str, ...]  # lowercase; the row runs only if one occurs in the lowered text
    # Given the match and the whole text, the span to redact, or None when it is not a secret.
    refine: Callable[[re.Match[str], str], Span | None] | None = None
    # A match preceded by one of these characters is glued to a longer token: not this kind.
    # (A check in Python, so the regex can start with its literal prefix and search fast; a
    # leading look-behind would make the engine try every position of the text.)
    not_after: str = ""
    # The regex runs on the text with ASCII letters lowered (same length, same offsets), so it is
    # written in lower case and searched case-sensitively: an (?i) literal cannot be searched fast.
    folded: bool = False


def _rx(source: str, flags: int = 0) -> re.Pattern[str]:
    # ASCII: a token glued to a non-ASCII letter ("éghp_...") must still count as a token start.
    return re.compile(source, flags | re.ASCII)


def secret_span(match: re.Match[str]) -> Span:
    for name in match.re.groupindex:
        if name.startswith("secret") and match.group(name) is not None:
            return match.span(name)
    return match.span()


# A token starts here: not glued to a preceding token character.
_TOKEN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_ALNUM = _TOKEN_CHARS[:-2]
# Vendor tokens keep their prefix; the body may be cut short (a half-pasted key still goes).
_BODY = r"[A-Za-z0-9_-]{4,}"
# A lowercase UUID: the whole body of several vendors' tokens (HubSpot, Plaid, LaunchDarkly).
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def _prefixed(
    kind: str, prefixes: tuple[str, ...], why: str, body: str = _BODY, not_after: str = _TOKEN_CHARS
) -> SecretPattern:
    alternatives = "|".join(re.escape(p) for p in prefixes)
    return SecretPattern(
        kind, _rx(rf"(?:{alternatives}){body}"), why, tuple(p.lower() for p in prefixes), not_after=not_after
    )


# ---- assignments ---------------------------------------------------------------------------

_CODE_WORDS = frozenset(
    "none null nil true false undefined str string bytes int optional secretstr any self await new"
    " yield lambda not async function typeof yes no ok required hidden redacted masked empty unset"
    " tbd todo skip skipped fail failed passed n/a na change_me changeme change-me removed".split()
)
_PATH = re.compile(r"(?:/|~/|\./|\.\./|[A-Za-z]:\\)\S*")
_DOTTED_CODE = re.compile(r"[a-z_][a-zA-Z_]*(?:\.[a-z_][a-zA-Z_]*)+(?:\(\))?")
_CODE_OWNERS = re.compile(r"(?:self|this|cls|os|env|process|config|settings|args|opts|options|req|request)\.")
_TEMPLATE = re.compile(r"\$\{.*\}|\{\{.*\}\}|<[^<>]*>|%\(\w+\)s|\*+|x{3,}|X{3,}|\.{3}|…")
_CLOSERS = {")": "(", "]": "[", "}": "{", ">": "<"}


def _trim_bare(value: str, in_query: bool) -> str:
    """The value of a bare assignment as it would be read: a query value ends at ``&``/``#``;
    trailing ``,``/``;`` and closing brackets that the value did not open belong to the code."""
    if in_query:
        value = re.split(r"[&#]", value, maxsplit=1)[0]
    if value.endswith("):"):
        value = value[:-1]  # def f(password=None): the colon opens the function's body
    while value:
        last = value[-1]
        if last in ",;" or (last in _CLOSERS and value.count(_CLOSERS[last]) < value.count(last)):
            value = value[:-1]
        else:
            break
    return value


def _bare_is_code(value: str, key: str) -> bool:
    if not value or value[0] in "$%<@*([{&":
        return True  # a variable ($TOKEN), a placeholder (<token>), masked (****)
    if re.search(
        r"[A-Za-z0-9_]\((?:[^()]*\)|[\"']|[A-Za-z_][A-Za-z0-9_.]*,?$|$)|[A-Za-z0-9_]\[(?:[^\[\]]*\]|[\"']|$)|\{", value
    ) or ("<" in value and ">" in value):
        return True  # a call, subscript or template: input(), os.environ["X"], x:<path>
    lowered = value.lower()
    if re.match(r"[A-Za-z_]\w*\)", value) or lowered.rstrip(":") in _CODE_WORDS:
        return True  # whoami(token=token)["name"], getPassword = lambda: None
    if lowered in _CODE_WORDS or (value.isdigit() and len(value) <= 4):
        return True  # pass: 2 in a lunch vote, Pass: 112 in a CI summary
    if set(value) <= set(".*xX-_#") or "..." in value or "…" in value or "••" in value or "●●" in value:
        return True  # ..., xxxx, ----, sk-...your-key..., ghp_••••: a visible placeholder
    if re.fullmatch(r"[a-z][a-z0-9+.-]*://[^@\s]*", value) and not value.startswith(("http", "ftp")):
        return True  # op://vault/item/field, vault://...: a reference to where the secret is
    if value.startswith("!") and value[1:].isalpha():
        return True  # password: !secret mqtt_password (a YAML tag: Home Assistant's secrets.yaml)
    if re.search(r"<[a-z]", value, re.IGNORECASE):
        return True  # sk_test_<your key here>: a template cut at its first space
    if re.fullmatch(r"[A-Z][a-z]+-[A-Z][A-Za-z]+", value):
        return True  # $pw = Read-Host ...: a PowerShell cmdlet (Verb-Noun)
    if _PLACEHOLDER_PHRASE.search(value):
        return True  # YOUR_API_KEY, INSERT_BOT_TOKEN_HERE
    if _PATH.fullmatch(value):
        return True  # private_key: /etc/ssl/x.key, PWD=/home/x
    if _CODE_OWNERS.match(value) or _DOTTED_CODE.fullmatch(value):
        return True  # self.token, form.password, credentials.token
    key_word = re.split(r"[.\-]", key.lower().lstrip("-"))[-1]
    if lowered == key_word or lowered in (key.lower(), key.lower().lstrip("-")):
        return True  # token=token: passing a variable on
    if lowered in ("self", "input()", "getpass()"):
        return True
    if re.match(r"[A-Za-z_][\w.]*[(\[]", value):
        return True  # pw = pytree.WildcardPattern([...]), Union[str, bytes]: a call or a subscript
    if len(value) <= 2:
        return True  # "token": i
    if re.fullmatch(r"[A-Za-z_][A-Za-z_]*(?:\.[A-Za-z_][A-Za-z_]*)+|[a-z]+(?:[A-Z][a-z]+)+", value):
        return True  # token = EXCLUDED.token, private_key=caKey, with_password=includeSecrets
    if "." in key and key.split(".", 1)[0] in ("self", "this", "cls") and re.fullmatch(r"[a-z_][a-z_]*", value):
        return True  # self.token = nextchar: an attribute set from a variable
    if re.fullmatch(r"[A-Z][A-Za-z]*(?:\.[A-Z][A-Za-z]*)+", value):
        return True  # token = Comment.Preproc: a class attribute
    if _CODE_IDENTIFIER.fullmatch(value):
        return True  # password=getpass_bytes, token = current_token, KEY_PASSWORD: a variable or constant
    if re.fullmatch(r"[A-Za-z_][A-Za-z_]*", value) and lowered.endswith(key_word.lstrip("_")[-5:]):
        return True  # access_token=token, self._authkey = authkey: a variable named after the key
    return False


# A name in code: snake_case with two parts or more, or a constant in capitals with one
# underscore or more (a password in chat is rarely two lowercase words joined by an underscore).
_CODE_IDENTIFIER = re.compile(r"_?[a-z][a-z0-9]*(?:_[a-z][a-z0-9]*)+|[A-Z][A-Z0-9]*(?:_[A-Z][A-Z0-9]*)+")


_PLACEHOLDER_PHRASE = re.compile(
    r"(?:^|[\W_])(?:your|insert|paste|put|replace|enter|changeme_to)(?:[\W_]|$).*(?:here|key|token|password|secret|phrase)|^your[\W_]",
    re.IGNORECASE,
)


def _quoted_is_placeholder(value: str) -> bool:
    return (
        value.isspace()
        or bool(_TEMPLATE.fullmatch(value.strip()))
        or value.lower().strip("[]<>")
        in ("none", "null", "", "redacted", "removed", "hidden", "secret", "changeme", "change_me")
        or bool(_PLACEHOLDER_PHRASE.search(value))
        or set(value) <= set("•●*·")
        or bool(re.fullmatch(r"&[\w.]+;|.*%[sdr].*|.*\{\d*\}.*", value))  # an entity, a format string
        or bool(re.fullmatch(r"#[0-9a-fA-F]{3,8}|\[[A-Z_]+\]|<[a-z_|]+>", value))  # a colour; [PAD], <unk>
        or not any(c.isalnum() for c in value)  # token = "'", end_token = '}'
    )


def refine_assignment(match: re.Match[str], text: str) -> Span | None:
    key = _key_of(match, text)
    if key is None:
        return None
    if key.startswith("M_") or key.lower().startswith(("existing", "secretkeyref", "secretname")):
        return None  # M_UNKNOWN_TOKEN: (a Matrix errcode), existingSecret: name (a reference)
    if _ENV_KEY_NAME.fullmatch(key) and not _KEY_COMPOUND.search(key.lower()):
        start, end = secret_span(match)
        return _shaped_value_span(text, start, end)
    key_start = match.end("kw") - len(key)
    if _code_statement_around(text, key_start, match.end()) or _documents_the_key(text, key_start, match):
        return None
    if text[key_start - 1 : key_start] == "[" and key_start > 1 and text[key_start - 2] not in " \t([,=:":
        return None  # self._cache[token] = obj, list[Token] = ...: a variable as a subscript, not a key
    quoted_group = "secret_dq" if match.group("secret_dq") is not None else "secret_sq"
    # From the text: a folded row's groups hold the lowered copy.
    quoted = text[match.start(quoted_group) : match.end(quoted_group)] if match.group(quoted_group) else None
    if quoted is not None and (
        _names_the_key(quoted, key) or (key.isupper() and re.fullmatch(r"[A-Za-z]+(?:_[A-Za-z]+)+", quoted))
    ):
        return None  # EXPIRED_TOKEN = "expired_token", PASSWORD: Final = "m.login.password": an enum
    if match.group("secret_bare") is None:
        return _quoted_not_placeholder(match, text)
    start = match.start("secret_bare")
    raw = text[start : match.end("secret_bare")]
    in_query = key_start > 0 and text[key_start - 1] in "?&;"
    value = _trim_bare(raw, in_query)
    if (
        raw.lower() in ("b", "r", "f", "u", "rb", "br", "rf", "fr")
        and text[match.end("secret_bare") : match.end("secret_bare") + 1] in "\"'"
    ):
        return None  # password=b'...': a bytes literal in code
    if raw.endswith("}") and "{" not in raw and text[max(0, key_start - 1) : key_start] == "{":
        return None  # f'token {token:02x}': a format field, the key a variable inside it
    if _bare_is_code(value, key):
        return None
    end = start + len(value)
    separator = text[match.end("kw") : start]
    if not in_query and (":" in separator or re.search(r"=[ \t]", separator)):
        # YAML, INI, prose: the value is the rest of the line (a passphrase has spaces).
        line_end = text.find("\n", start)
        line_end = len(text) if line_end < 0 else line_end
        rest = text[start:line_end].rstrip(" \t\r")
        if rest.endswith(","):
            rest = rest[:-1]  # a JSON/YAML flow separator
        end = max(end, start + len(rest))
    return start, end


# The first word of a description of a parameter ("token: The token to wait for.").
_DESCRIPTION_OPENERS = frozenset(
    "the a an if when where which whether to used for of optional ignored this that we is are must should will"
    " can see defaults list enable whose how what".split()
)
# A type annotation (``client_secret: ClientSecretStr``, ``token: object,``): CamelCase or a builtin type.
_TYPE_NAME = re.compile(r"(?:[A-Z][a-z]+){2,}[A-Z]?|object|int|float|bool|dict|list|tuple|set|bytes|Any|Callable")


def _names_the_key(value: str, key: str) -> bool:
    """True when a quoted value is the key's own name (a constant naming a field or a type)."""
    plain_value = re.sub(r"[\W_]", "", value).lower()
    plain_key = re.sub(r"[\W_]", "", key).lower()
    return bool(plain_value) and (plain_value == plain_key or plain_value.endswith(plain_key[-8:]) and "." in value)


def _documents_the_key(text: str, key_start: int, match: re.Match[str]) -> bool:
    """True when the line documents a parameter or field named like a credential rather than
    setting it: ``@param password: The password``, ``:arg token: the token``, a description of
    three words or more that opens like one, or a type annotation."""
    before = text[max(0, key_start - 40) : key_start].rpartition("\n")[2]
    if re.search(r"(?:[@:](?:param|ivar|cvar|var|arg|type|keyword|raises?)[ \t]+(?:\w+[ \t]+)?)\Z", before):
        return True
    value_start = match.start("secret_bare") if match.group("secret_bare") is not None else -1
    if value_start < 0 or ":" not in text[match.end("kw") : value_start]:
        return False
    rest = text[value_start : value_start + 200].partition("\n")[0]
    words = rest.split()
    prose = len(words) >= 2 and all(re.fullmatch(r"[A-Za-z'-]+[.,;:!]?", w) for w in words[:6])
    if prose and (
        re.search(r"\b(?:token|key|password|secret|passphrase|credentials?)\b", rest, re.IGNORECASE)
        or (len(words) >= 3 and re.match(r"[ \t]*(?:#|//|--|\*)[ \t].*[a-z][ \t]+\Z", before))
    ):
        return True  # api_key: API key of the space; # refreshed this token: adopt its result.
    if (
        len(words) >= 3
        and words[0].lower() in _DESCRIPTION_OPENERS
        and all(re.fullmatch(r"[A-Za-z'-]+[.,;:]?", w) for w in words[:3])
    ):
        return True
    if re.search(r"\)[ \t]*->", rest):
        return True  # def f(sig: Signature) -> int: an annotated parameter
    if (
        len(words) >= 3
        and re.fullmatch(r"[A-Z][a-z]+", words[0])
        and all(re.fullmatch(r"[a-z]+[.,;:]?", w) for w in words[1:3])
    ):
        return True  # batch_token: Pagination information for..., to_token: Latest point to return: a description
    return bool(_TYPE_NAME.fullmatch(words[0].rstrip(",)=") if words else ""))


def _code_statement_around(text: str, key_start: int, value_end: int) -> bool:
    """True when the assignment is one step of a code statement: a tuple on the left
    (``self.user, self.password = user, password``), a chain (``a = passwd = ''``), or a
    string value that an operator goes on building (``sig = "at least %d" % (n,)``)."""
    # Only the text near the key is read: a long line of assignments must stay linear.
    before = text[max(0, key_start - 120) : key_start].rpartition("\n")[2]
    if re.search(r"[\w\])],[ \t]*\Z", before) or re.search(r"\w[ \t]*=[ \t]*\Z", before):
        return True
    after = text[value_end : value_end + 120].partition("\n")[0]
    return bool(
        re.match(
            r"[ \t]*(?:=(?!=)[ \t]*\S|%[ \t]|\.format\(|\+[ \t]*[A-Za-z_\"'(]|,[ \t]*[A-Za-z_][\w.]*[ \t]*\Z"
            r"|[ \t]+(?:[-+*/%^|&]|//|\*\*|<<|>>)[ \t]+[A-Za-z_(\d])",
            after,
        )
    )


def _key(words: str) -> str:
    # The regex finds the credential word (a literal search, fast); the rest of the key is found
    # by walking back in ``_key_of``.
    return rf"(?P<kw>{words})"


_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_GLUED_CAPS = ("PASSWORD", "PASSWD", "PASSPHRASE", "TOKEN", "SECRET", "APIKEY")
# Tools that read a password from an environment name with PASS glued on (not BYPASS, COMPASS).
_PASS_ENV_NAMES = frozenset({"SSHPASS", "PGPASS", "SMBPASS", "FTPPASS", "LDAPPASS", "DBPASS", "RCLONE_PASS"})


def _key_of(match: re.Match[str], text: str) -> str | None:
    """The whole key that ends with the matched credential word, or None when the word does not
    end the key at a word boundary. It must follow _ . - or a camelCase hump, or be the key
    alone: DB_PASS, dbPass, smtp-pass, --pass, but not bypass or compass. All capitals may glue
    the long forms on (PGPASSWORD), not PASS (BYPASS)."""
    word_start = match.start("kw")
    start = word_start
    while start > 0 and text[start - 1] in _KEY_CHARS:
        start -= 1
    if match.group("kw") in ("key", "pat", "private"):  # only as the end of a compound, which is the word here
        compound = _KEY_COMPOUND.search(text[start : match.end("kw")].lower())
        if compound is None:
            # An environment name in capitals ending _KEY or _PAT (ALGOLIA_ADMIN_KEY, AZURE_DEVOPS_PAT):
            # the caller then wants a value shaped like a secret (SORT_KEY=created_at stays).
            return text[start : match.end("kw")] if _ENV_KEY_NAME.fullmatch(text[start : match.end("kw")]) else None
        word_start = start + compound.start()
    if start < word_start:
        before, first, word = (
            text[word_start - 1],
            text[word_start],
            text[word_start : match.end("kw")].replace("_", "").replace("-", ""),
        )
        glued = text[start:word_start]
        glued_caps = (glued.isupper() or glued.islower()) and word.upper() in _GLUED_CAPS
        glued_caps = glued_caps or text[start : match.end("kw")].upper() in _PASS_ENV_NAMES
        camel = (before.islower() or before.isdigit()) and first.isupper()
        if before not in "_.-" and not camel and not glued_caps:
            return None
    return text[start : match.end("kw")]


def _assignment(words: str) -> re.Pattern[str]:
    """``<key><sep><value>``: password=x, "dbPass": "x", PASSWORD=x, pass: x, token: str = "x",
    'api_key' => 'x', <add key="Password" value="x"/> is its own row."""
    return _rx(
        _key(words) + r"[\"']?\]?[ \t]*"  # the closing quote of a JSON or dict key, a subscript's ]
        r"(?:"
        r":[ \t]*[&A-Za-z_][\w.\[\]|, &']*?[ \t]+(?:=>|=(?!=))"  # annotated: token: str = ..., KEY: &str = ...
        r"|=>|=(?!=)|:(?![:/=])"  # not ==, not a::b, not scheme://, not :=
        r")[ \t]*(?:\*\*[ \t]*)?"  # **pw:** `x` (Markdown bold around the label)
        r"(?:\"(?P<secret_dq>(?:[^\"\\\n]|\\.)+)\""
        r"|'(?P<secret_sq>(?:[^'\\\n]|\\.)+)'"
        r"|`(?P<secret_bq>[^`\n]+)`"
        r"|(?P<secret_bare>[^\s\"'`]+))"
    )


_PASSWORD_WORDS = r"pass(?:word|wd|phrase|wort|code)?|pwd|pw|psk|authtok|_auth"
# The last word of the key; "key" counts only in the compounds below (api_key, privateKey, ...),
# not alone ("key: value" is any YAML) nor in monkey or hotkey. Searching for the last word
# alone keeps the search fast; ``refine_assignment`` checks the compound.
_SECRET_WORDS = r"secret|token|key|credentials|sig|dsn|pat|private"
_KEY_COMPOUND = re.compile(
    r"(?:api|auth|private|secret|access|signing|account|master|encryption|client|app|license|pickle)[_-]?key\Z"
)
# PAT alone is a name, not a credential word; as the end of an environment name it is a personal access token.
_ENV_KEY_NAME = re.compile(r"[A-Z][A-Z0-9_]*_(?:KEY|PAT|PRIVATE)")


# ---- prose ------------------------------------------------------------------------------------

# One row per language: each regex starts with its own literal, which the engine searches fast,
# and runs only when its trigger occurs.
# "das Passwort für den Server ist X", "a senha do wifi é X": up to three words naming what it is for.
_DE_FOR = r"(?:\s+(?:für|fürs|zum|zur|vom|von|des|der|bei)(?:\s+[^\s:]+){1,3}?)?"
_ROMANCE_FOR = r"(?:\s+(?:de|del|do|da|dos|das|du|des|para|pour|per|della|dello)(?:\s+[^\s:]+){1,5}?)?"
_SLAVIC_FOR = r"(?:\s+(?:от|для|к|на|до|від|do|od|dla|na|k|ke|pro)(?:\s+[^\s:]+){1,3}?)?"
_PROSE_LEADS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        r"p(?:assword|asswd|assphrase|ass|w)(?:\s+(?:is|was)(?:\s+(?:now|literally|just|still|actually|simply))?|['’]s)",
        ("pass", "pw"),
    ),
    # changed my password to X, the password was reset to X: the value after "to" (a plain word stays)
    (r"p(?:assword|asswd|assphrase|w)\b[^\n.!?]{0,30}?\sto(?=\s)", ("password", "passwd", "passphrase", "pw")),
    (r"(?:passwort|kennwort)" + _DE_FOR + r"(?:\s+(?:ist|lautet|war)|\s*:)", ("passwort", "kennwort")),
    (r"mot\s+de\s+passe" + _ROMANCE_FOR + r"(?:\s+(?:est|c'est)|\s*:)", ("mot de passe",)),
    (r"(?:contraseña|contrasena|clave)" + _ROMANCE_FOR + r"(?:\s+(?:es|era)|\s*:)", ("contrase", "clave")),
    (r"senha" + _ROMANCE_FOR + r"(?:\s+(?:é|e|eh)|\s*:)", ("senha",)),
    (
        r"password(?:\s+(?:del|della|dello|dell['’]\S+|di|per)(?:\s+[^\s:]+){0,4}?(?:\s+(?:è|e)|\s*:)|\s+(?:è|e))",
        ("password",),
    ),
    (r"wachtwoord(?:\s+(?:van|voor)(?:\s+[^\s:]+){1,3}?)?(?:\s+(?:is|was)|\s*:)", ("wachtwoord",)),
    (r"mdp" + _ROMANCE_FOR + r"(?:\s+(?:est|c'est)|\s*:)", ("mdp",)),
    (r"비번(?:은|는)?\s*:?", ("비번",)),
    (r"(?:wifi-?)?lösen(?:ordet)?(?:\s+(?:i|till|för|på)(?:\s+[^\s:]+){1,3}?)?\s*:", ("lösen",)),
    (r"has[łl]o" + _SLAVIC_FOR + r"(?:\s+(?:to|jest)|\s*:)", ("hasło", "haslo")),
    (r"heslo" + _SLAVIC_FOR + r"(?:\s+(?:je|bylo)|\s*:)", ("heslo",)),
    (r"salasana(?:\s+on|\s*:)", ("salasana",)),
    (
        r"(?:adgangskode|adgangskoden|passord|passordet)(?:\s+(?:til|for|på)(?:\s+[^\s:]+){1,4}?)?(?:\s+(?:er|var)|\s*:)",
        ("adgangskode", "passord"),
    ),
    (r"jelsz[óo](?:\s*:|\s+)", ("jelszó", "jelszo")),
    (r"kata\s+sandi(?:nya(?:\s+(?:adalah|ialah))?|\s+(?:adalah|ialah)|\s*:)", ("kata sandi",)),
    (r"m[ậa]t\s+kh[ẩa]u(?:\s+(?:là)|\s*:)", ("mật khẩu", "mat khau")),
    (r"lösenord(?:et)?(?:\s+(?:till|för)(?:\s+[^\s:]+){1,3}?)?(?:\s+(?:är|var)|\s*:)", ("lösenord",)),
    (r"[şŞ]ifre(?:m|si)?\s*(?:de|:)?", ("şifre",)),
    (r"(?:пароль|Пароль)" + _SLAVIC_FOR + r"(?:\s+(?:—|-|это|був|был))?\s*:?", ("пароль",)),
    (r"parola" + _ROMANCE_FOR + r"(?:\s+(?:e|este|era)|\s*:)", ("parola",)),
    (r"password\s+(?:hai|he)", ("password",)),
    (r"pasvorto\s+(?:estas|:)", ("pasvorto",)),
    (r"contrasenya" + _ROMANCE_FOR + r"(?:\s+(?:és|es|era)|\s*:)", ("contrasenya",)),
    (r"code\s+d['’]accès" + _ROMANCE_FOR + r"(?:\s+(?:est|c'est)|\s*:)", ("code d'accès", "code d’accès")),
)
# Leads in scripts that glue words together or have no letter case: a row each with no not_after
# (wifi密码是 …, 服务器root密码： …), the value after them judged like any told value.
_UNSPACED_LEADS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"(?:密码|密碼)(?:是|为|為|:|：|\s|改成|改为|改為|换成|換成)\s*", ("密码", "密碼")),
    (r"パスワード(?:は|:|：|[^\n:：]{1,12}[:：])", ("パスワード",)),
    (r"ww\s*:", ("ww",)),
    (r"비밀번호(?:는|:)", ("비밀번호",)),
    (r"(?:كلمة\s+(?:ال)?(?:سر|مرور)|باسورد|الباسورد)[^\n:]{0,30}?(?:\s+هي|\s+هو|\s*:)", ("كلمة", "باسورد")),
    (r"(?:ה)?סיסמ(?:ה|א)(?:\s+היא|\s+זה|\s*:)", ("סיסמ",)),
    (r"पासवर्ड(?:\s+है|\s*:)", ("पासवर्ड",)),
    (r"(?:κωδικός|κωδικος|συνθηματικό)(?:\s+(?:είναι|ειναι)|\s*:)", ("κωδικ", "συνθηματικ")),
    (r"(?:رمز\s+عبور|رمز)(?:\s+(?:است|هست)|\s*:)", ("رمز",)),
    (r"รหัสผ่าน(?:คือ|:|\s)", ("รหัสผ่าน",)),
)
_PROSE_VALUE = r"[ \t]*(?P<secret>[\"'«“„`][^\"'»”“`\n]+[\"'»”“`]|[^\s\"'«“„`]+)"


def refine_prose(match: re.Match[str], text: str) -> Span | None:
    start, end = match.span("secret")
    value = text[start:end].rstrip(".,!?;:)]}。、！？")
    if not value:
        return None  # "забыл пароль, письмо …": only punctuation followed the label
    if _TEMPLATE.fullmatch(value.strip("\"'`")) or "{{" in value:
        return None  # "{{ vault_mysql_root_password }}": a template
    if value[:1] == "`" and re.fullmatch(r"`[a-z_][a-z0-9_]*_[a-z0-9_]*`", value):
        return None  # rename `password` to `password_hash`: a column, not a password
    if value[:1] in "\"'«“„`":
        return start, end  # a quoted value is told on purpose
    if any("\u3040" <= c <= "\u9fff" or "\uac00" <= c <= "\ud7af" for c in value):
        return None  # パスワードは8文字以上: Japanese, Chinese or Korean words, not a password
    plain = value.islower() or value.istitle() or value.upper() == value.lower() or any(ord(c) > 0x24F for c in value)
    if len(value) < 4 or value.isalpha() and plain:
        return None  # "the password is wrong", "das Passwort ist geheim", "管理者に聞いてください", "DM으로"
    if value.lower() in _CODE_WORDS or _PATH.fullmatch(value):
        return None
    return start, start + len(value)


# A password named without a verb ("ssh in with password toor1234!", "use password hunter2x")
# and a key or token told in words ("the api key is 9f8e…"): with no "is" or ":" to say a value
# follows, only a value shaped like a secret counts, so "password reset", "the token is expired"
# and "password sha256 hashes" stay.
# Each lead opens with its literal (look-behinds after it) so that the engine searches it fast.
# Not bare "pass": it is a verb in code talk ("you can't pass *mut/*const between threads").
_BARE_PASSWORD_LEAD = r"p(?<![^\s(\[_]p)(?:assword|asswd|assphrase|asswort|wd|w)[ \t]+"
_PROSE_KEY_LEAD = (
    r"(?:api[ _-]?key|access[ _-]?key|secret[ _-]?key|key|token|secret|pass(?:word|wd|phrase|wrod|owrd|code)?|pasword|pwd|pw|p/w|psk|pat"
    r"|access[ _-]?code|secret[ _-]?word|magic[ _-]?word|safe[ _-]?word)"
    r"(?:"
    r"(?:[ \t]+(?:for|to|of|on|from|del|de|da|do|von|für)[ \t]+[^\s]+(?:[ \t]+[^\s]+){0,6})?(?:[ \t]+(?:is|was)(?:[ \t]+(?:now|literally|just|still|actually|simply))?[ \t]+|[ \t]+(?:->|→)[ \t]+"
    r"|[ \t]+(?:changed|updated|reset|rotated)(?:[ \t]+to[ \t]+|[ \t]*:[ \t]*))"
    r"|[ \t]+(?:for|to|of|on|from|del|de|da|do|von|für)[ \t]+[^\s]+(?:[ \t]+[^\s]+){0,8}?[ \t]*[:=][ \t]*"  # the pw for the wifi: X
    r"|['’]s[ \t]+"  # the wifi pwd's X
    r"|[ \t]*\([^)\n]{1,60}\)[ \t]*:[ \t]*"  # access token (@bot@fosstodon.org): X
    r")"
)
_PROSE_PLAIN_VALUE = r"[\"'`]?(?P<secret>[^\s\"'`]+)"
_NOT_SECRET_SHAPES = re.compile(
    r"(?:sha\d*|md5|bcrypt|s?crypt|argon2(?:id|i|d)?|pbkdf2\w*|base64|utf-?8|2fa|mfa|totp|otp|v?\d+(?:\.\d+)+\w*"
    r"|\d+(?:st|nd|rd|th|x|px|ms|s|min|h|d|kb|mb|gb|%)?)",
    re.IGNORECASE,
)

_KEY_CHORD = re.compile(r"(?:(?:ctrl|shift|alt|cmd|meta|super|option|opt|win|fn)\+)+\S+", re.IGNORECASE)


def refine_secret_shaped(match: re.Match[str], text: str) -> Span | None:
    """The value counts only when it looks made to be secret: 8+ characters mixing letters and
    digits, or 6+ with a symbol; never a path, dotted code, a hash name, a version or a count."""
    start, end = match.span("secret")
    return _shaped_value_span(text, start, end)


def refine_told_value(match: re.Match[str], text: str) -> Span | None:
    """As ``refine_secret_shaped``, and also: a single word of 16+ letters (a passphrase run
    together, correcthorsebatterystaple, is no word a sentence goes on with), a diceware password
    after a password's name, and one word after "secret word"; never a value told as public."""
    start, end = match.span("secret")
    value = text[start:end].rstrip(".,;:!?)]}")
    lead = match.group().lower()
    if "public" in lead[: start - match.start()]:
        return None  # master key (public): …, the key for the public API is …: told as public
    if len(value) >= 16 and value.isalpha():
        return start, start + len(value)
    if lead.startswith(("secret word", "safe word", "secret-word")) and len(value) >= 4 and value.isalpha():
        return start, start + len(value)  # the secret word for the meetup door is persimmon
    if lead.startswith(("pass", "pw", "pwd", "p/w")):
        return _shaped_or_diceware(match, text)  # pw for the pdf: ivory-quill-umber-dune
    return _shaped_value_span(text, start, end)


_DICEWARE = re.compile(r"[a-z]{3,}(?:-[a-z]{3,}){2,7}")


def refine_strong_password(match: re.Match[str], text: str) -> Span | None:
    """A value that can only be a password: 8+ characters with a capital, a small letter, a digit
    and one of !@#$%^&*?~ (try P@ssw0rd123): after a verb as loose as "try" or "use", nothing
    weaker counts."""
    start, end = match.span("secret")
    value = text[start:end].rstrip(".,;:)]}")
    if (
        len(value) >= 8
        and any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
        and any(c in "!@#$%^&*?~" for c in value)
        and not _PATH.fullmatch(value)
        and "://" not in value
    ):
        return start, start + len(value)
    return None


def refine_password_shaped(match: re.Match[str], text: str) -> Span | None:
    """As ``refine_secret_shaped``, but 6 letters and digits are enough after a password's own
    name ("password hunter2"): that word is rarely followed by anything else mixing them."""
    start, end = match.span("secret")
    if ":" in text[start:end]:
        return None  # user:pw, oauth:<token>: rows of their own name them
    return _shaped_value_span(text, start, end, mixed_length=6)


def _shaped_value_span(text: str, start: int, end: int, mixed_length: int = 8) -> Span | None:
    raw = text[start:end]
    if _TEMPLATE.fullmatch(raw) or "${" in raw or "{{" in raw or _KEY_CHORD.fullmatch(raw) or raw[:1] in "([{":
        return None  # ... or a tuple, list or call: "the key is (agent_id, name)"
    if re.search(r"<[A-Za-z]", raw):
        return None  # sk_test_<your key here>: a template cut at its first space
    if re.match(r"(?:ssh-(?:ed25519|rsa|dss)|ecdsa-sha2|sk-ssh-|sk-ecdsa-|age1[02-9ac-hj-np-z]|npub1)", raw):
        return None  # my SSH public key for the box: ssh-ed25519 AAAA...: public
    if "://" in raw:
        return None  # a URL: a credential inside one is the URL rows' to find
    if set(raw.rstrip(".")) <= set("*•●xX"):
        return None  # *******: masked
    value = text[start:end].rstrip(".,;:)]}?")
    if not value or _PATH.fullmatch(value) or _DOTTED_CODE.fullmatch(value):
        return None
    if value.lower() in _CODE_WORDS or _NOT_SECRET_SHAPES.fullmatch(value) or value.endswith("()"):
        return None
    if re.match(r"[A-Za-z_][\w.]*[(\[]", value) or _CODE_IDENTIFIER.fullmatch(value):
        return None  # sys.exit(1), self.auth_cache[key], rc2_key_st: a call, a subscript, a name in code
    if re.fullmatch(r"[A-Za-z_][A-Za-z_]*(?:\.[A-Za-z_][A-Za-z_]*)+|[A-Z]\{.*", value):
        return None  # token is Name.Other, Keyword.Type: an attribute in code; C{True}: epytext markup
    letters = any(c.isalpha() for c in value)
    digits = any(c.isdigit() for c in value)
    symbols = any(not c.isalnum() and c not in "_-/" for c in value)  # secret/db is a path
    if (len(value) >= mixed_length and letters and digits) or (len(value) >= 6 and symbols and (letters or digits)):
        return start, start + len(value)
    return None


# ---- rows ---------------------------------------------------------------------------------

_B64 = r"[A-Za-z0-9+/]"
# An Element key export (MEGOLM SESSION DATA) is armoured the same way: its room keys go like a private key.
_PEM_LABEL = r"(?:(?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?|MEGOLM SESSION DATA|OpenVPN Static key V1)"


_LAST_BODY_LINE = re.compile(r"[ \t]*[A-Za-z0-9+/]{1,80}={0,2}[ \t]*\r?")
_TRAILING_BODY_RUN = re.compile(r"(?:^|(?<=[ \t]))[A-Za-z0-9+/]{48,80}[ \t]*\r?\Z")


def _pem_body_lines(match: re.Match[str], text: str) -> Span | None:
    """The match is a run of full body lines (after a newline); the span grows back over the
    previous line's trailing base64 (a paste after a log prefix) and forward over one last
    shorter line. Two lines at least."""
    start, end = match.start() + 1, match.end()
    lines = match.group().count("\n")
    line_start = text.rfind("\n", 0, match.start()) + 1
    previous = text[line_start : match.start()]
    found = _TRAILING_BODY_RUN.search(previous)
    if found:
        start, lines = line_start + found.start(), lines + 1
    line_end = text.find("\n", end)
    if line_end >= 0:  # one last, shorter line (the regex took every full one)
        next_end = text.find("\n", line_end + 1)
        next_end = len(text) if next_end < 0 else next_end
        line = text[line_end + 1 : next_end]
        if line.strip() and _LAST_BODY_LINE.fullmatch(line):
            end, lines = next_end, lines + 1
    if lines < 2:
        return None
    body = text[start:end]
    opened = text.rfind("-----BEGIN ", 0, start)
    if (
        opened >= 0
        and "PRIVATE KEY" not in text[opened : text.find("\n", opened)]
        and "-----END" not in text[opened : match.start()]
    ):
        return None  # the body of a certificate or public key: public
    if re.fullmatch(r"[0-9a-fA-F\s]+", body):
        return None  # hex digests, one per line: not a key
    if not (re.search(r"[a-z]", body) and re.search(r"[A-Z]", body) and re.search(r"[0-9]", body)):
        return None
    return start, len(text[:end].rstrip(" \t\r"))


_PEM_BODY_LINE = re.compile(r"[ \t]*(?:[A-Za-z0-9+/=]+|[A-Za-z-]+: [^\n]*)?[ \t]*\r?")


def _pem_body_above_end(match: re.Match[str], text: str) -> Span | None:
    start = match.start()
    if start and text[start - 1] != "\n":
        return None  # the END line must start a line
    while start > 0:
        previous = text.rfind("\n", 0, start - 1) + 1
        line = text[previous : start - 1]
        if not line.strip() or "-----" in line or not _PEM_BODY_LINE.fullmatch(line):
            break
        start = previous
    return start, match.end()


def _not_plain_word(match: re.Match[str], text: str) -> Span | None:
    start, end = secret_span(match)
    value = text[start:end].rstrip(".,;:!?)")
    if value.isalpha() and (value.islower() or value.istitle()) or value.lower() in _CODE_WORDS or value[:1] in "$<*":
        return None  # Enable password entry., Enable secret Twisted physics: words, not a password
    return start, end


def _digits_before(match: re.Match[str], text: str, most: int) -> Span | None:
    start = match.start()
    while start > 0 and text[start - 1].isdigit() and match.start() - start < most:
        start -= 1
    if start and text[start - 1].isdigit():
        return None  # a longer number: not a bot id
    return start, match.end()


def _pgpass_host(match: re.Match[str], text: str) -> Span | None:
    line_start = text.rfind("\n", 0, match.start()) + 1
    if not re.fullmatch(r"[ \t]*[A-Za-z0-9_.*-]+", text[line_start : match.start()]):
        return None
    if re.fullmatch(r"[ \t]*(?:[0-9a-fA-F]{2}:)+[0-9a-fA-F]{0,2}[ \t]*", text[line_start : match.end()]):
        return None  # e2:41:f4:2d:c8:54:...: a hex dump of a key's modulus, not host:port:db:user:pw
    return secret_span(match)


def _url_password(match: re.Match[str], text: str) -> Span | None:
    start, end = match.span("secret")
    if text[start:end].isdigit() and end - start <= 5:
        return None  # host:port followed by an @ further on
    if (
        _TEMPLATE.fullmatch(text[start:end])
        or text[start] == "$"
        or text[start:end].lower()
        in (
            "password",
            "passwd",
            "yourpassword",
        )
    ):
        return None  # postgres://app:${PGPASS}@db, mongodb://<user>:<password>@host: placeholders
    return start, end


def _decodes_to_user_password(match: re.Match[str], text: str) -> Span | None:
    value = match.group("secret")
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    if not colon or not user or not password or not decoded.isprintable():
        return None  # base64 of something else: not a credential
    return match.span("secret")


def _phrase_value(match: re.Match[str], text: str) -> Span | None:
    """A told phrase's span, without trailing punctuation; None for a question or one plain word."""
    start, end = match.span("secret")
    value = match.group("secret").rstrip(" \t.,;!")
    words = value.split()
    if not words or value.endswith("?") or (len(words) == 1 and words[0].isalpha() and words[0].islower()):
        return None
    return start, start + len(value)


# Words a sentence has and a generated passphrase (correct horse battery staple) has not.
_FUNCTION_WORDS = frozenset(
    "the a an in on at to of for and or but not is are was be it its this that with from by as my your"
    " our their too very so no yes stored saved kept written somewhere there here".split()
)


def _passphrase_words(match: re.Match[str], text: str) -> Span | None:
    """A passphrase told in words: the rest of the line when it is 3 to 12 words of letters, none
    of them a function word ('the passphrase is stored in the vault' stays), and not a question."""
    start, end = match.span("secret")
    value = text[start:end]
    for cut in (" — ", " – ", " - ", " (", ", ", "; "):
        value = value.split(cut, 1)[0]  # "lobster cactus porcupine monkey shadow — memorize & delete"
    value = value.rstrip(" \t\r.,;!")
    words = value.split()
    quoted = start > 0 and text[start - 1] in "\"'`" and text[end : end + 1] == text[start - 1]
    if _TEMPLATE.fullmatch(value) or "{{" in value or "${" in value:
        return None
    if quoted and 2 <= len(words) <= 12 and not value.endswith("?"):
        return start, start + len(value)  # "purple monkey dishwasher 88": quoted, told on purpose
    if not 3 <= len(words) <= 12 or value.endswith("?"):
        return None
    numbers = [word for word in words if word.isdigit()]
    if not match.group().lower().startswith("passphrase") and len(numbers) != 1:
        return None  # after "password" a run of plain words is talk (password manager: bitwarden keepass)
    if len(numbers) > 1 or any(
        not (word.isalpha() or word.isdigit()) or word.lower() in _FUNCTION_WORDS for word in words
    ):
        return None  # one number among the words is allowed (island biscuit glacier jasper 63)
    return start, start + len(value)


_URL_SCHEMES = frozenset("mailto xmpp sip sips tel matrix http https ftp irc ircs news git ssh".split())


def _bare_userinfo(match: re.Match[str], text: str) -> Span | None:
    """user:password@host without a scheme (root:S3cret!@10.0.0.5): the name before the colon must
    be a user (letters, digits, _ . -) at a word start, not a scheme; the password shaped like one."""
    user_end = match.start()
    user_start = user_end
    while user_start > 0 and (text[user_start - 1].isalnum() or text[user_start - 1] in "_.-"):
        user_start -= 1
    if user_start == user_end or (
        user_start > 0 and not (text[user_start - 1].isspace() or text[user_start - 1] in "\"'`(<[")
    ):
        return None
    if text[user_start:user_end].lower() in _URL_SCHEMES:
        return None
    start, end = match.span("secret")
    return _shaped_value_span(text, start, end)


_SNAKE_NAME = re.compile(r"[a-z]+(?:[_-](?:[a-z][a-z0-9]*|[0-9]+))+")  # test_version_7_shapes, token_count_2048


def _not_a_header_constant(match: re.Match[str], text: str) -> Span | None:
    """The block, unless its BEGIN line is a string that code closes on the same line
    (``HEADER = "-----BEGIN MEGOLM SESSION DATA-----"``, ``assertEqual(b"-----BEGIN ...-----", x)``):
    a constant naming the format, not a key."""
    after_begin = text.find("-----", text.find("-----BEGIN ", match.start()) + 11) + 5
    if re.match(r"[\"'`]+[ \t]*(?:[^\s\\]|\r?(?:\n|\Z))", text[after_begin : after_begin + 8]):
        return None
    return secret_span(match)


def _not_a_snake_name(match: re.Match[str], text: str) -> Span | None:
    """The secret's span, unless it is a snake_case or kebab-case name: code, not a token
    (token_count_per_window_2048, live_reload_enabled_for_the_development_server)."""
    start, end = secret_span(match)
    if text[end : end + 1] == "(" or text[max(0, start - 4) : start] == "def ":
        return None  # def test_KEXDH_INIT_GROUP14_rsa_sha2_512(self): a function's name
    return None if _SNAKE_NAME.fullmatch(text[start:end]) else (start, end)


def _not_placeholder(match: re.Match[str], text: str) -> Span | None:
    """Any value after a label that can only be followed by a password, unless it is a variable
    or a placeholder ($PW, <password>, ${X}, ****, ...)."""
    start, end = secret_span(match)
    value = text[start:end]
    if value[:1] in "$<{%*" or _TEMPLATE.fullmatch(value) or value.lower() in _CODE_WORDS:
        return None
    if value.lower().strip("`'\",.;)") in ("pw", "pwd", "pass", "passwd", "password", "secret", "token", "key"):
        return None  # sqlplus user/pw, -p password: the argument's name, in docs
    if value.lower().strip("`'\",.;)") in ("option", "options", "flag", "flags", "argument", "arguments", "command"):
        return None  # the --username and --password options: docs naming the flag
    return start, end


_HTPASSWD_ARGUMENT = re.compile(r"\"[^\"\n]*\"|'[^'\n]*'|[^\s\"']+")


def _htpasswd_password(match: re.Match[str], text: str) -> Span | None:
    """htpasswd takes the password on its command line only with -b: then it is the third
    positional argument (file, user, password), or the second with -n (no file)."""
    flags = ""
    positional: list[tuple[int, int]] = []
    for argument in _HTPASSWD_ARGUMENT.finditer(text, match.start() + len("htpasswd"), match.end()):
        if argument.group().startswith("-") and not positional:
            flags += argument.group()[1:]
        else:
            positional.append(argument.span())
    wanted = 1 if "n" in flags else 2
    if "b" not in flags or len(positional) <= wanted:
        return None
    start, end = positional[wanted]
    if text[start] in "$<":
        return None
    return start, end


def _env_default(match: re.Match[str], text: str) -> Span | None:
    """The default after a credential read from the environment; the key must end with its word
    (DB_PASSWORD, api_key: not bypass, token_count) and the default must not be a placeholder."""
    key = _key_of(match, text)
    if key is None:
        return None
    start, end = secret_span(match)
    value = text[start:end]
    if _quoted_is_placeholder(value) or value.lower() in _CODE_WORDS or value.startswith(("http://", "https://", "/")):
        return None
    key_start = match.end("kw") - len(key)
    if match.group("secret") is not None and not _ENV_READ_BEFORE.search(text, max(0, key_start - 60), key_start):
        return None  # ('password', 'x') in a list of pairs, hasattr(self.passwd, 'x'): no read of the environment
    return start, end


# The call that reads a name from the environment, right before the quoted name: getenv("X", ...),
# os.environ.get('X', ...), ENV.fetch("X", ...), env("X", ...), config("X", default=...).
_ENV_READ_BEFORE = re.compile(
    r"(?:env|environ|fetch|get|var|config|setting|default)\w*[ \t]*\([ \t]*[\"'`]\Z", re.IGNORECASE
)


def _sasl_host(match: re.Match[str], text: str) -> Span | None:
    """The line must open with the bracketed host ([smtp.example.org]:587 user@x:pw)."""
    line_start = text.rfind("\n", 0, match.start()) + 1
    if not re.fullmatch(r"[ \t]*\[[A-Za-z0-9.-]+", text[line_start : match.start()]):
        return None
    return _not_placeholder(match, text)


def _quoted_not_placeholder(match: re.Match[str], text: str) -> Span | None:
    """A quoted value (the match's secret group), unless it is a placeholder."""
    start, end = secret_span(match)
    return None if _quoted_is_placeholder(text[start:end]) else (start, end)


def _seed_label_before(match: re.Match[str], text: str) -> Span | None:
    """The label word must name a wallet's words (seed/recovery/mnemonic/backup/secret/wallet
    before phrase or words; mnemonic or seed alone)."""
    line_start = text.rfind("\n", 0, match.start()) + 1
    label = text[line_start : match.start("secret")].lower()
    if not re.search(r"(?:seed|recovery|mnemonic|backup|secret|wallet)[ _-]?(?:phrase|words)|mnemonic", label):
        return None
    words = match.group("secret").lower().replace(",", " ").split()
    if sum(word in ("the", "and", "over", "with", "that", "this", "from", "for", "you", "are") for word in words) > 1:
        return None  # prose (no wordlist holds these), not a wallet's words
    return match.span("secret")


def _user_then_password(match: re.Match[str], text: str) -> Span | None:
    """The word after a user is a password only when shaped like one, and the user is not a
    sentence going on ("login page is broken" is no user and password)."""
    start, end = match.span("secret")
    value = text[start:end]
    if ":" in value or "/" in value:
        return None  # a URL or a path, or user:pw which rows of their own name
    if re.match(r"[A-Za-z_][\w.]*[(\[]", value):
        return None  # if user or passwd: self.cache[key] = ...: code
    named = re.search(
        r"(?:pass(?:word|wd|wort)?|pw|pwd|ww|senha|hasło|passord|lösenord|contraseña|mot de passe)[ \t]*:?[ \t]+[\"'`]?\Z",
        text[match.start() : start],
        re.IGNORECASE,
    )
    if named and len(value) >= 6 and not (value.isalpha() and (value.islower() or value.istitle())):
        return start, end  # user stmarks, password BassLine_Low_E: named, and no plain word
    return refine_password_shaped(match, text)


def _account_password(match: re.Match[str], text: str) -> Span | None:
    """'service: user / password': shaped like a password, and not a name with a version or a file
    (versions: python3 / python3.12, build: debug / release-2.1)."""
    value = match.group("secret").rstrip(".,;:!?)")
    if re.fullmatch(r"[A-Za-z_-]*\d+(?:\.\d+)+\w*|[\w-]+\.[A-Za-z]{1,4}", value):
        return None
    return refine_password_shaped(match, text)


def _shaped_or_diceware(match: re.Match[str], text: str) -> Span | None:
    """Shaped like a secret, or three or more small words joined by hyphens (a diceware password)."""
    start, end = match.span("secret")
    value = text[start:end].rstrip(".,;:!?)]}")
    if _DICEWARE.fullmatch(value):
        return start, start + len(value)
    return _shaped_value_span(text, start, end)


_CODE_GAP_SAYS = re.compile(
    r"code|[кК]од|kod|koodi|c[oó]digo|codice|clave|combina|numbers?|ziffern|:|=|→|->|\bis\b|\ber\b|\bè\b|\bär\b|\bon\b|\bto\b"
    r"|c['’]est|lautet|\bist\b|\bé\b|\bes\b|wynosi|\bdann\b",
    re.IGNORECASE,
)
_CODE_GAP_DENIES = re.compile(
    r"error|status|exit|http|line|port|version|year|room|page|issue|pull|commit|tel|phone|#|\bpr\b", re.IGNORECASE
)


# A snake_case or camelCase field name right before a value (``expires_in=``, ``"maxAge": ``): the
# value belongs to that field, whatever words came earlier on the line.
_FIELD_BEFORE_VALUE = re.compile(
    r"(?<![\w-])[A-Za-z]+(?:_[A-Za-z0-9]+|[a-z][A-Z][a-z]+)+[\"']?[ \t]*[=:][ \t]*[\"']?\Z"
)


def _code_after_label(match: re.Match[str], text: str) -> Span | None:
    """The number after a door/alarm/padlock label is its code only when the words between say so
    ('code', 'is', ':', 'c'est', 'er' …), and none of them makes it another number (error code, port,
    room, version, phone)."""
    gap = match.group("gap")
    label = text[match.start() : match.start("gap")]
    if not (_CODE_GAP_SAYS.search(gap) or _CODE_GAP_SAYS.search(label)) or _CODE_GAP_DENIES.search(gap):
        return None
    if _FIELD_BEFORE_VALUE.search(text, max(0, match.start("secret") - 80), match.start("secret")):
        return None  # expires_in=3600, "retry_after_ms": 5000: the number is that field's, not a code
    return match.span("secret")


def _email_then_password(match: re.Match[str], text: str) -> Span | None:
    """The match opens at the email's @: its local part must stand alone before it (not a URL path
    like /pgsql-admin@postgresql.org/msg05772.html), then the password as ``_user_then_password``."""
    start = match.start()
    while start > 0 and text[start - 1] not in " \t\r\n/,;:(<`'\"@":
        start -= 1
    if start == match.start() or (start > 0 and text[start - 1] not in " \t\r\n(<`'\""):
        return None
    return _user_then_password(match, text)


def _mailgun_whole(match: re.Match[str], text: str) -> Span | None:
    start = match.start() - 32
    if start > 0 and text[start - 1] in "0123456789abcdef":
        return None  # a longer hex run: a digest, not a key
    return start, match.end()


def _needs_digit(match: re.Match[str], text: str) -> Span | None:
    start, end = secret_span(match)
    return (start, end) if any(c.isdigit() for c in text[start:end]) else None


def _decodes_to_private_key(match: re.Match[str], text: str) -> Span | None:
    """Base64 of a PEM block: a secret only when its BEGIN line names a private key (a
    certificate's ``client-certificate-data`` is public)."""
    value = match.group()
    head = value[: min(len(value), 80) // 4 * 4]
    try:
        begin = base64.b64decode(head, validate=True)
    except ValueError:
        return None
    return match.span() if b"PRIVATE KEY" in begin or b"MEGOLM SESSION" in begin else None


_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _is_wif(value: str) -> bool:
    """A Bitcoin private key in wallet import format: base58 whose last four bytes are the
    double-SHA256 checksum of the rest, with a private-key version byte (0x80 main, 0xef test)."""
    number = 0
    for char in value:
        number = number * 58 + _BASE58.index(char)
    raw = number.to_bytes(38 if len(value) == 52 else 37, "big")
    payload, checksum = raw[:-4], raw[-4:]
    return payload[0] in (0x80, 0xEF) and hashlib.sha256(hashlib.sha256(payload).digest()).digest()[:4] == checksum


def _wif_key(match: re.Match[str], text: str) -> Span | None:
    try:
        return match.span() if _is_wif(match.group()) else None
    except (ValueError, OverflowError):
        return None


def _cookie_values(match: re.Match[str], text: str) -> Span | None:
    """A Cookie header's value when one of its cookies holds a value long enough to be a
    session (16+ characters); ``Cookie: lang=en`` stays."""
    start, end = match.span("secret")
    value = text[start:end].rstrip(" \t\r")
    pairs = [pair.partition("=")[2].strip() for pair in value.split(";")]
    if not any(len(pair) >= 16 for pair in pairs):
        return None
    return start, start + len(value)


# What a guide writes where the password goes: not a secret.
_PLACEHOLDER_WORDS = frozenset(
    "password pass passwd pw pwd yourpassword yourpass mypassword mypass secret your_password"
    " <password> [password] {password} <pass> <pw> ***".split()
)


def _told_to_a_service(match: re.Match[str], text: str) -> Span | None:
    """A password given in an IRC command (/msg NickServ IDENTIFY pw): any value but a
    placeholder, a variable or a masked one."""
    start, end = secret_span(match)
    if "secret_p" in match.re.groupindex and match.group("secret_p") is not None:
        line_start = text.rfind("\n", 0, match.start()) + 1
        if text[line_start : match.start()].strip():
            return None  # /pass is an IRC command only where a line opens with it (cmdkey ... /pass prompts)
    value = text[start:end].rstrip("`'\"")  # a closing quote; a password's own ! or . stays in the span
    word = value.rstrip(".,;:!?")
    if not word or word[0] in "<[{$*%" or word.lower() in _PLACEHOLDER_WORDS or set(word) <= set("*x.X"):
        return None
    return start, start + len(value)


PATTERNS: tuple[SecretPattern, ...] = (
    # -- private keys --------------------------------------------------------------------------
    SecretPattern(
        "private_key",
        _rx(rf"-----BEGIN {_PEM_LABEL}-----(?:.*?-----END {_PEM_LABEL}-----|.*\Z)", re.DOTALL),
        "PEM/OpenSSH/PGP private keys and Element key exports, whole block; a BEGIN without END redacts to the end of text",
        ("-----begin",),
        _not_a_header_constant,
    ),
    SecretPattern(
        "private_key",
        _rx(rf"-----END {_PEM_LABEL}-----"),
        "a PEM body pasted without its BEGIN line (it came in an earlier message): the base64 lines"
        " above an END line, found by walking back line by line (a regex would retry every line)",
        ("-----end",),
        _pem_body_above_end,
    ),
    SecretPattern(
        "private_key",
        _rx(
            r"\n[ \t]*[A-Za-z0-9+/]{48,80}(?=[ \t]*(?:\r?\n|\Z))(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/]{48,80}(?=[ \t]*(?:\r?\n|\Z)))*"
        ),
        "two or more full PEM body lines (48-80 base64 chars, both cases and digits, not hex) on their own",
        ("\n",),
        _pem_body_lines,
    ),
    SecretPattern(
        "private_key",
        _rx(r"LS0tLS1CRUdJTi[A-Za-z0-9+/]{20,}={0,2}"),
        "a PEM private key as one base64 run (kubeconfig client-key-data, a Kubernetes secret's tls.key):"
        " base64 of '-----BEGIN' whose label says PRIVATE KEY; a certificate's (public) stays",
        ("ls0tls1crudjti",),
        _decodes_to_private_key,
        not_after=_ALNUM + "+/",
    ),
    SecretPattern(
        "private_key",
        _rx(
            r"private-lines:[ \t]*\d+[ \t]*\r?\n"
            r"(?P<secret>[a-z0-9+/=]+(?=[ \t]*\r?(?:\n|\Z))(?:[ \t]*\r?\n[a-z0-9+/=]+(?=[ \t]*\r?(?:\n|\Z)))*)"
        ),
        "a PuTTY key file's Private-Lines (the public lines and the comment stay)",
        ("private-lines",),
        folded=True,
    ),
    SecretPattern(
        "password_hash",
        _rx(
            r"\$(?:2[abxy]\$\d\d\$[./A-Za-z0-9]{53}"
            r"|(?:1|5|6|apr1|md5|sha1)\$(?:rounds=\d+\$)?[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{20,}"
            r"|y\$[./A-Za-z0-9]+\$[./A-Za-z0-9]+\$[./A-Za-z0-9]{20,}"
            r"|argon2(?:id|i|d)\$v=\d+\$m=\d+,t=\d+,p=\d+\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]{16,})"
            r"|pbkdf2_sha(?:1|256)\$\d+\$[A-Za-z0-9./+]+\$[A-Za-z0-9./+=]{20,}"
        ),
        "password hashes (bcrypt $2b$, md5-crypt $1$/$apr1$, sha-crypt $5$/$6$, yescrypt $y$, argon2,"
        " Django pbkdf2): a shadow, htpasswd or Synapse users-table line is cracked offline",
        (
            "$2a$",
            "$2b$",
            "$2x$",
            "$2y$",
            "$1$",
            "$5$",
            "$6$",
            "$apr1$",
            "$md5$",
            "$sha1$",
            "$y$",
            "$argon2",
            "pbkdf2_sha",
        ),
    ),
    SecretPattern(
        "crypto_private_key",
        _rx(r"[xyzt]prv[1-9A-HJ-NP-Za-km-z]{60,}"),
        "BIP32 extended private keys (xprv/yprv/zprv/tprv; the xpub is public)",
        ("xprv", "yprv", "zprv", "tprv"),
        not_after=_ALNUM,
    ),
    SecretPattern(
        "crypto_private_key",
        _rx(r"(?:5[HJK][1-9A-HJ-NP-Za-km-z]{49}|[KL][1-9A-HJ-NP-Za-km-z]{51})(?![A-Za-z0-9])"),
        "Bitcoin (mainnet) private keys in wallet import format, only when the base58 checksum holds (so"
        " a random 51-character id stays). No trigger: no literal. It opens with 5, K or L, which the"
        " engine skips to fast (a look-behind first would run it at every position); bounded, so linear."
        " Testnet keys (9, c: a common letter) hold nothing of value and are left",
        (),
        _wif_key,
        not_after=_ALNUM,
    ),
    _prefixed("crypto_private_key", ("nsec1",), "Nostr private keys (nsec1 and bech32)", body=r"[02-9ac-hj-np-z]{50,}"),
    SecretPattern(
        "crypto_private_key",
        _rx(
            r"(?:private|priv|secret|signing)[ _-]?key[\"']?[ \t]*(?:is|:|=)?[ \t]*[\"'`]?"
            r"(?P<secret>(?:0x)?[0-9a-f]{64})(?![0-9a-z])"
        ),
        "a 64-hex private key after its label (Ethereum, a raw ed25519 seed): private key: 0x4c08…",
        tuple(f"{what}{sep}key" for what in ("private", "priv", "secret", "signing") for sep in ("", " ", "_", "-")),
        folded=True,
    ),
    SecretPattern(
        "age_key",
        _rx(r"AGE-SECRET-KEY-1[0-9A-Z]{20,}"),
        "age encryption secret keys",
        ("age-secret-key-",),
    ),
    SecretPattern(
        "synapse_signing_key",
        _rx(r"ed25519[ \t]+a_[A-Za-z0-9_]+[ \t]+(?P<secret>[A-Za-z0-9+/]{40,}={0,2})"),
        "a Synapse signing key file line: ed25519 a_<id> <base64 seed>",
        ("ed25519",),
    ),
    SecretPattern(
        "element_security_key",
        _rx(r"E[sS][1-9A-HJ-NP-Za-km-z]{2}(?:[ \t]+[1-9A-HJ-NP-Za-km-z]{4}){11}(?![A-Za-z0-9])"),
        "Element/Matrix secure backup recovery keys: 12 groups of 4 base58 characters starting Es",
        (),
        not_after=_ALNUM,
    ),
    # -- forges and registries ----------------------------------------------------------------
    _prefixed(
        "github_token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        "GitHub classic (ghp_/gho_/ghu_/ghs_/ghr_) and fine-grained (github_pat_) tokens; distinctive"
        " enough to match glued to other text",
        not_after="",
    ),
    _prefixed(
        "gitlab_token",
        ("glpat-", "glrt-", "gldt-", "glptt-", "gloas-", "glcbt-", "glimt-", "glft-", "glsoat-"),
        "GitLab personal, runner, deploy, trigger, OAuth, CI job, incoming-mail, feed, service tokens",
    ),
    _prefixed(
        "gitlab_token",
        ("GR1348941",),
        "GitLab runner registration tokens (GR1348941 and 20+ characters)",
        body=r"[A-Za-z0-9_-]{20,}",
    ),
    _prefixed(
        "npm_token",
        ("npm_",),
        "npm access tokens (30+ characters: npm_config_* and npm_lifecycle_* are env names)",
        body=r"[A-Za-z0-9]{30,}",
    ),
    _prefixed("pypi_token", ("pypi-Ag",), "PyPI API tokens (macaroons, pypi-AgEI...)"),
    _prefixed("rubygems_token", ("rubygems_",), "RubyGems API keys"),
    _prefixed("docker_hub_token", ("dckr_pat_", "dckr_oat_"), "Docker Hub personal/organisation access tokens"),
    _prefixed("huggingface_token", ("hf_",), "Hugging Face access tokens", body=r"[A-Za-z0-9]{20,}"),
    _prefixed("atlassian_token", ("ATATT3", "ATCTT3"), "Atlassian API tokens", body=r"[A-Za-z0-9_=-]{20,}"),
    _prefixed("linear_key", ("lin_api_", "lin_oauth_"), "Linear API keys and OAuth tokens"),
    _prefixed("postman_key", ("PMAK-",), "Postman API keys"),
    _prefixed("shopify_token", ("shpat_", "shpca_", "shppa_", "shpss_"), "Shopify access tokens and shared secrets"),
    _prefixed("pulumi_token", ("pul-",), "Pulumi access tokens", body=r"[a-f0-9]{20,}"),
    _prefixed(
        "doppler_token",
        ("dp.st.", "dp.sa.", "dp.ct.", "dp.pt.", "dp.scim.", "dp.audit."),
        "Doppler tokens",
        body=r"[A-Za-z0-9_.-]{8,}",
    ),
    _prefixed(
        "grafana_token",
        ("glsa_", "glc_"),
        "Grafana service account tokens and Cloud API keys",
        body=r"[A-Za-z0-9_+/=-]{8,}",
    ),
    _prefixed("newrelic_key", ("NRAK-", "NRII-", "NRJS-"), "New Relic user, insert and browser keys"),
    _prefixed("databricks_token", ("dapi",), "Databricks personal access tokens", body=r"[a-f0-9]{32}(?:-\d)?"),
    _prefixed("flyio_token", ("fo1_", "fm1r_", "fm2_"), "Fly.io tokens", body=r"[A-Za-z0-9_+/=-]{8,}"),
    _prefixed("supabase_token", ("sbp_", "sb_secret_"), "Supabase access tokens and secret keys"),
    _prefixed("sentry_token", ("sntrys_", "sntryu_"), "Sentry organisation and user auth tokens"),
    SecretPattern(
        "airtable_token",
        _rx(r"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}(?![A-Za-z0-9])"),
        "Airtable personal access tokens (pat<14>.<64 hex>)",
        ("pat",),
        not_after=_TOKEN_CHARS,
    ),
    _prefixed(
        "grafana_key",
        ("eyJrIjoi",),
        'Grafana legacy API keys: base64 of {"k":"...","n":...}, no dots (not a JWT)',
        body=r"[A-Za-z0-9+/]{24,}={0,2}",
    ),
    SecretPattern(
        "crates_token",
        _rx(r"cio(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[A-Z])[A-Za-z0-9]{32}(?![A-Za-z0-9])"),
        "crates.io API tokens (cio + 32 letters and digits, one of them a capital and one a digit)",
        ("cio",),
        not_after=_TOKEN_CHARS,
    ),
    _prefixed("notion_token", ("ntn_",), "Notion integration tokens", body=r"[A-Za-z0-9]{20,}"),
    _prefixed(
        "adafruit_key",
        ("aio_",),
        "Adafruit IO keys (aio_ and 28 letters and digits)",
        body=r"[A-Za-z0-9]{28}(?![A-Za-z0-9_])",
    ),
    _prefixed(
        "alibaba_key",
        ("LTAI",),
        "Alibaba Cloud AccessKey ids",
        body=r"(?=[A-Za-z]*[0-9])[A-Za-z0-9]{12,20}(?![A-Za-z0-9])",
    ),
    SecretPattern(
        "azure_client_secret",
        _rx(r"Q~(?<=[A-Za-z0-9_~.]{3}[0-9]Q~)[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])"),
        "Entra ID (Azure AD) app client secrets: 3 characters, a digit, Q~, 31-34 more; the literal Q~"
        " first, the four characters behind it",
        ("q~",),
        lambda match, text: (match.start() - 4, match.end()),
    ),
    _prefixed("clojars_token", ("CLOJARS_",), "Clojars deploy tokens", body=r"[a-z0-9]{60}"),
    _prefixed("cloudflare_origin_ca_key", ("v1.0-",), "Cloudflare Origin CA keys", body=r"[a-f0-9]{24}-[a-f0-9]{146}"),
    _prefixed("dynatrace_token", ("dt0c01.", "dt0s01."), "Dynatrace API tokens", body=r"[A-Z0-9]{24}\.[A-Z0-9]{64}"),
    _prefixed("easypost_key", ("EZAK", "EZTK"), "EasyPost API keys", body=r"[A-Za-z0-9]{54}"),
    _prefixed("frameio_token", ("fio-u-",), "Frame.io API tokens", body=r"[A-Za-z0-9_=-]{64}"),
    _prefixed(
        "hubspot_token",
        ("pat-na1-", "pat-na2-", "pat-eu1-"),
        "HubSpot private app tokens",
        body=_UUID,
    ),
    _prefixed("infracost_key", ("ico-",), "Infracost API keys", body=r"[A-Za-z0-9]{32,40}(?![A-Za-z0-9])"),
    _prefixed(
        "jfrog_token", ("AKCp", "cmVmdGtuOjAxOj"), "JFrog API keys and reference tokens", body=r"[A-Za-z0-9]{50,}"
    ),
    _prefixed(
        "plaid_token",
        ("access-sandbox-", "access-development-", "access-production-"),
        "Plaid access tokens",
        body=_UUID,
    ),
    _prefixed("readme_key", ("rdme_",), "ReadMe API keys", body=r"[a-z0-9]{70}"),
    _prefixed("scalingo_token", ("tk-us-",), "Scalingo API tokens", body=r"[A-Za-z0-9_-]{40,56}"),
    _prefixed("yandex_key", ("AQVN", "YCAJE", "YCM"), "Yandex Cloud API keys and secrets", body=r"[A-Za-z0-9_-]{30,}"),
    _prefixed(
        "defined_networking_key",
        ("dnkey-",),
        "Defined Networking (Nebula) API keys",
        body=r"[A-Za-z0-9=_-]{20,}-[A-Za-z0-9=_-]{40,}",
    ),
    _prefixed("huggingface_token", ("api_org_",), "Hugging Face organisation API tokens", body=r"[A-Za-z0-9]{30,}"),
    _prefixed(
        "launchdarkly_key",
        ("api-", "sdk-"),
        "LaunchDarkly API and SDK keys (a UUID after api- / sdk-)",
        body=_UUID,
    ),
    _prefixed("bitbucket_app_password", ("ATBB",), "Bitbucket app passwords", body=r"[A-Za-z0-9_=.-]{28,}"),
    SecretPattern(
        "payment_api_key",
        _rx(r"(?:live|test)_(?=[A-Za-z0-9_=-]*[0-9])[A-Za-z0-9_=-]{30,45}(?![A-Za-z0-9_=-])"),
        "GoCardless, Lob and Mollie keys (live_ / test_ and 30-45 characters); a lowercase snake_case name is code",
        ("live_", "test_"),
        _not_a_snake_name,
        not_after=_TOKEN_CHARS,
    ),
    SecretPattern(
        "teams_webhook",
        _rx(r"\.webhook\.office\.com/webhookb2/(?P<secret>[A-Za-z0-9@/_-]+)"),
        "Microsoft Teams incoming webhook URLs: the path is the credential",
        (".webhook.office.com/",),
    ),
    SecretPattern(
        "bundler_credentials",
        _rx(r"BUNDLE_[A-Z0-9_]*__[A-Z0-9_]+[ \t]*[=:][ \t]*[\"']?(?P<secret>[^\s\"']{6,})"),
        "Bundler's per-host credentials in the environment (BUNDLE_GEMS__CONTRIBSYS__COM=user:pass)",
        ("bundle_",),
    ),
    SecretPattern(
        "livekit_secret",
        _rx(r"API[A-Za-z0-9]{10,14}[\"']?[ \t]*:[ \t]*[\"']?(?P<secret>[A-Za-z0-9]{32,})"),
        "LiveKit (Element Call) API key and secret pairs, as in its keys: map",
        ("api",),
        not_after=_ALNUM,
    ),
    SecretPattern(
        "wifi_password",
        _rx(r"wifi:(?:[a-z]:(?:\\.|[^;\\])*;)*?p:(?P<secret>(?:\\.|[^;\\\n])+)"),
        "a Wi-Fi QR code's password (WIFI:S:net;T:WPA;P:pw;;)",
        ("wifi:",),
        folded=True,
    ),
    SecretPattern(
        "notion_token",
        _rx(r"secret_[A-Za-z0-9]{43}(?![A-Za-z0-9_-])"),
        "Notion integration tokens of the older form: secret_ and exactly 43 letters and digits"
        " (secret_santa_budget and secret_name are code: an underscore ends the run)",
        ("secret_",),
        _needs_digit,
        not_after=_TOKEN_CHARS,
    ),
    # Each body is long enough that naming the prefix in prose ("a tskey-auth key") stays.
    _prefixed("tailscale_key", ("tskey-",), "Tailscale auth, API, client and webhook keys", body=r"[A-Za-z0-9-]{16,}"),
    _prefixed("sourcegraph_token", ("sgp_",), "Sourcegraph access tokens", body=r"[A-Za-z0-9_]{20,}"),
    _prefixed("prefect_key", ("pnu_",), "Prefect Cloud API keys", body=r"[A-Za-z0-9]{30,}"),
    _prefixed("buildkite_token", ("bkua_",), "Buildkite agent and API tokens", body=r"[A-Za-z0-9]{30,}"),
    _prefixed("circleci_token", ("CCIPAT_",), "CircleCI personal API tokens", body=r"[A-Za-z0-9_]{20,}"),
    _prefixed(
        "brevo_key",
        ("xkeysib-", "xsmtpsib-"),
        "Brevo (Sendinblue) API and SMTP keys",
        body=r"[a-f0-9]{32,}[A-Za-z0-9-]*",
    ),
    _prefixed(
        "planetscale_token",
        ("pscale_tkn_", "pscale_pw_", "pscale_oauth_"),
        "PlanetScale service tokens, passwords and OAuth tokens",
        body=r"[A-Za-z0-9_=.-]{20,}",
    ),
    _prefixed("neon_key", ("napi_",), "Neon API keys", body=r"[A-Za-z0-9]{40,}"),
    _prefixed("pinecone_key", ("pcsk_",), "Pinecone API keys", body=r"[A-Za-z0-9_]{30,}"),
    _prefixed(
        "langsmith_key", ("lsv2_pt_", "lsv2_sk_"), "LangSmith personal and service keys", body=r"[A-Za-z0-9_]{20,}"
    ),
    _prefixed("replicate_token", ("r8_",), "Replicate API tokens", body=r"[A-Za-z0-9]{30,}"),
    _prefixed("perplexity_key", ("pplx-",), "Perplexity API keys", body=r"[A-Za-z0-9]{40,}"),
    _prefixed("figma_token", ("figd_", "figu_"), "Figma personal and OAuth tokens", body=r"[A-Za-z0-9_-]{20,}"),
    _prefixed("netlify_token", ("nfp_", "nfc_", "nfo_"), "Netlify personal and OAuth tokens", body=r"[A-Za-z0-9]{30,}"),
    _prefixed("render_key", ("rnd_",), "Render API keys", body=r"[A-Za-z0-9]{20,}"),
    _prefixed("contentful_token", ("CFPAT-",), "Contentful personal access tokens", body=r"[A-Za-z0-9_-]{30,}"),
    _prefixed("typeform_token", ("tfp_",), "Typeform personal tokens", body=r"[A-Za-z0-9_-]{30,}"),
    _prefixed("flutterwave_key", ("FLWSECK-", "FLWSECK_TEST-"), "Flutterwave secret keys", body=r"[A-Za-z0-9-]{20,}"),
    _prefixed(
        "shipping_key",
        ("shippo_live_", "shippo_test_", "duffel_live_", "duffel_test_"),
        "Shippo and Duffel API tokens",
        body=r"[A-Za-z0-9_-]{20,}",
    ),
    _prefixed("onepassword_token", ("ops_eyJ",), "1Password service account tokens", body=r"[A-Za-z0-9+/=_-]{30,}"),
    _prefixed("mapbox_token", ("sk.eyJ",), "Mapbox secret tokens (pk. tokens are public)", body=r"[A-Za-z0-9._-]{30,}"),
    _prefixed(
        "dropbox_token",
        ("sl.",),
        "Dropbox short-lived access tokens (sl. and 130+ characters)",
        body=r"[A-Za-z0-9_-]{130,}",
    ),
    SecretPattern(
        "braintree_token",
        _rx(r"access_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[a-f0-9]{32}"),
        "Braintree/PayPal access tokens",
        ("access_token$",),
    ),
    SecretPattern(
        "okta_token",
        _rx(r"ssws[ \t]+(?P<secret>00[a-z0-9_-]{30,})"),
        "Okta API tokens after their SSWS scheme",
        ("ssws",),
        folded=True,
    ),
    SecretPattern(
        "twitch_token",
        _rx(r"oauth:(?P<secret>[a-z0-9]{30})(?![A-Za-z0-9])"),
        "Twitch chat OAuth tokens (oauth: and 30 lowercase letters and digits)",
        ("oauth:",),
        _needs_digit,
        not_after=_ALNUM,
    ),
    SecretPattern(
        "wandb_key",
        _rx(r"wandb[ \t]+login[ \t]+(?:--relogin[ \t]+)?(?P<secret>[a-f0-9]{40})(?![a-f0-9])"),
        "Weights & Biases API keys given to wandb login",
        ("wandb",),
        folded=True,
    ),
    # Short words could follow these prefixes ("xai-sdk"): only a key's full length counts.
    _prefixed("groq_key", ("gsk_",), "Groq API keys", body=r"[A-Za-z0-9]{40,}"),
    _prefixed("xai_key", ("xai-",), "xAI API keys", body=r"[A-Za-z0-9]{40,}"),
    _prefixed(
        "aws_session_token",
        ("FwoGZXIvYXdz", "IQoJb3JpZ2lu"),
        "AWS STS session tokens (base64 that opens with 'aws' or 'origin')",
        body=r"[A-Za-z0-9+/=]{20,}",
    ),
    _prefixed("mailgun_key", ("key-",), "Mailgun API keys (key- and 32 lowercase characters)", body=r"[0-9a-z]{32}\b"),
    SecretPattern(
        "mailchimp_key",
        _rx(r"[0-9a-f]{32}-us[0-9]{1,2}\b"),
        "Mailchimp API keys (32 hex and the datacentre, -us12)",
        ("-us",),
        not_after=_TOKEN_CHARS,
    ),
    SecretPattern(
        "wireguard_key",
        _rx(r"(?:private|preshared)[ _-]?key[ \t]*[:=][ \t]*(?P<secret>[a-z0-9+/]{43}=)"),
        "WireGuard private and preshared keys (43 base64 characters and '=') after their label",
        ("private", "preshared"),
        folded=True,
    ),
    SecretPattern(
        "totp_seed",
        _rx(r"(?:otp|2fa|mfa)[ _-]?(?:seed|secret|key)[ \t]*[:=]?[ \t]*(?P<secret>[a-z2-7]{16,}=*)(?![a-z0-9])"),
        "one-time-password seeds (base32) after their label: TOTP seed JBSWY3DPEHPK3PXP",
        ("otp", "2fa", "mfa"),
        folded=True,
    ),
    SecretPattern(
        "terraform_token",
        _rx(r"\.atlasv1\.(?<=[A-Za-z0-9]{14}\.atlasv1\.)[A-Za-z0-9_=-]{20,}"),
        "Terraform Cloud / HCP tokens (<id>.atlasv1.<secret>): the literal first, the 14-char id behind it",
        (".atlasv1.",),
        lambda match, text: (match.start() - 14, match.end()),
    ),
    # -- clouds -----------------------------------------------------------------------------------
    SecretPattern(
        "aws_access_key_id",
        _rx(r"(?:AKIA|ASIA|ABIA|ACCA|AIDA|AROA|ANPA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        "AWS key ids: exactly 16 capitals and digits after the prefix (base32 in real ones), not glued to a"
        " word or a hashtag",
        ("akia", "asia", "abia", "acca", "aida", "aroa", "anpa"),
        not_after=_ALNUM + "#@",
    ),
    SecretPattern(
        "aws_secret_key",
        _rx(
            r"(?:aws_?secret_?(?:access_?)?key|secretaccesskey)[\"']?[ \t]*(?:=>|=|:)[ \t]*[\"']?"
            r"(?P<secret>[a-z0-9/+]{40})(?![a-z0-9/+])"
        ),
        "AWS secret keys when labelled",
        ("secret",),
        folded=True,
    ),
    SecretPattern(
        "aws_secret_key",
        _rx(
            r"(?:AKIA|ASIA)[A-Z2-7]{16}[^\n]{0,3}\n?[^\n]{0,30}?(?<![A-Za-z0-9/+])"
            r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        "the 40-character AWS secret key right after its key id (the console's CSV, a paste of both, the next line)",
        ("akia", "asia"),
    ),
    SecretPattern(
        "azure_key",
        _rx(r"(?:accountkey|sharedaccesskey|accesskey)=(?P<secret>[a-z0-9+/=%]{16,})"),
        "Azure storage/service bus connection strings: the key goes, account and endpoint stay",
        ("accountkey=", "sharedaccesskey=", "accesskey="),
        folded=True,
    ),
    SecretPattern(
        "azure_sas",
        _rx(r"sig=(?P<secret>[A-Za-z0-9%+/=_-]{16,})"),
        "Azure SAS signatures in URLs and connection strings",
        ("sig=",),
        not_after=_ALNUM + "_",
    ),
    _prefixed(
        "digitalocean_token",
        ("dop_v1_", "doo_v1_", "dor_v1_"),
        "DigitalOcean personal/OAuth/refresh tokens",
        body=r"[a-f0-9]{8,}",
    ),
    _prefixed("heroku_key", ("HRKU-",), "Heroku API keys (new format; old UUID keys go by their label)"),
    SecretPattern(
        "vault_token",
        _rx(r"hv[sbr]\.[A-Za-z0-9_-]{8,}"),
        "HashiCorp Vault service, batch and recovery tokens",
        ("hvs.", "hvb.", "hvr."),
        not_after=_TOKEN_CHARS + ".",
    ),
    SecretPattern(
        "google_api_key",
        _rx(r"(?:AIza[A-Za-z0-9_-]{8,}|GOCSPX-[A-Za-z0-9_-]{8,}|ya29\.[A-Za-z0-9_-]{20,}|1//0[A-Za-z0-9_-]{20,})"),
        "Google API keys (AIza), OAuth client secrets (GOCSPX-), access (ya29.) and refresh (1//0) tokens",
        ("aiza", "gocspx-", "ya29.", "1//0"),
        not_after=_ALNUM,
    ),
    SecretPattern(
        "firebase_key",
        _rx(r"AAAA[A-Za-z0-9_-]{7}:APA91b[A-Za-z0-9_-]{20,}"),
        "Firebase Cloud Messaging legacy server keys",
        (":apa91b",),
        not_after=_ALNUM,
    ),
    # -- chat and mail ------------------------------------------------------------------------
    _prefixed(
        "slack_token",
        ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-", "xoxe-", "xoxe.", "xapp-", "xoxc-"),
        "Slack bot/user/app/refresh (xoxe-) tokens, and a browser session's client token (xoxc-)",
        body=r"[A-Za-z0-9._-]{4,}",
        not_after="",
    ),
    _prefixed(
        "slack_token",
        ("xoxd-",),
        "a Slack browser session's d cookie (xoxd-, URL-encoded base64)",
        body=r"[A-Za-z0-9._%+/=-]{4,}",
        not_after="",
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
        "discord_bot_token",
        _rx(r"[MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}(?![A-Za-z0-9_-])"),
        "Discord bot tokens: base64 user id (starts M/N/O), timestamp, HMAC",
        (".",),
        not_after=_TOKEN_CHARS,
    ),
    SecretPattern(
        "telegram_bot_token",
        _rx(r":AA(?<=[0-9]{6}:AA)[A-Za-z0-9_-]{30,}"),
        "Telegram bot tokens, alone or inside api.telegram.org/bot<token>/ URLs: the literal :AA"
        " first, then the 6-12 digit bot id behind it",
        (":aa",),
        lambda match, text: _digits_before(match, text, 12),
    ),
    SecretPattern(
        "sendgrid_key",
        _rx(r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{20,}"),
        "SendGrid API keys",
        ("sg.",),
        not_after=_ALNUM,
    ),
    SecretPattern(
        "mailgun_key",
        _rx(r"key-[0-9a-f]{32}(?![0-9a-f])"),
        "Mailgun API keys (key- and 32 hex)",
        ("key-",),
        not_after=_TOKEN_CHARS,
    ),
    SecretPattern(
        "twilio_key",
        _rx(r"SK[0-9a-f]{32}(?![0-9a-f])"),
        "Twilio API key SIDs (SK + 32 hex); auth tokens go by their label",
        ("sk",),
        not_after=_ALNUM,
    ),
    SecretPattern(
        "matrix_token",
        _rx(
            r"(?:(?:syt|syr|syl|mct|mcr)_[A-Za-z0-9_-]{4,}"
            r"|(?:mat|mar)_[A-Za-z0-9]{30}_[A-Za-z0-9]{6}"  # 'format_...' is code
            r"|MDAx[A-Za-z0-9+/_-]{40,}=*)"  # not inside a longer base64 blob
        ),
        "Matrix access/refresh/login tokens: Synapse syt_/syr_/syl_, MAS mat_/mar_/mct_, old macaroons (MDAx)",
        ("syt_", "syr_", "syl_", "mct_", "mcr_", "mat_", "mar_", "mdax"),
        not_after=_ALNUM + "+/",
    ),
    SecretPattern(
        "irc_password",
        _rx(
            r"(?:/msg[ \t]+nickserv[ \t]+|/nickserv[ \t]+|/ns[ \t]+|/privmsg[ \t]+nickserv[ \t]+:?[ \t]*)(?:"
            r"(?:identify|id|login)[ \t]+(?:(?:[^\s]+[ \t]+)?(?P<secret>[^\s]+)(?=[ \t]*(?:\r?\n|\Z))|(?P<secret_1>[^\s]+))"
            r"|register[ \t]+(?P<secret_r>[^\s]+)"
            r"|(?:ghost|recover|release|regain)[ \t]+[^\s]+[ \t]+(?P<secret_g>[^\s]+)"
            r"|set[ \t]+password[ \t]+(?P<secret_s>[^\s]+))"
            r"|(?:/quote[ \t]+|/raw[ \t]+|/)pass[ \t]+(?P<secret_p>[^\s]+)"
            r"|/oper[ \t]+[^\s]+[ \t]+(?P<secret_o>[^\s]+)"
        ),
        "IRC passwords: /msg NickServ IDENTIFY [account] pw (the last word of its line, or the first"
        " after IDENTIFY mid-sentence), REGISTER pw, GHOST nick pw, SET PASSWORD pw, /pass and /oper;"
        " a placeholder (<password>, yourpassword) stays",
        ("nickserv", "/ns", "/pass", "/quote", "/raw", "/oper"),
        _told_to_a_service,
        not_after=_ALNUM + "/",
        folded=True,
    ),
    SecretPattern(
        "irc_password",
        _rx(
            r"privmsg[ \t]+nickserv[ \t]+:?[ \t]*(?:identify|id|login)[ \t]+"
            r"(?:(?:[^\s]+[ \t]+)?(?P<secret>[^\s]+)(?=[ \t]*(?:\r?\n|\Z))|(?P<secret_1>[^\s]+))"
        ),
        "the raw IRC line PRIVMSG NickServ :IDENTIFY [account] pw (a row of its own, so the row above"
        " opens with '/', which the engine skips to fast)",
        ("privmsg",),
        _told_to_a_service,
        not_after=_ALNUM,
        folded=True,
    ),
    SecretPattern(
        "twitter_bearer_token",
        _rx(r"A{20,}[A-Za-z0-9%]{60,}"),
        "X/Twitter app bearer tokens: a run of 20+ A (zero bytes in base64), then URL-encoded"
        " base64; one without a digit is someone holding the A key",
        ("aaaaaaaaaaaaaaaaaaaa",),
        _needs_digit,
        not_after=_TOKEN_CHARS + "+/",
    ),
    SecretPattern(
        "facebook_token",
        _rx(r"EAA[A-Za-z0-9]{100,}"),
        "Facebook/Meta Graph API access tokens: EAA and 100+ letters and digits. No trigger: 'eaa'"
        " occurs in one hex id in ~140, and the literal EAA is searched as fast as a trigger",
        (),
        _needs_digit,
        not_after=_TOKEN_CHARS + "+/",
    ),
    # -- payments and AI ------------------------------------------------------------------------
    SecretPattern(
        "stripe_key",
        _rx(r"(?:(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{8,}|whsec_[A-Za-z0-9]{8,})"),
        "Stripe secret and restricted keys, webhook secrets (pk_ publishable keys are public)",
        ("sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"),
    ),
    SecretPattern(
        "stripe_key",
        _rx(r"(?:pi|seti|src)_[A-Za-z0-9]{14,30}_secret_[A-Za-z0-9]{16,}"),
        "Stripe PaymentIntent / SetupIntent / Source client secrets (<id>_secret_<random>): they confirm a payment",
        ("_secret_",),
        not_after=_ALNUM,
    ),
    SecretPattern(
        "square_token",
        _rx(r"(?:EAAA[A-Za-z0-9_-]{40,}|sq0(?:atp|csp)-[A-Za-z0-9_-]{16,})"),
        "Square access tokens and OAuth secrets",
        ("eaaa", "sq0atp-", "sq0csp-"),
        not_after=_ALNUM,
    ),
    SecretPattern(
        "api_key",
        _rx(r"sk-(?<![A-Za-z0-9_-]sk-)(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{20,}"),
        "OpenAI/Anthropic style keys (sk-, sk-proj-, sk-ant-api03-); needs a digit, so sk-learn stays",
        ("sk-",),
    ),
    SecretPattern(
        "jwt",
        _rx(r"eyJ[A-Za-z0-9_-]*+(?P<rest>\.eyJ[A-Za-z0-9_-]*+\.?[A-Za-z0-9_-]*+)?"),
        'JSON Web Tokens (base64url {" header, {" payload, signature), glued to text or not. Every'
        " part is possessive and optional, so a match always takes the whole run and the search goes"
        " on after it: a run of eyJeyJ... is scanned once (the old rule retried it from each eyJ:"
        " quadratic); the veto keeps only header.payload shapes",
        ("eyj",),
        lambda match, text: match.span() if match.group("rest") and match.start("rest") - match.start() >= 11 else None,
    ),
    # -- headers, URLs, command lines --------------------------------------------------------------
    SecretPattern(
        "authorization",
        _rx(
            r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?"
            r"(?:(?:bearer|basic|token|digest|negotiate|mac|apikey|sso-key)[ \t]+(?P<secret>[^\s\"',;\[\]]{8,})"
            r"|(?P<secret_bare>(?=[A-Za-z0-9._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{16,}))"
        ),
        "Authorization headers: the credential after the scheme (the scheme stays); a bare value"
        " needs a digit, so 'handled-by-the-reverse-proxy' stays; Bearer <ACCESS_TOKEN> and $TOKEN are placeholders",
        ("authorization",),
        _not_placeholder,
        folded=True,
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"(?:docker[ \t]+login|register_new_matrix_user)(?=[ \t])[^\n]{0,200}?[ \t](?:-p|--password)[ \t=]+(?P<secret>[^\s\"']+|\"[^\"\n]+\"|'[^'\n]+')"
        ),
        "docker login -p <password>, register_new_matrix_user -p <password>, within 200 characters (a line"
        " of repeats stays linear; --password-stdin has no value; -p $CI_JOB_TOKEN stays)",
        ("docker", "register_new_matrix_user"),
        _not_placeholder,
    ),
    SecretPattern(
        "code_password",
        _rx(
            r"(?:auth[ \t]*=[ \t]*[(\[]|basicauth[ \t]*\(|digestauth[ \t]*\()[ \t]*[\"'][^\"'\n]*[\"'][ \t]*,[ \t]*"
            r"[\"'](?P<secret>[^\"'\n]+)[\"']"
        ),
        "a password given to an HTTP client in code: auth=('user', 'pw'), HTTPBasicAuth('user', 'pw')",
        ("auth",),
        folded=True,
    ),
    SecretPattern(
        "cookie",
        _rx(r"cookie[\"']?[ \t]*:[ \t]*(?P<secret>[^\s=;\"']+=[^\n\"']*)"),  # Set-Cookie: too
        "Cookie and Set-Cookie headers when a cookie holds a session-length value (16+ characters):"
        " the whole value goes, the header name stays",
        ("cookie",),
        _cookie_values,
        folded=True,
    ),
    SecretPattern(
        "session_token",
        _rx(r"(?:bw_session|op_session_[a-z0-9_]+)[\"']?[ \t]*[=:][ \t]*[\"']?(?P<secret>[a-z0-9+/=_-]{20,})"),
        "Bitwarden (BW_SESSION) and 1Password (OP_SESSION_<account>) CLI session keys",
        ("bw_session", "op_session_"),
        folded=True,
    ),
    SecretPattern(
        "cli_password",
        _rx(r"ngrok[ \t]+(?:config[ \t]+add-authtoken|authtoken)[ \t]+(?P<secret>[A-Za-z0-9_]{20,})"),
        "ngrok agent authtokens given on its command line",
        ("ngrok",),
    ),
    SecretPattern(
        "bearer",
        _rx(r"bearer[ \t]+(?=[A-Za-z0-9._~+/-]*[0-9])(?P<secret>[A-Za-z0-9._~+/-]{20,}=*)"),
        "Bearer <token> outside a header; needs 20+ chars with a digit, so prose stays",
        ("bearer",),
        folded=True,
    ),
    SecretPattern(
        "url_password",
        _rx(r"://[^\s:/?#@\[\]]*:(?P<secret>[^\s/@]+(?:@[^\s/@]+)*)@(?=[A-Za-z0-9\[])"),
        "user:password@ in URLs: only the password goes (it may hold # ? @); scheme, user, host stay",
        ("://",),
        _url_password,
    ),
    SecretPattern(
        "url_credential",
        _rx(
            r"[?&;](?:x-amz-signature|x-goog-signature|signature|code|jsessionid|phpsessid|sessionid|session_id|appid|auth|key)="
            r"(?P<secret>(?=[a-z0-9/_.~%+-]*[0-9])[a-z0-9/_.~%+-]{16,})"
        ),
        "capabilities in a URL's query: signed-URL signatures (S3, GCS), OAuth authorization codes"
        " (?code=, 16+ characters with a digit: ?code=ABCD stays), session ids (;jsessionid=, ?PHPSESSID=)"
        " and keys named appid or auth (OpenWeather, Firebase's REST ?auth=)",
        ("signature=", "code=", "sessionid=", "phpsessid=", "session_id=", "appid=", "auth=", "key="),
        folded=True,
    ),
    SecretPattern(
        "url_token_user",
        _rx(r"://(?P<secret>[A-Za-z0-9_.~-]{16,})@"),
        "a token as the whole userinfo (Sentry DSN keys, https://<token>@host): needs a digit",
        ("://",),
        _needs_digit,
    ),
    # Command lines, a row per tool: each regex opens with its tool's name, a literal the engine
    # searches fast, and in a long paste it is searched only on the lines naming that tool (one row
    # of alternatives opening with different letters cost ~1.3 ms per 60 KB, searched whole).
    *(
        SecretPattern("cli_password", _rx(source), why, triggers, _not_placeholder)
        for source, why, triggers in (
            (
                r"(?:curl|wget)\b[^\n]{0,300}?[ \t](?:-u|--user)[ \t=]+[\"']?[^\s:\"']*:(?P<secret>[^\s\"']+)",
                "curl -u user:pw, wget --user user:pw ($VAR and <password> stay)",
                ("curl", "wget"),
            ),
            (
                r"m(?:ysql|ysqldump|ariadb|ysqladmin)\b[^\n]{0,300}?[ \t]-p(?P<secret>[^\s\"'`]+|\"[^\"\n]+\"|'[^'\n]+')",
                "mysql -ppw (mysql -p alone prompts; -p$MYSQL_PWD stays)",
                ("mysql", "mariadb"),
            ),
            (
                r"sshpass[ \t]+-p[ \t]*(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|[^\s\"']+)",
                "sshpass -p pw",
                ("sshpass",),
            ),
            (
                r"redis-cli\b[^\n]{0,300}?[ \t]-a[ \t]+(?P<secret>[^\s]+)",
                "redis-cli -a pw",
                ("redis-cli",),
            ),
            (
                r"--(?:[a-z]+-)?(?:password|passwd|passphrase|pass|token|authtoken|cookie|api-key|secret|account-key"
                r"|access-key|secret-key|auth-token|(?:[a-z0-9]+-)+key)[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])"
                r"(?!(?:via|on|in|is|to|the|and|or|for|from|with|will|can|flag|option|file|stdin|prompt)\b)[^\s\"']+)",
                "--password pw, --account-key k (the --password=pw form is an assignment; docker's own warning"
                " 'Using --password via the CLI is insecure' stays)",
                ("--",),
            ),
        )
    ),
    # More command lines, a row per tool: each regex opens with its tool's name, a literal the
    # engine searches fast (one row of alternatives opening with different letters cost ~2 ms
    # per 60 KB), and runs only when that name occurs.
    *(
        SecretPattern("cli_password", _rx(source), why, triggers)
        for source, why, triggers in (
            (
                r"ldap(?:search|add|modify|delete|passwd|whoami|compare|modrdn|exop|url)\b[^\n]{0,300}?[ \t]-w[ \t]*"
                r"(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|[^\s\"']+)",
                "ldapsearch/ldapmodify/... -w pw (-W prompts and has no value)",
                ("ldap",),
            ),
            (
                r"smbclient\b[^\n]{0,300}?[ \t](?:-U|--user)[ \t=]*[\"']?[^\s%\"']+%(?P<secret>[^\s\"']+)",
                "smbclient -U user%pw",
                ("smbclient",),
            ),
            (
                r"(?:mongo(?:sh|dump|restore|export|import)?|mosquitto_(?:pub|sub))\b[^\n]{0,300}?[ \t]-[pP][ \t]+"
                r"(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"']+)",
                "mongo/mongosh/mongodump/... and mosquitto_pub/sub -p pw",
                ("mongo", "mosquitto"),
            ),
            (
                r"sqlcmd\b[^\n]{0,300}?[ \t]-P[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"']+)",
                "sqlcmd -P pw",
                ("sqlcmd",),
            ),
            (
                r"cqlsh\b[^\n]{0,300}?[ \t]-p[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`]+)",
                "cqlsh -p pw (Cassandra)",
                ("cqlsh",),
            ),
            (
                r"influx\b[^\n]{0,300}?[ \t]-t[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`]+)",
                "influx -t token (InfluxDB's CLI; --token is the -- row)",
                ("influx",),
            ),
            (
                r"cargo[ \t]+login[ \t]+(?:--registry[ \t=]+\S+[ \t]+)?(?P<secret>(?![-$<])[A-Za-z0-9_]{20,})",
                "cargo login <token>",
                ("cargo",),
            ),
            (
                r"(?:xfreerdp|wlfreerdp|sdl-freerdp|rdesktop)\b[^\n]{0,300}?[ \t](?:/p:|-p[ \t]+)"
                r"(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`]+)",
                "xfreerdp /p:pw, rdesktop -p pw",
                ("freerdp", "rdesktop"),
            ),
            (
                r"rclone[ \t]+obscure[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`]+)",
                "rclone obscure pw (obscuring is reversible: the argument is the password)",
                ("rclone",),
            ),
            (
                r"openssl[ \t]+passwd\b(?:[ \t]+-(?:salt[ \t]+\S+|\S+))*[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<(])[^\s\"'`)]+)",
                "openssl passwd [-1|-6|-salt s] pw: the plaintext a hash is made of",
                ("openssl",),
            ),
            (
                r"-(?<=[ \t]-)(?:pass(?:in|out)?|kpass)[ \t]+pass:(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|[^\s\"'`]+)",
                "openssl -pass/-passin/-passout pass:pw (env: and file: name where it is, and stay)",
                ("pass:",),
            ),
            (
                r"-(?<=[ \t]-)(?:(?:src|dest|new)?(?:store|key)pass|passwd|password|passphrase)(?::plain)?[ \t]+"
                r"(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`]+)",
                "single-dash password flags: keytool -storepass/-keypass, x11vnc -passwd, -password pw"
                " (-storepass:env VAR names a variable and stays)",
                ("pass", "passwd", "password", "passphrase"),
            ),
            (
                r"echo[ \t]+(?:-[ne]+[ \t]+)?(?P<secret>\"[^\"\n$]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`|>]+)[ \t]*\|[ \t]*"
                r"(?:sudo[ \t]+(?:-[A-Za-z]+[ \t]+)*-[A-Za-z]*S|passwd[ \t]+--stdin|\S*docker[ \t]+login\b)",
                "a password piped in: echo pw | sudo -S, | passwd --stdin, | docker login",
                ("sudo", "--stdin", "docker"),
            ),
            (
                r"echo[ \t]+(?:-[ne]+[ \t]+)?[\"']?[^\s:\"'|]+:(?P<secret>[^\s\"'|]+)[\"']?[ \t]*\|[ \t]*(?:sudo[ \t]+)?chpasswd\b",
                "echo user:pw | chpasswd",
                ("chpasswd",),
            ),
            (
                r"echo[ \t]+(?:-[ne]+[ \t]+)?(?P<secret>\"[^\"\n$]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`|>]+)[ \t]*>>?[ \t]*"
                r"[^\s]*(?:pass|secret|token|key|cred)[^\s/]*(?![^\s;&|])",
                "a password written to a file named for one: echo pw > ~/.vault_pass (echo $VAR stays)",
                ("echo",),
            ),
            (
                r"psexec\b[^\n]{0,300}?[ \t]-p[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`]+)",
                "psexec -p pw",
                ("psexec",),
            ),
            (
                r"cmdkey\b[^\n]{0,300}?[ \t]/pass:(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`]+)",
                "cmdkey /pass:pw (/pass alone prompts)",
                ("cmdkey",),
            ),
            (
                r"net[ \t]+use[ \t]+(?:[A-Za-z]:[ \t]+|\*[ \t]+)?\\\\\S+[ \t]+(?P<secret>(?![/*])[^\s\"]+|\"[^\"\n]+\")",
                "net use Z: \\\\server\\share pw /user:... (* prompts)",
                ("net use",),
            ),
            (
                r"sqlplus[ \t]+(?:-\w+[ \t]+)*[\"']?[A-Za-z0-9_$#]+/(?P<secret>[^\s@/\"']+)",
                "sqlplus user/pw[@db]",
                ("sqlplus",),
            ),
            (
                r"murmurd\b[^\n]{0,300}?[ \t]-supw[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`]+)",
                "murmurd -supw pw (the Mumble SuperUser password)",
                ("murmurd",),
            ),
            (
                r"snmp(?:walk|get|getnext|bulkwalk|bulkget|set|table|trap|df|status|netstat)\b[^\n]{0,300}?[ \t]-c[ \t]*"
                r"(?P<secret>(?!public\b)[^\s\"']+)",
                "snmpwalk/snmpget/... -c community (public stays: it is the well-known default)",
                ("snmp",),
            ),
            (
                r"(?:snmp\w*|net-snmp-config)\b[^\n]{0,300}?[ \t]-A[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`]+)",
                "SNMPv3 -A authpassphrase",
                ("snmp",),
            ),
            (
                r"(?:snmp\w*|net-snmp-config)\b[^\n]{0,300}?[ \t]-X[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`]+)",
                "SNMPv3 -X privpassphrase",
                ("snmp",),
            ),
            (
                r"(?:etcdctl|mc|influx|nats|consul|nomad)\b[^\n]{0,300}?[ \t]--user[ \t=]+[\"']?[^\s:\"']+:(?P<secret>[^\s\"']+)",
                "etcdctl/nats/... --user user:pw",
                ("etcdctl", "nats", "--user"),
            ),
            (
                r"(?:vault|bao)[ \t]+login[ \t]+(?:-\S+[ \t]+)*(?P<secret>(?![-$<])(?:hvs\.|s\.|b\.)?[A-Za-z0-9_.-]{20,})",
                "vault login <token> (legacy s. tokens too)",
                ("vault", "bao"),
            ),
            (
                r"snyk[ \t]+auth[ \t]+(?P<secret>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[A-Za-z0-9_-]{20,})",
                "snyk auth <token>",
                ("snyk",),
            ),
            (
                r"curl\b[^\n]{0,300}?[ \t](?:-b|--cookie)[ \t]+[\"']?[^\s=;\"']+=(?P<secret>[^\s;\"']{16,})",
                "curl -b 'session=<16+ characters>' (a session cookie on the command line)",
                ("curl",),
            ),
            (
                r"/(?:connect|server)[ \t]+(?:-\S+[ \t]+)*[A-Za-z0-9.-]+\.[A-Za-z]{2,}[ \t]+\+?\d{2,5}[ \t]+(?P<secret>[^\s]+)",
                "IRC /connect host port password (irssi, WeeChat)",
                ("/connect", "/server"),
            ),
            (
                r"net[ \t]+user[ \t]+(?:\"[^\"\n]+\"|[^\s/\"]+)[ \t]+(?P<secret>(?![/*])[^\s\"]+|\"[^\"\n]+\")",
                "net user name pw [/add] (Windows; net user name * prompts)",
                ("net user",),
            ),
        )
    ),
    SecretPattern(
        "cli_password",
        _rx(r"htpasswd(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\"']+)){2,8}"),
        "htpasswd -b [-c|-B|-n...] [file] user pw: the last positional argument with -b (-n: no file)",
        ("htpasswd",),
        _htpasswd_password,
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"(?:enable[ \t]+(?:secret|password)|username[ \t]+\S+(?:[ \t]+privilege[ \t]+\d+)?[ \t]+(?:secret|password))"
            r"(?:[ \t]+[0-9])?[ \t]+(?P<secret>[^\s]{2,})"
        ),
        "Cisco IOS: enable secret pw, username u [privilege n] secret|password pw (type 0 is plain;"
        " 5/7/8/9 are hashes or weak ciphers, and go too)",
        ("enable secret", "enable password", "username"),
        _not_plain_word,
        folded=True,
    ),
    SecretPattern(
        "cli_password",
        _rx(r"(?:requirepass|masterauth)[ \t]+[\"']?(?P<secret>[^\s\"'`]+)"),
        "redis.conf requirepass/masterauth pw (CONFIG SET requirepass pw too)",
        ("requirepass", "masterauth"),
        _not_placeholder,
        folded=True,
    ),
    SecretPattern(
        "cli_password",
        _rx(r"neo4j_auth[\"']?[ \t]*[=:][ \t]*[\"']?[^\s/\"']+/(?P<secret>[^\s\"']+)"),
        "NEO4J_AUTH=user/pw",
        ("neo4j_auth",),
        folded=True,
    ),
    # -- labels: assignments and prose -----------------------------------------------------------
    SecretPattern(
        "security_phrase",
        _rx(r"security[ _-]?(?:pass)?phrase(?:[ \t]*\([^)\n]{0,40}\))?[ \t]*(?:is|was|:|=)[ \t]*(?P<secret>[^\n]+)"),
        "an Element Security Phrase (the passphrase of a key backup) after its label, to the end of the"
        " line; a single plain word ('is lost') or a question stays",
        ("security",),
        _phrase_value,
        folded=True,
    ),
    SecretPattern(
        "seed_phrase",
        _rx(
            r"(?:(?:seed|recovery|mnemonic|backup|secret|wallet)[ _-]?(?:phrase|words)|mnemonic|\d\d[ -]word[ \t]+seed|seed(?=[ \t]+for\b))"
            r"(?:[ \t]+(?:for|of|to|on)[^\n:]{1,80}?(?=:))?"  # seed phrase for the test wallet (...):
            r"[ \t]*(?:is|was|:|=)?[ \t]*[\"'`]?"
            r"(?P<secret>[a-z]{3,10}(?:[ \t,]+[a-z]{3,10}){11,24})(?![a-z])"
        ),
        "a wallet's recovery phrase after its label: 12 to 25 words of 3 to 10 letters (BIP39's and"
        " Monero's shapes); a question about one has short words (is, it, my) that end the run",
        (
            "phrase",
            "mnemonic",
            "seed words",
            "recovery words",
            "backup words",
            "secret words",
            "wallet words",
            "word seed",
        ),
        folded=True,
    ),
    SecretPattern(
        "seed_phrase",
        _rx(
            r"(?:phrase|words|mnemonic|seed)[ \t]*:?[ \t]*\r?\n[ \t]*[\"'`]?"
            r"(?P<secret>[a-z]{3,10}(?:[ \t,]+[a-z]{3,10}){11,24})(?![a-z])"
        ),
        "a recovery phrase on the line after its label (my recovery words:\\n boost ancient ...)",
        ("phrase", "mnemonic", "seed words", "recovery words", "backup words", "secret words", "wallet words", "seed"),
        _seed_label_before,
        folded=True,
    ),
    SecretPattern(
        "recovery_codes",
        _rx(
            r"(?:recovery|backup|2fa|mfa|otp|scratch)[ _-]codes?(?:[ \t]+[^\n:=]{1,100}?(?=:))?[ \t]*(?:are|is|were|was|:|=)?[ \t]*[\"'`]?"
            r"(?:\r?\n[ \t]*(?:[-*]|\d+[.)])?[ \t]*)?"  # the first code may open the next line, as a list
            r"(?P<secret>(?=[a-z-]*[0-9])[a-z0-9]{4,10}(?:-[a-z0-9]{4,10})?"
            r"(?:[ \t,;]*\r?\n?[ \t]*(?:[-*]|\d+[.)])?[ \t]*(?=[a-z-]*[0-9])[a-z0-9]{4,10}(?:-[a-z0-9]{4,10})?)*)"
            r"(?![a-z0-9])"
        ),
        "two-factor recovery and backup codes after their label: one or more codes of 4-10 letters and"
        " digits (xxxxx-xxxxx), each with a digit, so 'backup codes are in the vault' stays",
        tuple(f"{what}{sep}code" for what in ("recovery", "backup", "2fa", "mfa", "otp", "scratch") for sep in " _-"),
        folded=True,
    ),
    SecretPattern(
        "prose_credentials",
        _rx(
            r"(?:login|log(?:ged)?[ \t]+in|logon|sign(?:ed)?[ \t]+in|creds|credentials|user(?:name)?[ \t]*/[ \t]*pass(?:word)?|u/p)"
            r"(?:[ \t]+(?:for|to|of|on)(?:[ \t]+[^\s]+){1,3}?(?=[ \t]*(?:->|→|:|=|is|are)))?"
            r"(?:[ \t]+(?:is|are|with|was|as))?(?:[ \t]*(?:[:=]|->|→)[ \t]*|[ \t]+)[\"'`]?[^\s:/\"'`]{1,64}[ \t]*[:/][ \t]*"
            r"[\"'`]?(?P<secret>[^\s\"'`]+)"
        ),
        "a user and password told together (login with alice / Tr0ub4dor&3, creds are admin:S3cret!x),"
        " when the password is shaped like one: 'login with google/github' stays",
        ("login", "log in", "logged in", "sign in", "signed in", "logon", "creds", "credentials", "/pass", "u/p"),
        refine_secret_shaped,
        not_after=_TOKEN_CHARS + "/.",  # inside a URL path or a longer word: not a told login
        folded=True,
    ),
    SecretPattern(
        "prose_pin",
        _rx(
            r"(?:pin(?:[ \t]+(?:code|number))?|puk|passcode|unlock[ \t]+code|пін(?:-код)?|пин(?:-код)?|暗証番号|digicode)"
            r"(?:[ \t]+(?:for|of|on|to|del|della|de|do|da|der|des|du|für|fürs|zur|zum|від|для|от)(?:[ \t]+[^\s:]+){1,5}?"
            r"(?=[ \t]*(?::|is|was|è|es|é|ist|est|\d)))?"
            r"(?:[ \t]+(?:is|was|è|es|é|ist|est)|[ \t]*[:：]|は|[ \t]+)[ \t]*"
            r"(?P<secret>\d{4,8})(?![0-9])"
        ),
        "a PIN or PUK told in words (my PIN is 4821, voicemail pin 3033, Il PIN della carta è 84426): 4 to 8"
        " digits after the label ('the pin is 13' on a board stays)",
        ("pin ", "pin:", "pin\t", "puk", "passcode", "unlock code", "пін", "пин", "暗証番号", "digicode"),
        not_after=_ALNUM,
        folded=True,
    ),
    SecretPattern(
        "password",
        _assignment(_PASSWORD_WORDS),
        "password/passwd/passphrase/pass/pwd/pw/psk assignments (JSON, YAML, env, code, query strings, npm _auth)",
        ("pass", "pwd", "pw", "psk", "authtok", "_auth"),
        refine_assignment,
        folded=True,
    ),
    SecretPattern(
        "secret",
        _assignment(_SECRET_WORDS),
        "token/secret/api_key/client_secret/private_key/credentials/dsn assignments; key must end with it;"
        " an environment name in capitals ending _KEY or _PAT when its value is shaped like a secret",
        ("secret", "token", "key", "credentials", "sig", "dsn", "pat", "private"),
        refine_assignment,
        folded=True,
    ),
    SecretPattern(
        "sql_password",
        _rx(r"(?:identified[ \t]+by|password)(?:[ \t]*=[ \t]*|[ \t]+)'(?P<secret>(?:[^'\n]|'')+)'"),
        "SQL: IDENTIFIED BY 'pw', CREATE ROLE ... PASSWORD 'pw', WITH PASSWORD = 'pw'",
        ("identified", "password"),
        folded=True,
    ),
    SecretPattern(
        "xml_secret",
        _rx(
            r"<(?P<tag>[\w:.-]*(?:password|passwd|secret|token|apikey|api[_-]?key))(?:[ \t][^>]*)?>"
            r"(?P<secret>[^<\n]+)</(?P=tag)>"
            r"|key=\"[\w.:-]*(?:password|secret|token|apikey)\"[ \t]+value=\"(?P<secret_v>[^\"\n]+)\""
        ),
        "XML elements and .NET appSettings named like a credential: <password>pw</password>",
        ("<",),
        folded=True,
    ),
    SecretPattern(
        "netrc",
        _rx(r"(?:login|machine[ \t]+\S+)[ \t\r\n]+(?:\S+[ \t\r\n]+)?password[ \t]+(?P<secret>\S+)"),
        ".netrc entries: machine host login user password pw, on one line or several",
        ("password",),
        _not_plain_word,
    ),
    SecretPattern(
        "pgpass",
        _rx(r"(?m):(?<=[A-Za-z0-9_.*-]:)(?:\d{1,5}|\*):[A-Za-z0-9_*-]+:[A-Za-z0-9_*.-]+:(?P<secret>\S{4,})$"),
        ".pgpass lines: host:port:db:user:password (the host alone on the line before the first colon)",
        (":",),
        _pgpass_host,
    ),
    SecretPattern(
        "docker_auth",
        _rx(r"\"(?:auth|identitytoken)\"[ \t]*:[ \t]*\"(?P<secret>[A-Za-z0-9+/=._-]{12,})\""),
        'docker config.json "auth" (base64 user:password) and identity tokens',
        ("auth", "identitytoken"),
    ),
    *(
        SecretPattern(
            "prose_password",
            re.compile(lead + _PROSE_VALUE),
            why,
            triggers,
            refine_prose,
            not_after=not_after,
            folded=True,
        )
        for leads, why, not_after in (
            (
                _PROSE_LEADS,
                "a password told in words, in several languages, when the value is not a plain word",
                _ALNUM,  # "bypass is", "compass is": a longer word
            ),
            (
                _UNSPACED_LEADS,
                "a password told in a script that glues words or has no letter case (Chinese, Japanese,"
                " Korean, Arabic, Hebrew, Hindi, Greek, Persian, Thai), when the value is not a plain word",
                "",  # wifi密码是 …: glued to the word before it
            ),
        )
        for lead, triggers in leads
    ),
    SecretPattern(
        "prose_password",
        re.compile(_BARE_PASSWORD_LEAD + _PROSE_PLAIN_VALUE),
        "a password named without a verb (with password toor1234!, root pw Tr0ub4dor&3), when the value is shaped like one",
        ("password", "passwd", "passphrase", "passwort", "pwd", "pw"),
        refine_password_shaped,
        folded=True,
    ),
    SecretPattern(
        "prose_secret",
        re.compile(_PROSE_KEY_LEAD + _PROSE_PLAIN_VALUE),
        "a key, token or secret told in words (the api key is 9f8e…, the password for the NAS -> X, the pw for"
        " the wifi: X), when the value is shaped like one or is one long word (a passphrase run together)",
        (
            "key",
            "token",
            "secret",
            "pass",
            "pw",
            "p/w",
            "psk",
            "pat",
            "pasword",
            "access code",
            "access-code",
            "access_code",
            "secret word",
            "magic word",
            "safe word",
            "secret-word",
            "magic-word",
        ),
        refine_told_value,
        not_after=_ALNUM,  # "monkey is", "bypass is": a longer word
        folded=True,
    ),
    SecretPattern(
        "prose_secret",
        _rx(
            r"(?:token|secret|api[ _-]?key|access[ _-]?key|apikey)[ \t]+[\"'`]?"
            r"(?P<secret>(?=[a-z0-9_+=-]*[0-9])(?=[a-z0-9_+=-]*[a-z])[a-z0-9_+=-]{16,})(?![a-z0-9_+=./-])"
        ),
        "a key, token or secret named without a verb (mattermost token k3j9…, ZENDESK_API_TOKEN k3J9…):"
        " 16+ letters and digits, not a snake_case name, a path, a URL or a dotted name",
        ("token", "secret", "key"),
        _not_a_snake_name,
        not_after=_ALNUM,
        folded=True,
    ),
    SecretPattern(
        "prose_password",
        _rx(
            r"(?:use|try|it's|its|it[ \t]+is)[ \t]+[\"'`]?(?P<secret>[^\s\"'`]+)[\"'`]?[ \t]+as[ \t]+"
            r"(?:(?:the|my|your|a|our)[ \t]+)?(?:new[ \t]+)?(?:password|passphrase|passwd|pw|pass)\b"
        ),
        "a password told value first: use hunter2 as the password (a plain word stays)",
        (
            "as the pass",
            "as my pass",
            "as your pass",
            "as a pass",
            "as our pass",
            "as the new pass",
            "as pass",
            "as the pw",
            "as pw",
        ),
        refine_prose,
        not_after=_ALNUM,
        folded=True,
    ),
    SecretPattern(
        "prose_password",
        _rx(
            r"(?:try|use|default(?:[ \t]+(?:is|was|one))?|(?:set|changed|reset)[ \t]+it[ \t]+to|it['’]s|it[ \t]+is)"
            r"[ \t]+[\"'`]?(?P<secret>[^\s\"'`,;]+)"
        ),
        "a password offered without its name (try P@ssw0rd123, the default is Adm1n!2024): only a value"
        " with a capital, a small letter, a digit and a symbol, so 'try python3.11' stays",
        ("try", "use", "default", "it to", "it's", "it’s", "it is"),
        refine_strong_password,
        not_after=_ALNUM,
        folded=False,
    ),
    SecretPattern(
        "prose_credentials",
        _rx(
            r"u(?<![A-Za-z0-9_]u)(?:ser(?:name)?)?[ \t]*[:=][ \t]*[^\s:=]+[ \t,;/|]+"
            r"p(?:w|wd|ass|assword)?[ \t]*[:=][ \t]*[\"'`]?(?P<secret>[^\s\"'`,;]+)"
        ),
        "a user and password as two short labels (u: jenny p: Ch0c0lat3, user=bob pass=S3cret!),"
        " when the password is shaped like one",
        ("u:", "u=", "user:", "user=", "username:", "username="),
        refine_password_shaped,
        folded=True,
    ),
    SecretPattern(
        "secret",
        _rx(r"secret_key_base[\"']?[ \t]*(?:=>|=|:)[ \t]*[\"']?(?P<secret>[0-9a-f]{32,})"),
        "Rails SECRET_KEY_BASE (hex; signs every session cookie)",
        ("secret_key_base",),
        folded=True,
    ),
    SecretPattern(
        "totp_secret",
        _rx(
            r"(?:2fa|mfa|totp|otp|authenticator|two[ -]factor)[ \t]+(?:setup[ \t]+|secret[ \t]+|seed[ \t]+)?"
            r"(?:key|secret|seed|code)\b[^\n:=]{0,60}?[:=]?[ \t]*"
            r"(?P<secret>[a-z2-7]{4}(?:[ ]?[a-z2-7]{4}){3,15})(?![a-z0-9])"
        ),
        "a TOTP shared secret told for setup (2FA setup key: E4TP CU3J 3XCN GDZK): 16-64 base32"
        " characters, in groups of four or not, with a digit (checked after)",
        ("2fa", "mfa", "totp", "otp", "authenticator", "two factor", "two-factor"),
        _needs_digit,
        folded=True,
    ),
    SecretPattern(
        "url_credential",
        _rx(
            r"/(?:webhooks?|hooks)/(?:[A-Za-z0-9_-]+/){0,3}"
            r"(?P<secret>(?=[A-Za-z0-9_-]*[0-9])(?=[A-Za-z0-9_-]*[A-Z])(?=[A-Za-z0-9_-]*[a-z])[A-Za-z0-9_-]{20,})"
            r"(?![A-Za-z0-9_-])"
        ),
        "a webhook URL's secret path segment (hookshot, Gitea, generic /webhook/<token>): 20+ characters"
        " mixing capitals, small letters and digits, so /hooks/12 and /hooks/deploy-on-push stay",
        ("/webhook/", "/webhooks/", "/hooks/"),
    ),
    SecretPattern(
        "prose_password",
        _rx(
            r"(?m)^>[^\n]*\b(?:password|passwd|passphrase|pw|pass|creds|login|pin)\b[^\n]*\?[ \t]*\r?\n(?:[ \t]*\r?\n)?"
            r"[ \t]*[\"'`]?(?P<secret>[^\s\"'`]+)[\"'`]?[ \t]*(?:$|[—–-][ \t]|\()"
        ),
        "a password given as the whole reply to a quoted question about one (> what's the staging password?"
        " then the value alone on its line), when shaped like one",
        ("password", "passwd", "passphrase", "pw", "pass", "creds", "login", "pin"),
        refine_password_shaped,
        folded=True,
    ),
    SecretPattern(
        "prose_password",
        _rx(
            r"(?:wifi|wi-fi|wlan|ssid)\b[^\n]{0,60}?\b(?:code|key|pass|password|pw)(?:[ \t]+(?:is|was)|[ \t]*:)?[ \t]+[\"'`]?"
            r"(?P<secret>[^\s\"'`]+)"
        ),
        "a Wi-Fi key told in words (the wifi is called X and the code is Y), when shaped like one",
        ("wifi", "wi-fi", "wlan", "ssid"),
        refine_secret_shaped,
        folded=True,
    ),
    SecretPattern(
        "prose_credentials",
        _rx(
            r":(?<=\S:)[ \t]+[\"'`]?(?P<user>[A-Za-z0-9._%+@-]{2,64})[\"'`]?[ \t]+/[ \t]+"
            r"[\"'`]?(?P<secret>[^\s\"'`]+)[\"'`]?(?=[ \t]*(?:$|[\r\n,;—–(]|[ \t]-))"
        ),
        "an account told as 'service: user / password' (instagram: stream_team / marta_1975, gitea admin"
        " account: root / Cob4ltd0nu7-), when the password is shaped like one and is no name with a version",
        (": ",),
        _account_password,
    ),
    SecretPattern(
        "prose_credentials",
        _rx(
            r"(?:login|log[ \t]+in|user(?:name)?|acct|account|email)[ \t]*:?[ \t]+"
            r"(?:[^\s,;]{2,64}[ \t]*[,;]?[ \t]+(?:pass(?:word|wd)?|pw|pwd)[ \t]*:?[ \t]+"  # user X pass Y
            r"|[^\s@,;]{1,64}@[^\s@,;]+\.[a-z]{2,}[ \t]*[,;]?[ \t]+)"  # login me@example.org Y
            r"[\"'`]?(?P<secret>[^\s\"'`,;]+)"
        ),
        "a user then a password in one breath (login toni75@posteo.de, pass Router*maple+56; user admin pass"
        " qazwsx$119; panel login me@x.org qwerty#370), when the password is shaped like one",
        ("login", "log in", "user", "acct", "account", "email"),
        _user_then_password,
        folded=True,
    ),
    SecretPattern(
        "prose_password",
        _rx(
            r"(?:security[ \t]+question\b[^\n]{0,100}?\banswer|maiden[ \t]+name|first[ \t]+pet(?:['’]s[ \t]+name)?)"
            r"[ \t]*(?:is|was|:|=)[ \t]*[\"'`]?(?P<secret>[^\s\"'`,;]+)"
        ),
        "the answer to a security question (answer is Noodle61, mother's maiden name = Haverkamp)",
        ("security question", "maiden name", "first pet"),
        _not_placeholder,
        folded=True,
    ),
    SecretPattern(
        "prose_password",
        _rx(r"(?:password|passwd|passphrase|pw|pass)[ \t]*:[ \t]*\r?\n[ \t]*(?P<secret>[^\s]+)[ \t]*(?=\r?\n|$)"),
        "a password alone on the line after 'password:' (copied from a manager)",
        ("password", "passwd", "passphrase", "pw", "pass"),
        refine_password_shaped,
        folded=True,
    ),
    SecretPattern(
        "secret",
        _rx(r"api_hash[\"']?[ \t]*[:=][ \t]*[\"']?(?P<secret>[0-9a-f]{32})(?![0-9a-f])"),
        "Telegram api_hash (mautrix-telegram, Telethon)",
        ("api_hash",),
        folded=True,
    ),
    SecretPattern(
        "secret",
        _rx(r"encryption:[ \t]*\r?\n[ \t]+key:[ \t]*[\"']?(?P<secret>[A-Za-z0-9+/]{40,}={0,2})"),
        "an ESPHome API encryption key (api: encryption: key: <base64>)",
        ("encryption:",),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"cat[ \t]+[^\s]*(?:auth\.txt|\.pass\b|passwd|password|credentials|secret|token|\.key\b)[^\s]*[ \t]*\r?\n"
            r"(?P<secret>(?![ \t]*[$#>])[^\n]{1,200}(?:\r?\n(?![ \t]*[$#>])[^\n]{1,200})?)"
        ),
        "a credential file printed with cat (the OpenVPN auth.txt's user and password lines), up to the next prompt",
        ("cat ",),
        _not_placeholder,
    ),
    _prefixed(
        "password_hash",
        ("JDJhJD", "JDJ5JD", "JDJiJD"),
        "bcrypt hashes in base64 (Caddy's basicauth)",
        body=r"[A-Za-z0-9+/]{40,}={0,2}",
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"(?:az[ \t]+login|nmcli)\b[^\n]{0,300}?[ \t](?:-p|--password|password)[ \t]+"
            + r"""(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`]+)"""
        ),
        "az login -p pw, nmcli ... password pw",
        ("az login", "nmcli"),
    ),
    SecretPattern(
        "code_password",
        _rx(
            r"(?:bearer_auth|basic_auth|set_bearer_token|with_token)\([ \t]*(?:[\"'][^\"'\n]*[\"'][ \t]*,[ \t]*(?:some\()?)?[\"'](?P<secret>[^\"'\n]{8,})[\"']"
        ),
        'a token or password handed to an HTTP client in code: .bearer_auth("…"), .basic_auth("u", Some("pw"))',
        ("bearer_auth", "basic_auth", "set_bearer_token", "with_token"),
        _quoted_not_placeholder,
        folded=True,
    ),
    SecretPattern(
        "code_password",
        _rx(
            r"dbi->connect\([ \t]*[\"'][^\"'\n]*[\"'][ \t]*,[ \t]*[\"'][^\"'\n]*[\"'][ \t]*,[ \t]*"
            r"[\"'](?P<secret>[^\"'\n]+)[\"']"
        ),
        "Perl DBI->connect(dsn, user, pw)",
        ("dbi->connect",),
        _quoted_not_placeholder,
        folded=True,
    ),
    SecretPattern(
        "matrix_recovery_key",
        _rx(
            r"(?:security|recovery)[ \t]+key\b[^\n:]{0,80}:?[ \t]*(?:\r?\n[ \t]*)?"
            r"(?P<secret>[1-9A-HJ-NP-Za-km-z]{4}(?:[ ]+[1-9A-HJ-NP-Za-km-z]{4}){7,11})(?![1-9A-HJ-NP-Za-km-z])"
        ),
        "a Matrix Security Key (recovery key) told after its label: 8-12 groups of 4 base58 characters",
        ("security key", "recovery key"),
        folded=False,
    ),
    SecretPattern(
        "cli_password",
        _rx(r"b2[ \t]+(?:authorize-account|account[ \t]+authorize)[ \t]+\S+[ \t]+(?P<secret>[A-Za-z0-9+/]{20,})"),
        "b2 authorize-account keyID applicationKey (Backblaze)",
        ("b2 ",),
    ),
    SecretPattern(
        "backblaze_key",
        _rx(
            r"K00[0-9](?=[A-Za-z0-9+/]{27}(?![A-Za-z0-9+/]))(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[A-Z])[A-Za-z0-9+/]{27}"
        ),
        "Backblaze B2 application keys (K00 and 28 more letters and digits)",
        ("k00",),
        not_after=_ALNUM,
    ),
    SecretPattern(
        "url_credential",
        _rx(
            r"hc-ping\.com/(?P<secret>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[A-Za-z0-9_-]{20,})"
        ),
        "a Healthchecks.io ping URL: whoever has its UUID can ping (or fail) the check",
        ("hc-ping.com/",),
    ),
    SecretPattern(
        "code_password",
        _rx(
            r"(?:client|api|sdk)\([ \t]*[\"']"
            r"(?P<secret>(?=[A-Za-z0-9_-]*[0-9])(?=[A-Za-z0-9_-]*[A-Z])(?=[A-Za-z0-9_-]*[a-z])[A-Za-z0-9_-]{32,})[\"'][ \t]*\)",
            re.IGNORECASE,
        ),
        'an API key as a client\'s only argument: cohere.Client("…"), Anthropic(api_key=…) is an assignment',
        ("client(", "api(", "sdk("),
    ),
    SecretPattern(
        "prose_password",
        _rx(
            r"(?P<secret>[^\s\"'`]{6,})[\"'`]?[ \t]+(?:is|was|←|<-|<--)[ \t]+(?:that['’]s[ \t]+|it['’]s[ \t]+)?"
            r"(?:the|my|our|your)[ \t]+(?:new[ \t]+)?(?:password|passwd|passphrase|passcode|pw|pwd|pass)\b"
        ),
        "a password told value first (MyCactusIsVeryRosie5 is the password for …; X ← that's the pw),"
        " when shaped like one",
        (
            "the password",
            "the passwd",
            "the passphrase",
            "the passcode",
            "the pw",
            "the pass",
            "my password",
            "my pw",
            "my pass",
            "our password",
            "our pw",
            "your password",
            "your pw",
        ),
        _shaped_or_diceware,
        folded=True,
    ),
    SecretPattern(
        "prose_password",
        _rx(
            r"\bused[ \t]+[\"'`]?(?P<secret>[^\s\"'`]+)[\"'`]?[ \t]+as[ \t]+(?:the|my|our|a)[ \t]+(?:new[ \t]+)?(?:password|passphrase|pw|pass)\b"
        ),
        "a password told as what was used (I used cactus-liverpool-cobalt-17 as the pass)",
        ("as the pass", "as my pass", "as our pass", "as a pass", "as the pw", "as the new pass"),
        _shaped_or_diceware,
        folded=True,
    ),
    SecretPattern(
        "cli_password",
        _rx(r"--from-literal[ \t=]+[\w.-]+=(?P<secret>'[^'\n]+'|\"[^\"\n]+\"|[^\s'\"]+)"),
        "kubectl create secret --from-literal=key=value: each literal is the secret's data",
        ("--from-literal",),
        _not_placeholder,
    ),
    SecretPattern(
        "secret",
        _rx(r"secrets:[ \t]*\r?\n[ \t]+encryption:[ \t]*[\"']?(?P<secret>[0-9a-f]{32,})"),
        "matrix-authentication-service secrets.encryption (hex)",
        ("secrets:",),
    ),
    SecretPattern(
        "secret",
        _rx(r"login_shared_secret_map:[ \t]*\r?\n[ \t]+[^\s:]+:[ \t]*[\"']?(?P<secret>[^\s\"']{16,})"),
        "a mautrix bridge's double-puppeting login_shared_secret_map entry",
        ("login_shared_secret_map",),
        _not_placeholder,
    ),
    SecretPattern(
        "code_password",
        _rx(r"\.login\([ \t]*(?:password[ \t]*=[ \t]*)?[\"'](?P<secret>[^\"'\n]{6,})[\"'][ \t]*\)"),
        "a password as login()'s only argument (matrix-nio's client.login(\"pw\"))",
        ("login(",),
        _quoted_not_placeholder,
    ),
    SecretPattern(
        "door_code",
        _rx(
            r"(?:alarm|padlock|lockbox|key[ -]?box|key[ -]?safe|combination|combinazione|combo|digicode|t[üu]rcode"
            r"|portkod(?:en)?|koodi|codice|c[oó]digo|clave|kod|[кК]од|kodu|lucchetto|candado|cadenas|sleutelkastje"
            r"|nøkkelboks(?:en)?|nyckelbox|keypad|door|gate|garage|porte|portão|portone|spogliatoio|domofon|домофон"
            r"|alarmkoden?|kapı)"
            r"(?P<gap>[^\n\d]{0,60}?)(?<![A-Za-z0-9])(?P<secret>[A-Z]?\d{4,8}[#*]?)(?![\d.,:/-]\d)(?![\d])"
        ),
        "a door, alarm, padlock or key-box code in any of several languages: 4-8 digits after the label,"
        " when the words between say it is the code ('code', 'is', ':', '→', 'c'est', 'er', 'è', 'to')",
        (
            "alarm",
            "padlock",
            "lockbox",
            "key box",
            "keybox",
            "key-box",
            "key safe",
            "combination",
            "combinazione",
            "combo",
            "digicode",
            "türcode",
            "turcode",
            "portkod",
            "koodi",
            "codice",
            "código",
            "codigo",
            "clave",
            "kod",
            "код",
            "kodu",
            "lucchetto",
            "candado",
            "cadenas",
            "sleutelkastje",
            "nøkkelboks",
            "nyckelbox",
            "keypad",
            "door",
            "gate",
            "garage",
            "porte",
            "portão",
            "portone",
            "spogliatoio",
            "domofon",
            "домофон",
            "alarmkode",
            "kapı",
        ),
        _code_after_label,
        folded=True,
    ),
    SecretPattern(
        "prose_credentials",
        _rx(
            r"@[^\s@/,;:]+\.[a-z]{2,}[`'\"]?"
            r"(?:[ \t]+[/—–-][ \t]+|[ \t]*[—–][ \t]*|[ \t]*,[ \t]*(?=(?:password|passwort|contraseña|mot de passe|lösenord"
            r"|passord|hasło|ww|pw|pass|senha)\b))"
            r"(?:(?:password|passwort|contraseña|mot de passe|lösenord|passord|hasło|ww|pw|pass|senha)[ \t]*:?[ \t]+)?"
            r"[`'\"]?(?P<secret>[^\s`'\",;]+)"
        ),
        "an account told as email then password (maps@club.org — Cartography&Coffee9, gm@x.club / Beholder!Eye42),"
        " when the password is shaped like one",
        ("@",),
        _email_then_password,
        folded=True,
    ),
    SecretPattern(
        "prose_password",
        _rx(
            r"app[ -]?passwor[dt][^\n:]{0,100}:[ \t]*(?:\r?\n[ \t]*)?"
            r"(?P<secret>[A-Za-z0-9]{4,5}(?:[ -][A-Za-z0-9]{4,5}){3,5})(?![A-Za-z0-9])"
        ),
        "an app password (Google, WordPress, Nextcloud) in its groups of four or five",
        ("app password", "app-password", "apppassword", "app-passwort", "app passwort"),
        folded=True,
    ),
    _prefixed("mailgun_key", ("key-",), "Mailgun API keys (key- and 32 hex)", body=r"[0-9a-f]{32}"),
    SecretPattern(
        "mailgun_key",
        _rx(r"-(?<=[0-9a-f]{32}-)[0-9a-f]{8}-[0-9a-f]{8}(?![0-9a-f])"),
        "Mailgun sending keys (32 hex, then two groups of 8): the first '-' is the literal the engine"
        " searches for, the 32 hex are checked behind it (no trigger: a '-' trigger would flag every UUID"
        " the journal tests)",
        (),
        _mailgun_whole,
    ),
    SecretPattern(
        "deepl_key",
        _rx(r":fx\b(?<=[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:fx)"),
        "DeepL Free API keys (<uuid>:fx): the whole key",
        (":fx",),
        lambda match, text: (match.start() - 36, match.end()),
    ),
    SecretPattern(
        "secret",
        _rx(r"accesskey[ \t]*secret[ \t]*[:：=][ \t]*(?P<secret>[A-Za-z0-9/+]{24,})"),
        "an Alibaba Cloud AccessKey Secret after its label (full-width colon too)",
        ("accesskey",),
        folded=True,
    ),
    # -- code, config and tool output ---------------------------------------------------------------
    SecretPattern(
        "code_password",
        _rx(
            r"define\([ \t]*[\"'](?:[A-Z0-9_]*(?:PASSWORD|PASSWD|PASS|PWD|SECRET|TOKEN)|(?:SECURE_)?AUTH_(?:KEY|SALT)"
            r"|LOGGED_IN_(?:KEY|SALT)|NONCE_(?:KEY|SALT)|[A-Z0-9_]*API_KEY)[\"'][ \t]*,[ \t]*"
            r"(?:\"(?P<secret>[^\"\n]+)\"|'(?P<secret_sq>[^'\n]+)')"
        ),
        "PHP define('DB_PASSWORD', 'pw') and WordPress's keys and salts ('put your unique phrase here' stays)",
        ("define",),
        _quoted_not_placeholder,
    ),
    SecretPattern(
        "code_password",
        _rx(
            r"(?:\.login|getconnection|networkcredential|new[ \t]+pdo|basicauthentication|usernamepasswordcredentials"
            r"|passwordauthentication|plaincredentials|credentials)[ \t]*\([^()\n]{0,200}?[\"'][^\"'\n]*[\"'][ \t]*,[ \t]*"
            r"[\"'](?P<secret>[^\"'\n]+)[\"'][ \t]*\)"
        ),
        "a password as the last string argument after a user: s.login('u', 'pw'), DriverManager.getConnection(url,"
        " 'u', 'pw'), new PDO(dsn, 'u', 'pw'), new NetworkCredential('u', 'pw')",
        ("login", "getconnection", "networkcredential", "pdo", "credential", "passwordauthentication"),
        _not_placeholder,
        folded=True,
    ),
    SecretPattern(
        "twilio_key",
        _rx(r"AC[0-9a-f]{32}[\"']?[ \t]*,[ \t]*[\"']?(?P<secret>[0-9a-f]{32})(?![0-9a-f])"),
        "a Twilio auth token beside its account SID: Client('AC…', '<32 hex>')",
        ("ac",),
        not_after=_ALNUM,
    ),
    SecretPattern(
        "code_password",
        _rx(
            r"variable[ \t]+\"[\w-]*(?:password|passwd|secret|token|api_key|apikey|private_key|access_key)\"[ \t]*\{"
            r"[^{}]{0,400}?\bdefault[ \t]*=[ \t]*\"(?P<secret>[^\"\n]+)\""
        ),
        "a Terraform variable named for a credential with a literal default",
        ("variable",),
        _not_placeholder,
        folded=True,
    ),
    SecretPattern(
        "password",
        _rx(
            r"(?:setenv|env|set[ \t]+-[gxU]+|passenv)[ \t]+(?P<kw>[A-Za-z0-9_]*(?:PASSWORD|PASSWD|PASS|PWD|SECRET|TOKEN|API_KEY|APIKEY))"
            r"[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`=]+)",
            re.IGNORECASE,
        ),
        'SetEnv DB_PASS "pw" (Apache), ENV DB_PASSWORD pw (Dockerfile, space form), set -x TOKEN v (fish)',
        ("setenv", "env ", "set -", "passenv"),
        _not_placeholder,
    ),
    SecretPattern(
        "code_password",
        _rx(r"convertto-securestring[ \t]+(?:-string[ \t]+)?(?P<secret>\"[^\"\n$]+\"|'[^'\n]+')"),
        'PowerShell ConvertTo-SecureString "pw" -AsPlainText',
        ("convertto-securestring",),
        folded=True,
    ),
    SecretPattern(
        "cli_password",
        _rx(r"(?m)^[ \t]*user[ \t]+[^\s]+[ \t]*\r?\n(?:[^\n]*\r?\n){0,2}?[ \t]*pass[ \t]+(?P<secret>[^\s]+)"),
        "a POP3 or FTP session pasted: USER name, then PASS pw",
        ("pass ",),
        _not_placeholder,
        folded=True,
    ),
    SecretPattern(
        "cli_password",
        _rx(r"(?:ro|rw)community6?[ \t]+(?P<secret>(?!public\b)[^\s]+)"),
        "snmpd.conf rocommunity/rwcommunity (public stays)",
        ("community",),
        folded=True,
    ),
    SecretPattern(
        "cli_password",
        _rx(r":[ \t]*(?:psk|xauth|eap)[ \t]+(?P<secret>\"[^\"\n]+\"|[^\s\"]+)"),
        'ipsec.secrets: <ids> : PSK "secret"',
        ("psk", "xauth", "eap"),
        folded=True,
    ),
    SecretPattern(
        "secret",
        _rx(r"secret[ _]?id[ \t]*[:=][ \t]*(?P<secret>" + _UUID + r")"),
        "Consul and Nomad ACL tokens as their CLIs print them (SecretID: <uuid>; the AccessorID stays)",
        ("secretid", "secret id", "secret_id"),
        folded=True,
    ),
    SecretPattern(
        "vault_token",
        _rx(
            r"s\.(?=[A-Za-z0-9]{24}(?![A-Za-z0-9]))(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[A-Z])(?=[A-Za-z0-9]*[a-z])[A-Za-z0-9]{24}"
        ),
        "HashiCorp Vault's older service tokens: s. and 24 letters and digits mixing cases",
        ("s.",),
        not_after=_TOKEN_CHARS + ".",
    ),
    _prefixed(
        "sonarqube_token", ("sqp_", "squ_", "sqa_"), "SonarQube project, user and analysis tokens", body=r"[a-f0-9]{40}"
    ),
    _prefixed(
        "lightning_macaroon",
        ("0201036c6e64",),
        "LND macaroons in hex (0201036c6e64 is the header of every lnd macaroon)",
        body=r"[0-9a-f]{60,}",
    ),
    SecretPattern(
        "ghost_admin_key",
        _rx(r":(?<=[0-9a-f]{24}:)(?P<secret>[0-9a-f]{64})(?![0-9a-f])"),
        "Ghost Admin API keys (<24-hex id>:<64-hex secret>): the secret goes, the id stays",
        (":",),
    ),
    SecretPattern(
        "secret",
        _rx(
            r"master\.key\b(?:[^\n]{0,20}?(?:is|:|=)[ \t]*|[^\n]{0,40}\r?\n[ \t]*)"
            r"(?P<secret>[0-9a-f]{32})(?![0-9a-f])"
        ),
        "a Rails master key printed under its file name (cat config/master.key) or told after it"
        " (config/master.key content is …)",
        ("master.key",),
    ),
    SecretPattern(
        "password",
        _rx(r"password[ \t]+for[ \t]+the[ \t]+[\w-]+[ \t]+user\b[^\n]{0,100}:[ \t]*\r?\n[ \t]*(?P<secret>[^\s]{8,})"),
        "a generated password printed on the next line (Elasticsearch's first start: 'Password for the elastic user ...:')",
        ("password for the",),
        folded=True,
    ),
    SecretPattern(
        "password",
        _rx(
            r"(?P<kw>password|passwd|pass|pwd|secret|token|api_?key)[\"'`]?[ \t]*"
            r"(?:,[ \t]*[\"'](?P<secret>[^\"'\n$]{4,})[\"'][ \t]*\)"  # getenv("X", "pw")
            r"|\)?[ \t]*(?:\|\||\?\?|\bor\b|\.unwrap_or(?:_else)?\([^\"'\n]{0,20}?)[ \t]*[\"'](?P<secret_o>[^\"'\n$]{4,})[\"']"
            r"|:-(?P<secret_s>[^}\s$]{4,})\})"  # ${PASSWORD:-pw}
        ),
        "a credential's default where code reads it from the environment: getenv('DB_PASSWORD', 'pw'),"
        ' env::var("DB_PASSWORD").unwrap_or("pw"), process.env.TOKEN || \'x\', ${PASSWORD:-pw}',
        ("password", "passwd", "pass", "pwd", "secret", "token", "api_key", "apikey"),
        _env_default,
        folded=True,
    ),
    SecretPattern(
        "cli_password",
        _rx(r"\](?::\d{1,5})?[ \t]+[^\s:@\[\]]+@[^\s:]+:(?P<secret>[^\s]+(?:[ ][a-z]{4}){0,3})"),
        "Postfix sasl_passwd: [smtp.host]:587 user@domain:pw",
        ("]",),
        _sasl_host,
    ),
    SecretPattern(
        "prose_credentials",
        _rx(
            r"(?:admin|administrator|root|pi|ubuntu|guest|demo|postgres|sa|ubnt)"
            r"(?<![A-Za-z0-9_./@-]admin)(?<![A-Za-z0-9_./@-]administrator)(?<![A-Za-z0-9_./@-]root)"
            r"(?<![A-Za-z0-9_./@-]pi)(?<![A-Za-z0-9_./@-]ubuntu)(?<![A-Za-z0-9_./@-]guest)(?<![A-Za-z0-9_./@-]demo)"
            r"(?<![A-Za-z0-9_./@-]postgres)(?<![A-Za-z0-9_./@-]sa)(?<![A-Za-z0-9_./@-]ubnt)"
            r"[ \t]*:(?P<secret>[^\s:@/\"'`]++)(?![:@/\w])"  # possessive: root:pw@host is the url row's
        ),
        "a well-known account with its password, no host (admin:admin123kyocera works): the password shaped like one",
        ("admin:", "administrator:", "root:", "pi:", "ubuntu:", "guest:", "demo:", "postgres:", "sa:", "ubnt:"),
        refine_password_shaped,
    ),
    SecretPattern(
        "prose_password",
        _rx(r"log(?:ging)?[ \t]*in[ \t]+with[ \t]+[\"'`]?(?P<secret>[^\s\"'`=?&]+)(?![ \t]*[/:])(?![^\s]*=)"),
        "a password given to log in with (try logging in with Summer2026!, or cinder-oyster-fable-violet),"
        " when shaped like one; 'login with google' stays, and 'login with user / pw' is the row above",
        ("log in with", "login with", "logging in with"),
        _shaped_or_diceware,
        not_after=_ALNUM,
        folded=True,
    ),
    SecretPattern(
        "prose_password",
        _rx(
            r"pass(?:phrase|word)?(?:[ \t]+(?:for|to|of|on|in|has)(?:[ \t]+[^\s:]+){1,8}?)?[ \t]*(?:is|was|:|=)"
            r"[ \t]*[\"'`]?(?P<secret>[^\n\"'`]+)"
        ),
        "a passphrase of several words told after its label (the passphrase is correct horse battery staple,"
        " the pass has spaces in it: jelly llama pixel daemon 23)",
        ("passphrase", "password", "pass"),
        _passphrase_words,
        folded=True,
    ),
    SecretPattern(
        "door_code",
        _rx(
            r"(?:(?:door|gate|lock|alarm|entry|safe|locker|garage|keypad|building|lockbox)[ \t]+(?:code|combo|combination)"
            r"|keypad|combo|combination|padlock"
            r"|code[ \t]+(?:for|to|of|on)[ \t]+(?:the[ \t]+)?(?:[^\s]+[ \t]+)?(?:lock|padlock|door|gate|alarm|safe|locker|garage)"
            r"|koden[ \t]+til[ \t]+\S+"
            r"|(?:t[üu]rcode|zugangscode|torcode)(?:[ \t]+(?:für|fürs|zum|zur|vom)(?:[ \t]+\S+){1,3}?)?[ \t]+(?:lautet|ist)"
            r"|codice(?:[ \t]+(?:del|della|dello|di)[ \t]+\S+)?[ \t]+(?:è|e)"
            r"|code[ \t]+(?:de[ \t]+la[ \t]+porte|d['’]entrée|du[ \t]+portail|de[ \t]+l['’]immeuble))"
            r"(?:[ \t]+(?:for|to|of|on|at)(?:[ \t]+[^\s]+){1,6}?[ \t]*(?=is|was|changed|=|:))?"
            r"[ \t]*(?:is|was|er|:|=|→|->|changed[ \t]+to)?[ \t]*"
            r"(?P<secret>\d{1,3}(?:-\d{1,3}){2,3}|\d{3,8}#?)(?![0-9])"
        ),
        "a door, gate, alarm or lockbox code, a keypad's code or a lock's combination told after its label"
        " (door code: 4829, garage keypad 21182, locker combo is 39-38-29)",
        (
            "keypad",
            "combo",
            "combination",
            "padlock",
            "code for",
            "code to",
            "code of",
            "code on",
            "koden til",
            "türcode",
            "turcode",
            "zugangscode",
            "torcode",
            "codice",
            "code de la porte",
            "code d'entrée",
            "code du portail",
        )
        + tuple(
            f"{what} code"
            for what in (
                "door",
                "gate",
                "lock",
                "alarm",
                "entry",
                "safe",
                "locker",
                "garage",
                "keypad",
                "building",
                "lockbox",
            )
        ),
        not_after=_ALNUM,
        folded=True,
    ),
    SecretPattern(
        "prose_secret",
        _rx(
            r"(?:api|access|secret|private|license|app|privilege|master|admin|product|activation|registration|serial)"
            r"[ \t]+key[ \t]*:[ \t]*[\"'`]?(?P<secret>[^\s\"'`]+)"
        ),
        "a key after a spaced label and a colon (my api key: 4f8e…, the TeamSpeak privilege key: …), when shaped like one",
        (
            "api key",
            "access key",
            "secret key",
            "private key",
            "license key",
            "app key",
            "privilege key",
            "master key",
            "admin key",
            "product key",
            "activation key",
            "registration key",
            "serial key",
        ),
        refine_secret_shaped,
        not_after=_ALNUM,
        folded=True,
    ),
    SecretPattern(
        "url_password",
        _rx(
            r":(?P<secret>[^\s@:/\"'`]{6,64})@"
            r"(?=(?:[0-9]{1,3}\.){3}[0-9]{1,3}\b|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|(?:tcp|unix)\()"  # Go's user:pw@tcp(host)
        ),
        "user:password@host without a scheme (root:S3cret!@10.0.0.5, an ssh or rsync target):"
        " the colon first, the user checked behind it; the password shaped like one",
        (":",),
        _bare_userinfo,
    ),
    # After the Authorization row: inside a header that row names it.
    SecretPattern(
        "basic_credentials",
        _rx(r"Basic[ \t]+(?P<secret>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])"),
        "Basic user:password in base64 outside an Authorization header (it must decode to user:password)",
        ("basic",),
        _decodes_to_user_password,
        not_after=_TOKEN_CHARS,
    ),
)
