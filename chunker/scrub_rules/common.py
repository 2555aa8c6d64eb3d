"""What the rows of the credential table are made of, shared by every family module.

Owns: ``SecretPattern`` (a row: its regex, why, triggers, refine, and its evidence: the examples it
must remove, each with the exact span, and the lookalikes it must leave), ``secret_span``, the
regex pieces several families use, and the vetoes (``refine_*`` and friends) that tell code and
placeholders from secrets. The rule set itself and its decisions: ``chunker.scrub_rules``.

Must not: hold rows, do I/O or keep any text.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from typing import Callable

from chunker.scrub_rules.likeness import (
    FILE_NAME,
    FUNCTION_WORDS,
    RANDOM_CASE,
    names_a_secret,
    passphrase_words,
    password_likeness,
)

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
    # Every match starts with one of the triggers, at its first character: the engine then tries
    # the regex only where a trigger starts (it knows where from its one pass over the text),
    # never at every position. For a row whose regex is a long alternation of words.
    starts_at_trigger: bool = False
    # The row's evidence, checked row by row (tests/unit/test_scrub_rules.py): texts it must remove,
    # each with exactly the span the scrubber replaces, and texts it must leave byte-identical.
    examples: tuple[tuple[str, str], ...] = ()
    lookalikes: tuple[str, ...] = ()


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


def _not_a_filler_body(match: re.Match[str], text: str) -> Span | None:
    """The token, unless its body after the prefix is one character repeated (ghp_XXXX…, sk-0000…):
    the placeholder a document shows, not a key."""
    body = match.group()[match.end("prefix") - match.start() :]
    return None if len(set(body.strip("_-"))) <= 1 else match.span()


def _prefixed(
    kind: str,
    prefixes: tuple[str, ...],
    why: str,
    body: str = _BODY,
    not_after: str = _TOKEN_CHARS,
    examples: tuple[tuple[str, str], ...] = (),
    lookalikes: tuple[str, ...] = (),
) -> SecretPattern:
    alternatives = "|".join(re.escape(p) for p in prefixes)
    return SecretPattern(
        kind,
        _rx(rf"(?P<prefix>{alternatives}){body}"),
        why,
        tuple(p.lower() for p in prefixes),
        _not_a_filler_body,
        not_after=not_after,
        examples=examples,
        lookalikes=lookalikes,
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


def _bare_is_code(value: str, key: str) -> bool:  # noqa: C901 - a flat list of independent one-line checks; groups would be arbitrary
    """True when a bare value is code, a variable or a placeholder, not a secret: any one shape says so."""
    if not value or value[0] in "$%<@*([{&)]":
        return True  # a variable ($TOKEN), a placeholder (<token>), masked (****), the rest of a regex
    if re.fullmatch(r"0x[0-9a-fA-F]{1,4}", value):
        return True  # USERNAME_PASSWORD = 0x02: a constant
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
    if _PATH.fullmatch(value) or re.search(r"(?:^|[/\\:=])[\w-]+\.(?:pem|key|crt|cer|der|p12|pfx|jks)(?::|$)", value):
        return True  # private_key: /etc/ssl/x.key, PWD=/home/x, privateKey=key.pem:certKey=crt.pem
    if _CODE_OWNERS.match(value) or _DOTTED_CODE.fullmatch(value):
        return True  # self.token, form.password, credentials.token
    if re.fullmatch(r"_?[a-z][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+", value) and not RANDOM_CASE.search(value):
        return True  # rust_openssl.hpke.MLKEM768X25519PrivateKey, rfc3161.TimeStampToken: a dotted name
    if re.fullmatch(r"_[a-z][a-z0-9_]*", value):
        return True  # credentials = _creds: a private variable
    if value.isalpha() and (value.lower() in key.lower() or re.sub(r"[\W_]", "", key).lower() in value.lower()):
        return True  # use_auth_token=auth, signing_key = key, private_key=privateKeyForCA: a variable
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


# Quoted values that name a placeholder in tests and docs ("SECRET_KEY": "test").
_PLACEHOLDER_VALUES = frozenset("test testing dummy fake example sample placeholder foo bar baz".split())


def _quoted_is_placeholder(value: str) -> bool:
    return (
        value.isspace()
        or bool(_TEMPLATE.fullmatch(value.strip()))
        or value.lower().strip("[]<>")
        in ("none", "null", "", "redacted", "removed", "hidden", "secret", "changeme", "change_me")
        or value.lower() in _PLACEHOLDER_VALUES
        or bool(re.fullmatch(r"[A-Z]+(?:_[A-Z]+)*_(?:KEY|TOKEN|SECRET|PASSWORD)", value))  # "DEFAULT_KEY"
        or bool(re.fullmatch(r"\[[^\]]+\][+*]", value))  # "[a-zA-Z0-9-!#$%&'*+.^_`|~]+": a regex
        or bool(re.fullmatch(r"\$[A-Za-z_]\w*", value))  # "$PASSWORD": a shell variable
        or bool(_PLACEHOLDER_PHRASE.search(value))
        or set(value) <= set("•●*·")
        or bool(re.fullmatch(r"&[\w.]+;|.*%[sdr].*|.*\{\d*\}.*", value))  # an entity, a format string
        or bool(re.fullmatch(r"#[0-9a-fA-F]{3,8}|\[[A-Z_]+\]|<[a-z_|]+>", value))  # a colour; [PAD], <unk>
        or not any(c.isalnum() for c in value)  # token = "'", end_token = '}'
    )


def refine_assignment(match: re.Match[str], text: str) -> Span | None:
    """The value of a ``key = value`` or ``key: value`` when it is a secret, not code, a
    placeholder or a key's documentation; a secret named by an environment variable is read by
    its shape."""
    key = _key_of(match, text)
    if key is None:
        return None
    if key.startswith("M_") or key.lower().startswith(("existing", "secretkeyref", "secretname", "public")):
        return None  # M_UNKNOWN_TOKEN: (a Matrix errcode), existingSecret: name (a reference), publicKeyToken
    if _ENV_KEY_NAME.fullmatch(key) and not _KEY_COMPOUND.search(key.lower()):
        start, end = secret_span(match)
        return _shaped_value_span(text, start, end)
    key_start = match.end("kw") - len(key)
    if _code_statement_around(text, key_start, match.end()) or _documents_the_key(text, key_start, match):
        return None
    if text[key_start - 1 : key_start] == "[" and key_start > 1 and text[key_start - 2] not in " \t([,=:":
        return None  # self._cache[token] = obj, list[Token] = ...: a variable as a subscript, not a key
    if _quoted_is_code(match, text, key):
        return None
    if match.group("secret_bare") is None:
        return _quoted_not_placeholder(match, text)
    return _bare_value(match, text, key, key_start)


def _quoted_is_code(match: re.Match[str], text: str, key: str) -> bool:
    """True when the quoted or backticked value is code, not a secret: an enum's own name, a file
    name, code between two strings, a call in backticks."""
    quoted_group = "secret_dq" if match.group("secret_dq") is not None else "secret_sq"
    # From the text: a folded row's groups hold the lowered copy.
    quoted = text[match.start(quoted_group) : match.end(quoted_group)] if match.group(quoted_group) else None
    if quoted is not None and (
        _names_the_key(quoted, key) or (key.isupper() and re.fullmatch(r"[A-Za-z]+(?:_[A-Za-z]+)+", quoted))
    ):
        return True  # EXPIRED_TOKEN = "expired_token", PASSWORD: Final = "m.login.password": an enum
    if quoted is not None and (
        re.match(r"[,;)\]}+%][ \t]|\.[A-Za-z_]\w*\(", quoted) or (len(quoted) <= 40 and FILE_NAME.fullmatch(quoted))
    ):
        return True  # b"Password:", b"Username:" / "…'s password: ".format(…): code between two strings; "server.pem"
    backticked = match.group("secret_bq")
    # pass: `collect: 'eventually_due'`, token: `get_token()`: code in backticks, not a password
    return backticked is not None and bool(re.search(r"[:=][ \t]|['\"()\[\]{}]", backticked))


def _bare_value(match: re.Match[str], text: str, key: str, key_start: int) -> Span | None:
    """The unquoted value after the key, when it is no code, variable or name: cut at a query's
    ``&``, or run to the line's end where a ``:`` or ``= `` opens a value that may have spaces."""
    start = match.start("secret_bare")
    literal = _LITERAL_IN_CALL.match(text, start)
    if literal and not _CODE_IDENTIFIER.fullmatch(literal.group("secret")):
        return literal.span("secret")  # secret_key = bytes.fromhex('532e…'): the literal is the key
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
    separator = text[match.end("kw") : start]
    if not _PASSWORD_KW.fullmatch(match.group("kw").lower()) and _names_a_thing(value):
        return None  # token = Error, privateKey: PKey, id-token: write: a name, no token or key has that shape
    if (
        separator.strip() == "="
        and re.fullmatch(r"[a-z_][a-z0-9_]*", value)
        and re.match(r"[ \t]{4,}", text[text.rfind("\n", max(0, key_start - 200), key_start) + 1 : key_start])
    ):
        return None  # (indented code) passphrase = extra: a variable
    if separator[:1] == ":" and separator == ":" and text[key_start - 1 : key_start] in ("'", '"'):
        if re.fullmatch(r"[a-z]+", value) and text[start + len(value) : start + len(value) + 1] == text[key_start - 1]:
            return None  # "passwd:shell", 'token:id': a name with a namespace, inside one string
    if not in_query and (":" in separator or re.search(r"=[ \t]", separator)):
        return _value_to_line_end(text, start, value)
    return start, start + len(value)


