"""Scrubber rows: a password told to someone, found by evidence rather than by phrasing.

Owns: ``ROWS``, this family's rows in the order the engine runs them, each with its evidence, and
the reading of what follows a cue word. A cue is a word that names a secret in one of the
languages the chat speaks (password, Kennwort, пароль, 密码, ...), a code (PIN, door code, код)
or a place a secret goes with (wifi, login, admin, router). After a cue, the next few words of its
line are read: the first that ``chunker.scrub_rules.likeness`` scores as password-like enough is
the secret. How much is enough depends on the evidence around it: right after the cue or after a
":", "is", "→" (any language's copula in a short list) a hunter2 is enough; further on, or after a
weak cue (wifi, login), only a value that can be nothing else (Gr4phite&Moth9, Sägeblatt-Wolke-9).
The same reading finds a value before the cue ("8362 is my bank pin"), a pair ("admin /
Fr0mage_Bleu!"), a quoted phrase, a passphrase of plain words after a ":", and the answer to a
quoted question about a password ("> what's the nas password?" then "Vltava-Kamen-2291").

Must not: do I/O or keep any text; list phrasings per language (a new language is a cue word, not
a row); reorder rows without checking the scrubber's output is unchanged.
"""

from __future__ import annotations

import re

from chunker.scrub_rules.common import _ALNUM, SecretPattern, Span
from chunker.scrub_rules.likeness import (
    FUNCTION_WORDS,
    LEADING,
    TRAILING,
    code_number,
    passphrase_words,
    password_likeness,
)

# Words that name a password, a passphrase or a PIN-like secret, in the chat's languages. A Latin
# stem takes any letters after it (passwords, Passworte, jelszava, hasła), except the short ones,
# which must stand alone (pass, pw, mdp, ww).
_STRONG_STEMS = (
    "password passwort passwd passphrase passcode passwrod pasword kennwort contraseña contrasena contrasenya"
    " senha wachtwoord hasło haslo hesl пароль парол salasan lösenord lösen adgangskod passord jelsz"
    " şifre sifre parol pasvort κωδικ συνθηματικ"
).split() + ["kata sandi"]
_STRONG_WORDS = "pass pw pwd p/w pword mdp clave ww mk".split()
_STRONG_PHRASES = ("mot de passe", "mật khẩu", "mat khau", "code d'accès", "code d’accès")
# Scripts without spaces between words: the cue is the characters alone.
_STRONG_GLUED = (
    "密码", "密碼", "口令", "パスワード", "비번", "비밀번호", "암호", "كلمة السر", "كلمة المرور", "كلمة سر", "كلمة مرور",
    "باسورد", "رمز", "סיסמ", "पासवर्ड", "รหัสผ่าน",
)  # fmt: skip
# A number after these is a code (PIN 604219, Türcode 24681357, код 3841, combination 7-31-22).
_CODE_STEMS = "türcode kombinac kombinat combinaci combinaz".split()
# "code" alone is too common a word in chat about programs: only a number right after it counts.
_CODE_WORDS = "pin code combination combo kod код коду кода código codigo codice pincode".split()
# Where a secret goes (wifi for the workshop is X, login admin + X, the router: admin / X): only a
# value that can be nothing but a password counts after these.
_WEAK_WORDS = (
    "wifi wi-fi wlan gäste-wlan gastnetwerk login logon inlog inloggen anmeldung credentials creds credenziali"
    " zugang zugangsdaten identifiants account konto compte cuenta conta tili fiók аккаунт admin root router"
    " routeur server servidor serveur сервер master vpn tk"
).split()

_CONNECTIVES = frozenset(
    (
        ": = - — – → -> => is was es era ist lautet war est c'est é è er är var je bylo jest to on là hai he howa"
        " это — був был wynosi sind now jetzt agora ahora maintenant teraz nu nyt most már type use try here"
        " new neu nouveau nuevo nova nieuwe nowe новый هي هو است هست היא זה है คือ 's ’s"
    ).split()
)
# Connectives after which a run of plain words is not a passphrase (server to run tests against).
_LOOSE_CONNECTIVES = frozenset("to type use try here new neu nouveau nuevo nova nieuwe nowe новый".split())
_ASSIGNS = frozenset("= == != += := -= |= ||= ?=".split())
# The word before a number that makes it another number than a code.
_NOT_A_CODE = frozenset(
    (
        "error status exit http https line port version year room page issue pull pr commit phone tel zip postal"
        " post area country qr source promo discount coupon tracking order invoice ticket bug build job run step"
        " test return response sms otp verification country-code line-number"
    ).split()
)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af：:]+")
_TOKEN = re.compile(r"\S+")
_QUOTES = {'"': '"', "'": "'", "`": "`", "«": "»", "“": "”", "„": "“"}
_IT_IS = re.compile(r"(?:it['’]?s|it is|its|es ist|c['’]est|é|это|het is|det är|to je)[ \t]+", re.IGNORECASE)
_BEFORE_COPULAS = frozenset("is was as = ist est es é er är это".split())
_BEFORE_DETERMINERS = frozenset(
    "my the our your his her their mein meine unser le la mon ma notre el mi nuestro".split()
)


