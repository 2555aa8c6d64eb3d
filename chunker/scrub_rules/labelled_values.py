"""Scrubber rows: credentials named by a label in chat: keys, PINs, codes, told values.

Owns: ``ROWS``, this family's rows in the order the engine runs them, each with its evidence
(``examples``: texts it must remove and the exact span; ``lookalikes``: texts it must leave).
Adding a rule of this family is one row here, with its evidence.

Must not: do I/O or keep any text; reorder rows without checking the scrubber's output is unchanged
(the engine merges overlapping spans under the kind of the row that runs first).
"""

from __future__ import annotations

import re

from chunker.scrub_rules.common import (
    _ALNUM,
    SecretPattern,
    _account_password,
    _code_after_label,
    _email_then_password,
    _mailgun_whole,
    _needs_digit,
    _not_placeholder,
    _prefixed,
    _quoted_not_placeholder,
    _rx,
    _shaped_or_diceware,
    _user_then_password,
    refine_password_shaped,
)

ROWS: tuple[SecretPattern, ...] = (
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
        examples=(("u: jenny p: Ch0c0lat3Ch1p", "Ch0c0lat3Ch1p"),),
        lookalikes=("u: bob p: hunter",),
    ),
    SecretPattern(
        "secret",
        _rx(r"secret_key_base[\"']?[ \t]*(?:=>|=|:)[ \t]*[\"']?(?P<secret>[0-9a-f]{32,})"),
        "Rails SECRET_KEY_BASE (hex; signs every session cookie)",
        ("secret_key_base",),
        folded=True,
        examples=(
            (
                "SECRET_KEY_BASE=" + "c383f1ebb6fbb5c2" * 8,
                "c383f1ebb6fbb5c2c383f1ebb6fbb5c2c383f1ebb6fbb5c2c383f1ebb6fbb5c2"
                + "c383f1ebb6fbb5c2c383f1ebb6fbb5c2c383f1ebb6fbb5c2c383f1ebb6fbb5c2",
            ),
        ),
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
        examples=(("2FA setup key for the shared ops account: E4TP CU3J 3XCN GDZK", "E4TP CU3J 3XCN GDZK"),),
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
        examples=(
            (
                "webhook url is https://hookshot.example.org/webhook/Fp6KPNonodFRU0kRkwsadQrsA1266sar set it",
                "Fp6KPNonodFRU0kR" + "kwsadQrsA1266sar",
            ),
        ),
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
        examples=(
            ("club accounts:\n- instagram: stream_team / marta_1975\n- twitter: ask me", "marta_1975"),
            ("gitea admin account: root / Cob4ltd0nu7-", "Cob4ltd0nu7-"),
        ),
        lookalikes=("versions: python3 / python3.12",),
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
        examples=(
            (
                "handing over the account. login toni75@posteo.de, pass Router*maple+56. please change it",
                "Router*maple+56.",
            ),
            ("router admin page is http://192.168.178.164 user admin pass qazwsx$119", "qazwsx$119"),
            ("pterodactyl panel login clubadmin33@proton.me qwerty#370", "qwerty#370"),
            ("mqtt broker creds → user `sensors`, pass `Mosquitto-Bite-2024`", "Mosquitto" + "-Bite-2024"),
            ("ChoralTracks account: user stmarks, password BassLine_Low_E", "BassLine_Low_E"),
        ),
        lookalikes=(
            "    def __init__(self, username: bytes, password: bytes) -> None: ...",
            "# is used for the username and password quoting. For the joint userinfo component",
            "if user or passwd: self.auth_cache[key] = (user, passwd)",
        ),
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
        examples=(
            ("security question is 'name of your first pet', answer is Noodle61", "Noodle61"),
            ("for the bank form, mother's maiden name = Haverkamp", "Haverkamp"),
        ),
    ),
    SecretPattern(
        "prose_password",
        _rx(r"(?:password|passwd|passphrase|pw|pass)[ \t]*:[ \t]*\r?\n[ \t]*(?P<secret>[^\s]+)[ \t]*(?=\r?\n|$)"),
        "a password alone on the line after 'password:' (copied from a manager)",
        ("password", "passwd", "passphrase", "pw", "pass"),
        refine_password_shaped,
        folded=True,
        examples=(("password:\n!QAZ2wsx!496\n(copy it exactly)", "!QAZ2wsx!496"),),
        lookalikes=("password = getpass.getpass('Password: ')\nif not password:\n    sys.exit(1)\n",),
    ),
    SecretPattern(
        "secret",
        _rx(r"api_hash[\"']?[ \t]*[:=][ \t]*[\"']?(?P<secret>[0-9a-f]{32})(?![0-9a-f])"),
        "Telegram api_hash (mautrix-telegram, Telethon)",
        ("api_hash",),
        folded=True,
        examples=(
            (
                "telegram:\n    api_id: 5848218\n    api_hash: 0251dc9168f9aa5858edaf4adf476d3a",
                "0251dc9168f9aa58" + "58edaf4adf476d3a",
            ),
        ),
    ),
    SecretPattern(
        "secret",
        _rx(r"encryption:[ \t]*\r?\n[ \t]+key:[ \t]*[\"']?(?P<secret>[A-Za-z0-9+/]{40,}={0,2})"),
        "an ESPHome API encryption key (api: encryption: key: <base64>)",
        ("encryption:",),
        examples=(
            (
                'api:\n  encryption:\n    key: "aWKJlTbN7seGO+8GWO1aYW9jiv6PQVkTkWtC/E5Zulo="',
                "aWKJlTbN7seGO+8GWO1aYW" + "9jiv6PQVkTkWtC/E5Zulo=",
            ),
        ),
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
        examples=(
            ("cat config/master.key\n5017f0c720bf231ceffb4b23ae8fc13d", "5017f0c720bf231c" + "effb4b23ae8fc13d"),
            (
                "$ cat /etc/openvpn/client/auth.txt\npixelpusher84\nlemon1717\n$ sudo systemctl restart openvpn",
                "pixelpusher84\nlemon1717",
            ),
        ),
    ),
    _prefixed(
        "password_hash",
        ("JDJhJD", "JDJ5JD", "JDJiJD"),
        "bcrypt hashes in base64 (Caddy's basicauth)",
        body=r"[A-Za-z0-9+/]{40,}={0,2}",
        examples=(
            (
                "basicauth /* {\n\tdeploy JDJhJDE0JGY1YmpNYlBiMVIzRkdsVGlsWGdjMVNmNUg5ZVVjandST0lMVGJ2\n}",
                "JDJhJDE0JGY1YmpNYlBiMVIzRkdsVG" + "lsWGdjMVNmNUg5ZVVjandST0lMVGJ2",
            ),
            (
                "basicauth /* {\n\tadmin " + "JDJhJDE0" + "JGY1YmpNYlBiMVIzRkdsVGlsWGdjMVNmNUg5ZVVjandST0lMVGJ2\n}",
                "JDJhJDE0JGY1YmpNYlBiMVIzRkdsVG" + "lsWGdjMVNmNUg5ZVVjandST0lMVGJ2",
            ),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"(?:az[ \t]+login|nmcli)\b[^\n]{0,300}?[ \t](?:-p|--password|password)[ \t]+"
            + r"""(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`]+)"""
        ),
        "az login -p pw, nmcli ... password pw",
        ("az login", "nmcli"),
        examples=(
            (
                "az login -u tux.fan26@posteo.de -p 'orbit-island-otter62' --allow-no-subscriptions",
                "'orbit-isla" + "nd-otter62'",
            ),
            (
                'nmcli dev wifi connect "FRITZ!Box 7590 QW" password "88149953934599152091"',
                '"8814995393' + '4599152091"',
            ),
        ),
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
        examples=(
            (
                'let res = client.get(url).bearer_auth("dJOtIKndtarl2yGuMacvngzpEQZn98khYvB2oMz4").send().await?;',
                "dJOtIKndtarl2yGuMacv" + "ngzpEQZn98khYvB2oMz4",
            ),
        ),
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
        examples=(
            (
                'my $dbh = DBI->connect("DBI:Pg:dbname=irc;host=db", "ircbot", "ILoveWaffle25$") or die;',
                "ILoveWaffle25$",
            ),
        ),
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
        examples=(
            (
                "my security key (don't judge me): JXPq LEUV VyFa Rroq iDn2 3vxZ 1MYH VCxs dbVj GyVB EDRY yeRM",
                "JXPq LEUV VyFa Rroq iDn2 3vxZ 1MYH VCxs dbVj GyVB EDRY yeRM",
            ),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"b2[ \t]+(?:authorize-account|account[ \t]+authorize)[ \t]+\S+[ \t]+(?P<secret>[A-Za-z0-9+/]{20,})"),
        "b2 authorize-account keyID applicationKey (Backblaze)",
        ("b2 ",),
        examples=(
            (
                "b2 authorize-account 004b9468e63a29d473a6a317 K004kXQhErCMKIG62uezZBYxUrkXnAj",
                "K004kXQhErCMKIG" + "62uezZBYxUrkXnAj",
            ),
            (
                "b2 authoriz" + "e-account 0012ab34cd56 K001Zx9Qk2LmZx9Qk2LmZx9Qk2Lm",
                "K001Zx9Qk2LmZx" + "9Qk2LmZx9Qk2Lm",
            ),
        ),
    ),
    SecretPattern(
        "backblaze_key",
        _rx(
            r"K00[0-9](?=[A-Za-z0-9+/]{27}(?![A-Za-z0-9+/]))(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[A-Z])[A-Za-z0-9+/]{27}"
        ),
        "Backblaze B2 application keys (K00 and 28 more letters and digits)",
        ("k00",),
        not_after=_ALNUM,
        examples=(
            (
                "B2_APPLICATION_KEY in the unit: K004kXQhErCMKIG62uezZBYxUrkXnAj ok",
                "K004kXQhErCMKIG" + "62uezZBYxUrkXnAj",
            ),
        ),
    ),
    SecretPattern(
        "url_credential",
        _rx(
            r"hc-ping\.com/(?P<secret>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[A-Za-z0-9_-]{20,})"
        ),
        "a Healthchecks.io ping URL: whoever has its UUID can ping (or fail) the check",
        ("hc-ping.com/",),
        examples=(
            (
                "curl -fsS -m 10 https://hc-ping.com/df4c46c2-1d35-4278-b652-f437ffdda227",
                "df4c46c2-1d35-4278" + "-b652-f437ffdda227",
            ),
        ),
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
        examples=(
            (
                'co = cohere.Client("JQmLu2qblUBxmvKauVHfWd6YkBH2pGDYYg4dacuc")',
                "JQmLu2qblUBxmvKauVHf" + "Wd6YkBH2pGDYYg4dacuc",
            ),
        ),
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
        examples=(
            (
                "lighthouse-nebula-marmalade-91 ← that's the pw for the shared bitwarden org",
                "lighthouse-nebu" + "la-marmalade-91",
            ),
            (
                "psst MyCactusIsVeryRosie5 is the password for the minecraft whitelist panel",
                "MyCactusIs" + "VeryRosie5",
            ),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"--from-literal[ \t=]+[\w.-]+=(?P<secret>'[^'\n]+'|\"[^\"\n]+\"|[^\s'\"]+)"),
        "kubectl create secret --from-literal=key=value: each literal is the secret's data",
        ("--from-literal",),
        _not_placeholder,
        examples=(
            (
                "kubectl -n matrix create secret generic keys --from-literal=macaroon='qt:5VHaJ6MWP&mH^lzY5dQd'",
                "'qt:5VHaJ6MWP&mH^lzY5dQd'",
            ),
        ),
    ),
    SecretPattern(
        "secret",
        _rx(r"secrets:[ \t]*\r?\n[ \t]+encryption:[ \t]*[\"']?(?P<secret>[0-9a-f]{32,})"),
        "matrix-authentication-service secrets.encryption (hex)",
        ("secrets:",),
        examples=(
            (
                "secrets:\n  encryption: " + "f8cf4125dad41659" * 4,
                "f8cf4125dad41659f8cf4125dad41659" + "f8cf4125dad41659f8cf4125dad41659",
            ),
        ),
    ),
    SecretPattern(
        "secret",
        _rx(r"login_shared_secret_map:[ \t]*\r?\n[ \t]+[^\s:]+:[ \t]*[\"']?(?P<secret>[^\s\"']{16,})"),
        "a mautrix bridge's double-puppeting login_shared_secret_map entry",
        ("login_shared_secret_map",),
        _not_placeholder,
        examples=(
            (
                "bridge:\n    login_shared_secret_map:\n        fediverse.cafe: wYXP0VdnSF6bvYuLZiTawKRGzgXULfBf",
                "wYXP0VdnSF6bvYuL" + "ZiTawKRGzgXULfBf",
            ),
        ),
    ),
    SecretPattern(
        "code_password",
        _rx(r"\.login\([ \t]*(?:password[ \t]*=[ \t]*)?[\"'](?P<secret>[^\"'\n]{6,})[\"'][ \t]*\)"),
        "a password as login()'s only argument (matrix-nio's client.login(\"pw\"))",
        ("login(",),
        _quoted_not_placeholder,
        examples=(('print(await client.login("MyPumpkinIsSoLuna3"))', "MyPumpkin" + "IsSoLuna3"),),
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
        examples=(
            ("door code: 4829", "4829"),
            ("the alarm code for the office is 739164 then press OFF", "739164"),
            ("door code for the hackerspace changed to 2618# starting today", "2618#"),
            ("garage keypad → 02087162 then press the bell icon", "02087162"),
            ("the padlock on the server cage is 3630 🔒", "3630"),
            ("koden til døren er 363570", "363570"),
            ("combo for the blue bike lock out front = 0261", "0261"),
            ("Der Türcode fürs Vereinsheim lautet 7679 – bitte nicht weitergeben", "7679"),
            ("code de la porte : 7577, puis tirez fort", "7577"),
            ("alarm panel code for the space is 7719, you've got 30 sec", "7719"),
            ("Minibus keys are in the lockbox by the gate, code 1886 — return them Sunday", "1886"),
            ("new padlock on the car park gate, numbers are 3014", "3014"),
            ("Le code de l'alarme du club-house c'est 8143, puis la touche OFF.", "8143"),
            ("Kod do alarmu w świetlicy to 9052, nie zapomnijcie", "9052"),
            ("Alarmkoden er 0836, husk å slå på før dere går", "0836"),
            ("PORTKODEN ÄR 2497 👍 (gäller från måndag)", "2497"),
            ("Код домофона 4718", "4718"),
        ),
        lookalikes=(
            "the alarm goes off at 0700, the door opens at 0800",
            "the gate is on port 8448, room 1203",
            "the error code is 403",
            "Es ist 12 Uhr",
        ),
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
        examples=(
            ("Patreon login for the map maker: maps@dicegoblins.club — Cartography&Coffee9", "Cartography&Coffee9"),
            ("log into the club roll20 as gm@dicegoblins.club / Beholder!Eye42 — please", "Beholder!Eye42"),
        ),
        lookalikes=("mail bob@example.org - thanks",),
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
        examples=(
            (
                "The app password for the Zapier → WordPress thing is:\nlkht v9V0 gwwR N6k2 zbjm WZzl",
                "lkht v9V0 gwwR N6k2 zbjm WZzl",
            ),
            (
                "Google app password for the choir gmail so Thunderbird works: uqqd xjur cxam lrcj",
                "uqqd xjur cxam lrcj",
            ),
            ("hab dir ein App-Passwort angelegt:\nygzAJ-CEi9N-2cX99-TGLc7-q8WWp", "ygzAJ-CEi9N-2c" + "X99-TGLc7-q8WWp"),
        ),
    ),
    _prefixed(
        "mailgun_key",
        ("key-",),
        "Mailgun API keys (key- and 32 hex)",
        body=r"[0-9a-f]{32}",
        examples=(
            (
                "Kann mir jemand helfen? Das ist meine Konfiguration:\nexport TOKEN=key-4c5db570196"
                + "630fb2875cd7c73fbe989\nDanke!",
                "key-4c5db570196630" + "fb2875cd7c73fbe989",
            ),
        ),
    ),
    SecretPattern(
        "mailgun_key",
        _rx(r"-(?<=[0-9a-f]{32}-)[0-9a-f]{8}-[0-9a-f]{8}(?![0-9a-f])"),
        "Mailgun sending keys (32 hex, then two groups of 8): the first '-' is the literal the engine"
        " searches for, the 32 hex are checked behind it (no trigger: a '-' trigger would flag every UUID"
        " the journal tests)",
        (),
        _mailgun_whole,
        examples=(
            (
                "mailgun sending key (eu region) 50ab23edc11826cd4a6ad37fb20d5a6b-dbe73a45-bf7a1b6c",
                "50ab23edc11826cd4a6ad37fb" + "20d5a6b-dbe73a45-bf7a1b6c",
            ),
        ),
    ),
    SecretPattern(
        "deepl_key",
        _rx(r":fx\b(?<=[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:fx)"),
        "DeepL Free API keys (<uuid>:fx): the whole key",
        (":fx",),
        lambda match, text: (match.start() - 36, match.end()),
        examples=(
            (
                "DeepL free api key for the docs: 764b6dfc-a222-4705-9a23-51e0cea0b232:fx",
                "764b6dfc-a222-4705" + "-9a23-51e0cea0b232:fx",
            ),
        ),
    ),
    SecretPattern(
        "secret",
        _rx(r"accesskey[ \t]*secret[ \t]*[:：=][ \t]*(?P<secret>[A-Za-z0-9/+]{24,})"),
        "an Alibaba Cloud AccessKey Secret after its label (full-width colon too)",
        ("accesskey",),
        folded=True,
        examples=(("阿里云 AccessKey Secret：yNBJ15IGwR1E6LQX626lE8FN2YULDh", "yNBJ15IGwR1E6LQ" + "X626lE8FN2YULDh"),),
    ),
)
