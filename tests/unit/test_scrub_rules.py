"""Each row of the credential table against the evidence it carries, row by row.

Owns: checking every row's ``examples`` (the full scrubber removes exactly the stored span, and the
row itself redacts a piece of it), every row's ``lookalikes`` (the full scrubber leaves them
byte-identical), and that every row carries an example that it removes and no other row does (the
rows not yet there are listed: the list may only shrink).
"""

from __future__ import annotations

import pytest

from chunker.scrub import PATTERNS, find_secrets, scrub
from chunker.scrub_rules import FAMILIES
from tools.scrub_catalogue import collect, row_spans

# Rows none of whose examples they alone remove: another row removes each of them too. Each is a row
# to give an example of its own or to merge into the other; the list may only shrink. (kind, the
# first 60 characters of why: unique per row, a test below keeps it so)
ROWS_WITHOUT_AN_EXAMPLE_OF_THEIR_OWN = frozenset(
    {
        ("authorization", "Authorization headers: the credential after the scheme (the "),
        ("aws_secret_key", "AWS secret keys when labelled"),
        ("azure_key", "Azure storage/service bus connection strings: the key goes, "),
        ("azure_sas", "Azure SAS signatures in URLs and connection strings"),
        ("cli_password", "cmdkey /pass:pw (/pass alone prompts)"),
        ("cli_password", "etcdctl/nats/... --user user:pw"),
        ("cli_password", "openssl -pass/-passin/-passout pass:pw (env: and file: name "),
        ("cli_password", "vault login <token> (legacy s. tokens too)"),
        ("mailgun_key", "Mailgun API keys (key- and 32 hex)"),
        ("netrc", ".netrc entries: machine host login user password pw, on one "),
        ("totp_seed", "one-time-password seeds (base32) after their label: TOTP see"),
    }
)

EXAMPLES = [(order, text, span) for order, row in enumerate(PATTERNS) for text, span in row.examples]
LOOKALIKES = [(order, text) for order, row in enumerate(PATTERNS) for text in row.lookalikes]


def _name(order: int) -> tuple[str, str]:
    row = PATTERNS[order]
    return row.kind, " ".join(row.why.split())[:60]


@pytest.mark.parametrize(("order", "text", "span"), EXAMPLES, ids=[f"{o}-{PATTERNS[o].kind}" for o, _, _ in EXAMPLES])
def test_a_rows_example_loses_exactly_its_span(order: int, text: str, span: str) -> None:
    start = text.find(span)
    assert start >= 0, "the span is a piece of the example"
    end = start + len(span)
    assert any((s, e) == (start, end) for _, s, e in find_secrets(text)), "the scrubber removes exactly the span"
    assert any(s < end and e > start for s, e in row_spans(PATTERNS[order], text)), "the row itself removes it"
    assert scrub(text).count(span) < text.count(span)


@pytest.mark.parametrize(("order", "text"), LOOKALIKES, ids=[f"{o}-{PATTERNS[o].kind}" for o, _ in LOOKALIKES])
def test_a_rows_lookalike_stays_byte_identical(order: int, text: str) -> None:
    assert scrub(text) == text


def test_every_row_carries_an_example_that_it_alone_removes() -> None:
    found = collect()
    without = {_name(order) for order, evidence in enumerate(found) if not evidence.own}
    assert without <= ROWS_WITHOUT_AN_EXAMPLE_OF_THEIR_OWN, sorted(without - ROWS_WITHOUT_AN_EXAMPLE_OF_THEIR_OWN)


def test_the_list_of_rows_without_an_example_of_their_own_holds_only_rows_that_exist() -> None:
    names = [_name(order) for order in range(len(PATTERNS))]
    assert len(set(names)) == len(names), "two rows share a name: the list could hide one behind the other"
    assert ROWS_WITHOUT_AN_EXAMPLE_OF_THEIR_OWN <= set(names)


def test_the_check_fails_a_row_whose_examples_another_row_removes() -> None:
    # Not vacuous: a row added twice leaves both copies without an example of their own.
    order = next(o for o, evidence in enumerate(collect()) if evidence.own)
    doubled = collect((*PATTERNS, PATTERNS[order]))
    assert doubled[order].own == doubled[-1].own == 0


def test_the_families_hold_every_row_once_in_the_engines_order() -> None:
    assert tuple(row for family in FAMILIES for row in family.ROWS) == PATTERNS
    assert all(family.ROWS for family in FAMILIES)