def _value_to_line_end(text: str, start: int, value: str) -> Span | None:
    """YAML, INI, prose: the value is the rest of the line (a passphrase has spaces), unless that
    rest reads as a sentence about the key rather than a value told."""
    end = start + len(value)
    line_end = text.find("\n", start)
    line_end = len(text) if line_end < 0 else line_end
    rest = text[start:line_end].rstrip(" \t\r")
    if rest.endswith(","):
        rest = rest[:-1]  # a JSON/YAML flow separator
    if " " in rest.strip() and not _told_rest_of_line(rest[:240], value):
        return None  # now_token: The `next_batch` token of the response; pwd: expected bytes, got %s
    after = rest[len(value) :].split()
    if len(after) >= 3 and any(word.lower() in FUNCTION_WORDS for word in after[:6]):
        return start, end  # token: tok_1FQt…; a similar object exists in test mode: the value, not the message
    return start, max(end, start + len(rest))


_PASSWORD_KW = re.compile(r"pass(?:word|wd|phrase|wort|code)?|pwd|pw|psk|authtok|_auth")


# Lower-case words a permission, a style or a state takes where a token's name is a field's
# (permissions: id-token: write; Token: foreground).
_STATE_WORDS = frozenset("read write none all foreground background bold italic underline".split())


def _names_a_thing(value: str) -> bool:
    """A bare value after a token's or a key's name that is a name, not a token: a word of letters
    (Error, foreground, EOF, write), a class (PKCS7PrivateKeyTypes), ABNF (1*tchar)."""
    word = value.rstrip(".,;:`'\")")
    if re.fullmatch(r"[A-Z]{1,4}[a-z]+|[A-Z]{2,5}|[a-z]{1,3}", word) or word in _STATE_WORDS:
        return True  # Error, PKey, EOF, id
    if re.fullmatch(r"[A-Z]+[0-9]*(?:[A-Z][a-z]{2,}[0-9]*)+", word):
        return True  # PKCS7PrivateKeyTypes: a class
    return bool(re.fullmatch(r"\d*\*\w+|0x[0-9a-fA-F]{1,4}", word))


