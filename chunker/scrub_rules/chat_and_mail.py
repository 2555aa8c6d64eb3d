"""Scrubber rows: chat, mail and messaging services: bot tokens, webhooks, API keys.

Owns: ``ROWS``, this family's rows in the order the engine runs them, each with its evidence
(``examples``: texts it must remove and the exact span; ``lookalikes``: texts it must leave).
Adding a rule of this family is one row here, with its evidence.

Must not: do I/O or keep any text; reorder rows without checking the scrubber's output is unchanged
(the engine merges overlapping spans under the kind of the row that runs first).
"""

from __future__ import annotations

from chunker.scrub_rules.common import (
    _ALNUM,
    _TOKEN_CHARS,
    SecretPattern,
    _digits_before,
    _needs_digit,
    _prefixed,
    _rx,
    _told_to_a_service,
)

ROWS: tuple[SecretPattern, ...] = (
    # -- chat and mail ------------------------------------------------------------------------
    _prefixed(
        "slack_token",
        ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-", "xoxe-", "xoxe.", "xapp-", "xoxc-"),
        "Slack bot/user/app/refresh (xoxe-) tokens, and a browser session's client token (xoxc-)",
        body=r"[A-Za-z0-9._-]{4,}",
        not_after="",
        examples=(
            (
                "[2026-11-30 10:02:11] DEBUG loaded settings\n[2026-11-30 10:02:11] DEBUG use xoxb-25912689699-2965224194"
                + "931-yoazWjNRmHDfaLl8T01UXAfO for now, I'll rotate it later\n[2026-11-30 10:02:12] ERROR connection refused",
                "xoxb-25912689699-2965224194" + "931-yoazWjNRmHDfaLl8T01UXAfO",
            ),
        ),
    ),
    _prefixed(
        "slack_token",
        ("xoxd-",),
        "a Slack browser session's d cookie (xoxd-, URL-encoded base64)",
        body=r"[A-Za-z0-9._%+/=-]{4,}",
        not_after="",
        examples=(
            (
                'curl -b "d=xoxd-k3J9qLm2Pz8Rt5Vw1Yb7%2BNc4Hd6%2F" https://x',
                "xoxd-k3J9qLm" + "2Pz8Rt5Vw1Yb7%2BNc4Hd6%2F",
            ),
            (
                "[2026-11-30 10:02:11] DEBUG loaded settings\n[2026-11-30 10:02:11] DEBUG d cookie: xoxd-ldHub6bfcnxuOPMpt"
                + "QbmGnIZ498uiOuMk3m0QAut%2Bd3HAj8Oq0xuJfS72zX1jlx8Wi8exBT%2FKoS8LxS7aI84Bm8oEwfQ%3D\n[2026-11-30 10:02:12] ERROR connection refused",
                "xoxd-ldHub6bfcnxuOPMpt"
                + "QbmGnIZ498uiOuMk3m0QAut%2Bd3HAj8Oq0xuJfS72zX1jlx8Wi8exBT%2FKoS8LxS7aI84Bm8oEwfQ%3D",
            ),
        ),
    ),
    SecretPattern(
        "slack_webhook",
        _rx(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9/_-]+)"),
        "Slack incoming webhook URLs: the path is the credential",
        ("hooks.slack.com/",),
        examples=(
            (
                "post alerts to https://hooks.slack.com/services/T024BE7LD/B08AB"
                + "12CD/xYz9AbC8dEf7GhI6jKl5MnO4 please",
                "T024BE7LD/B08AB12CD/xY" + "z9AbC8dEf7GhI6jKl5MnO4",
            ),
        ),
    ),
    SecretPattern(
        "discord_webhook",
        _rx(r"discord(?:app)?\.com/api/webhooks/[0-9]+/(?P<secret>[A-Za-z0-9_-]+)"),
        "Discord webhook URLs: the last path segment is the credential",
        ("/api/webhooks/",),
        examples=(
            (
                "the bot posts via https://discord.com/api/webhooks/112233445566778899/ab"
                + "3de5gh7jk9mn1pq3st5vw7yz9bc1ef3hj5-xy_z",
                "ab3de5gh7jk9mn1pq3st" + "5vw7yz9bc1ef3hj5-xy_z",
            ),
        ),
    ),
    SecretPattern(
        "discord_bot_token",
        _rx(r"[MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}(?![A-Za-z0-9_-])"),
        "Discord bot tokens: base64 user id (starts M/N/O), timestamp, HMAC",
        (".",),
        not_after=_TOKEN_CHARS,
        examples=(
            (
                "проверьте пожалуйста, что не так:\nclient.run('NzkyMDIzNTk3"
                + "OTEwNjgyNjg1.x4a9vv.7EIgBVS9UzntOGN2DiLV1EJK1p-IseU4rcgv7W')",
                "NzkyMDIzNTk3" + "OTEwNjgyNjg1.x4a9vv.7EIgBVS9UzntOGN2DiLV1EJK1p-IseU4rcgv7W",
            ),
        ),
        lookalikes=(
            "see https://serverfault.com/questions/36421/stop-ssh-login-from-printing-motd/38160#38160",
            "token endpoint is https://auth.example.org/oauth2/token",
            "see https://example.com/page?code=ABCD&lang=en",
            "https://github.com/search?q=code%3Afoo&type=code",
            "mailto:bob@example.org and xmpp:alice@jabber.example.org",
            "echo hello > notes.txt",
            "https://example.org/hooks/deploy-on-push-to-main-branch",
            '{"errcode":"M_UNKNOWN_TOKEN","error":"Invalid access token passed.","soft_logout":false}',
            "snmpwalk -v2c -c public 192.168.88.1",
            "rocommunity public 10.0.0.0/24",
            "curl -b cookies.txt https://example.org",
            "the token s.length is a property, s.toUpperCase() too",
            "the master.key file is gitignored",
            "/connect irc.libera.chat 6697",
            "I am back into my account on Riot.im",
            "not sure if this is helpful: http://www.mail-archive.com/pgsql-admin@postgresql.org/msg05772.html",
        ),
    ),
    SecretPattern(
        "telegram_bot_token",
        _rx(r":AA(?<=[0-9]{6}:AA)[A-Za-z0-9_-]{30,}"),
        "Telegram bot tokens, alone or inside api.telegram.org/bot<token>/ URLs: the literal :AA"
        " first, then the 6-12 digit bot id behind it",
        (":aa",),
        lambda match, text: _digits_before(match, text, 12),
        examples=(
            (
                "curl https://api.telegram.org/bot9" + "853346436:AA8Ts_k8XF4Kp-PUSqgH_q1qWxc15SnrLJA/getMe",
                "9853346436:AA8Ts_k8XF4Kp-PUS" + "qgH_q1qWxc15SnrLJA",
            ),
        ),
    ),
    SecretPattern(
        "sendgrid_key",
        _rx(r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{20,}"),
        "SendGrid API keys",
        ("sg.",),
        not_after=_ALNUM,
        examples=(
            (
                "> can you paste your config?\n\nsure:\n```yaml\nuse SG.1v44DX5qYhF"
                + "nFdhTeMs--1.W51jgAz0IGi1m7wNcSXOMLtaFbpdUioDZtv0MEhBUxB for now, I'll rotate it later\n```",
                "SG.1v44DX5qYhF" + "nFdhTeMs--1.W51jgAz0IGi1m7wNcSXOMLtaFbpdUioDZtv0MEhBUxB",
            ),
        ),
    ),
    SecretPattern(
        "twilio_key",
        _rx(r"SK[0-9a-f]{32}(?![0-9a-f])"),
        "Twilio API key SIDs (SK + 32 hex); auth tokens go by their label",
        ("sk",),
        not_after=_ALNUM,
        examples=(
            (
                "> can you paste your config?\n\nsure:\n```yaml\nuse SK97d430d85c84987"
                + "9d055818400eaedcf for now, I'll rotate it later\n```",
                "SK97d430d85c84987" + "9d055818400eaedcf",
            ),
        ),
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
        not_after=_ALNUM + "+/_",
        examples=(
            ("login with ?loginToken=syl_k3J9qLm2Pz8Rt5Vw1Yb7_0a1B2c", "syl_k3J9qLm2Pz8" + "Rt5Vw1Yb7_0a1B2c"),
            (
                "ok so I ran\n    use syt_0YFu9Mgp_H4eoagC"
                + "u1uzAYi0PGhJo_AIRqy4 for now, I'll rotate it later\nand got 401",
                "syt_0YFu9Mgp_H4eoagC" + "u1uzAYi0PGhJo_AIRqy4",
            ),
        ),
        lookalikes=("def _do_mct_aes_test(self, file_name):\n    nist_aes_mct_files = ()",),
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
        examples=(
            ("/msg NickServ IDENTIFY huginn Sw0rdf1sh!", "Sw0rdf1sh!"),
            ("I typed /msg nickserv identify hunter2 and it said invalid", "hunter2"),
        ),
        lookalikes=(
            "type /msg NickServ IDENTIFY <password> to log in",
            "/msg nickserv identify yourpassword",
            "see /usr/share/pass storage",
            "cmdkey /generic:TERMSRV/rdp01 /user:CORP\\jdoe /pass   (leave out a value and it prompts you)",
        ),
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
        examples=(("PRIVMSG NickServ :IDENTIFY Z3=Ks+HTHUVyg6", "Z3=Ks+HTHUVyg6"),),
    ),
    SecretPattern(
        "twitter_bearer_token",
        _rx(r"A{20,}[A-Za-z0-9%]{60,}"),
        "X/Twitter app bearer tokens: a run of 20+ A (zero bytes in base64), then URL-encoded"
        " base64; one without a digit is someone holding the A key",
        ("aaaaaaaaaaaaaaaaaaaa",),
        _needs_digit,
        not_after=_TOKEN_CHARS + "+/",
        starts_at_trigger=True,
        examples=(
            (
                (
                    "X_BEARER="
                    + "A" * 21
                    + "MLheAAAAAAA0%2BuSeid%2BULvsea4JtiGRiSDSJSI%3DEUifiRBkKG5E2XzMDjRfl76ZC9Ub0wnz4XsN"
                ),
                "AAAAAAAAAAAAAAAA"
                + "AAAAAMLheAAAAAAA0%2BuSeid%2BULvsea4JtiGRiSDSJSI%3DEUifiRBkKG5E2XzMDjRfl76ZC9Ub0wnz4XsN",
            ),
        ),
        lookalikes=("A" * 90 + "!!! ship it",),
    ),
    SecretPattern(
        "facebook_token",
        _rx(r"EAA[A-Za-z0-9]{100,}"),
        "Facebook/Meta Graph API access tokens: EAA and 100+ letters and digits. No trigger: 'eaa'"
        " occurs in one hex id in ~140, and the literal EAA is searched as fast as a trigger",
        (),
        _needs_digit,
        not_after=_TOKEN_CHARS + "+/",
        examples=(
            (
                "graph token EAACEdEose0cBA" + "Zx9Qk2Lm" * 13 + " expires",
                "EAACEdEose0cBAZx9Qk2LmZx9Qk2LmZx9Qk2LmZx9Qk2LmZx9Qk2LmZx9Qk"
                + "2LmZx9Qk2LmZx9Qk2LmZx9Qk2LmZx9Qk2LmZx9Qk2LmZx9Qk2LmZx9Qk2Lm",
            ),
            (
                "проверьте пожалуйста, что не так:\nuse EAAGSlUjPA8i4TUfJxSaU4JjGAjn2tEGeykk34qGzIRt3zvkydBbr4Rbt9Yjfkh2M0aooJaE6TIl40CUT36R7Syv2l1HLmgEN56wt7"
                + "P15AMVc0OnqL2ZQLtY5EO1vZ1f5p5u4gQScMuHE9w7flTcFHI0MTpcmRevYM6iSthG400G1ae2oNrN9b4UcaESjnxp4VVw0t2yOMzc for now, I'll rotate it later",
                "EAAGSlUjPA8i4TUfJxSaU4JjGAjn2tEGeykk34qGzIRt3zvkydBbr4Rbt9Yjfkh2M0aooJaE6TIl40CUT36R7Syv2l1HLmgEN56wt7"
                + "P15AMVc0OnqL2ZQLtY5EO1vZ1f5p5u4gQScMuHE9w7flTcFHI0MTpcmRevYM6iSthG400G1ae2oNrN9b4UcaESjnxp4VVw0t2yOMzc",
            ),
        ),
        lookalikes=("EAA is the European Athletics Association",),
    ),
)
