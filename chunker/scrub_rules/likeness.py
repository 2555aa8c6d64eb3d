"""How much a value told in chat looks like a password: evidence from the value itself.

Owns: ``password_likeness`` (a score from 0, "not a password", to 3, "can only be one", read off
the value's length, its character classes and its shape), ``passphrase_words`` (a run of plain
words that reads as a generated passphrase, not as a sentence) and ``code_number`` (a PIN, a door
code, a lock's combination). The rows that find a value *told* (``chunker.scrub_rules.told_values``,
and the vetoes of ``chunker.scrub_rules.common``) ask these instead of listing phrasings.

Must not: do I/O or keep any text; know any phrase of any language (that is the rows' business).

What is never a password, whatever its classes: a URL, an e-mail address, a path or a file name, a
host name or an IP address, a Matrix id or a room alias, a number with a unit (5GHz, 30s, 1080p), a
version (v1.2.3, python3.11), a date or a time, a hash or encoding name (sha256, UTF-8), an
acronym with a number (AES-256, WPA2-PSK), an identifier of code (snake_case, dotted.name, a call,
CamelCase letters), markup (``C{True}``, ``*never*``), a placeholder (<password>, ${PW}, ****).
"""

from __future__ import annotations

import functools
import re

_URL = re.compile(r"[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_EMAIL = re.compile(r"[^\s@]+@[^\s@]+\.[A-Za-z]{2,}")
_MATRIX_ID = re.compile(r"[@#!+][^\s:]+:[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_PATH = re.compile(r"(?:/|~/|\./|\.\./|[A-Za-z]:\\)\S*|\S*/\S*/\S*")
FILE_NAME = re.compile(
    r"[\w.-]+\.(?:pem|key|crt|cer|der|p12|pfx|jks|pub|gpg|asc|json|ya?ml|toml|txt|md|env|conf|cfg|ini|log|py|js|ts"
    r"|sh|rs|go|c|h|cpp|java|rb|php|html|css|csv|sql|db|sqlite|zip|gz|tgz|7z|rar|tar|iso|img|deb|rpm|exe|dll|so"
    r"|png|jpe?g|gif|svg|pdf|docx?|xlsx?|odt|mp[34]|mkv|wav|lock|service|timer)(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_HOST = re.compile(r"(?:[a-z0-9-]+\.)+[a-z]{2,}\.?|\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?|\[?[0-9a-f:]+:[0-9a-f:]+\]?")
_UNIT = re.compile(
    r"[~≈+-]?\d+(?:[.,]\d+)?(?:ms|us|µs|ns|s|sec|secs|min|mins|h|hr|hrs|d|days?|w|wk|y|yr|k|m|g|kb|mb|gb|tb|kib|mib"
    r"|gib|tib|b|bit|bps|kbps|mbps|gbps|hz|khz|mhz|ghz|px|pt|em|rem|dpi|fps|p|i|x|v|mv|a|ma|w|kw|kwh|mah|°c?|c|f"
    r"|%|mm|cm|km|in|ft|kg|lb|st|nd|rd|th|am|pm|g)",
    re.IGNORECASE,
)
_VERSION = re.compile(r"[A-Za-z_-]*v?\d+(?:\.\d+)+(?:[-.+~]?[A-Za-z0-9]+)*|v\d+[a-z0-9]*", re.IGNORECASE)
_DATE_TIME = re.compile(
    r"\d{4}-\d\d(?:-\d\d)?(?:[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?)?Z?|\d{1,2}[./-]\d{1,2}[./-]\d{2,4}"
    r"|\d{1,2}:\d\d(?::\d\d(?:[.,]\d+)?)?(?:am|pm)?|\d{1,2}(?:am|pm)",
    re.IGNORECASE,
)
_TECH_NAME = re.compile(
    r"(?:sha|md|blake|crc|aes|des|rsa|dsa|ecdsa|ed|curve|utf|ucs|iso|latin|cp|win|ipv|http|tls|ssl|wpa|wep|gpt|x86"
    r"|amd|arm|aarch|base|ascii|pbkdf|argon|bcrypt|scrypt|ext|fat|ntfs|zfs|raid|usb|pcie?|ddr|lte|[2-6]g)"
    r"[_-]?\d+(?:[a-z]{1,3}\d*)?(?:[_-]\w+)?",
    re.IGNORECASE,
)
# An acronym or a model with a number (AES-256, WPA2-PSK, RTX-3080, GPT-4, ISO-8859-1).
_ACRONYM_NUMBER = re.compile(r"[A-Z]{1,4}\d*(?:[-/.#]?[A-Z0-9]{1,4}){1,3}")
_HEX_OR_UUID = re.compile(
    r"(?:0x)?[0-9a-f]{7,}|[0-9A-F]{7,}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
)
_PLACEHOLDER = re.compile(
    r"<[^<>]*>|\$\{.*\}|\$[A-Za-z_]\w*|\{\{.*\}\}|%\(\w+\)s|%[sdr]|\{\w*\}|[*•●·xX]{3,}|\.{3}.*|.*…|[A-Z]\{.*\}"
    r"|\*[^*]+\*|_[^_]+_|\[[^\]]*\]|\(.*\)"
)
# Code: snake_case of two parts or more, a dotted name, a call, a subscript, CONSTANT_CASE.
_CODE = re.compile(
    r"_?[a-z][a-z0-9]*(?:_[a-z][a-z0-9]*)+|[A-Z][A-Z0-9]*(?:_[A-Z][A-Z0-9]*)+|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?"
    r"|[A-Za-z_][\w.]*[(\[].*|[a-z]+(?:[A-Z][a-z]+)+|(?:[A-Z][a-z]+){2,}|--?[a-z][\w-]*|\w+=.*|\w+::\w+.*"
    # CamelCase with a number (POP3Error, T5Encoder), a name with an acronym (centOS5, macOS), a spec id (MSC4380-style)
    r"|[A-Z]+[0-9]*(?:[A-Z][a-z]+[0-9]*)+|[a-z]+[A-Z]{2,}\d*|[A-Z]{2,}\d+(?:-[a-z]+)+"
)
# A vendor's id: a short prefix, an underscore, a random part (acct_1FEIqXABEbeMMbDU, req_31wO2osIa0ulxc).
_VENDOR_ID = re.compile(r"[a-z]{2,6}_[A-Za-z0-9]{10,}")
_WIDE_SCRIPT = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
_KEY_CHORD = re.compile(r"(?:(?:ctrl|shift|alt|cmd|meta|super|option|opt|win|fn)\+)+\S+", re.IGNORECASE)
# Punctuation that closes a sentence or a clause, not part of the value.
TRAILING = ".,;:)]}»”\"'`…"
LEADING = "([{«“„\"'`"


def _classes(value: str) -> tuple[bool, bool, bool, bool]:
    lower = upper = digit = symbol = False
    for char in value:
        if char.isdigit():
            digit = True
        elif char.isalpha():
            if char.isupper():
                upper = True
            else:
                lower = True  # a letter with no case (CJK, Arabic) counts as lower
        elif char not in "-_'’/":
            symbol = True  # an apostrophe (that's) or a slash (a/b) is no password's symbol
    return lower, upper, digit, symbol


# Words joined by - _ or . (diceware; Blumenkohl-Regen-17, kávé-és-csavar-88, chai_samosa_42).
_JOINED = re.compile(r"[^\W\d_]{2,}(?:[-_.][^\W_]+){1,7}")


_MENTION = re.compile(r"@[\w.-]+(?::[\w.-]+)?|#[\w-]+|[\w.-]+@")
# A flag, emphasis or a pointer, a YAML tag, a variable: --config, *never*, *mut/*const, &RefCell, !secret, $PW
_SIGIL = re.compile(r"--?[A-Za-z]\S*|\*.*\*|\*[a-z]+(?:/\*[a-z]+)*|&[A-Za-z_]\w*|![a-z]+|\$[A-Za-z_{].*")
_MARKUP = re.compile(r"[{}<>()\[\]|]|\.\.|^\d+#[a-z]")
_PAIR = re.compile(r"[\w.-]+:(?:\d{2,5}|\S+)")
_INNER_CODE = re.compile(r"[\"`\\]")
_KEY_VALUE = re.compile(r"(?:^|[?&])[A-Za-z_][\w.-]*=")


def not_a_password(value: str) -> bool:
    """True when the value has a shape that is never a password (see the module doc)."""
    if not value or value.isspace():
        return True
    if _URL.match(value) or _EMAIL.fullmatch(value) or _MATRIX_ID.fullmatch(value) or _MENTION.fullmatch(value):
        return True
    if _PATH.fullmatch(value) or FILE_NAME.fullmatch(value) or _HOST.fullmatch(value):
        return True
    if _UNIT.fullmatch(value) or _VERSION.fullmatch(value) or _DATE_TIME.fullmatch(value):
        return True
    if _TECH_NAME.fullmatch(value) or _ACRONYM_NUMBER.fullmatch(value) or _HEX_OR_UUID.fullmatch(value):
        return True
    if _PLACEHOLDER.fullmatch(value) or _KEY_CHORD.fullmatch(value) or "[redacted:" in value:
        return True
    if _MARKUP.search(value):
        return True  # markup (L{bytes}, <T>, [x](y)), alternatives (a|b), an ellipsis (encryption..n) (8.10...was), RFC 1945#section
    if _SIGIL.fullmatch(value) or "${" in value or _PAIR.fullmatch(value):
        return True  # a flag, emphasis or a pointer, a YAML tag (!secret), a variable, host:port, a key:value pair
    if _VENDOR_ID.fullmatch(value):
        return True  # an object's id at a vendor (acct_…, req_…): named, not secret
    if _WIDE_SCRIPT.search(value):
        return True  # words of a script without spaces (8文字以上に): a sentence, not a password
    if (
        (_CODE.fullmatch(value) and not RANDOM_CASE.search(value))
        or _INNER_CODE.search(value, 1, max(1, len(value) - 1))
        or _KEY_VALUE.search(value)
    ):
        return True  # code, JSON or an escape: "a","b":1, {"k": v}, \\n, key=value
    return False


# Case changes inside a run of letters that words and CamelCase names do not make: two capitals
# with a small letter between (DqJ), or a capital after a capital run mid-word (hlDq…KAB).
RANDOM_CASE = re.compile(r"[A-Z][a-z][A-Z][a-z]?[A-Z]|[a-z][A-Z]{2,}[a-z]|[A-Z]{2}[a-z][A-Z]")
_CAMEL_WORDS = re.compile(r"[a-z]*(?:[A-Z][a-z]{2,})+|[A-Z]+(?:[A-Z][a-z]{2,})*")


@functools.lru_cache(maxsize=4096)
def password_likeness(value: str) -> int:
    """0 (not a password) to 3 (can only be one): the evidence in the value alone.

    1: six or seven letters and digits (hunter2), a run of 16+ letters (a passphrase written
    together), or three or more words joined by hyphens (ivory-quill-umber-dune).
    2: eight or more letters and digits (stitch4ever), or letters and a symbol (tournesol$citrouille).
    3: three classes of character or more in seven characters or more (Gr4phite&Moth9), or words
    joined with a number among them (Blumenkohl-Regen-17, velvet-otter-canyon-mango-42)."""
    value = value.strip()
    if len(value) < 4:
        return 0
    letters_only = value.rstrip("!").replace("_", "").replace("-", "")
    if letters_only.isalpha():
        if len(letters_only) >= 8 and RANDOM_CASE.search(letters_only) and not _CAMEL_WORDS.fullmatch(letters_only):
            return 0 if not_a_password(value) else 2  # wqhlDqJtaTdKAB: case that no word or name has
        if len(value) < 16 or not (value.islower() or value.istitle()):
            return 0  # a word (the shapes below are slower to test, and most of what chat tells is words)
    lower, upper, digit, symbol = _classes(value)
    letters = lower or upper
    if not letters and not symbol:
        return 0  # a number: a PIN only where a code is asked for (``code_number``)
    if not_a_password(value):
        return 0
    if _JOINED.fullmatch(value):
        parts = re.split(r"[-_.]", value)
        numbers = [p for p in parts if p.isdigit()]
        words = [p for p in parts if p.isalpha()]
        if numbers and len(words) >= 2 or (upper and lower and digit):
            return 3
        if len(words) >= 3 and not numbers and all(len(w) >= 3 for w in words):
            return 1
        if not digit and not symbol:
            return 0  # Nextcloud-Account, state-of-the-art: words, not a password
    return _likeness_of_classes(value, lower, upper, digit, symbol)


def _likeness_of_classes(value: str, lower: bool, upper: bool, digit: bool, symbol: bool) -> int:
    """``password_likeness`` of a value that is no plain word and no settled joined shape: by the
    classes of character it mixes and its length."""
    letters = lower or upper
    classes = sum((lower, upper, digit, symbol))
    if classes >= 3 and len(value) >= 7:
        return 3
    if letters and (digit or symbol) and len(value) >= 8:
        return 2
    if letters and symbol and len(value) >= 6:
        return 2
    if letters and digit and len(value) >= 6:
        return 1
    if not digit and not symbol and len(value) >= 16 and (value.islower() or value.istitle()):
        return 1
    return 0


# Words a sentence has and a generated passphrase has not, in the languages the chat speaks.
FUNCTION_WORDS = frozenset(
    (
        "the a an in on at to of for and or but not is are was were be been it its this that these those with from by"
        " as my your our their his her too very so no yes if then than when where what which who how why all any some"
        " just also only still again already now here there today tomorrow yesterday please thanks thank ok okay"
        " can could will would should must may might do does did done have has had get got go going gone use used"
        " stored saved kept written somewhere same like about into over under after before up down out off"
        " der die das den dem des ein eine einer und oder nicht ist sind war mit von für auf bei zu im am es"
        " le la les un une des et ou pas est sont avec pour dans sur du au ce cette"
        " el los las y o no es son con para en por del al lo que"
        " o os as um uma e não é são com em do da dos das"
        " de het een en niet is zijn met voor op van"
        " il lo gli una e non è sono con per di del della"
        " och eller inte är med för på av som"
        " og eller ikke er med for på af"
        " и или не это с в на для от"
    ).split()
)


def names_a_secret(word: str) -> bool:
    """A word that names a secret (password, onepassword, keys): a passphrase does not name itself."""
    lowered = word.lower()
    return any(stem in lowered for stem in ("pass", "secret", "token")) or lowered in (
        "key",
        "keys",
        "word",
        "pw",
        "pwd",
    )


def passphrase_words(value: str, least: int = 3, quoted: bool = False) -> bool:
    """True when ``value`` is ``least`` to 8 plain words (one may be a number), none a function
    word nor an inflected form a sentence needs (-ing, -ed): a generated passphrase (sunflower otter
    quilt harbor), not a sentence (the passphrase is stored in the vault). A ``quoted`` phrase may
    hold any lower-case words."""
    words = value.split()
    if not least <= len(words) <= 8:
        return False
    numbers = [w for w in words if w.isdigit()]
    if len(numbers) > 1 or len(words) - len(numbers) < least:
        return False  # min 12 chars: two words and a count, not a passphrase
    for word in words:
        if word.isdigit():
            continue
        lowered = word.lower()
        if not word.islower() or names_a_secret(word):
            return False  # a generated passphrase is lower case and does not name itself
        if quoted and word.isalpha():
            continue  # quoted after its name, a phrase is told on purpose: "seven ferns under the bridge"
        if not word.isalpha() or lowered in FUNCTION_WORDS or len(word) < 3:
            return False
        if lowered.endswith(("ing", "ed", "n't")) and len(lowered) > 5:
            return False
    return True


_CODE_NUMBER = re.compile(r"\d{4,10}|\d{1,4}(?:[-*#.][0-9]{1,4}){1,4}|\d{3,8}[A-Za-z]{1,2}|[A-Za-z]\d{4,8}")


def code_number(value: str) -> bool:
    """A PIN, a door code or a combination: 4-10 digits, digit groups (7-31-22, 26*48), or digits
    with a letter (7390B); not a year with a month, a time or a version."""
    if not _CODE_NUMBER.fullmatch(value) or _DATE_TIME.fullmatch(value):
        return False
    return not (re.fullmatch(r"\d+\.\d+(?:\.\d+)*", value))
