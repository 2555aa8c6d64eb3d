"""Scrubber rows: seed and recovery phrases, labelled assignments, config files (netrc, pgpass, docker).

Owns: ``ROWS``, this family's rows in the order the engine runs them, each with its evidence
(``examples``: texts it must remove and the exact span; ``lookalikes``: texts it must leave).
Adding a rule of this family is one row here, with its evidence.

Must not: do I/O or keep any text; reorder rows without checking the scrubber's output is unchanged
(the engine merges overlapping spans under the kind of the row that runs first).
"""

from __future__ import annotations

from chunker.scrub_rules.common import (
    _ALNUM,
    _PASSWORD_WORDS,
    _SECRET_WORDS,
    _TOKEN_CHARS,
    SecretPattern,
    _assignment,
    _not_plain_word,
    _pgpass_host,
    _phrase_value,
    _rx,
    _seed_label_before,
    refine_assignment,
    refine_secret_shaped,
)

ROWS: tuple[SecretPattern, ...] = (
    # -- labels: assignments and prose -----------------------------------------------------------
    SecretPattern(
        "security_phrase",
        _rx(r"security[ _-]?(?:pass)?phrase(?:[ \t]*\([^)\n]{0,40}\))?[ \t]*(?:is|was|:|=)[ \t]*(?P<secret>[^\n]+)"),
        "an Element Security Phrase (the passphrase of a key backup) after its label, to the end of the"
        " line; a single plain word ('is lost') or a question stays",
        ("security",),
        _phrase_value,
        folded=True,
        examples=(
            ("my security phrase is granite orbit lantern 42", "granite orbit lantern 42"),
            (
                "my security phrase (the element one) is `otter maple princess broccoli badger` if i get locked out",
                "`otter maple princess broccoli badger` if i get locked out",
            ),
        ),
        lookalikes=(
            "my security phrase is lost",
            "what is a security phrase?",
        ),
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
        examples=(
            (
                "my seed phrase is abandon ability able about above absent absorb abstract absurd abuse access accident",
                "abandon ability able about above absent absorb abstract absurd abuse access accident",
            ),
            (
                "seed phrase for the test wallet (has 40 bucks on it): achieve cute cousin craft casino bridge crater bone cabin agent chuckle charge",
                "achieve cute cousin craft casino bridge crater bone cabin agent chuckle charge",
            ),
            (
                "my 25 word seed is " + " ".join(["abyss", "apology", "adhesive", "awakened", "aptitude"] * 5),
                "abyss apology adhesive awakened aptitude abyss apology adhesive awakened aptitude abyss apology adhesive awakened aptitude abyss apology adhesive awakened aptitude abyss apology adhesive awakened aptitude",
            ),
        ),
        lookalikes=(
            "seed phrase: what is it and where do I find it?",
            "the seed phrase is written on paper in the safe",
        ),
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
        examples=(
            (
                "my recovery words:\nboost ancient brain balcony achieve assault catalog cattle choose ahead chaos boat",
                "boost ancient brain balcony achieve assault catalog cattle choose ahead chaos boat",
            ),
        ),
        lookalikes=("recovery words:\nthe quick brown fox jumps over the lazy dog again and again",),
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
        starts_at_trigger=True,
        examples=(
            ("my github recovery codes: 4f8e2-a1c9b 7d3e5-f6a0b", "4f8e2-a1c9b 7d3e5-f6a0b"),
            ("backup codes:\n1. 38492017\n2. 58204719", "38492017\n2. 58204719"),
            (
                "save these recovery codes somewhere safe:\n0kpm-ipyx\nls13-1a2w\nvxsi-rsn4",
                "0kpm-ipyx\nls13-1a2w\nvxsi-rsn4",
            ),
            ("2FA backup codes for the shared org account: 96016436 49591296 66951625", "96016436 49591296 66951625"),
            (
                "backup codes for the org google account, putting them here so they're not only on my laptop:\n7227 2835\n5864 8552",
                "7227 2835\n5864 8552",
            ),
        ),
        lookalikes=("error code 403, the recovery code expired",),
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
        examples=(
            ("the staging login is deploy / s3cretpass99", "s3cret" + "pass99"),
            ("the staging login is admin / S3cr3tPassw0rd", "S3cr3tPassw0rd"),
            ("ok logged in with admin:h3ll0w0rld! and it worked", "h3ll0w0rld!"),
        ),
        lookalikes=(
            "login with google/github",
            "login at 10:30am, the page is at host:8080",
            "ok logged in with github and it worked",
        ),
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
        examples=(
            ("my bank PIN is 4821", "4821"),
            ("sim card PUK is 22814706 if it locks again", "22814706"),
            ("phone unlock pin 645469 in case I pass out", "645469"),
            ("voicemail pin 3033", "3033"),
            ("Il PIN della carta è 84426, non dirlo a nessuno", "84426"),
            ("暗証番号は081916です。誰にも言わないでね", "081916"),
            ("PIN für die Haustür: 5388 🙂", "5388"),
            ("пін-код від картки 787180", "787180"),
            ("code du digicode : 3646", "3646"),
            ("PIN for the office phone voicemail is 778198", "778198"),
        ),
        lookalikes=(
            "GPIO pin is 17",
            "the wifi pin is on the router's sticker",
            "pin 13 is the LED",
        ),
    ),
    SecretPattern(
        "password",
        _assignment(_PASSWORD_WORDS),
        "password/passwd/passphrase/pass/pwd/pw/psk assignments (JSON, YAML, env, code, query strings, npm _auth)",
        ("pass", "pwd", "pw", "psk", "authtok", "_auth"),
        refine_assignment,
        folded=True,
        starts_at_trigger=True,
        examples=(
            ('network={\n    ssid="HomeNet"\n    psk="Sunflower_2Apples"\n}', "Sunflowe" + "r_2Apples"),
            ("ldap_default_authtok = sssdB1nd-KE08Kuvni", "sssdB1nd-" + "KE08Kuvni"),
            ("  'dbpassword' => '3J5C6l69FF50G5Unezwz+rEkY4C/Mp',", "3J5C6l69FF50G5U" + "nezwz+rEkY4C/Mp"),
            ("**login:** `raidbot`\n**pw:** `R4idB0tGYw5U`", "R4idB0tGYw5U"),
            ("    env:\n      SSHPASS: Emma&Lucia55\n    steps:", "Emma&Lucia55"),
            ("POSTGRES_PASSWORD=#W!ij$)venoFfCeLzn(8JaMhK", "#W!ij$)venoFfCeLzn(8JaMhK"),
            ("spring.datasource.password=zo!mepO(TH8&cZ$g%cu=hLq1JdBT5CU", "zo!mepO(TH8&cZ$g%cu=hLq1JdBT5CU"),
        ),
        lookalikes=(
            "USERNAME_PASSWORD = 0x02",
            '    AttributeOID.CHALLENGE_PASSWORD: "challengePassword",',
            'INVALID_USERNAME_OR_PASSWORD = "Invalid username or password"',
            '        self.challenges = [b"Password:", b"Username:"]',
            '            prompt = "{}@{}\'s password: ".format(self.user, options["host"])',
            '            raise TypeError("pwd: expected bytes, got %s" % type(pwd).__name__)',
            '        self.assertEqual("Could not change passphrase: key not encrypted", str(error))',
            "            passphrase = extra",
            '    "passwd:shell",',
            'export PGPASSWORD="$PASSWORD"',
            "When you create the account link pass: `collect: 'eventually_due'`",
            "psk: ${WIFI_PSK}",
            "keytool -storepass:env STOREPASS -list -keystore t.jks",
            "mount -t cifs //srv/share /mnt -o username=<user>,password=<pass>,dom=<domain>",
            'pw = os.getenv("DB_PASSWORD")',
            'POST /login with {"type": "m.login.password", "identifier": {"type": "m.id.user"}, "password": "..."}',
            "DB_PASSWORD=op://Infra/postgres-prod/password op run -- ./start.sh",
            '$pw = Read-Host -AsSecureString "Enter password"',
            "ERROR 1045 (28000): Access denied for user 'root'@'localhost' (using password: YES)",
            "  password: !secret mqtt_password",
            'mysql_root_password: "{{ vault_mysql_root_password }}"',
            "2024-05-12T10:00:01Z INFO auth ok user=alice password=<redacted> token=[FILTERED]",
            "private_key = load_pem_private_key(data, password=None)",
            "password = getpass.getpass('Password: ')",
            "kubectl create secret generic keys --from-literal=password=$PW",
            "password: ${POSTGRES_PASSWORD:?set it in .env}",
            "if password == confirm_password: save() else: raise ValueError",
        ),
    ),
    SecretPattern(
        "secret",
        _assignment(_SECRET_WORDS),
        "token/secret/api_key/client_secret/private_key/credentials/dsn assignments; key must end with it;"
        " an environment name in capitals ending _KEY or _PAT when its value is shaped like a secret",
        ("secret", "token", "key", "credentials", "sig", "dsn", "pat", "private"),
        refine_assignment,
        folded=True,
        starts_at_trigger=True,
        examples=(
            (
                "app.secret_key = bytes.fromhex('532e15e9e633f5e1912b2179512c574498a2fd2d871abc23')",
                "532e15e9e633f5e1912b2179512c574498a2fd2d871abc23",
            ),
            (
                "token: tok_1FQt2mHX1BvZRPweiqMXH0mM; a similar object exists in test mode",
                "tok_1FQt2mHX1BvZRPweiqMXH0mM",
            ),
            ("ALGOLIA_ADMIN_KEY=4f8e2a1c9b7d3e5f6a0b8c2d4e6f1a3b", "4f8e2a1c9b7d3e5f" + "6a0b8c2d4e6f1a3b"),
            ("AZURE_DEVOPS_PAT=k3j9qlm2pz8rt5vw1yb7nc4hd6fg0aqs2wd3", "k3j9qlm2pz8rt5vw1y" + "b7nc4hd6fg0aqs2wd3"),
            ("draupnir pickleKey: k3J9qLm2Pz8Rt5Vw1Yb7Nc4Hd6Fg0aQs", "k3J9qLm2Pz8Rt5Vw" + "1Yb7Nc4Hd6Fg0aQs"),
            (
                "X-Auth-Email: admin@example.org\nX-Auth-Key: " + "d0995c78978d2215" + "0996b192ed5696d5f2ce8",
                "d0995c78978d221509" + "96b192ed5696d5f2ce8",
            ),
            (
                "app.config['SECRET_KEY'] = 'ITZYRgVYCQwO6V0O7UNK9Q1mpTd6r_D3y_JwJpe2'",
                "ITZYRgVYCQwO6V0O7UNK" + "9Q1mpTd6r_D3y_JwJpe2",
            ),
            (
                'const OPENWEATHER_KEY: &str = "0d3b8752286d0123' + '3b5d75eba01423cf";',
                "0d3b8752286d0123" + "3b5d75eba01423cf",
            ),
            ("form_secret: eoWrIeSAbw5j4vojkT0311O1=AbcdEf", "eoWrIeSAbw5j4vo" + "jkT0311O1=AbcdEf"),
            ("MJ_APIKEY_PRIVATE=bd0bb86990f53fde44dd018e1f4dfd68", "bd0bb86990f53fde" + "44dd018e1f4dfd68"),
        ),
        lookalikes=(
            "# cached token: `get_token()` may refresh an OAuth token (network call + file writes)",
            "            token = Error",
            "    privateKey: PKey,",
            "        private_key: PKCS7PrivateKeyTypes,",
            "which GitHub only injects when the job declares `permissions: id-token: write`.",
            "# token          = 1*tchar",
            "        credentials = _creds",
            "    use_auth_token=auth,",
            "        signing_key = key",
            '_STREAM_TOKEN = "stream"',
            '        "master_key": "master",',
            'HUGGINGFACE_HEADER_X_XET_ACCESS_TOKEN = "X-Xet-Access-Token"',
            '    privateKey="server.pem",',
            '    reactor, "ssl:443:privateKey=key.pem:certKey=crt.pem")',
            'processorArchitecture="*" publicKeyToken="1fc8b3b9a1e18e3b"',
            "            now_token: The `next_batch` token of the response being built.",
            "            since_token: stream id to start from when fetching messages",
            "        sync_token = since or self.next_batch",
            "MLKEM768X25519PrivateKey = rust_openssl.hpke.MLKEM768X25519PrivateKey",
            '    pickle_key: str = "DEFAULT_KEY"',
            '_token = "[a-zA-Z0-9-!#$%&\'*+.^_`|~]+"',
            'ACCESS_TOKEN_RE = re.compile(r"(\\?.*access(_|%5[Ff])token=)[^&]*(.*)$")',
            'CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"',
            '    app = create_app({"TESTING": True, "SECRET_KEY": "test"})',
            "npub1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5 is my public key",
            "SORT_KEY=created_at, PRIMARY_KEY=id",
            "X-Auth-Key: ${CF_API_KEY}",
            "OPENAI_API_KEY=sk-...your-key...",
            "tokens.map(token => token.trim())",
            'openai.api_key = "YOUR_API_KEY"',
            "TOKEN = 'INSERT_BOT_TOKEN_HERE'",
            "Token: ghp_••••••••••••••••••••••••••••••••••••",
            "as_token: <generated>\nhs_token: CHANGE_ME",
            "STRIPE_KEY=sk_test_<your key here>",
            'turn_shared_secret: "REDACTED"\nregistration_shared_secret: "[redacted]"',
            "auth:\n  existingSecret: redis-auth\n  existingSecretPasswordKey: redis-password",
            "M_UNKNOWN_TOKEN: Access token has expired, soft_logout: true",
        ),
    ),
    SecretPattern(
        "sql_password",
        _rx(r"(?:identified[ \t]+by|password)(?:[ \t]*=[ \t]*|[ \t]+)'(?P<secret>(?:[^'\n]|'')+)'"),
        "SQL: IDENTIFIED BY 'pw', CREATE ROLE ... PASSWORD 'pw', WITH PASSWORD = 'pw'",
        ("identified", "password"),
        folded=True,
        starts_at_trigger=True,
        examples=(
            ("CREATE USER app IDENTIFIED BY 'appsecret2026';", "appsec" + "ret2026"),
            (
                "Traceback (most recent call last):\n  File \"deploy.py\", line 41, in <module>\n    main()\nRuntimeError: auth failed with CREATE USER 'app'@'%' IDENTIFIED BY 'Csft^IW29.!_ki6';",
                "Csft^IW29.!_ki6",
            ),
        ),
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
        examples=(
            (
                "here's what I have:\n```\n<datasource>\n  <user>app</user>\n  <password>FmUbxJC5cm1</password>\n</datasource>\n```",
                "FmUbxJC5cm1",
            ),
        ),
    ),
    SecretPattern(
        "netrc",
        _rx(r"(?:login|machine[ \t]+\S+)[ \t\r\n]+(?:\S+[ \t\r\n]+)?password[ \t]+(?P<secret>\S+)"),
        ".netrc entries: machine host login user password pw, on one line or several",
        ("password",),
        _not_plain_word,
        examples=(
            (
                "¿alguien sabe por qué no conecta? tengo esto:\n\nmachine api.heroku.com\n  login me@example.com\n  password A+3N%OIqdJC14ktz9",
                "A+3N%OIqdJC14ktz9",
            ),
        ),
    ),
    SecretPattern(
        "pgpass",
        _rx(r"(?m):(?<=[A-Za-z0-9_.*-]:)(?:\d{1,5}|\*):[A-Za-z0-9_*-]+:[A-Za-z0-9_*.-]+:(?P<secret>\S{4,})$"),
        ".pgpass lines: host:port:db:user:password (the host alone on the line before the first colon)",
        (":",),
        _pgpass_host,
        examples=(("ok so I ran\n    db.internal:5432:app:appuser:EJBTGkO7-eX2\nand got 401", "EJBTGkO7-eX2"),),
        lookalikes=(
            "menu: file, p: print",
            "root:x:0:0:root:/root:/bin/bash",
            "the combination of both settings: 2 / 3",
        ),
    ),
    SecretPattern(
        "docker_auth",
        _rx(r"\"(?:auth|identitytoken)\"[ \t]*:[ \t]*\"(?P<secret>[A-Za-z0-9+/=._-]{12,})\""),
        'docker config.json "auth" (base64 user:password) and identity tokens',
        ("auth", "identitytoken"),
        examples=(
            (
                'Traceback (most recent call last):\n  File "deploy.py", line 41, in <module>\n    main()\nRuntimeError: auth failed with {"auths": {"registry.example.com": {"auth": "Ym9iOkwuczRYV2'
                + 'wyTFl5WXBaPTM="}}}',
                "Ym9iOkwuczRYV2" + "wyTFl5WXBaPTM=",
            ),
        ),
    ),
)
