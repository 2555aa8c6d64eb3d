"""Scrubber rows: passwords given on command lines, a row per tool.

Owns: ``ROWS``, this family's rows in the order the engine runs them, each with its evidence
(``examples``: texts it must remove and the exact span; ``lookalikes``: texts it must leave).
Adding a rule of this family is one row here, with its evidence.

Must not: do I/O or keep any text; reorder rows without checking the scrubber's output is unchanged
(the engine merges overlapping spans under the kind of the row that runs first).
"""

from __future__ import annotations

from chunker.scrub_rules.common import _ALNUM, SecretPattern, _htpasswd_password, _not_placeholder, _not_plain_word, _rx

ROWS: tuple[SecretPattern, ...] = (
    # Command lines, a row per tool: each regex opens with its tool's name, a literal the engine
    # searches fast, and in a long paste it is searched only on the lines naming that tool (one row
    # of alternatives opening with different letters cost ~1.3 ms per 60 KB, searched whole).
    SecretPattern(
        "cli_password",
        _rx(r"(?:curl|wget)\b[^\n]{0,300}?[ \t](?:-u|--user)[ \t=]+[\"']?[^\s:\"']*:(?P<secret>[^\s\"']+)"),
        "curl -u user:pw, wget --user user:pw ($VAR and <password> stay)",
        ("curl", "wget"),
        _not_placeholder,
        examples=(
            (
                "> can you paste your config?\n\nsure:\n```yaml\ncurl -s -X POST --user 'deploy:C0gfItFawa2' https://ci.example.com/job/x/build\n```",
                "C0gfItFawa2",
            ),
        ),
        lookalikes=("curl -u <username>:<password> https://api.example.com/v1/status",),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"m(?:ysql|ysqldump|ariadb|ysqladmin)\b[^\n]{0,300}?[ \t]-p(?P<secret>[^\s\"'`]+|\"[^\"\n]+\"|'[^'\n]+')"),
        "mysql -ppw (mysql -p alone prompts; -p$MYSQL_PWD stays)",
        ("mysql", "mariadb"),
        _not_placeholder,
        examples=(("這個設定哪裡錯了？\nmysql -u root -pJU8Aq6dGh-C0 -h 127.0.0.1 shop", "JU8Aq6dGh-C0"),),
        lookalikes=("mysql -u root -p$MYSQL_ROOT_PASSWORD -e 'show databases'",),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"(?:7z|7za|7zz|7zr|rar|unrar)\b[^\n]{0,300}?[ \t]-p(?P<secret>[^\s\"'`]+|\"[^\"\n]+\"|'[^'\n]+')"
            r"|(?:zip|unzip|zipcloak)\b[^\n]{0,300}?[ \t]-P[ \t]+(?P<secret_z>[^\s\"'`]+|\"[^\"\n]+\"|'[^'\n]+')"
        ),
        "7z/rar -ppw, zip/unzip -P pw: an archive's password on the command line (7z -p alone prompts)",
        ("7z", "rar", "zip"),
        _not_placeholder,
        not_after=_ALNUM + "._-/",
        examples=(
            ("7z x backup.7z -p'Gr4n1te!Moss' then the dump is inside", "'Gr4n1te!Moss'"),
            ("unzip -P hunter2x minutes.zip", "hunter2x"),
        ),
        lookalikes=("7z x backup_2024-03.7z -p", "zip -r site.zip public/"),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"sshpass[ \t]+-p[ \t]*(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|[^\s\"']+)"),
        "sshpass -p pw",
        ("sshpass",),
        _not_placeholder,
        examples=(("sshpass -p 'X5M=q_SYrLW1' ssh deploy@10.0.0.5", "'X5M=q_SYrLW1'"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"redis-cli\b[^\n]{0,300}?[ \t]-a[ \t]+(?P<secret>[^\s]+)"),
        "redis-cli -a pw",
        ("redis-cli",),
        _not_placeholder,
        examples=(
            (
                "Kann mir jemand helfen? Das ist meine Konfiguration:\nredis-cli -h cache -a MWWkc6-ub^bF*P4 ping\nDanke!",
                "MWWkc6-ub^bF*P4",
            ),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"--(?:[a-z]+-)?(?:password|passwd|passphrase|pass|token|authtoken|cookie|api-key|secret|account-key"
            r"|access-key|secret-key|auth-token|(?:[a-z0-9]+-)+key)[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])"
            r"(?!(?:via|on|in|is|to|the|and|or|for|from|with|will|can|flag|option|file|stdin|prompt)\b)[^\s\"']+)"
        ),
        "--password pw, --account-key k (the --password=pw form is an assignment; docker's own warning"
        " 'Using --password via the CLI is insecure' stays)",
        ("--",),
        _not_placeholder,
        examples=(
            ("rclone sync /srv/media b2:backup --b2-account 0012f3a4b5c6 --b2-key 'galaxy3Lemon'", "'galaxy3Lemon'"),
        ),
        lookalikes=("cargo build --release on the ci box",),
    ),
    # More command lines, a row per tool: each regex opens with its tool's name, a literal the
    # engine searches fast (one row of alternatives opening with different letters cost ~2 ms
    # per 60 KB), and runs only when that name occurs.
    SecretPattern(
        "cli_password",
        _rx(
            r"ldap(?:search|add|modify|delete|passwd|whoami|compare|modrdn|exop|url)\b[^\n]{0,300}?[ \t]-w[ \t]*"
            r"(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|[^\s\"']+)"
        ),
        "ldapsearch/ldapmodify/... -w pw (-W prompts and has no value)",
        ("ldap",),
        examples=(("ldapsearch -x -D cn=admin,dc=example,dc=org -w S3cr3tPassw0rd -b dc=example", "S3cr3tPassw0rd"),),
        lookalikes=("ldapsearch -x -W -D cn=admin,dc=example,dc=org",),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"smbclient\b[^\n]{0,300}?[ \t](?:-U|--user)[ \t=]*[\"']?[^\s%\"']+%(?P<secret>[^\s\"']+)"),
        "smbclient -U user%pw",
        ("smbclient",),
        examples=(("smbclient //nas/backup -U backup%S3cr3tPassw0rd", "S3cr3tPassw0rd"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"(?:mongo(?:sh|dump|restore|export|import)?|mosquitto_(?:pub|sub))\b[^\n]{0,300}?[ \t]-[pP][ \t]+"
            r"(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"']+)"
        ),
        "mongo/mongosh/mongodump/... and mosquitto_pub/sub -p pw",
        ("mongo", "mosquitto"),
        examples=(
            ("ok so I ran\n    mongosh 'mongodb://db:27017' -u root -p IZmNzotr3yPOr7\nand got 401", "IZmNzotr3yPOr7"),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"sqlcmd\b[^\n]{0,300}?[ \t]-P[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"']+)"),
        "sqlcmd -P pw",
        ("sqlcmd",),
        examples=(
            ("¿alguien sabe por qué no conecta? tengo esto:\n\nsqlcmd -S db -U sa -P M1Qf8dz9jVQ3", "M1Qf8dz9jVQ3"),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"cqlsh\b[^\n]{0,300}?[ \t]-p[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`]+)"),
        "cqlsh -p pw (Cassandra)",
        ("cqlsh",),
        examples=(("cqlsh -u cassandra -p 'cQl$h3ll' 10.1.1.5", "'cQl$h3ll'"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"influx\b[^\n]{0,300}?[ \t]-t[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`]+)"),
        "influx -t token (InfluxDB's CLI; --token is the -- row)",
        ("influx",),
        examples=(
            (
                "influx config create -n prod -o acme -t influxT0ken_FFXQtiObF2oconHMcIknKlj9GUqA7Vt6k==",
                "influxT0ken_FFXQtiObF2o" + "conHMcIknKlj9GUqA7Vt6k==",
            ),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"cargo[ \t]+login[ \t]+(?:--registry[ \t=]+\S+[ \t]+)?(?P<secret>(?![-$<])[A-Za-z0-9_]{20,})"),
        "cargo login <token>",
        ("cargo",),
        examples=(
            ("cargo login cio0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6", "cio0a1b2c3d4e5f6a7" + "b8c9d0e1f2a3b4c5d6"),
            ("cargo login " + "k7Hd9sLq2ZxV8bNm4TpR6wYc", "k7Hd9sLq2ZxV" + "8bNm4TpR6wYc"),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"(?:xfreerdp|wlfreerdp|sdl-freerdp|rdesktop)\b[^\n]{0,300}?[ \t](?:/p:|-p[ \t]+)"
            r"(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`]+)"
        ),
        "xfreerdp /p:pw, rdesktop -p pw",
        ("freerdp", "rdesktop"),
        examples=(
            ("xfreerdp /v:10.0.0.20 /u:Administrator /p:rdpUser!9 /cert:ignore", "rdpUser!9"),
            ("rdesktop -u admin -p Rdp-Pa55-2026 10.0.0.5", "Rdp-Pa55-2026"),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"rclone[ \t]+obscure[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`]+)"),
        "rclone obscure pw (obscuring is reversible: the argument is the password)",
        ("rclone",),
        examples=(("rclone obscure 'rclonePw_33'", "'rclonePw_33'"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"openssl[ \t]+passwd\b(?:[ \t]+-(?:salt[ \t]+\S+|\S+))*[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<(])[^\s\"'`)]+)"
        ),
        "openssl passwd [-1|-6|-salt s] pw: the plaintext a hash is made of",
        ("openssl",),
        examples=(("useradd -m -p $(openssl passwd -1 'userAdd!Pw') tempuser", "'userAdd!Pw'"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"-(?<=[ \t]-)(?:pass(?:in|out)?|kpass)[ \t]+pass:(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|[^\s\"'`]+)"),
        "openssl -pass/-passin/-passout pass:pw (env: and file: name where it is, and stay)",
        ("pass:",),
        examples=(("openssl enc -aes256 -pass pass:Sup3rS3cret -in x", "Sup3rS3cret -in x"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"-(?<=[ \t]-)(?:(?:src|dest|new)?(?:store|key)pass|passwd|password|passphrase)(?::plain)?[ \t]+"
            r"(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`]+)"
        ),
        "single-dash password flags: keytool -storepass/-keypass, x11vnc -passwd, -password pw"
        " (-storepass:env VAR names a variable and stays)",
        ("pass", "passwd", "password", "passphrase"),
        examples=(
            ("keytool -importcert -keystore t.jks -storepass keystorePass1 -file ca.crt", "keystorePass1"),
            ("x11vnc -passwd vncSecret -display :0", "vncSecret"),
        ),
        lookalikes=(
            "you can't pass *mut/*const between threads",
            "SetEnv WIKI_DB_PASS ${WIKI_DB_PASS}",
            "forgot my password, the reset mail never arrives",
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"echo[ \t]+(?:-[ne]+[ \t]+)?(?P<secret>\"[^\"\n$]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`|>]+)[ \t]*\|[ \t]*"
            r"(?:sudo[ \t]+(?:-[A-Za-z]+[ \t]+)*-[A-Za-z]*S|passwd[ \t]+--stdin|\S*docker[ \t]+login\b)"
        ),
        "a password piped in: echo pw | sudo -S, | passwd --stdin, | docker login",
        ("sudo", "--stdin", "docker"),
        examples=(("echo 'myS00doPass' | sudo -S systemctl restart matrix-synapse", "'myS00doPass'"),),
        lookalikes=("echo $PW | sudo -S systemctl restart synapse",),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"echo[ \t]+(?:-[ne]+[ \t]+)?[\"']?[^\s:\"'|]+:(?P<secret>[^\s\"'|]+)[\"']?[ \t]*\|[ \t]*(?:sudo[ \t]+)?chpasswd\b"
        ),
        "echo user:pw | chpasswd",
        ("chpasswd",),
        examples=(("echo 'deploy:chpw99xyz' | chpasswd", "chpw99xyz"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"echo[ \t]+(?:-[ne]+[ \t]+)?(?P<secret>\"[^\"\n$]+\"|'[^'\n]+'|(?![-$<])[^\s\"'`|>]+)[ \t]*>>?[ \t]*"
            r"[^\s]*(?:pass|secret|token|key|cred)[^\s/]*(?![^\s;&|])"
        ),
        "a password written to a file named for one: echo pw > ~/.vault_pass (echo $VAR stays)",
        ("echo",),
        examples=(
            (
                "echo '7ekc9UT5cqzN2O9lmprSPrwnmWAtrBdC' > ~/.vault_pass && ansible-playbook site.yml",
                "'7ekc9UT5cqzN2O9l" + "mprSPrwnmWAtrBdC'",
            ),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"psexec\b[^\n]{0,300}?[ \t]-p[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`]+)"),
        "psexec -p pw",
        ("psexec",),
        examples=(("psexec \\\\10.1.1.20 -u Administrator -p Adm1no7iehOziI! cmd.exe", "Adm1no7iehOziI!"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"cmdkey\b[^\n]{0,300}?[ \t]/pass:(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`]+)"),
        "cmdkey /pass:pw (/pass alone prompts)",
        ("cmdkey",),
        examples=(("cmdkey /add:fs01 /user:CORP\\jdoe /pass:Winter2026!x", "Winter2026!x"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"net[ \t]+use[ \t]+(?:[A-Za-z]:[ \t]+|\*[ \t]+)?\\\\\S+[ \t]+(?P<secret>(?![/*])[^\s\"]+|\"[^\"\n]+\")"),
        "net use Z: \\\\server\\share pw /user:... (* prompts)",
        ("net use",),
        examples=(("net use Z: \\\\nas01\\media k0diMedia4i3kt /user:NAS01\\kodi", "k0diMedia4i3kt"),),
        lookalikes=(
            "net user bob * /domain",
            "net user bob /delete",
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"sqlplus[ \t]+(?:-\w+[ \t]+)*[\"']?[A-Za-z0-9_$#]+/(?P<secret>[^\s@/\"']+)"),
        "sqlplus user/pw[@db]",
        ("sqlplus",),
        examples=(("sqlplus system/OrclJScPQQgx_1@//oradb:1521/ORCLPDB1", "OrclJScPQQgx_1"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"murmurd\b[^\n]{0,300}?[ \t]-supw[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`]+)"),
        "murmurd -supw pw (the Mumble SuperUser password)",
        ("murmurd",),
        examples=(("murmurd -ini /etc/mumble-server.ini -supw mumbl3zlyvBL4w", "mumbl3zlyvBL4w"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"snmp(?:walk|get|getnext|bulkwalk|bulkget|set|table|trap|df|status|netstat)\b[^\n]{0,300}?[ \t]-c[ \t]*"
            r"(?P<secret>(?!public\b)[^\s\"']+)"
        ),
        "snmpwalk/snmpget/... -c community (public stays: it is the well-known default)",
        ("snmp",),
        examples=(("snmpwalk -v2c -c mikr0t1k_g8t0pm 192.168.88.1", "mikr0t1k_g8t0pm"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"(?:snmp\w*|net-snmp-config)\b[^\n]{0,300}?[ \t]-A[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`]+)"
        ),
        "SNMPv3 -A authpassphrase",
        ("snmp",),
        examples=(
            ("snmpget -v3 -u monitor -l authNoPriv -a SHA -A Sn3mpAuth!42 10.0.0.1 sysUpTime.0", "Sn3mpAuth!42"),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"(?:snmp\w*|net-snmp-config)\b[^\n]{0,300}?[ \t]-X[ \t]+(?P<secret>\"[^\"\n]+\"|'[^'\n]+'|(?![-$<%])[^\s\"'`]+)"
        ),
        "SNMPv3 -X privpassphrase",
        ("snmp",),
        examples=(
            (
                "net-snmp-config --create-snmpv3-user -ro -A auth3XkOhDlY62ry -X privpass99x -a SHA zabbix",
                "privpass99x",
            ),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"(?:etcdctl|mc|influx|nats|consul|nomad)\b[^\n]{0,300}?[ \t]--user[ \t=]+[\"']?[^\s:\"']+:(?P<secret>[^\s\"']+)"
        ),
        "etcdctl/nats/... --user user:pw",
        ("etcdctl", "nats", "--user"),
        examples=(
            (
                "etcdctl --endpoints=https://10.0.0.11:2379 --user root:etcdR00tL8UYpMHr member list",
                "etcdR00t" + "L8UYpMHr",
            ),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"(?:vault|bao)[ \t]+login[ \t]+(?:-\S+[ \t]+)*(?P<secret>(?![-$<])(?:hvs\.|s\.|b\.)?[A-Za-z0-9_.-]{20,})"),
        "vault login <token> (legacy s. tokens too)",
        ("vault", "bao"),
        examples=(("vault login " + "s." + "yfshC0aCwtzZgw9rYohHu7TA", "s.yfshC0aCwtzZ" + "gw9rYohHu7TA"),),
        lookalikes=("backup codes are in the vault",),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"snyk[ \t]+auth[ \t]+(?P<secret>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[A-Za-z0-9_-]{20,})"
        ),
        "snyk auth <token>",
        ("snyk",),
        examples=(("snyk auth f8e11705-e348-4d9f-a235-321a0b45adb1", "f8e11705-e348-4d9f" + "-a235-321a0b45adb1"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"curl\b[^\n]{0,300}?[ \t](?:-b|--cookie)[ \t]+[\"']?[^\s=;\"']+=(?P<secret>[^\s;\"']{16,})"),
        "curl -b 'session=<16+ characters>' (a session cookie on the command line)",
        ("curl",),
        examples=(
            (
                "curl -b 'PHPSESSID=nrqzm3st3g1cachnlic6m1fjni' https://panel.example.org/admin/users.php",
                "nrqzm3st3g1ca" + "chnlic6m1fjni",
            ),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"/(?:connect|server)[ \t]+(?:-\S+[ \t]+)*[A-Za-z0-9.-]+\.[A-Za-z]{2,}[ \t]+\+?\d{2,5}[ \t]+(?P<secret>[^\s]+)"
        ),
        "IRC /connect host port password (irssi, WeeChat)",
        ("/connect", "/server"),
        examples=(("/connect irc.example.net 6697 srvpass-fx58ps", "srvpass-fx58ps"),),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"net[ \t]+user[ \t]+(?:\"[^\"\n]+\"|[^\s/\"]+)[ \t]+(?P<secret>(?![/*])[^\s\"]+|\"[^\"\n]+\")"),
        "net user name pw [/add] (Windows; net user name * prompts)",
        ("net user",),
        examples=(
            ("net user kiosk kioskpass2026 /add", "kioskp" + "ass2026"),
            ("net user svc_backup Appl3Seed /add", "Appl3Seed"),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"htpasswd(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\"']+)){2,8}"),
        "htpasswd -b [-c|-B|-n...] [file] user pw: the last positional argument with -b (-n: no file)",
        ("htpasswd",),
        _htpasswd_password,
        examples=(
            ("htpasswd -b .htpasswd deploy deploypass77", "deploy" + "pass77"),
            ("htpasswd -b -c /etc/nginx/.htpasswd admin htpw-Admin-5", "htpw-Admin-5"),
            ("htpasswd -nb admin Ht9pass77", "Ht9pass77"),
        ),
        lookalikes=("htpasswd -c /etc/nginx/.htpasswd admin",),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"(?m)^[ \t]*(?:enable[ \t]+(?:secret|password)|username[ \t]+\S+(?:[ \t]+privilege[ \t]+\d+)?[ \t]+(?:secret|password))"
            r"(?:[ \t]+[0-9])?[ \t]+(?P<secret>[^\s]{2,})"
        ),
        "Cisco IOS: enable secret pw, username u [privilege n] secret|password pw (type 0 is plain;"
        " 5/7/8/9 are hashes or weak ciphers, and go too)",
        ("enable secret", "enable password", "username"),
        _not_plain_word,
        folded=True,
        examples=(
            ("enable secret CiscoEnable1", "CiscoE" + "nable1"),
            ("enable secret CiscoEnable1\nusername admin privilege 15 secret CiscoUser2", "CiscoUser2"),
        ),
        lookalikes=(
            '            raise Failure(Exception("username or password incorrect"))',
            "enable secret is set on every router",
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"(?:requirepass|masterauth)[ \t]+[\"']?(?P<secret>[^\s\"'`]+)"),
        "redis.conf requirepass/masterauth pw (CONFIG SET requirepass pw too)",
        ("requirepass", "masterauth"),
        _not_placeholder,
        folded=True,
        examples=(
            (
                "redis.conf has `requirepass zvb8GiJoagWVLGHzl2aNddoO2gb7PVaV` and still NOAUTH",
                "zvb8GiJoagWVLGHz" + "l2aNddoO2gb7PVaV",
            ),
            ("redis.conf: requirepass foobared", "foobared"),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"neo4j_auth[\"']?[ \t]*[=:][ \t]*[\"']?[^\s/\"']+/(?P<secret>[^\s\"']+)"),
        "NEO4J_AUTH=user/pw",
        ("neo4j_auth",),
        folded=True,
        examples=(("NEO4J_AUTH=neo4j/N30j!graph", "N30j!graph"),),
    ),
)
