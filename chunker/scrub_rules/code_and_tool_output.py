"""Scrubber rows: credentials in code, configuration and tool output.

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
    _TOKEN_CHARS,
    _UUID,
    SecretPattern,
    _bare_userinfo,
    _decodes_to_user_password,
    _env_default,
    _not_placeholder,
    _prefixed,
    _quoted_not_placeholder,
    _rx,
    _sasl_host,
    _shaped_or_diceware,
    refine_password_shaped,
    refine_secret_shaped,
)

ROWS: tuple[SecretPattern, ...] = (
    # -- code, config and tool output ---------------------------------------------------------------
    SecretPattern(
        "code_password",
        _rx(
            r"define\([ \t]*[\"'](?:[A-Z0-9_]*(?:PASSWORD|PASSWD|PASS|PWD|SECRET|TOKEN)|(?:SECURE_)?AUTH_(?:KEY|SALT)"
            r"|LOGGED_IN_(?:KEY|SALT)|NONCE_(?:KEY|SALT)|[A-Z0-9_]*API_KEY)[\"'][ \t]*,[ \t]*"
            r"(?:\"(?P<secret>[^\"\n]+)\"|'(?P<secret_sq>[^'\n]+)')"
        ),
        "PHP define('DB_PASSWORD', 'pw') and WordPress's keys and salts ('put your unique phrase here' stays)",
        ("define",),
        _quoted_not_placeholder,
        examples=(
            ("define( 'DB_PASSWORD', 'Tz4#BSTXbR09gGrs' );", "Tz4#BSTXbR09gGrs"),
            (
                "define('AUTH_KEY', '%ys_O|&wzC)ZbzC)vND/yTyEpb26/Bz|G=s?UcwU');",
                "%ys_O|&wzC)ZbzC)vND/yTyEpb26/Bz|G=s?UcwU",
            ),
        ),
        lookalikes=(
            "define('NONCE_KEY', 'put your unique phrase here');",
            "define('WP_DEBUG', true);",
        ),
    ),
    SecretPattern(
        "code_password",
        _rx(
            r"(?:\.login|getconnection|networkcredential|new[ \t]+pdo|basicauthentication|usernamepasswordcredentials"
            r"|passwordauthentication|plaincredentials|credentials)[ \t]*\([^()\n]{0,200}?[\"'][^\"'\n]*[\"'][ \t]*,[ \t]*"
            r"[\"'](?P<secret>[^\"'\n]+)[\"'][ \t]*\)"
        ),
        "a password as the last string argument after a user: s.login('u', 'pw'), DriverManager.getConnection(url,"
        " 'u', 'pw'), new PDO(dsn, 'u', 'pw'), new NetworkCredential('u', 'pw')",
        ("login", "getconnection", "networkcredential", "pdo", "credential", "passwordauthentication"),
        _not_placeholder,
        folded=True,
        examples=(
            ('    s.login("alerts.homelab@gmail.com", "ehml gdgo xcgd zvpz")', "ehml gdgo xcgd zvpz"),
            (
                'c = DriverManager.getConnection("jdbc:postgresql://localhost/app", "app", "j4vauNiH1KjRzO");',
                "j4vauNiH1KjRzO",
            ),
            (
                "$pdo = new PDO('mysql:host=localhost;dbname=forum', 'forum', 'f0rum_AI1vaq7o0C');",
                "f0rum_AI" + "1vaq7o0C",
            ),
            ('Credentials = new NetworkCredential("reports@contoso.com", "O365cFWGz4XsKN!"),', "O365cFWGz4XsKN!"),
        ),
    ),
    SecretPattern(
        "twilio_key",
        _rx(r"AC[0-9a-f]{32}[\"']?[ \t]*,[ \t]*[\"']?(?P<secret>[0-9a-f]{32})(?![0-9a-f])"),
        "a Twilio auth token beside its account SID: Client('AC…', '<32 hex>')",
        ("ac",),
        not_after=_ALNUM,
        examples=(
            (
                'client = Client("AC' + "af4b0c7bd584783e6c149c21910e8cd7" + '", "6f54c8f5042b1a8a59a23411cae0fcab")',
                "6f54c8f5042b1a8a" + "59a23411cae0fcab",
            ),
        ),
    ),
    SecretPattern(
        "code_password",
        _rx(
            r"variable[ \t]+\"[\w-]*(?:password|passwd|secret|token|api_key|apikey|private_key|access_key)\"[ \t]*\{"
            r"[^{}]{0,400}?\bdefault[ \t]*=[ \t]*\"(?P<secret>[^\"\n]+)\""
        ),
        "a Terraform variable named for a credential with a literal default",
        ("variable",),
        _not_placeholder,
        folded=True,
        examples=(
            (
                'variable "db_password" {\n  type = string\n  default   = "Tf-2QdH0U67LzLMgC!9"\n}',
                "Tf-2QdH0" + "U67LzLMgC!9",
            ),
        ),
    ),
    SecretPattern(
        "password",
        _rx(
            r"(?:setenv|env|set[ \t]+-[gxU]+|passenv)[ \t]+(?P<kw>[A-Za-z0-9_]*(?:PASSWORD|PASSWD|PASS|PWD|SECRET|TOKEN|API_KEY|APIKEY))"
            r"[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`=]+)",
            re.IGNORECASE,
        ),
        'SetEnv DB_PASS "pw" (Apache), ENV DB_PASSWORD pw (Dockerfile, space form), set -x TOKEN v (fish)',
        ("setenv", "env ", "set -", "passenv"),
        _not_placeholder,
        examples=(
            ('    SetEnv WIKI_DB_PASS "wikipass2026"', '"wikipass2026"'),
            ('    SetEnv WIKI_DB_PASS "ap4che-Wiki-My3Wp9"', '"ap4che-Wi' + 'ki-My3Wp9"'),
        ),
    ),
    SecretPattern(
        "code_password",
        _rx(r"convertto-securestring[ \t]+(?:-string[ \t]+)?(?P<secret>\"[^\"\n$]+\"|'[^'\n]+')"),
        'PowerShell ConvertTo-SecureString "pw" -AsPlainText',
        ("convertto-securestring",),
        folded=True,
        examples=(('$secpw = ConvertTo-SecureString "Bkup!PYukjolz8C2" -AsPlainText -Force', '"Bkup!PYukjolz8C2"'),),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"(?m)^[ \t]*user[ \t]+[^\s]+[ \t]*\r?\n(?:[^\n]*\r?\n){0,2}?[ \t]*pass[ \t]+(?P<secret>[^\s]+)"),
        "a POP3 or FTP session pasted: USER name, then PASS pw",
        ("pass ",),
        _not_placeholder,
        folded=True,
        examples=(
            ("USER jens\n+OK\nPASS jens2026pop\n-ERR [AUTH] Authentication failed.", "jens2026pop"),
            ("USER jens\n+OK\nPASS jensesNtc9!\n-ERR [AUTH] Authentication failed.", "jensesNtc9!"),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"(?:ro|rw)community6?[ \t]+(?P<secret>(?!public\b)[^\s]+)"),
        "snmpd.conf rocommunity/rwcommunity (public stays)",
        ("community",),
        folded=True,
        examples=(("agentAddress udp:161\nrocommunity n0cR34dqe4kp 10.0.0.0/24", "n0cR34dqe4kp"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(r":[ \t]*(?:psk|xauth|eap)[ \t]+(?P<secret>\"[^\"\n]+\"|[^\s\"]+)"),
        'ipsec.secrets: <ids> : PSK "secret"',
        ("psk", "xauth", "eap"),
        folded=True,
        examples=(
            (
                '203.0.113.10 198.51.100.7 : PSK "2N6edeiqho/vb7cDAcv0mTh/+kite3ks"',
                '"2N6edeiqho/vb7cD' + 'Acv0mTh/+kite3ks"',
            ),
        ),
    ),
    SecretPattern(
        "secret",
        _rx(r"secret[ _]?id[ \t]*[:=][ \t]*(?P<secret>" + _UUID + r")"),
        "Consul and Nomad ACL tokens as their CLIs print them (SecretID: <uuid>; the AccessorID stays)",
        ("secretid", "secret id", "secret_id"),
        folded=True,
        examples=(
            ("SecretID:         a4bbecaf-2f64-4592-9976-ddaa814f9623", "a4bbecaf-2f64-4592" + "-9976-ddaa814f9623"),
        ),
    ),
    SecretPattern(
        "vault_token",
        _rx(
            r"s\.(?=[A-Za-z0-9]{24}(?![A-Za-z0-9]))(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[A-Z])(?=[A-Za-z0-9]*[a-z])[A-Za-z0-9]{24}"
        ),
        "HashiCorp Vault's older service tokens: s. and 24 letters and digits mixing cases",
        ("s.",),
        not_after=_TOKEN_CHARS + ".",
        examples=(("hm, " + "s." + "yfshC0aCwtzZgw9rYohHu7TA expired yesterday", "s.yfshC0aCwtzZ" + "gw9rYohHu7TA"),),
    ),
    _prefixed(
        "sonarqube_token",
        ("sqp_", "squ_", "sqa_"),
        "SonarQube project, user and analysis tokens",
        body=r"[a-f0-9]{40}",
        examples=(
            (
                "-Dsonar.login=" + "sqp_" + "bc7dfdfec6c168666f3bb30f5b0020ef383a0243",
                "sqp_bc7dfdfec6c168666f" + "3bb30f5b0020ef383a0243",
            ),
        ),
    ),
    _prefixed(
        "lightning_macaroon",
        ("0201036c6e64",),
        "LND macaroons in hex (0201036c6e64 is the header of every lnd macaroon)",
        body=r"[0-9a-f]{60,}",
        examples=(
            (
                (
                    "xxd -p admin.macaroon:\n"
                    + "0201036c6e64"
                    + "02f801696b57e64cfb8b25813ab2532e46c69c692e7d4f8cfea9e6797b00e18d76"
                ),
                "0201036c6e6402f801696b57e64cfb8b25813ab" + "2532e46c69c692e7d4f8cfea9e6797b00e18d76",
            ),
        ),
    ),
    SecretPattern(
        "ghost_admin_key",
        _rx(r":(?<=[0-9a-f]{24}:)(?P<secret>[0-9a-f]{64})(?![0-9a-f])"),
        "Ghost Admin API keys (<24-hex id>:<64-hex secret>): the secret goes, the id stays",
        (":",),
        examples=(
            (
                "ghost integration f4d3519e26b7a1b029d18b38:" + "0c93f3de6a4c6526" * 4,
                "0c93f3de6a4c65260c93f3de6a4c6526" + "0c93f3de6a4c65260c93f3de6a4c6526",
            ),
        ),
    ),
    SecretPattern(
        "secret",
        _rx(
            r"master\.key\b(?:[^\n]{0,20}?(?:is|:|=)[ \t]*|[^\n]{0,40}\r?\n[ \t]*)"
            r"(?P<secret>[0-9a-f]{32})(?![0-9a-f])"
        ),
        "a Rails master key printed under its file name (cat config/master.key) or told after it"
        " (config/master.key content is …)",
        ("master.key",),
        examples=(
            (
                "RAILS master.key (for staging)\n5017f0c720bf231ceffb4b23ae8fc13d",
                "5017f0c720bf231c" + "effb4b23ae8fc13d",
            ),
            ("config/master.key content is dd526d945c225591a237dc74b10953b6", "dd526d945c225591" + "a237dc74b10953b6"),
        ),
    ),
    SecretPattern(
        "password",
        _rx(r"password[ \t]+for[ \t]+the[ \t]+[\w-]+[ \t]+user\b[^\n]{0,100}:[ \t]*\r?\n[ \t]*(?P<secret>[^\s]{8,})"),
        "a generated password printed on the next line (Elasticsearch's first start: 'Password for the elastic user ...:')",
        ("password for the",),
        folded=True,
        examples=(
            (
                "Password for the elastic user (reset with `bin/elasticsearch-reset-password -u elastic`):\n  0fC18A8R*X5lOnt_V5mBN",
                "0fC18A8R*X5lOnt_V5mBN",
            ),
        ),
    ),
    SecretPattern(
        "password",
        _rx(
            r"(?P<kw>password|passwd|pass|pwd|secret|token|api_?key)[\"'`]?[ \t]*"
            r"(?:,[ \t]*[\"'](?P<secret>[^\"'\n$]{4,})[\"'][ \t]*\)"  # getenv("X", "pw")
            r"|\)?[ \t]*(?:\|\||\?\?|\bor\b|\.unwrap_or(?:_else)?\([^\"'\n]{0,20}?)[ \t]*[\"'](?P<secret_o>[^\"'\n$]{4,})[\"']"
            r"|:-(?P<secret_s>[^}\s$]{4,})\})"  # ${PASSWORD:-pw}
        ),
        "a credential's default where code reads it from the environment: getenv('DB_PASSWORD', 'pw'),"
        ' env::var("DB_PASSWORD").unwrap_or("pw"), process.env.TOKEN || \'x\', ${PASSWORD:-pw}',
        ("password", "passwd", "pass", "pwd", "secret", "token", "api_key", "apikey"),
        _env_default,
        folded=True,
        starts_at_trigger=True,
        examples=(
            (
                'let pw = std::env::var("DB_PASSWORD").unwrap_or_else(|_| "r0ckyRXVrxGxOI%".to_string());',
                "r0ckyRXVrxGxOI%",
            ),
            ('pw = os.getenv("DB_PASSWORD", "Gh7-pY2qLmX9")', "Gh7-pY2qLmX9"),
            ("image: postgres\n    command: ${POSTGRES_PASSWORD:-Pg9xQ2mLw7}", "Pg9xQ2mLw7"),
        ),
        lookalikes=(
            '    # (e.g. "a/../../etc/passwd" or "a/../file.txt") is not caught by a prefix check',
            "No 'registration_shared_secret' or 'registration_shared_secret_path' defined in config.",
            "__all__ = ('Context', 'ContextVar', 'Token', 'copy_context')",
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"\](?::\d{1,5})?[ \t]+[^\s:@\[\]]+@[^\s:]+:(?P<secret>[^\s]+(?:[ ][a-z]{4}){0,3})"),
        "Postfix sasl_passwd: [smtp.host]:587 user@domain:pw",
        ("]",),
        _sasl_host,
        examples=(
            ("[smtp.fastmail.com]:587 relay@example.org:rhnuopkbcq1cqgso", "rhnuopkb" + "cq1cqgso"),
            ("[smtp.gmail.com]:587 clubnewsletter@gmail.com:ahcd shay ovjw tscw", "ahcd shay ovjw tscw"),
        ),
    ),
    SecretPattern(
        "prose_credentials",
        _rx(
            r"(?:admin|administrator|root|pi|ubuntu|guest|demo|postgres|sa|ubnt)"
            r"(?<![A-Za-z0-9_./@-]admin)(?<![A-Za-z0-9_./@-]administrator)(?<![A-Za-z0-9_./@-]root)"
            r"(?<![A-Za-z0-9_./@-]pi)(?<![A-Za-z0-9_./@-]ubuntu)(?<![A-Za-z0-9_./@-]guest)(?<![A-Za-z0-9_./@-]demo)"
            r"(?<![A-Za-z0-9_./@-]postgres)(?<![A-Za-z0-9_./@-]sa)(?<![A-Za-z0-9_./@-]ubnt)"
            r"[ \t]*:(?P<secret>[^\s:@/\"'`]++)(?![:@/\w])"  # possessive: root:pw@host is the url row's
        ),
        "a well-known account with its password, no host (admin:admin123kyocera works): the password shaped like one",
        ("admin:", "administrator:", "root:", "pi:", "ubuntu:", "guest:", "demo:", "postgres:", "sa:", "ubnt:"),
        refine_password_shaped,
        examples=(("admin:admin123kyocera works for the printer web ui", "admin123kyocera"),),
        lookalikes=("admin:admin works? no, admin: see the wiki",),
    ),
    SecretPattern(
        "prose_password",
        _rx(r"log(?:ging)?[ \t]*in[ \t]+with[ \t]+[\"'`]?(?P<secret>[^\s\"'`=?&]+)(?![ \t]*[/:])(?![^\s]*=)"),
        "a password given to log in with (try logging in with Summer2026!, or cinder-oyster-fable-violet),"
        " when shaped like one; 'login with google' stays, and 'login with user / pw' is the row above",
        ("log in with", "login with", "logging in with"),
        _shaped_or_diceware,
        not_after=_ALNUM,
        folded=True,
        examples=(
            ("try logging in with Summer2026!", "Summer2026!"),
            (
                "Can someone try logging in with cinder-oyster-fable-violet? it says invalid",
                "cinder-oyster" + "-fable-violet",
            ),
        ),
        lookalikes=("login with google, or log in with github",),
    ),
    SecretPattern(
        "door_code",
        _rx(
            r"(?:(?:door|gate|lock|alarm|entry|safe|locker|garage|keypad|building|lockbox)[ \t]+(?:code|combo|combination)"
            r"|keypad|combo|combination|padlock"
            r"|code[ \t]+(?:for|to|of|on)[ \t]+(?:the[ \t]+)?(?:[^\s]+[ \t]+)?(?:lock|padlock|door|gate|alarm|safe|locker|garage)"
            r"|koden[ \t]+til[ \t]+\S+"
            r"|(?:t[üu]rcode|zugangscode|torcode)(?:[ \t]+(?:für|fürs|zum|zur|vom)(?:[ \t]+\S+){1,3}?)?[ \t]+(?:lautet|ist)"
            r"|codice(?:[ \t]+(?:del|della|dello|di)[ \t]+\S+)?[ \t]+(?:è|e)"
            r"|code[ \t]+(?:de[ \t]+la[ \t]+porte|d['’]entrée|du[ \t]+portail|de[ \t]+l['’]immeuble))"
            r"(?:[ \t]+(?:for|to|of|on|at)(?:[ \t]+[^\s]+){1,6}?[ \t]*(?=is|was|changed|=|:))?"
            r"[ \t]*(?:is|was|er|:|=|→|->|changed[ \t]+to)?[ \t]*"
            r"(?P<secret>\d{1,3}(?:-\d{1,3}){2,3}|\d{3,8}#?)(?![0-9])"
        ),
        "a door, gate, alarm or lockbox code, a keypad's code or a lock's combination told after its label"
        " (door code: 4829, garage keypad 21182, locker combo is 39-38-29)",
        (
            "keypad",
            "combo",
            "combination",
            "padlock",
            "code for",
            "code to",
            "code of",
            "code on",
            "koden til",
            "türcode",
            "turcode",
            "zugangscode",
            "torcode",
            "codice",
            "code de la porte",
            "code d'entrée",
            "code du portail",
        )
        + tuple(
            f"{what} code"
            for what in (
                "door",
                "gate",
                "lock",
                "alarm",
                "entry",
                "safe",
                "locker",
                "garage",
                "keypad",
                "building",
                "lockbox",
            )
        ),
        not_after=_ALNUM,
        folded=True,
        examples=(
            ("my locker combo is 39-38-29 if you need the soldering station", "39-38-29"),
            ("garage keypad 21182 then the up arrow", "21182"),
            ("the code for the bike lock is 7388", "7388"),
            ("il codice del portone è 80368 🔑", "80368"),
        ),
        lookalikes=("the code for the bike lock is on the fridge",),
    ),
    SecretPattern(
        "prose_secret",
        _rx(
            r"(?:api|access|secret|private|license|app|privilege|master|admin|product|activation|registration|serial)"
            r"[ \t]+key[ \t]*:[ \t]*[\"'`]?(?P<secret>[^\s\"'`]+)"
        ),
        "a key after a spaced label and a colon (my api key: 4f8e…, the TeamSpeak privilege key: …), when shaped like one",
        (
            "api key",
            "access key",
            "secret key",
            "private key",
            "license key",
            "app key",
            "privilege key",
            "master key",
            "admin key",
            "product key",
            "activation key",
            "registration key",
            "serial key",
        ),
        refine_secret_shaped,
        not_after=_ALNUM,
        folded=True,
        examples=(
            ("here's my api key: 4f8e2a1c9b7d3e5f6a0b", "4f8e2a1c9b" + "7d3e5f6a0b"),
            (
                "teamspeak server admin privilege key: z4TwBH3jYBkMcthkHxOZkLBvS1HJ0AradOVbNe9U",
                "z4TwBH3jYBkMcthkHxOZ" + "kLBvS1HJ0AradOVbNe9U",
            ),
        ),
        lookalikes=("the private key: ask Anna, it is in the vault",),
    ),
    SecretPattern(
        "url_password",
        _rx(
            r":(?P<secret>[^\s@:/\"'`]{6,64})@"
            r"(?=(?:[0-9]{1,3}\.){3}[0-9]{1,3}\b|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|(?:tcp|unix)\()"  # Go's user:pw@tcp(host)
        ),
        "user:password@host without a scheme (root:S3cret!@10.0.0.5, an ssh or rsync target):"
        " the colon first, the user checked behind it; the password shaped like one",
        (":",),
        _bare_userinfo,
        examples=(
            ("ssh root:Summer2026!@192.168.1.10", "Summer2026!"),
            ('db, err := sql.Open("mysql", "gitea:G1teaQ9xuSq44M@tcp(127.0.0.1:3306)/gitea")', "G1teaQ9xuSq44M"),
        ),
    ),
    # After the Authorization row: inside a header that row names it.
    SecretPattern(
        "basic_credentials",
        _rx(r"Basic[ \t]+(?P<secret>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])"),
        "Basic user:password in base64 outside an Authorization header (it must decode to user:password)",
        ("basic",),
        _decodes_to_user_password,
        not_after=_TOKEN_CHARS,
        examples=(
            (
                "проверьте пожалуйста, что не так:\ncurl with Basic YWRtaW46Qi0qTmJF" + "RVVYZV9POHlrbDA= works",
                "YWRtaW46Qi0qTmJF" + "RVVYZV9POHlrbDA=",
            ),
        ),
    ),
)
