"""Scrubber rows: cloud providers: AWS, Azure, GCP and their kin.

Owns: ``ROWS``, this family's rows in the order the engine runs them, each with its evidence
(``examples``: texts it must remove and the exact span; ``lookalikes``: texts it must leave).
Adding a rule of this family is one row here, with its evidence.

Must not: do I/O or keep any text; reorder rows without checking the scrubber's output is unchanged
(the engine merges overlapping spans under the kind of the row that runs first).
"""

from __future__ import annotations

from chunker.scrub_rules.common import _ALNUM, _TOKEN_CHARS, SecretPattern, _prefixed, _rx

ROWS: tuple[SecretPattern, ...] = (
    # -- clouds -----------------------------------------------------------------------------------
    SecretPattern(
        "aws_access_key_id",
        _rx(r"(?:AKIA|ASIA|ABIA|ACCA|AIDA|AROA|ANPA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        "AWS key ids: exactly 16 capitals and digits after the prefix (base32 in real ones), not glued to a"
        " word or a hashtag",
        ("akia", "asia", "abia", "acca", "aida", "aroa", "anpa"),
        not_after=_ALNUM + "#@",
        examples=(("the IAM user for the backups is AKIAHQ39KWW25UQPYTY9", "AKIAHQ39KW" + "W25UQPYTY9"),),
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
        examples=(
            (
                "¿alguien sabe por qué no conecta? tengo esto:\n\n[default]\naws_acce"
                + "ss_key_id = AKIAI2EQMPVPVJCLLEOT\naws_secret_access_key = b8QzIxGULnGtdck1DpqPf5EA7XFDN2Pj1kt/yo4L",
                "b8QzIxGULnGtdck1DpqP" + "f5EA7XFDN2Pj1kt/yo4L",
            ),
        ),
        lookalikes=(
            "openssl enc -aes256 -pass file:/run/secrets/pw -in x",
            "username admin privilege 15 secret 5",
            "SecretID: <uuid>",
        ),
    ),
    SecretPattern(
        "aws_secret_key",
        _rx(
            r"(?:AKIA|ASIA)[A-Z2-7]{16}[^\n]{0,3}\n?[^\n]{0,30}?(?<![A-Za-z0-9/+])"
            r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        "the 40-character AWS secret key right after its key id (the console's CSV, a paste of both, the next line)",
        ("akia", "asia"),
        examples=(
            (
                "> can you paste your config?\n\nsure:\n```yaml\nAccess key ID,Secret access key\nAKIA4DJOIW"
                + "IDV5UFEKUL,9PIuc7MCX6gpR/ltlw/8WumFqoVcqP4Ivwm+v3uQ\n```",
                "9PIuc7MCX6gpR/ltlw/8" + "WumFqoVcqP4Ivwm+v3uQ",
            ),
        ),
    ),
    SecretPattern(
        "azure_key",
        _rx(r"(?:accountkey|sharedaccesskey|accesskey)=(?P<secret>[a-z0-9+/=%]{16,})"),
        "Azure storage/service bus connection strings: the key goes, account and endpoint stay",
        ("accountkey=", "sharedaccesskey=", "accesskey="),
        folded=True,
        examples=(
            (
                "why does this fail? 🤔\nDefaultEndpoint"
                + "sProtocol=https;AccountName=acmeprod;AccountKey=7fhmFNfGv6qjU0m+R/Jw9mNnAHQvo0kGaPSL4ddE6Cmd0Lhxr39jYbXvxHIPfoJfw7u8flclJbDNbieRy7O/A0==;EndpointSuffix=core.windows.net\nit worked yesterday",
                "7fhmFNfGv6qjU0m+R/Jw9mNnAHQvo0kGaPSL4ddE6Cmd"
                + "0Lhxr39jYbXvxHIPfoJfw7u8flclJbDNbieRy7O/A0==;EndpointSuffix=core.windows.net",
            ),
        ),
    ),
    SecretPattern(
        "azure_sas",
        _rx(r"sig=(?P<secret>[A-Za-z0-9%+/=_-]{16,})"),
        "Azure SAS signatures in URLs and connection strings",
        ("sig=",),
        not_after=_ALNUM + "_",
        examples=(
            (
                "je comprends pas, ça marche pas avec ça :\nhttps://acme.blob.core.windows.net/backups/db.bak?sv=2022-11-02&ss=b&srt=o&sp=r&se=2026-"
                + "12-31T00:00:00Z&spr=https&sig=L2LtQiaFbl1FCEwHyAkpc8v0IbQq4Sgiajt71sNkb1w%3D",
                "L2LtQiaFbl1FCEwHyAkpc" + "8v0IbQq4Sgiajt71sNkb1w%3D",
            ),
        ),
    ),
    _prefixed(
        "digitalocean_token",
        ("dop_v1_", "doo_v1_", "dor_v1_"),
        "DigitalOcean personal/OAuth/refresh tokens",
        body=r"[a-f0-9]{8,}",
        examples=(
            (
                "ok so I ran\n    use dop_v1_2cac34483bc7a4a891ee69a7e950"
                + "da4b534841e8cbae36269888c2b7f72a1e19 for now, I'll rotate it later\nand got 401",
                "dop_v1_2cac34483bc7a4a891ee69a7e950" + "da4b534841e8cbae36269888c2b7f72a1e19",
            ),
        ),
    ),
    _prefixed(
        "heroku_key",
        ("HRKU-",),
        "Heroku API keys (new format; old UUID keys go by their label)",
        examples=(
            (
                "¿alguien sabe por qué no conecta? tengo esto:\n\nuse HRKU-AA9jRrfATgxAw1xUofI2dz2CUoZ"
                + "CmiXzxlN2m8LVXv4wPnPQg5Tv9GiLBNw4 for now, I'll rotate it later",
                "HRKU-AA9jRrfATgxAw1xUofI2dz2CUoZ" + "CmiXzxlN2m8LVXv4wPnPQg5Tv9GiLBNw4",
            ),
        ),
    ),
    SecretPattern(
        "vault_token",
        _rx(r"hv[sbr]\.[A-Za-z0-9_-]{8,}"),
        "HashiCorp Vault service, batch and recovery tokens",
        ("hvs.", "hvb.", "hvr."),
        not_after=_TOKEN_CHARS + ".",
        examples=(
            (
                "> can you paste your config?\n\nsure:\n```yaml\nuse hvs.6L1C5EzuPvGsIExAWlSSsS7xfj5PyMjZkKkPi-7uKZGBc"
                + "AlZm0JhavS0NgapKJQUAATJ21G7EsxxkB1itza4V_bKjC for now, I'll rotate it later\n```",
                "hvs.6L1C5EzuPvGsIExAWlSSsS7xfj5PyMjZkKkPi-7uKZGBc" + "AlZm0JhavS0NgapKJQUAATJ21G7EsxxkB1itza4V_bKjC",
            ),
        ),
    ),
    SecretPattern(
        "google_api_key",
        _rx(r"(?:AIza[A-Za-z0-9_-]{8,}|GOCSPX-[A-Za-z0-9_-]{8,}|ya29\.[A-Za-z0-9_-]{20,}|1//0[A-Za-z0-9_-]{20,})"),
        "Google API keys (AIza), OAuth client secrets (GOCSPX-), access (ya29.) and refresh (1//0) tokens",
        ("aiza", "gocspx-", "ya29.", "1//0"),
        not_after=_ALNUM,
        examples=(
            (
                "проверьте пожалуйста, что не так:\nuse AIzaSy0Lng3hFoJ76ri"
                + "2EcdPRKNjwLXv6jV16kQ for now, I'll rotate it later",
                "AIzaSy0Lng3hFoJ76ri" + "2EcdPRKNjwLXv6jV16kQ",
            ),
        ),
    ),
    SecretPattern(
        "firebase_key",
        _rx(r"AAAA[A-Za-z0-9_-]{7}:APA91b[A-Za-z0-9_-]{20,}"),
        "Firebase Cloud Messaging legacy server keys",
        (":apa91b",),
        not_after=_ALNUM,
        examples=(
            (
                "這個設定哪裡錯了？\nuse AAAAO9fku6D:APA91b2j4xyeO4M6h6VqPyAVDm8tskgB6dPG4wZ8mOYLv_bT_DJcp6JLZ1E3XkgjewHEpf"
                + "cI8Bvl-je64ELQ-EwTYUMWuVNOyazmVUkpjEAeGwTpUFGzn0I5YTl3ulyOlHjnlAdcgxNU for now, I'll rotate it later",
                "AAAAO9fku6D:APA91b2j4xyeO4M6h6VqPyAVDm8tskgB6dPG4wZ8mOYLv_bT_DJcp6JLZ1E3XkgjewHEpf"
                + "cI8Bvl-je64ELQ-EwTYUMWuVNOyazmVUkpjEAeGwTpUFGzn0I5YTl3ulyOlHjnlAdcgxNU",
            ),
        ),
    ),
)
