"""The lexical analysis of the BM25 leg: identifiers, paths and error codes split AND whole."""

from __future__ import annotations

from hypothesis import given, strategies as st

from daemon.embedder import Bm25Sparse, lexical_text


def test_plain_prose_is_left_alone():
    assert lexical_text("how do I restore the trash icon") == "how do I restore the trash icon"


def test_snake_and_dotted_identifiers_gain_their_joined_runs():
    out = lexical_text("payment_intent.last_payment_error").split()
    for whole in ("paymentintent", "lastpaymenterror", "paymentintentlastpaymenterror"):
        assert whole in out


def test_paths_and_camel_case():
    assert "sambasmbconf" in lexical_text("/etc/samba/smb.conf").split()
    out = lexical_text("redirectToCheckout").split()
    assert {"redirect", "To", "Checkout", "redirecttocheckout"} <= set(out)


def test_long_compounds_are_bounded():
    # at most 6 parts joined: 15 runs, not quadratic in the length of a long path
    text = "/a/b/c/d/e/f/g/h/i/j/k/l"
    assert len(lexical_text(text).split()) <= 1 + 15


def test_a_whole_identifier_outweighs_its_scattered_parts():
    bm25 = Bm25Sparse()
    query = bm25.sparse_query("payment_intent.last_payment_error")
    whole, scattered = bm25.sparse(
        [
            "use payment_intent.last_payment_error for the message",
            "the payment failed with an error, intent unclear, last try",
        ]
    )
    shared_whole = set(query.indices) & set(whole.indices)
    shared_scattered = set(query.indices) & set(scattered.indices)
    assert len(shared_whole) > len(shared_scattered) + 3  # the joined runs match only the whole


@given(st.text(alphabet="aZ09._/:\\- xQ\n", max_size=40))
def test_the_quick_no_compound_test_never_skips_a_compound(text):
    """lexical_text skips the compound scan when its cheap test finds nothing: never wrongly."""
    from daemon.embedder import _expanded

    assert lexical_text(text) == _expanded(text)