def _told_rest_of_line(rest: str, value: str) -> bool:
    """A value of several words after ``key:`` is the secret when its first word is password-like
    (hunter2 # the old one) or when the words are a passphrase (correct horse battery staple); a
    description (The `next_batch` token of the response) or a message (expected bytes, got %s) is not."""
    first = value.rstrip(".,;:")
    if password_likeness(first) >= 1 or (any(c.isdigit() for c in first) and any(c.isalpha() for c in first)):
        return True
    words = re.split(r"[ \t]+#|[ \t]+//", rest, maxsplit=1)[0].strip()
    return " " not in words or passphrase_words(words, 3)


# A call whose one argument is a long literal of letters and digits (bytes.fromhex('532e…'), b64decode("…")).
_LITERAL_IN_CALL = re.compile(
    r"[A-Za-z_][\w.]*\([ \t]*[bBrRuU]{0,2}([\"'])"
    r"(?P<secret>(?=[A-Za-z0-9+/=_-]*[0-9])(?=[A-Za-z0-9+/=_-]*[A-Za-z])[A-Za-z0-9+/=_-]{16,})\1[ \t]*\)"
)


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
    if not plain_value:
        return False
    if plain_value == plain_key or plain_value.endswith(plain_key[-8:]) and "." in value:
        return True
    if len(plain_value) >= 4 and plain_value in plain_key:
        return True  # _STREAM_TOKEN = "stream", "master_key": "master", CHALLENGE_PASSWORD: "challengePassword"
    return len(plain_key) >= 8 and plain_value.startswith(
        plain_key
    )  # _INCORRECT_PASSPHRASE = "Incorrect passphrase (…"


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
# Leads in scripts that glue words together or have no letter case: a row each with no not_after
# (wifi密码是 …, 服务器root密码： …), the value after them judged like any told value.
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
    value = re.sub(r"(?:\\[nrt])+\Z", "", text[start:end]).rstrip(".,;:)]}?")
    if not value or _PATH.fullmatch(value) or _DOTTED_CODE.fullmatch(value):
        return None
    if re.fullmatch(r"\*[^*]+\*|_[^_]+_|[a-z]+:[a-z]+|[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)+/[\w./-]+", value):
        return None  # *never* (emphasis), domain:operator (a name), io.modelcontextprotocol/clientInfo (a namespace)
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
    if not _decodes_like_a_key(body):
        return None
    return start, len(text[:end].rstrip(" \t\r"))