def _alternation(words: list[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


# Two rows, one regex each: a cue of a spaced script must not be glued to a longer word (not_after),
# one of a glued script may follow anything (wifi密码是…). Both groups exist in both regexes.
# What may follow a cue that tells a value: a space, a colon or a dash, a comma, the password's,
# a question mark, a slash (admin/pw). Anything else is code or a longer name (password=,
# password.encode(), vpn.example.org); the regex refuses it so that no refine runs for it.
_CUE_END = r"(?=[\s:：—–→,;)?/]|['’]s|\Z)"
_CUE = re.compile(
    rf"(?:(?P<stem>{_alternation(_STRONG_STEMS + _CODE_STEMS)})[^\W\d_]*"
    rf"|(?P<word>{_alternation(_STRONG_WORDS + _CODE_WORDS + _WEAK_WORDS + list(_STRONG_PHRASES))})(?![^\W\d_])"
    rf"|(?P<glued>(?!))){_CUE_END}",
    re.IGNORECASE,
)
_GLUED_CUE = re.compile(rf"(?P<glued>{_alternation(list(_STRONG_GLUED))})(?P<stem>(?!))?(?P<word>(?!))?")


_STRENGTH = {**{w: "code" for w in _CODE_WORDS}, **{w: "weak" for w in _WEAK_WORDS}}


def _strength(match: re.Match[str]) -> str:
    if match.group("stem"):
        lowered = match.group("stem").lower()
        return "code" if lowered in _CODE_STEMS else "strong"
    return _STRENGTH.get(match.group().lower(), "strong")


# How far a cue's reading reaches, before or after it: every search from a cue is bounded, so a
# text of cues (password=password=…) costs a bounded step per cue, never a walk to the line's ends.
_REACH = 240


def _line_start(text: str, position: int) -> int:
    """Where ``position``'s line starts, or ``_REACH`` characters before it, whichever is nearer."""
    floor = max(0, position - _REACH)
    return max(text.rfind("\n", floor, position) + 1, floor)


def _line_end(text: str, position: int) -> int:
    """Where ``position``'s line ends, or ``_REACH`` characters after it, whichever is nearer."""
    ceiling = min(len(text), position + _REACH)
    at = text.find("\n", position, ceiling)
    return ceiling if at < 0 else at


def _clean(text: str, start: int, end: int) -> tuple[int, int]:
    """The token's span without the brackets, quotes and clause punctuation around it; a question
    mark ends a question, not a password, but an exclamation mark may be part of one."""
    while start < end and text[start] in LEADING:
        start += 1
    while end > start and text[end - 1] in TRAILING + "?":
        end -= 1
    return start, end


def _clause_end(text: str, start: int, line_end: int) -> int:
    end = line_end
    for cut in (" — ", " – ", " - ", " (", ", ", "; ", ". ", "! ", "? "):
        at = text.find(cut, start, end)
        if at >= 0:
            end = at
    while end > start and text[end - 1] in TRAILING + "?!":
        end -= 1
    return end


def _quoted(text: str, start: int, line_end: int) -> Span | None:
    close = _QUOTES.get(text[start])
    if close is None:
        return None
    at = text.find(close, start + 1, line_end)
    return (start + 1, at) if at > start + 1 else None


def _need(strength: str, since: int) -> int:
    """The likeness a single value needs: right after the cue or a connective, a little; a few
    words further, more; after a weak cue, a value that can be nothing else."""
    if strength != "strong":
        return 3 if since <= 1 else 99  # far from a weak cue, nothing is told
    return 1 if since == 0 else 2 if since <= 2 else 3


def _reply_to_question(match: re.Match[str], text: str, strength: str) -> Span | None:
    """The cue is in a quoted question (> what's the nas password?): the answer's first word."""
    line_start = _line_start(text, match.start())
    line_end = _line_end(text, match.end())
    if text[line_end : line_end + 1] != "\n" or not text[line_start : match.start()].lstrip().startswith(">"):
        return None
    if "?" not in text[match.end() : line_end]:
        return None
    position = line_end + 1
    while position < min(len(text), line_end + _REACH * 4):
        end = _line_end(text, position)
        line = text[position:end]
        if line.strip() and not line.lstrip().startswith(">"):
            break
        position = end + 1
    else:
        return None
    offset = position + len(line) - len(line.lstrip())
    said = _IT_IS.match(text, offset)
    if said:
        offset = said.end()
    token = _TOKEN.match(text, offset)
    if token is None:
        return None
    start, end = _clean(text, *token.span())
    value = text[start:end]
    if strength == "code":
        return (start, end) if code_number(value) else None
    return (start, end) if password_likeness(value) >= _need(strength, 0) else None


def _before_cue(match: re.Match[str], text: str, strength: str) -> Span | None:
    """A value told before its cue: 8362 is my bank pin, Summer2026! is the new wifi password.
    The last words before the cue are read: a value, a copula, then a determiner and one more
    word at most."""
    line_start = _line_start(text, match.start())
    words = list(_TOKEN.finditer(text, max(line_start, match.start() - 80), match.start()))[-4:]
    for size in (2, 3, 4):
        if len(words) < size:
            break
        value, copula, *rest = words[-size:]
        if copula.group().lower() not in _BEFORE_COPULAS:
            continue
        if size == 4 and rest[0].group().lower() not in _BEFORE_DETERMINERS:
            continue
        start, end = _clean(text, *value.span())
        candidate = text[start:end]
        if strength == "code" and code_number(candidate):
            return start, end
        return (start, end) if password_likeness(candidate) >= (1 if strength == "strong" else 3) else None
    return None


def refine_told(match: re.Match[str], text: str) -> Span | None:
    """The value told after (or before) the cue, judged by ``likeness`` (see the module doc)."""
    cue_start, cue_end = match.span()
    strength = _strength(match)
    # The cheapest tests first: most cues in a paste are code (password=, password.encode()) or a
    # flag, and a paste holds hundreds of them.
    follows = text[cue_end : cue_end + 1]
    if strength != "strong" and _part_of_a_name(text, cue_start):
        return None
    if follows == "/" and strength == "weak":
        return _pair_after_slash(text, cue_end)
    if _code_or_a_flag(match, text):
        return None
    line_start = _line_start(text, cue_start)
    line_end = _line_end(text, cue_end)
    # Fast paths: a told value has a digit, a symbol, mixed case, a quote or a long run of letters,
    # and a passphrase follows a colon or a copula; where none is near, only a quoted question's
    # answer on the next line can be the value.
    value_after = _CANDIDATE.search(text, cue_end, line_end) or (
        strength == "strong" and _STRONG_EVIDENCE.search(text, cue_end, line_end)
    )
    value_before = _CANDIDATE.search(text, max(line_start, cue_start - 80), cue_start)
    quoted_question = text[line_start:cue_start].lstrip().startswith(">")
    if not (value_after or value_before or quoted_question):
        return None
    if _inside_a_call(text, line_start, cue_start):
        return None  # PBKDF2(password, salt, ...), skipIf(pwd is None, '...'): an argument in a call
    if _a_variable_name(text, cue_start):
        return None  # $MYSQL_ROOT_PASSWORD, ${DB_PASSWORD}: a variable's name
    if strength == "strong" and _pass_as_a_verb(match, text):
        strength = "weak"  # "pass" is a verb too (pass *mut between threads): only a value that is nothing else
    if not value_after:
        return _told_elsewhere(match, text, strength, quoted_question, bool(value_before))
    return _read_after(match, text, strength, line_end, quoted_question, bool(value_before))


def _part_of_a_name(text: str, cue_start: int) -> bool:
    """True when the cue is glued to the word or path before it (authorize-account, --b2-account,
    client_server/…): a name or a path, where a code's or a place's cue is no cue."""
    return text[cue_start - 1 : cue_start] in ("-", "_", "/") or text[cue_start - 3 : cue_start] == "://"


def _pair_after_slash(text: str, cue_end: int) -> Span | None:
    """The secret of a weak cue's pair (admin/7Hq!pzT3), when it can be nothing but a password."""
    pair = _TOKEN.match(text, cue_end + 1)
    if pair is None:
        return None
    start, end = _clean(text, *pair.span())
    return (start, end) if password_likeness(text[start:end]) >= 3 else None


def _code_or_a_flag(match: re.Match[str], text: str) -> bool:
    """True when what touches the cue makes it code or a command's flag, not a cue: password=...,
    pass:x, password.encode(), --password, or mk / tk / ww without the colon that makes them one."""
    cue_start, cue_end = match.span()
    follows = text[cue_end : cue_end + 1]
    after = text[cue_end + 1 : cue_end + 2]
    if follows and not (
        follows.isspace()
        or match.group("glued")
        or (follows in ":：—–→,;)?" and (not after or after.isspace()))
        or (follows in "'’" and after == "s")
    ):
        return True  # password=..., pass:x, admin:x, password.encode(), vpn.example.org: another row's, or code
    if text[cue_start - 1 : cue_start] == "-" and (cue_start < 2 or text[cue_start - 2] in " \t-"):
        return True  # -pass, --password: a command's flag (the command-line rows read those)
    word = match.group("word")
    # mk: / tk: / ww: abbreviate a password or an account only before a colon
    return bool(word) and word.lower() in ("mk", "tk", "ww") and not re.match(r"[ \t]*:", text[cue_end : cue_end + 4])


def _a_variable_name(text: str, cue_start: int) -> bool:
    """True when the cue ends a name that follows ``$``, ``${`` or ``%`` ($MYSQL_ROOT_PASSWORD)."""
    glued_to = cue_start
    while glued_to > max(0, cue_start - 64) and (text[glued_to - 1].isalnum() or text[glued_to - 1] == "_"):
        glued_to -= 1
    return glued_to < cue_start and text[glued_to - 1 : glued_to] in ("$", "{", "%")


def _pass_as_a_verb(match: re.Match[str], text: str) -> bool:
    """True when the cue is "pass" not followed by a colon, "is", "was" or "'s" (pass the config):
    likely the verb."""
    if match.group().lower() != "pass":
        return False
    cue_end = match.end()
    follows = text[cue_end : cue_end + 1]
    if follows == ":":
        return False
    first = _TOKEN.search(text, cue_end + (follows in "'’"))
    return not (first and first.group().lower() in ("is", "was", "s"))


def _told_elsewhere(
    match: re.Match[str], text: str, strength: str, quoted_question: bool, value_before: bool
) -> Span | None:
    """The value told where the words after the cue hold none: the answer to a quoted question on
    the next line, or the words before the cue."""
    return (_reply_to_question(match, text, strength) if quoted_question else None) or (
        _before_cue(match, text, strength) if value_before else None
    )


class _Reading:
    """Where the reading of the words after a cue stands."""

    __slots__ = ("since", "explicit", "previous")

    def __init__(self, explicit: bool) -> None:
        self.since = 0  # words read since the cue or the last connective
        self.explicit = explicit  # a ":" or a copula said a value follows
        self.previous = ""  # the token before the one read

    def right_after_a_connective(self) -> bool:
        """True when a ":" or a copula said a value follows and this is the word after it."""
        return self.explicit and self.since == 0

    def need(self, strength: str) -> int:
        """The likeness a value needs here; after a "/" or "+" (admin / X), one that can be nothing else."""
        return 3 if self.previous in ("/", "+") else _need(strength, self.since)

    def read_past(self, raw: str, lowered: str) -> None:
        """A token that is not the value: a connective says a value follows; any other moves one word on."""
        if lowered in _CONNECTIVES or raw.endswith(":") or raw in ("/", "+"):
            self.since = 0
            self.explicit = lowered not in _LOOSE_CONNECTIVES
        else:
            self.since += 1
        self.previous = raw

    def read_past_an_aside(self, raw: str) -> None:
        """A token in brackets ([Low,Confirmed], (LUKS)): an aside, not a value; a colon after it
        still says a value follows."""
        self.since += 1
        self.previous = raw
        if raw.rstrip(TRAILING)[-1:] == ":" or raw.endswith(":"):
            self.since, self.explicit = 0, True

    def read_past_punctuation(self, raw: str) -> None:
        """A token of punctuation alone: a lone ":" or "—" is a connective."""
        if raw.strip("\"'`") in (":", "：", "—", "–", "-", "→"):
            self.since = 0
            self.explicit = True
        self.previous = raw


def _read_after(
    match: re.Match[str], text: str, strength: str, line_end: int, quoted_question: bool, value_before: bool
) -> Span | None:
    """The value told in the first words after the cue, else ``_told_elsewhere``'s; None when those
    words say nothing is told (master key (public), error code 4031)."""
    cue_end = match.end()
    window_end = min(line_end, cue_end + 200)
    possessive = text[cue_end : cue_end + 1] in "'’"  # the password's X: a value follows
    reading = _Reading(possessive)
    window_start = cue_end + 2 if possessive else cue_end
    glued = bool(match.group("glued"))
    # The first nine tokens: a value told further on is not told by this cue.
    for number, token in zip(range(9), _TOKEN.finditer(text, window_start, window_end)):
        raw = token.group()
        if (
            raw.isalpha()
            and raw == raw.lower()  # lower case, or a script without case
            and len(raw) < 16
            and strength != "code"
            and (not (reading.explicit and reading.since == 0) or raw in FUNCTION_WORDS or len(raw) < 3)
        ):
            # A plain lower-case word (most of what follows a cue), short or not right after a ":"
            # or a copula: no value, but a connective or one more word on.
            if raw in _CONNECTIVES:
                reading.since, reading.explicit = 0, raw not in _LOOSE_CONNECTIVES
            else:
                reading.since += 1
            reading.previous = raw
            continue
        if number and _another_cue(raw, strength):
            break  # the next cue reads on from here (password password …, pin 1 pin 2: each reads its own)
        quoted = _told_in_quotes(text, token.start(), line_end, strength, reading) if raw[0] in _QUOTES else None
        if quoted is not None:
            return quoted
        if _an_aside(raw):
            if "public" in raw.lower():
                return None  # master key (public): told as public
            reading.read_past_an_aside(raw)
            continue
        start, end = _token_value(text, token.span(), after_a_glued_cue=number == 0 and glued)
        value = text[start:end]
        if not value:
            reading.read_past_punctuation(raw)
            continue
        if strength == "code":
            if code_number(value) and (number == 0 or reading.right_after_a_connective()):
                return None if _not_a_code(text, match, reading.previous) else (start, end)
        else:
            told = _told_value(text, start, end, strength, reading, line_end)
            if told is not None:
                return told
        if _ends_the_reading(raw):
            break
        lowered = value.lower()
        if lowered.strip("()") in ("public", "öffentlich", "publique", "público", "pubblica"):
            return None  # master key (public): told as public
        if raw in _ASSIGNS or re.search(r"\w\(", raw):
            break  # code: an assignment or a call (pwd = ..., PBKDF2(password, salt)); the assignment rows read it
        reading.read_past(raw, lowered)
    return _told_elsewhere(match, text, strength, quoted_question, value_before)


def _told_in_quotes(text: str, start: int, line_end: int, strength: str, reading: _Reading) -> Span | None:
    """The quoted value that starts at ``start``: a single word password-like enough, or a phrase
    of plain words right after a ":" or a copula."""
    quoted = _quoted(text, start, line_end)
    if quoted is None:
        return None
    inner = text[quoted[0] : quoted[1]]
    if " " in inner.strip():
        phrase = strength != "weak" and reading.explicit and reading.since <= 1
        return quoted if phrase and passphrase_words(inner, 2, quoted=True) else None
    return quoted if password_likeness(inner) >= reading.need(strength) else None


_BRACKETS = {"[": "]", "(": ")", "{": "}", "<": ">"}


def _an_aside(raw: str) -> bool:
    """True when ``raw`` opens a bracket and closes it ([Low,Confirmed], (LUKS))."""
    closer = _BRACKETS.get(raw[0])
    return closer is not None and closer in raw[1:]


def _token_value(text: str, span: Span, after_a_glued_cue: bool) -> Span:
    """The token's span, cleaned; right after a cue of a glued script, without the CJK characters
    and colon still glued to it (密码：X)."""
    start, end = _clean(text, *span)
    if after_a_glued_cue:
        glue = _CJK.match(text, start, end)
        if glue:
            start = glue.end()
    return start, end


def _not_a_code(text: str, match: re.Match[str], previous: str) -> bool:
    """True when the word before the number, or before the cue, makes it another number than a
    code (port 8448, error code 4031)."""
    return previous.lower().strip(":") in _NOT_A_CODE or _denied_code(text, match)


def _told_value(text: str, start: int, end: int, strength: str, reading: _Reading, line_end: int) -> Span | None:
    """The value a password's or a place's cue tells at ``start``: a pair's secret (admin/X), a
    number after a password's name, a password-like word, or a passphrase of plain words."""
    value = text[start:end]
    if "/" in value and value.count("/") == 1 and not value.startswith("/"):
        user, _, secret = value.partition("/")
        if re.fullmatch(r"[\w.@-]{1,32}", user) and password_likeness(secret) >= 3:
            return end - len(secret), end  # admin/7Hq!pzT3
    if strength == "strong" and reading.since == 0 and code_number(value):
        return start, end  # 사물함 비번 6093, the password is 12345678: a number told as the secret
    score = password_likeness(value)
    if score and score >= reading.need(strength):
        return start, end
    if reading.right_after_a_connective() and value.isalpha() and value.islower():
        clause_end = _clause_end(text, start, line_end)
        if passphrase_words(text[start:clause_end], 3 if strength == "strong" else 4):
            return start, clause_end  # guest wifi rotated, now: sunflower otter quilt harbor
    return None


def _ends_the_reading(raw: str) -> bool:
    """True when ``raw`` is a command line's flag (what follows is the command's, read by the
    command-line rows) or ends a sentence."""
    if raw.startswith("-") and len(raw) > 1 and raw[1] != "-" or raw.startswith("--") and len(raw) > 2:
        return True
    bare = raw.rstrip("\"'`)]}»”")
    return bare[-1:] in (".", "?", "!") and not bare.endswith("...")


# A told value has one of these: a digit, a symbol, mixed case, a quote, a run of letters long
# enough to be a passphrase written together (a weak cue: also a colon before a passphrase).
_CANDIDATE = re.compile(r"[0-9:\"`«“„]|(?<!\w)'|[^\w\s'’.,;!?()-]|[a-z][A-Z]|[^\W\d_]{16}")
# After a password's name, also: a quote, mixed case, a run of letters long enough to be a
# passphrase written together, or a copula (the passphrase is lobster cactus porcupine monkey).
_STRONG_EVIDENCE = re.compile(
    r"[0-9:\"'`«“„]|[^\w\s.,;!?()-]|[a-z][A-Z]|[^\W\d_]{16}"
    r"|(?<!\S)(?:" + "|".join(re.escape(word) for word in sorted(_CONNECTIVES, key=len, reverse=True)) + r")(?!\S)"
)


def _another_cue(raw: str, strength: str) -> bool:
    """True when a token of the window is itself a cue at least as strong as the one reading (a
    password's name after wifi, any cue after a weak one): from there, that cue reads on."""
    if _GLUED_CUE.search(raw):
        return True
    cue = _CUE.match(raw)
    return cue is not None and (strength != "strong" or _strength(cue) == "strong")


def _inside_a_call(text: str, line_start: int, position: int) -> bool:
    """True when ``position`` is inside the parentheses of a call opened on its line (``f(``)."""
    paren = text.rfind("(", line_start, position)
    return (
        paren > line_start and ")" not in text[paren:position] and (text[paren - 1].isalnum() or text[paren - 1] == "_")
    )


def _denied_code(text: str, match: re.Match[str]) -> bool:
    """The word before the cue makes it another code: error code, status code, source code."""
    before = text[max(0, match.start() - 24) : match.start()].split()
    return bool(before) and before[-1].lower().strip(":,") in _NOT_A_CODE


ROWS: tuple[SecretPattern, ...] = (
    SecretPattern(
        "told_password",
        _CUE,
        "a password, passphrase or code told after a word naming it in any of the chat's languages (or"
        " before it, or as the answer to a quoted question), when the value is password-like enough for"
        " where it stands: see chunker/scrub_rules/likeness.py",
        tuple(
            sorted(
                {s.lower() for s in _STRONG_STEMS + _CODE_STEMS + _STRONG_WORDS + _CODE_WORDS + _WEAK_WORDS}
                | {p.lower() for p in _STRONG_PHRASES}
            )
        ),
        refine_told,
        not_after=_ALNUM + "./",
        starts_at_trigger=True,
        examples=(
            ("wifi for the workshop is Gr4phite&Moth9", "Gr4phite&Moth9"),
            ("Zugang für den Drucker: Benutzer admin, Kennwort Dr7ck3r#Xv", "Dr7ck3r#Xv"),
            ("ugh ignore that last message, 8362 is my bank pin lol", "8362"),
            ("pour le routeur : admin / Fr0mage_Bleu!", "Fr0mage_Bleu!"),
            ("guest wifi rotated, now: sunflower otter quilt harbor", "sunflower otter quilt harbor"),
            ("the managed switch is admin/7Hq!pzT3, web ui on .2", "7Hq!pzT3"),
            ("LAN mode for the X1C: IP 192.168.1.57, access code 38291045", "38291045"),
            ("pass is hunter2", "hunter2"),
            ("the password's hunter2", "hunter2"),
            ("password is literally birch215 🤦", "birch215"),
            ("changed my password to Summer2026!", "Summer2026!"),
            ("Das Passwort für den Server ist Sonnenblume#12", "Sonnenb" + "lume#12"),
            ("mot de passe: Ete2026!", "Ete2026!"),
            ("contraseña: Verano2026!", "Verano2026!"),
            ("a senha do wifi é Saudade@2023", "Saudad" + "e@2023"),
            ("la password dell'admin è wasd772", "wasd772"),
            ("La password del wifi in sede è Tiramisu_In_Sede_2024", "Tiramisu_I" + "n_Sede_2024"),
            ("het wachtwoord van de NAS is 5qu1dc0ffe3#", "5qu1dc" + "0ffe3#"),
            ("mdp du compte partagé : PotatoCedar195+ (ne le change pas stp)", "PotatoC" + "edar195+"),
            ("mdp du compte Facebook de la chorale : Soprano&Alto2022 (ne le changez pas)", "Soprano&" + "Alto2022"),
            ("wifi-lösen: winterislandfjord813", "winterisla" + "ndfjord813"),
            ("Wifi-lösenordet i föreningslokalen: Kanelbulle&Kaffe7", "Kanelbul" + "le&Kaffe7"),
            ("hasło do serwera to Tulipan#4", "Tulipan#4"),
            ("heslo je Hrad2024!", "Hrad2024!"),
            ("salasana: Kahvi!Pulla3", "Kahvi!" + "Pulla3"),
            ("Passordet til wifi på klubbhuset er Brunost_Og_Vafler9", "Brunost_O" + "g_Vafler9"),
            ("a jelszó MyNoodleIsVeryLeo2", "MyNoodleI" + "sVeryLeo2"),
            ("kata sandinya Nasigoreng_77 ya", "Nasigo" + "reng_77"),
            ("mật khẩu là Hoa$Sen2024", "Hoa$Sen2024"),
            ("lösenordet till routern är Lakers#2015", "Lakers#2015"),
            ("şifre: Kedi!2024x", "Kedi!2024x"),
            ("пароль от админки: Matreshka_88", "Matres" + "hka_88"),
            ("пароль до сервера: 1q2w3e4r268", "1q2w3e4r268"),
            ("parola de la wifi e Pr1nc3$$!79", "Pr1nc3$$!79"),
            ("wifi ka password hai Qwertybruno2024 bhai", "Qwertyb" + "runo2024"),
            ("la pasvorto estas monkey4Waffles", "monkey4" + "Waffles"),
            ("la contrasenya és MyPorcupineIsSoLucy1", "MyPorcupin" + "eIsSoLucy1"),
            ("Le code d'accès du local est tournesol$citrouille jusqu'à la fin du mois", "tournesol$" + "citrouille"),
            (
                "Spotify familie-abonnement, inlog: papa.devries@ziggo.nl, ww: Fietsbel&Tulpen22",
                "Fietsbel" + "&Tulpen22",
            ),
            ("wifi ww: Zk9#Pq2!x", "Zk9#Pq2!x"),
            ("ο κωδικός είναι ATHINA_511", "ATHINA_511"),
            ("root pw Tr0ub4dor&3", "Tr0ub4dor&3"),
            ("password hunter2", "hunter2"),
            ("ENV DB_PASSWORD Dk9-xQ2mLw7pZ", "Dk9-xQ" + "2mLw7pZ"),
            ("use hunter2 as the password", "hunter2"),
            ("> what's the staging admin password?\nSt4g1ng-yY5kzm", "St4g1ng" + "-yY5kzm"),
            ("> what's the password for the nextcloud share?\nKESTREL_7892 — link expires friday", "KESTRE" + "L_7892"),
            ("the wifi is called Schrodingers_Cat and the code is dead-or-alive-7731", "dead-or-a" + "live-7731"),
            ("The wifi at the venue: SSID `Meetup-Guest` / key `cheddar@2023`", "chedda" + "r@2023"),
            (
                "I used cactus-liverpool-cobalt-17 as the pass for the new mod account",
                "cactus-liverp" + "ool-cobalt-17",
            ),
            ("the passphrase is correct horse battery staple", "correct horse " + "battery staple"),
            ('passphrase for the deploy key is "purple monkey dishwasher 88"', "purple monkey" + " dishwasher 88"),
            (
                "passphrase for the release signing key is island biscuit glacier jasper 63",
                "island biscuit g" + "lacier jasper 63",
            ),
            ("the pass has spaces in it: jelly llama pixel daemon 23", "jelly llama p" + "ixel daemon 23"),
            (
                "recovery passphrase for the luks drive (write it down somewhere!): violet tundra gravel pebble timber",
                "violet tundra gra" + "vel pebble timber",
            ),
            (
                "the keepass master passphrase is lobster cactus porcupine monkey shadow — memorize & delete",
                "lobster cactus porc" + "upine monkey shadow",
            ),
        ),
        lookalikes=(
            "    in https://matrix.org/docs/spec/client_server/latest#id240",
            "# No password needed!",
            "res = PBKDF2(password, salt, out_len, iters, prf_SHA1)",
            "        @type password: L{bytes}",
            "i had disabled the password encryption..n u can see the dhclient connected",
            "the fix is to either pass &Rc or &RefCell instead",
            "tsal: you have this account acct_16W7fYBbUIaLcz8N (Ticket Seller).",
            "Updates the user table to record privacy policy consent",
            "My Server is based on Hardy, my DomU is centOS5",
            "# Device Code OAuth login (RFC 8628)",
            "# With a passphrase, the default is PKCS#8 with the default protection",
            'Launchpad bug 362511 in openssh "force-command unable to pass arguments along to internal-sftp" [Low,Confirmed]',
            '            prompt = "{}@{}\'s password: ".format(self.user, options["host"])',
            "token = x",
            "if password == confirm: save()",
            "pw = getpass()",
            "client(access_token=token)",
            "client.access_token = token",
            "if not password: sys.exit(1)",
            '{"expires_in": 3600, "token_type": "Bearer"}',
            "federation listens on port 8448, the client port is 8008",
            "2026-11-30 10:02:11,123 INFO login succeeded for @alice:example.org after 3 tries",
            "the error code is 4031, the admin panel says so",
            "password reset for user jonas2024 is done",
            "the wifi is down again: router keeps rebooting",
            "login with google, the password field stays empty",
            "my password manager is bitwarden, the vault is v2023.10.1",
            "the admin / root accounts are locked, see https://wiki.example.org/ops",
            "pass the config path as --config /etc/huginn/config.toml",
            "password hashing with argon2id",
            "    password (bool): Enable password entry.",
            "> is the password policy documented?\nyes",
            "Das Passwort für den Server ist geheim",
            "Merhaba, şifre sıfırlama sayfası çalışmıyor",
            "Passwort vergessen? Der Link zum Zurücksetzen geht nicht",
            "a senha do wifi é segredo",
            "allsystemsarego, I thought there was a www-data user and group?",
            "bypass is enabled, the compass is broken",
            "changed my password to something stronger",
            "la contraseña es obligatoria",
            "mon mot de passe est trop long",
            "my password is *******... wait, it shows as stars for you too right?",
            "my security key is in my password manager",
            "openssl enc -aes256 -pass env:ENC_PW -in x",
            "password for the test account -> ask ops",
            "password for the wiki: ask ops",
            "password manager: bitwarden keepass onepassword",
            "password reset: open settings page now",
            "rename `password` to `password_hash` in the model, it never stores the plaintext",
            "run `mysql -u root -p` and enter the password when prompted",
            "the passphrase is stored in the vault",
            "the password for the wifi is on the fridge",
            "this is the password field, leave it empty",
            "забыл пароль, письмо для сброса не приходит",
            "パスワードは管理者に聞いてください",
            "비밀번호는 DM으로 보낼게요",
            "the wifi is called Eduroam and the code is on the fridge",
            "password=form.password",
        ),
    ),
    SecretPattern(
        "told_password",
        _GLUED_CUE,
        "a password told after a word naming it in a script that glues words or has no letter case"
        " (wifi密码是…, NASのadminパスワード変えました：…), judged as the row above judges",
        tuple(_STRONG_GLUED),
        refine_told,
        starts_at_trigger=True,
        examples=(
            ("服务器root密码：Woaini2024*", "Woaini2024*"),
            ("관리자 계정 비번 qwertz!273", "qwertz!273"),
            ("wifi密码是X140m1ng*05", "X140m1ng*05"),
            ("密码 W041n1*10 别外传哈", "W041n1*10"),
            ("NAS管理员密码改成 Mahjong!NAS_2022 了", "Mahjong!" + "NAS_2022"),
            ("NASのadminパスワード変えました：Takoyaki#NAS_77", "Takoyak" + "i#NAS_77"),
            ("비밀번호는 Hana#2024!", "Hana#2024!"),
            ("كلمة السر هي willow-hazel-maple-velvet", "willow-hazel" + "-maple-velvet"),
            ("كلمة سر الواي فاي في النادي: Falafel_Club_2024", "Falafel_" + "Club_2024"),
            ("הסיסמה היא hapoelmaccabi72", "hapoelm" + "accabi72"),
            ("पासवर्ड है bharatsachin746", "bharats" + "achin746"),
            ("رمز عبور: Tehran1994%", "Tehran1994%"),
            ("รหัสผ่านคือ ivory-fable-oyster-copper นะ", "ivory-fable-" + "oyster-copper"),
        ),
        lookalikes=("パスワードは8文字以上にしてください",),
    ),
)
