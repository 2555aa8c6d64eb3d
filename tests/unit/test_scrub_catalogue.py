"""The scrubber catalogue and the rows' evidence.

Owns: checking that docs/scrubber.md is what tools/scrub_catalogue.py renders from the rows now,
and that every row removes a case of the evidence that no other row removes.
"""

from __future__ import annotations

from chunker.scrub import PATTERNS
from tools.scrub_catalogue import CATALOGUE, collect, render

# Rows that no case of the evidence needs: no case reaches them, or every case they remove another
# row removes too. Each is a row to give an example of its own or to merge; the list may only shrink.
ROWS_WITHOUT_EVIDENCE_OF_THEIR_OWN = frozenset(
    {
        ("private_key", "PEM/OpenSSH/PGP private keys and Element key exports, whole "),
        ("private_key", "a PEM body pasted without its BEGIN line (it came in an earl"),
        ("private_key", "a PuTTY key file's Private-Lines (the public lines and the c"),
        ("crates_token", "crates.io API tokens (cio + 32 letters and digits, one of th"),
        ("azure_client_secret", "Entra ID (Azure AD) app client secrets: 3 characters, a digi"),
        ("wireguard_key", "WireGuard private and preshared keys (43 base64 characters a"),
        ("totp_seed", "one-time-password seeds (base32) after their label: TOTP see"),
        ("aws_secret_key", "AWS secret keys when labelled"),
        ("aws_secret_key", "the 40-character AWS secret key right after its key id (the "),
        ("azure_key", "Azure storage/service bus connection strings: the key goes, "),
        ("azure_sas", "Azure SAS signatures in URLs and connection strings"),
        ("slack_webhook", "Slack incoming webhook URLs: the path is the credential"),
        ("discord_webhook", "Discord webhook URLs: the last path segment is the credentia"),
        ("mailgun_key", "Mailgun API keys (key- and 32 hex)"),
        ("authorization", "Authorization headers: the credential after the scheme (the "),
        ("cookie", "Cookie and Set-Cookie headers when a cookie holds a session-"),
        ("bearer", "Bearer <token> outside a header; needs 20+ chars with a digi"),
        ("url_token_user", "a token as the whole userinfo (Sentry DSN keys, https://<tok"),
        ("cli_password", "xfreerdp /p:pw, rdesktop -p pw"),
        ("cli_password", "openssl -pass/-passin/-passout pass:pw (env: and file: name "),
        ("cli_password", "cmdkey /pass:pw (/pass alone prompts)"),
        ("cli_password", "SNMPv3 -A authpassphrase"),
        ("cli_password", "etcdctl/nats/... --user user:pw"),
        ("cli_password", "vault login <token> (legacy s. tokens too)"),
        ("netrc", ".netrc entries: machine host login user password pw, on one "),
        ("prose_password", "a password told in words, in several languages, when the val"),
        ("prose_password", "a password told in words, in several languages, when the val"),
        ("prose_password", "a password told in words, in several languages, when the val"),
        ("prose_password", "a password told in a script that glues words or has no lette"),
        ("prose_password", "a password told in a script that glues words or has no lette"),
        ("prose_password", "a password told value first: use hunter2 as the password (a "),
        ("cli_password", "b2 authorize-account keyID applicationKey (Backblaze)"),
        ("mailgun_key", "Mailgun API keys (key- and 32 hex)"),
    }
)


def _name(order: int) -> tuple[str, str]:
    row = PATTERNS[order]
    return row.kind, " ".join(row.why.split())[:60]


def test_catalogue_is_current() -> None:
    assert CATALOGUE.read_text(encoding="utf-8") == render(), "run: .venv/bin/python tools/scrub_catalogue.py"


def test_every_row_removes_a_case_no_other_row_removes() -> None:
    found = collect()
    without = {_name(order) for order, evidence in enumerate(found) if not evidence.own}
    assert without <= ROWS_WITHOUT_EVIDENCE_OF_THEIR_OWN, sorted(without - ROWS_WITHOUT_EVIDENCE_OF_THEIR_OWN)


def test_the_list_of_rows_without_evidence_holds_only_rows_that_exist() -> None:
    names = {_name(order) for order in range(len(PATTERNS))}
    assert ROWS_WITHOUT_EVIDENCE_OF_THEIR_OWN <= names