# The DER of an X.509 name attribute (OID 2.5.4.x: 06 03 55 04) as base64 reads at each of the three
# alignments: only a certificate (public) names its subject and issuer; a key never does.
_X509_NAME = re.compile(r"BgNVB|DVQQ|A1UE")


def _decodes_like_a_key(body: str) -> bool:
    """True when base64 body lines decode like a key: random or DER bytes. False for a certificate
    (it names its subject) and for data that decodes to text or holds many strings (base64 test
    data, a plist, a key armoured twice): a key's bytes are about a third printable, text's nearly all."""
    if _X509_NAME.search(body):
        return False
    run = re.sub(r"[^A-Za-z0-9+/]", "", body)
    for skip in range(4):
        piece = run[skip:]
        piece = piece[: len(piece) // 4 * 4]
        if len(piece) < 16:
            continue
        decoded = base64.b64decode(piece)
        printable = sum(32 <= byte < 127 or byte in (9, 10, 13) for byte in decoded) / len(decoded)
        if printable >= 0.75 or len(_PRINTABLE_RUN.findall(decoded)) >= 8:
            return False  # text, or a binary format full of strings (a plist's "lots of binary gunk")
    return True


# A key holds a few strings at most (openssh-key-v1, ssh-ed25519, a comment); a data format many.
_PRINTABLE_RUN = re.compile(rb"[ -~]{8,}")


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
    if _TEMPLATE.fullmatch(value) or "{{" in value or "${" in value or "%s" in value:
        return None
    if any(names_a_secret(word) for word in words):
        return None  # "Incorrect passphrase", "old passphrase error": a message about a passphrase
    if not value.islower() and not quoted:
        return None  # None else 8: code, or a sentence's capital; a generated passphrase is lower case
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
    closes = re.match(r"(?:\\r)?(?:\\n)?[\"'`]+[ \t]*(?:[^\s\\]|\r?(?:\n|\Z))", text[after_begin : after_begin + 12])
    if closes and not _KEY_STRING_GOES_ON.match(text, after_begin + closes.end() - 1):
        return None  # startswith(b"-----BEGIN … KEY-----\n"): the string ends, no key lines follow
    body = text[after_begin : match.end()]
    if (
        ("\n" not in body or re.search(r"<[^<>\n]+>", body))
        and "-----END" in body
        and not re.search(r"[A-Za-z0-9+/]{16,}", body.replace("\\n", " "))
    ):
        return None  # b"-----BEGIN PRIVATE KEY-----\n\xff\xff\n-----END …", <base64 here>: no key in it
    return secret_span(match)


# After a BEGIN line's string closes: the next line opens another string of base64 (a key split
# over string literals), which is still the key.
_KEY_STRING_GOES_ON = re.compile(r"[ \t]*\r?\n[ \t]*\+?[ \t]*[bBrRuU]?[\"'][A-Za-z0-9+/=]{16,}")


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
    if text[key_start - 1 : key_start] == "/" or _CODE_IDENTIFIER.fullmatch(value) or "/" in value:
        return None  # "a/../../etc/passwd" or "a/../file.txt", 'x_secret' or 'x_secret_path': names, paths
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
    word = value.rstrip(".,;:!?)\"'")
    if word.isalpha() and (word.islower() or word.istitle()) or word.lower() in _CODE_WORDS:
        return None  # password: bytes) -> None, username and password quoting.: a type, a word
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
    if "=" in match.group("secret"):
        return None  # username="jo@x.com", password="...": the next key, not a password
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
