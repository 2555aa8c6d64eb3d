"""Writes the scrubber corpus: credentials.jsonl and benign.jsonl beside this file.

Every credential value is fake, generated from the kind's public format with a fixed seed, so the
files are reproducible (``python tests/data/scrub/make_corpus.py`` rewrites them byte for byte).
The tests read the committed .jsonl files, not this script.

credentials.jsonl: {"kind", "text", "secrets"}; every string in "secrets" must leave no piece of
4+ characters in ``scrub(text)`` (tests/unit/test_scrub_corpus.py defines "piece").
benign.jsonl: {"kind", "text"}; ``scrub(text)`` must return ``text`` unchanged.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
R = random.Random(20261130)

ALNUM = string.ascii_letters + string.digits
UPPER_ALNUM = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"


def pick(alphabet: str, n: int) -> str:
    while True:
        value = "".join(R.choice(alphabet) for _ in range(n))
        # A fake value has a digit and a letter, like a real one (and unlike a word).
        if (
            any(c.isdigit() for c in value)
            and any(c.isalpha() for c in value)
            or not any(c.isalpha() for c in alphabet)
        ):
            return value


def alnum(n: int) -> str:
    return pick(ALNUM, n)


def hexs(n: int) -> str:
    return pick(HEX, n)


def b64(n: int) -> str:
    return pick(ALNUM, 2) + pick(B64, n - 2)


def b64url(n: int) -> str:
    return pick(ALNUM, 2) + pick(B64URL, n - 2)


def password() -> str:
    return R.choice(string.ascii_uppercase) + pick(ALNUM + "!%^*-_+=.", R.randint(9, 15)) + str(R.randint(0, 9))


def tricky_password() -> str:
    # Characters that cut the old rule short: & ) ] , ; } > and #
    return alnum(6) + R.choice("&)],;}>#") + alnum(5)


def pem(label: str, lines: int = 6) -> tuple[str, list[str]]:
    body = [b64(64) for _ in range(lines)] + [b64(40) + "=="]
    text = f"-----BEGIN {label}-----\n" + "\n".join(body) + f"\n-----END {label}-----"
    return text, body


# ---- chat contexts: where a credential gets pasted --------------------------------------------

WRAPPERS = [
    "{p}",
    "here's what I have:\n```\n{p}\n```",
    "why does this fail? 🤔\n{p}\nit worked yesterday",
    "[2026-11-30 10:02:11] DEBUG loaded settings\n[2026-11-30 10:02:11] DEBUG {p}\n[2026-11-30 10:02:12] ERROR connection refused",
    "Kann mir jemand helfen? Das ist meine Konfiguration:\n{p}\nDanke!",
    "¿alguien sabe por qué no conecta? tengo esto:\n\n{p}",
    "je comprends pas, ça marche pas avec ça :\n{p}",
    "проверьте пожалуйста, что не так:\n{p}",
    "這個設定哪裡錯了？\n{p}",
    'Traceback (most recent call last):\n  File "deploy.py", line 41, in <module>\n    main()\nRuntimeError: auth failed with {p}',
    "> can you paste your config?\n\nsure:\n```yaml\n{p}\n```",
    "ok so I ran\n    {p}\nand got 401",
]

CREDENTIALS: list[dict] = []
KINDS: dict[str, int] = {}


def add(kind: str, payloads: list[tuple[str, list[str]]]) -> None:
    for i, (payload, secrets) in enumerate(payloads):
        wrapper = WRAPPERS[(len(CREDENTIALS) + i * 5) % len(WRAPPERS)] if "\n-----" not in payload else "{p}"
        text = wrapper.replace("{p}", payload)
        for secret in secrets:
            assert secret in text, (kind, secret, text)
        CREDENTIALS.append({"kind": kind, "text": text, "secrets": secrets})
        KINDS[kind] = KINDS.get(kind, 0) + 1


def each(kind: str, make, templates: list[str]) -> None:
    """One entry per template; ``make()`` returns (values for the template, secrets)."""
    payloads = []
    for template in templates:
        values, secrets = make()
        payloads.append((template.format(**values), secrets))
    add(kind, payloads)


def token(prefix: str, body) -> callable:
    def make():
        t = prefix + body()
        return {"t": t}, [t]

    return make


TOKEN_TEMPLATES = [
    "export TOKEN={t}",
    "token: {t}",
    "use {t} for now, I'll rotate it later",
    '{{"token": "{t}"}}',
    "curl -H 'Authorization: Bearer {t}' https://api.example.com/v1/me",
]


def tokens(kind: str, prefix: str, body, extra: list[str] = ()) -> None:
    each(kind, token(prefix, body), TOKEN_TEMPLATES + list(extra))


# ---- forges and registries --------------------------------------------------------------------
tokens("github_classic", "ghp_", lambda: alnum(36), ["git clone https://{t}@github.com/acme/infra.git"])
tokens("github_oauth", "gho_", lambda: alnum(36))
tokens("github_app", "ghs_", lambda: alnum(36), ["GH_USER_TOKEN=ghu_" + alnum(36) + " {t}"])
tokens("github_refresh", "ghr_", lambda: alnum(36))
tokens("github_fine_grained", "github_pat_", lambda: "11A" + alnum(19) + "_" + alnum(59))
tokens(
    "gitlab_pat",
    "glpat-",
    lambda: b64url(20),
    ['curl --header "PRIVATE-TOKEN: {t}" https://gitlab.example.com/api/v4/projects'],
)
tokens(
    "gitlab_runner",
    "glrt-",
    lambda: b64url(20),
    ["gitlab-runner register --token {t} --url https://gitlab.example.com"],
)
tokens(
    "gitlab_deploy",
    "gldt-",
    lambda: b64url(20),
    ["docker login -u gitlab+deploy-token-7 -p {t} registry.gitlab.example.com"],
)
tokens("npm_token", "npm_", lambda: alnum(36), ["//registry.npmjs.org/:_authToken={t}"])
tokens("pypi_token", "pypi-AgEIcHlwaS5vcmc", lambda: b64url(60), ["[pypi]\n  username = __token__\n  password = {t}"])
tokens("rubygems_token", "rubygems_", lambda: hexs(48))
tokens("docker_hub_token", "dckr_pat_", lambda: b64url(27), ["echo {t} | docker login -u acme --password-stdin"])
tokens("huggingface_token", "hf_", lambda: alnum(34), ["huggingface-cli login --token {t}"])
tokens("atlassian_token", "ATATT3xFfGF0", lambda: b64url(170) + "=" + hexs(8))
tokens("linear_key", "lin_api_", lambda: alnum(40))
tokens("postman_key", "PMAK-", lambda: hexs(24) + "-" + hexs(34))
tokens("shopify_token", "shpat_", lambda: hexs(32))
tokens("pulumi_token", "pul-", lambda: hexs(40), ["PULUMI_ACCESS_TOKEN={t} pulumi up"])
tokens("doppler_token", "dp.st.prd.", lambda: alnum(43))
tokens("grafana_token", "glsa_", lambda: alnum(32) + "_" + hexs(8))
tokens("newrelic_key", "NRAK-", lambda: pick(UPPER_ALNUM, 27))
tokens("databricks_token", "dapi", lambda: hexs(32))
tokens("flyio_token", "fo1_", lambda: b64url(43), ["fly deploy --access-token {t}"])
tokens("terraform_token", "", lambda: alnum(14) + ".atlasv1." + b64url(67))
tokens("digitalocean_token", "dop_v1_", lambda: hexs(64), ["doctl auth init -t {t}"])
tokens("heroku_key", "HRKU-AA", lambda: b64url(58))
tokens("vault_token", "hvs.", lambda: b64url(90), ["vault login {t}"])
tokens(
    "mailgun_key",
    "key-",
    lambda: hexs(32),
    ["curl -s --user 'api:{t}' https://api.mailgun.net/v3/mg.example.com/messages"],
)
tokens("sendgrid_key", "SG.", lambda: b64url(22) + "." + b64url(43))
tokens("linear_oauth", "lin_oauth_", lambda: hexs(64))
tokens("square_token", "EAAA", lambda: b64url(60))
tokens("square_secret", "sq0csp-", lambda: b64url(43))
tokens("stripe_secret", "sk_live_", lambda: "51" + alnum(97))
tokens("stripe_restricted", "rk_live_", lambda: "51" + alnum(97))
tokens("stripe_webhook", "whsec_", lambda: alnum(32))
tokens("openai_key", "sk-proj-", lambda: b64url(48) + "T3BlbkFJ" + b64url(48))
tokens("anthropic_key", "sk-ant-api03-", lambda: b64url(93) + "AA")
tokens("google_api_key", "AIza", lambda: "Sy" + b64url(33))
tokens("google_oauth_secret", "GOCSPX-", lambda: b64url(28))
tokens("google_oauth_token", "ya29.", lambda: "a0" + b64url(150))
tokens("twilio_api_key", "SK", lambda: hexs(32))
tokens("slack_bot", "xoxb-", lambda: f"{R.randint(10**10, 10**11)}-{R.randint(10**12, 10**13)}-{alnum(24)}")
tokens(
    "slack_user",
    "xoxp-",
    lambda: f"{R.randint(10**10, 10**11)}-{R.randint(10**10, 10**11)}-{R.randint(10**12, 10**13)}-{hexs(32)}",
)
tokens("slack_refresh", "xoxe-1-", lambda: b64url(140))
tokens("slack_app", "xapp-1-", lambda: f"A0{pick(UPPER_ALNUM, 9)}-{R.randint(10**12, 10**13)}-{hexs(64)}")
tokens(
    "matrix_access_token",
    "syt_",
    lambda: b64url(8).replace("-", "a").replace("_", "b") + "_" + alnum(20) + "_" + alnum(6),
    ["curl 'https://matrix.example.org/_matrix/client/v3/sync?access_token={t}'", "HUGINN_CHAT_TOKEN={t}"],
)
tokens("matrix_mas_token", "mat_", lambda: alnum(30) + "_" + alnum(6))
tokens(
    "jwt",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJ",
    lambda: b64url(80) + "." + b64url(43),
    ["Set-Cookie: session=eyJhbGciOiJSUzI1NiJ9.eyJ" + b64url(40) + "." + b64url(86) + "; Path=/ {t}"],
)
tokens("age_key", "AGE-SECRET-KEY-1", lambda: pick(BECH32, 58))
tokens("flyio_macaroon", "fm2_", lambda: b64url(120))
tokens("grafana_cloud", "glc_", lambda: b64(80) + "==")


def firebase():
    t = "AAAA" + b64url(7) + ":APA91b" + b64url(134)
    return {"t": t}, [t]


each("firebase_key", firebase, TOKEN_TEMPLATES)


def discord_bot():
    user = base64.b64encode(str(R.randint(10**17, 10**18)).encode()).decode().rstrip("=")
    t = f"{user}.{b64url(6)}.{b64url(38)}"
    return {"t": t}, [t]


each(
    "discord_bot_token",
    discord_bot,
    ["DISCORD_TOKEN={t}", "client.run('{t}')", "bot token is {t} lol", 'token = "{t}"', "{t}"],
)


def telegram():
    t = f"{R.randint(10**9, 10**10 - 1)}:AA{b64url(33)}"
    return {"t": t}, [t]


each(
    "telegram_bot_token",
    telegram,
    [
        "TELEGRAM_BOT_TOKEN={t}",
        "curl https://api.telegram.org/bot{t}/getMe",
        "requests.get(f'https://api.telegram.org/bot{t}/sendMessage', params=p)",
        "bot = Bot('{t}')",
        "{t}",
    ],
)


# ---- clouds ------------------------------------------------------------------------------------
def aws_id():
    t = R.choice(["AKIA", "ASIA"]) + pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
    return {"t": t}, [t]


each("aws_access_key_id", aws_id, TOKEN_TEMPLATES + ["aws_access_key_id = {t}"])


def aws_secret():
    t = b64(40)
    return {"t": t, "id": "AKIA" + pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)}, [t]


each(
    "aws_secret_key",
    aws_secret,
    [
        "[default]\naws_access_key_id = {id}\naws_secret_access_key = {t}",
        "export AWS_SECRET_ACCESS_KEY={t}",
        'AWS_SECRET_ACCESS_KEY: "{t}"',
        '{{"AccessKeyId": "{id}", "SecretAccessKey": "{t}"}}',
        "aws_secret_key={t}",
    ],
)


def aws_csv():
    i = "AKIA" + pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
    t = b64(40)
    return {"i": i, "t": t}, [i, t]


each(
    "aws_console_csv",
    aws_csv,
    [
        "Access key ID,Secret access key\n{i},{t}",
        "accessKeys.csv says:\nAccess key ID,Secret access key\r\n{i},{t}\r\n",
        "{i} {t}",
        "id {i}\nkey: {t}",
    ],
)


def azure_key():
    t = b64(86) + "=="
    return {"t": t}, [t]


each(
    "azure_storage_key",
    azure_key,
    [
        "DefaultEndpointsProtocol=https;AccountName=acmeprod;AccountKey={t};EndpointSuffix=core.windows.net",
        'AZURE_STORAGE_CONNECTION_STRING="DefaultEndpointsProtocol=https;AccountName=logs;AccountKey={t}"',
        "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={t}",
        "az storage blob list --account-name acme --account-key {t}",
    ],
)


def azure_sas():
    t = b64(43).replace("+", "%2B").replace("/", "%2F") + "%3D"
    return {"t": t}, [t]


each(
    "azure_sas",
    azure_sas,
    [
        "https://acme.blob.core.windows.net/backups/db.bak?sv=2022-11-02&ss=b&srt=o&sp=r&se=2026-12-31T00:00:00Z&spr=https&sig={t}",
        "SAS: ?sv=2021-06-08&sr=c&sig={t}&se=2026-01-01",
        "BlobEndpoint=https://acme.blob.core.windows.net/;SharedAccessSignature=sv=2022-11-02&ss=b&sig={t}",
        "azcopy copy ./out 'https://acme.blob.core.windows.net/c?sp=rw&sig={t}'",
    ],
)


def heroku_uuid():
    t = str(uuid.UUID(int=R.getrandbits(128), version=4))
    return {"t": t}, [t]


each(
    "heroku_legacy_key",
    heroku_uuid,
    ["HEROKU_API_KEY={t}", "heroku_api_key: {t}", 'export HEROKU_API_KEY="{t}"', '"apiKey": "{t}"'],
)


# ---- URLs and command lines ---------------------------------------------------------------------
def pw():
    p = password()
    return {"p": p}, [p]


def tricky():
    p = tricky_password()
    return {"p": p}, [p]


each(
    "url_password",
    pw,
    [
        "postgres://app:{p}@db.internal:5432/app",
        "DATABASE_URL=postgresql://svc_user:{p}@10.0.3.7/prod?sslmode=require",
        "mongodb+srv://admin:{p}@cluster0.ab1cd.mongodb.net/test",
        "amqp://guest:{p}@rabbit:5672/%2F",
        "redis://:{p}@cache.internal:6379/0",
        "git remote set-url origin https://deploy:{p}@git.example.com/acme/site.git",
    ],
)
each(
    "url_password_special",
    tricky,
    [
        "https://bob:{p}@git.example.com/acme/site.git",
        "ftp://backup:{p}@files.example.net/dump.tgz",
        "mysql://root:{p}@localhost:3306/app",
        "smtp://mailer:{p}@smtp.example.com:587",
    ],
)


def sentry():
    t = hexs(32)
    return {"t": t}, [t]


each(
    "sentry_dsn",
    sentry,
    [
        "SENTRY_DSN=https://{t}@o450123.ingest.sentry.io/5512345",
        'sentry_sdk.init(dsn="https://{t}@o123456.ingest.us.sentry.io/4505678")',
        "dsn: https://{t}@sentry.example.com/3",
        "Sentry.init({{ dsn: 'https://{t}@o11.ingest.sentry.io/22' }})",
    ],
)
each(
    "curl_user",
    pw,
    [
        "curl -u admin:{p} https://jenkins.example.com/api/json",
        "curl -s -X POST --user 'deploy:{p}' https://ci.example.com/job/x/build",
        "curl -fsSL -u ci-bot:{p} -o out.tgz https://nexus.example.com/repo/out.tgz",
        "wget --user=me --password={p} https://files.example.com/a.iso",
    ],
)
each(
    "mysql_p",
    pw,
    [
        "mysql -u root -p{p} -h 127.0.0.1 shop",
        "mysqldump -uroot -p{p} --all-databases > all.sql",
        "docker exec -it db mysql -u app -p'{p}' app",
        "mariadb -h db -u admin -p{p}",
    ],
)
each(
    "sshpass",
    pw,
    [
        "sshpass -p '{p}' ssh deploy@10.0.0.5",
        "sshpass -p {p} scp dump.sql backup@nas:/srv",
        'SSHPASS cmd: sshpass -p "{p}" rsync -a ./ deploy@web1:/var/www',
        "ansible all -m ping -e ansible_password={p}",
    ],
)
each(
    "cli_password_flag",
    pw,
    [
        "docker login registry.example.com -u bob --password {p}",
        "./manage.py createsuperuser --username admin --password {p}",
        "openssl pkcs12 -export -in c.pem -out c.p12 -passout pass:{p}",
        "psql --host db --username app --pass={p}",
        "redis-cli -h cache -a {p} ping",
    ],
)
each(
    "sql_password",
    pw,
    [
        "CREATE USER 'app'@'%' IDENTIFIED BY '{p}';",
        "ALTER ROLE reporting WITH LOGIN PASSWORD '{p}';",
        "GRANT ALL ON shop.* TO 'shop'@'localhost' identified by '{p}';",
        "CREATE LOGIN app WITH PASSWORD = '{p}';",
    ],
)
each(
    "xml_password",
    pw,
    [
        "<datasource>\n  <user>app</user>\n  <password>{p}</password>\n</datasource>",
        '<add key="DbPassword" value="{p}" />',
        "<server><id>nexus</id><username>ci</username><password>{p}</password></server>",
        "<apiKey>{p}</apiKey>",
    ],
)
each(
    "netrc",
    pw,
    [
        "machine api.heroku.com\n  login me@example.com\n  password {p}",
        "machine github.com login octocat password {p}",
        "~/.netrc:\nmachine ftp.example.org\nlogin anonymous\npassword {p}",
        "default login ci password {p}",
    ],
)


def docker_auth():
    t = base64.b64encode(f"bob:{password()}".encode()).decode()
    return {"t": t}, [t]


each(
    "docker_config_auth",
    docker_auth,
    [
        '{{"auths": {{"registry.example.com": {{"auth": "{t}"}}}}}}',
        '"auths": {{\n  "https://index.docker.io/v1/": {{\n    "auth": "{t}"\n  }}\n}}',
        'cat ~/.docker/config.json → {{"auths":{{"ghcr.io":{{"auth":"{t}"}}}}}}',
        '    "auth": "{t}",',
    ],
)


def npm_auth():
    t = base64.b64encode(f"ci:{password()}".encode()).decode()
    return {"t": t}, [t]


each(
    "npm_auth",
    npm_auth,
    [
        "_auth={t}",
        "//npm.example.com/:_auth={t}\nalways-auth=true",
        ".npmrc:\nregistry=https://npm.example.com/\n_auth = {t}",
        "//registry.npmjs.org/:_password={t}",
    ],
)


def signing_key():
    t = b64(43)
    return {"t": t, "i": "a_" + alnum(4)}, [t]


each(
    "synapse_signing_key",
    signing_key,
    [
        "ed25519 {i} {t}",
        "cat /data/example.org.signing.key\ned25519 {i} {t}",
        "signing key file: `ed25519 {i} {t}`",
        "old_signing_keys: ed25519 {i} {t}",
    ],
)


def element_key():
    groups = ["Es" + pick(B58, 2)] + [pick(B58, 4) for _ in range(11)]
    t = " ".join(groups)
    return {"t": t}, [g for g in groups]


each(
    "element_security_key",
    element_key,
    [
        "my security key is {t}",
        "Element recovery key: {t}",
        "{t}",
        "saved it: {t} (don't tell anyone)",
    ],
)


# ---- assignments ----------------------------------------------------------------------------
each(
    "env_password",
    pw,
    [
        "DB_PASS={p}",
        "SMTP_PASS={p}",
        "ADMIN_PWD={p}",
        "MYSQL_ROOT_PASSWORD={p}",
        "export PGPASSWORD={p}",
        "POSTGRES_PASSWORD={p}\nPOSTGRES_USER=app",
    ],
)
each(
    "env_password_cut", tricky, ["SMTP_PASSWORD={p}", "DB_PASSWORD={p} ./migrate.sh", "password={p}", "ADMIN_PASS={p}"]
)
each(
    "json_password",
    pw,
    [
        '{{"dbPass": "{p}"}}',
        '{{"user": "bob", "password": "{p}"}}',
        '"adminPassword": "{p}",',
        '{{ "smtpPass" : "{p}" }}',
    ],
)
each(
    "yaml_password",
    pw,
    [
        "smtp-pass: {p}",
        "database:\n  host: db\n  password: {p}\n  pool: 5",
        "pass: {p}",
        "redis_password: '{p}'",
        "--pass={p}",
    ],
)


def passphrase():
    words = (
        " ".join(
            R.choice(
                ["correct", "horse", "battery", "staple", "lantern", "orbit", "velvet", "quartz", "meadow", "cobalt"]
            )
            for _ in range(4)
        )
        + f" {R.randint(10, 99)}"
    )
    return {"p": words}, [words]


each(
    "passphrase",
    passphrase,
    [
        "passphrase: {p}",
        'GPG_PASSPHRASE="{p}"',
        "ssh key passphrase = {p}",
        "ini:\n[backup]\npassword = {p}\n",
        "keystore_password: {p}",
    ],
)


def api_key():
    t = alnum(32)
    return {"t": t}, [t]


each(
    "generic_api_key",
    api_key,
    [
        "api_key: {t}",
        "X-Api-Key: {t}",
        '"apiKey": "{t}"',
        "API_KEY={t}",
        "OPENWEATHER_APIKEY={t}",
        "curl -H 'x-api-key: {t}' https://api.example.com",
    ],
)
each(
    "client_secret",
    api_key,
    [
        "CLIENT_SECRET={t}",
        '"client_secret": "{t}"',
        "oauth:\n  client_id: 8812\n  client_secret: {t}",
        "OIDC_CLIENT_SECRET: '{t}'",
    ],
)
each(
    "synapse_config_secret",
    api_key,
    [
        'registration_shared_secret: "{t}"',
        "macaroon_secret_key: {t}",
        'form_secret: "{t}"',
        "turn_shared_secret: {t}",
    ],
)
each(
    "cloudflare_token",
    api_key,
    ["CF_API_TOKEN={t}", 'cloudflare_api_token = "{t}"', "CLOUDFLARE_API_TOKEN: {t}", "dns_cloudflare_api_token = {t}"],
)


def hex_token():
    t = hexs(32)
    return {"t": t}, [t]


each(
    "twilio_auth_token",
    hex_token,
    [
        "TWILIO_AUTH_TOKEN={t}",
        "twilio:\n  account_sid: AC" + hexs(32) + "\n  auth_token: {t}",
        "auth_token = '{t}'",
        '"authToken": "{t}"',
    ],
)
each(
    "pgpass",
    pw,
    [
        "db.internal:5432:app:appuser:{p}",
        "~/.pgpass\nlocalhost:5432:*:postgres:{p}",
        "*:*:*:replicator:{p}",
        "10.0.0.4:6432:shop:shop_rw:{p}",
    ],
)
each(
    "bearer_header",
    api_key,
    [
        "Authorization: Bearer {t}",
        'curl -H "Authorization: Bearer {t}" https://api.example.com',
        "headers = {{'Authorization': 'Bearer {t}'}}",
        "authorization: token {t}",
    ],
)


def basic():
    t = base64.b64encode(f"admin:{password()}".encode()).decode()
    return {"t": t}, [t]


each(
    "basic_auth_header",
    basic,
    [
        "Authorization: Basic {t}",
        "-H 'authorization: Basic {t}'",
        "Proxy-Authorization: Basic {t}",
        "'Authorization': 'Basic {t}'",
    ],
)


# ---- prose ---------------------------------------------------------------------------------------
each(
    "prose_password",
    pw,
    [
        "my password is {p}",
        "the wifi password is {p} btw",
        "pw is {p}",
        "Password is now {p}, change it after login",
        "mein Passwort ist {p}",
        "das Kennwort lautet {p}",
        "mon mot de passe est {p}",
        "mi contraseña es {p}",
        "a senha é {p}",
        "la mia password è {p}",
        "mijn wachtwoord is {p}",
        "мой пароль {p}",
        "пароль: {p}",
        "密码是 {p}",
        "パスワードは {p} です",
        "moje hasło to {p}",
        "lösenordet är {p}",
    ],
)

# ---- private keys --------------------------------------------------------------------------------
for label in (
    "RSA PRIVATE KEY",
    "OPENSSH PRIVATE KEY",
    "EC PRIVATE KEY",
    "PRIVATE KEY",
    "ENCRYPTED PRIVATE KEY",
    "PGP PRIVATE KEY BLOCK",
):
    block, body = pem(label)
    kind = "pem_" + label.lower().replace(" ", "_")
    add(
        kind,
        [
            (block, body),
            ("here is the key, don't share:\n" + block + "\nthanks", body),
        ],
    )
    block2, body2 = pem(label, 3)
    add(kind, [("```\n" + block2 + "\n```", body2)])
for i in range(5):
    block, body = pem("OPENSSH PRIVATE KEY", 4)
    without_begin = block.split("\n", 1)[1]
    add("pem_body_without_begin", [(["", "rest of it:\n", "```\n"][i % 3] + without_begin, body)])
for _ in range(4):
    block, body = pem("RSA PRIVATE KEY", 5)
    add("pem_body_only", [("\n".join(body[:-1]), body[:-1])])

# ---- told in words, without "is" or ":" (a password) or as "the key is …" ------------------------
each(
    "prose_password_bare",
    pw,
    [
        "ssh in as root with password {p}",
        "use password {p} for the staging db",
        "login: deploy / password {p}",
        "Passwort {p} für den Testserver",
    ],
)
each(
    "prose_secret",
    api_key,
    [
        "the api key is {t}",
        "our token is now {t}, the old one is revoked",
        "the access key was {t} until monday",
        "secret is '{t}'",
    ],
)

tokens("supabase_token", "sbp_", lambda: hexs(40))
tokens("sentry_token", "sntrys_", lambda: b64url(70))
tokens("notion_token", "ntn_", lambda: pick(string.digits, 11) + alnum(35))
tokens("groq_key", "gsk_", lambda: alnum(52))
tokens("xai_key", "xai-", lambda: alnum(80))
tokens("aws_session_token", "FwoGZXIvYXdz", lambda: b64(120))
tokens("mailgun_key", "key-", lambda: pick(string.ascii_lowercase + string.digits, 32))
tokens("mailchimp_key", "", lambda: hexs(32) + "-us" + str(R.randint(1, 21)))
each("basic_credentials", basic, ["curl with Basic {t} works", "creds for the proxy (Basic {t})", "Basic {t}"])


def wireguard():
    t = b64(43) + "="
    return {"t": t}, [t]


each("wireguard_key", wireguard, ["[Interface]\nPrivateKey = {t}\nAddress = 10.0.0.2/32", "wg private key: {t}"])


def totp():
    t = pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 32)
    return {"t": t}, [t]


each("totp_seed", totp, ["TOTP seed {t}", "2fa secret: {t}", "otpauth setup, mfa key {t}"])


# ---- SCRUB_VERSION 4 -----------------------------------------------------------------------------
# Drawn from a seed of their own, so that every entry above and the benign set below stay byte for byte.
_MAIN_SEQUENCE = R.getstate()
R.seed(4)


def twitter_bearer():
    t = "A" * R.randint(20, 24) + pick(ALNUM, 30) + "%2B" + pick(ALNUM, 40) + "%3D" + pick(ALNUM, 20)
    return {"t": t}, [t]


each("twitter_bearer_token", twitter_bearer, TOKEN_TEMPLATES[:3] + ["X_BEARER={t}"])
tokens("facebook_token", "EAAG", lambda: alnum(R.randint(120, 200)))
tokens("notion_token_legacy", "secret_", lambda: alnum(43))


def recovery_phrase():
    words = "abandon ability able about above absent absorb abstract absurd abuse access accident".split()
    words += "zebra zero zone zoo youth wrist wrong yard year yellow virus visa visit vital".split()
    t = " ".join(R.choice(words) for _ in range(R.choice((12, 24))))
    return {"t": t}, [t]


each(
    "seed_phrase",
    recovery_phrase,
    [
        "seed phrase: {t}",
        "my recovery phrase is {t}",
        'mnemonic = "{t}"',
        "here are the backup words {t}",
    ],
)
tokens("tailscale_key", "tskey-auth-", lambda: alnum(12) + "CNTRL-" + alnum(30))
tokens("sourcegraph_token", "sgp_", lambda: hexs(16) + "_" + hexs(40))
tokens("prefect_key", "pnu_", lambda: alnum(36))
tokens("buildkite_token", "bkua_", lambda: hexs(40))
tokens("circleci_token", "CCIPAT_", lambda: alnum(22) + "_" + hexs(40))
tokens("brevo_key", "xkeysib-", lambda: hexs(64) + "-" + alnum(16))
tokens("planetscale_token", "pscale_tkn_", lambda: alnum(43))
tokens("neon_key", "napi_", lambda: pick(string.ascii_lowercase + string.digits, 64))
tokens("pinecone_key", "pcsk_", lambda: alnum(6) + "_" + alnum(64))
tokens("langsmith_key", "lsv2_pt_", lambda: hexs(32) + "_" + hexs(10))
tokens("replicate_token", "r8_", lambda: alnum(37))
tokens("perplexity_key", "pplx-", lambda: alnum(48))
tokens("figma_token", "figd_", lambda: b64url(40))
tokens("netlify_token", "nfp_", lambda: alnum(36))
tokens("render_key", "rnd_", lambda: alnum(32))
tokens("contentful_token", "CFPAT-", lambda: b64url(43))
tokens("typeform_token", "tfp_", lambda: b64url(44) + "_" + alnum(14))
tokens("flutterwave_key", "FLWSECK-", lambda: hexs(32) + "-X")
tokens("shipping_key", "shippo_live_", lambda: hexs(40))
tokens("onepassword_token", "ops_eyJ", lambda: b64(120))
tokens("mapbox_token", "sk.eyJ", lambda: b64url(60) + "." + b64url(22))
tokens("dropbox_token", "sl.", lambda: b64url(140))
tokens(
    "braintree_token",
    "access_token$production$",
    lambda: pick(string.ascii_lowercase + string.digits, 16) + "$" + hexs(32),
)


def okta():
    t = "00" + b64url(40)
    return {"t": t}, [t]


each(
    "okta_token",
    okta,
    ["Authorization: SSWS {t}", "curl -H 'Authorization: SSWS {t}' https://dev.okta.com/api/v1/users"],
)


def twitch():
    t = pick(string.ascii_lowercase + string.digits, 30)
    return {"t": t}, [t]


each("twitch_token", twitch, ["PASS oauth:{t}", "irc password oauth:{t}"])


def wandb():
    t = hexs(40)
    return {"t": t}, [t]


each("wandb_key", wandb, ["wandb login {t}", "!wandb login --relogin {t}"])
each(
    "docker_login_password",
    pw,
    ["docker login -u deploy -p {p} registry.example.com", "docker login registry.gitlab.com -u bot -p {p}"],
)
each(
    "code_password",
    pw,
    [
        "requests.get(url, auth=('admin', '{p}'))",
        "auth = HTTPBasicAuth('svc', '{p}')",
        "aiohttp.BasicAuth('bot', '{p}')",
    ],
)
each("config_password_bare", pw, ['rcon_password "{p}"', "sv_password {p}"])
each("prose_psk", pw, ["the vpn psk is {p}", "wifi psk was {p} until the reset"])
each(
    "register_new_matrix_user",
    pw,
    [
        "register_new_matrix_user -u admin -p {p} -a -c homeserver.yaml",
        "register_new_matrix_user --password {p} -u bob",
    ],
)


def security_phrase():
    words = "granite orbit lantern velvet harbor quiet maple signal".split()
    t = " ".join(R.choice(words) for _ in range(R.randint(3, 5))) + " " + str(R.randint(10, 99))
    return {"t": t}, [t]


each(
    "security_phrase",
    security_phrase,
    ["my security phrase is {t}", "Security Phrase: {t}", "element security passphrase = {t}"],
)


def megolm_export():
    body = "\n".join(b64(64) for _ in range(4))
    return {"t": "-----BEGIN MEGOLM SESSION DATA-----\n" + body + "\n-----END MEGOLM SESSION DATA-----"}, body.split(
        "\n"
    )


each("megolm_key_export", megolm_export, ["{t}", "here's my key export from Element:\n{t}"])
R.setstate(_MAIN_SEQUENCE)

# ---- SCRUB_VERSION 5 -----------------------------------------------------------------------------
# Drawn from a seed of their own, like version 4's, so every entry above stays byte for byte.
_MAIN_SEQUENCE = R.getstate()
R.seed(5)


def kube_key():
    key_pem = (
        "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(b64(64) for _ in range(3)) + "\n-----END RSA PRIVATE KEY-----\n"
    )
    t = base64.b64encode(key_pem.encode()).decode()
    return {"t": t}, [t]


each(
    "kubeconfig_key_data",
    kube_key,
    ["    client-key-data: {t}", "  tls.key: {t}", 'kubectl config set users.ci.client-key-data "{t}"'],
)


def putty_key():
    lines = [b64(64), b64(40) + "=="]
    t = "\n".join(lines)
    head = "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: deploy@ci\nPublic-Lines: 2\n"
    head += b64(64) + "\n" + b64(24) + "\nPrivate-Lines: 2\n"
    return {"t": head + t + "\nPrivate-MAC: " + hexs(64)}, lines


each("putty_key", putty_key, ["{t}", "here's the .ppk:\n{t}"])


def crypt_hash():
    salt_chars = ALNUM + "./"
    kind = R.choice(("bcrypt", "sha512", "apr1", "argon2"))
    if kind == "bcrypt":
        t = "$2b$12$" + pick(salt_chars, 53)
    elif kind == "sha512":
        t = "$6$" + pick(salt_chars, 16) + "$" + pick(salt_chars, 86)
    elif kind == "apr1":
        t = "$apr1$" + pick(salt_chars, 8) + "$" + pick(salt_chars, 22)
    else:
        t = "$argon2id$v=19$m=65536,t=3,p=4$" + pick(ALNUM + "+/", 22) + "$" + pick(ALNUM + "+/", 43)
    return {"t": t}, [t]


each(
    "password_hash",
    crypt_hash,
    [
        "root:{t}:19700:0:99999:7:::",
        "alice:{t}",
        " @alice:example.org | {t} | 0",
        "UPDATE users SET password_hash = '{t}' WHERE name = '@admin:example.org';",
        "hash is {t}",
    ],
)


def django_hash():
    t = "pbkdf2_sha256$600000$" + alnum(22) + "$" + b64(43) + "="
    return {"t": t}, [t]


each("password_hash_django", django_hash, ["select password from auth_user: {t}", "'password': '{t}'"])


def wif():
    payload = bytes([0x80]) + bytes(R.getrandbits(8) for _ in range(32)) + R.choice((b"", b"\x01"))
    raw = payload + hashlib.sha256(hashlib.sha256(payload).digest()).digest()[:4]
    number, t = int.from_bytes(raw, "big"), ""
    while number:
        number, digit = divmod(number, 58)
        t = B58[digit] + t
    return {"t": t}, [t]


each("bitcoin_wif", wif, ["importprivkey {t}", "my paper wallet key {t} (empty now)", "{t}"])


def xprv():
    t = "xprv9s21ZrQH143K" + pick(B58, 95)
    return {"t": t}, [t]


def nsec():
    t = "nsec1" + pick("023456789acdefghjklmnpqrstuvwxyz", 58)
    return {"t": t}, [t]


def hex_key():
    t = "0x" + hexs(64)
    return {"t": t}, [t]


each("bip32_xprv", xprv, ["xprv: {t}", "restore from {t}"])
each("nostr_nsec", nsec, ["my nsec is {t}", "NOSTR_KEY={t}"])
each("hex_private_key", hex_key, ["private key: {t}", "PRIVATE_KEY {t}", "the eth private key is {t}"])


def cookie():
    t = "sessionid=" + alnum(32) + "; csrftoken=" + alnum(32)
    return {"t": t}, [t.split(";")[0][10:], t.split("=")[-1]]


each(
    "cookie",
    cookie,
    ["Cookie: {t}", "curl -H 'Cookie: {t}' https://admin.example.org/", "Set-Cookie: {t}; Path=/; HttpOnly"],
)


def session_key():
    t = b64(88) + "=="
    return {"t": t}, [t]


each("cli_session", session_key, ["export BW_SESSION={t}", 'OP_SESSION_acme="{t}"'])


def irc_pw():
    p = password()
    return {"p": p}, [p]


each(
    "irc_password",
    irc_pw,
    [
        "/msg NickServ IDENTIFY {p}",
        "/msg nickserv identify huginn {p}",
        "/ns identify {p}",
        "/msg NickServ REGISTER {p} ops@example.org",
        "/msg NickServ GHOST huginn {p}",
        "/quote PASS huginn/libera:{p}",
        "/oper admin {p}",
        "PRIVMSG NickServ :IDENTIFY {p}",
        "oops, typed /msg nickserv identify {p} in the wrong window",
    ],
)


def recovery_codes():
    codes = [hexs(5) + "-" + hexs(5) for _ in range(R.randint(2, 4))]
    return {"t": " ".join(codes), "l": "\n".join(f"{i}. {c}" for i, c in enumerate(codes, 1))}, codes


each("recovery_codes", recovery_codes, ["my github recovery codes: {t}", "backup codes:\n{l}", "2FA codes are {t}"])


def told_login():
    p = password()
    return {"p": p}, [p]


each(
    "prose_credentials",
    told_login,
    [
        "login with admin / {p}",
        "creds are deploy:{p}",
        "the staging login is admin / {p}",
        "username/password: bob/{p}",
    ],
)


def pin():
    t = str(R.randint(1000, 999999))
    return {"t": t}, [t]


each("prose_pin", pin, ["my bank PIN is {t}", "the door passcode is {t}", "SIM pin code: {t}"])
tokens("gitlab_runner_registration", "GR1348941", lambda: alnum(20))


def cli_pw():
    p = password()
    return {"p": p}, [p]


each(
    "cli_password_v5",
    cli_pw,
    [
        "ldapsearch -x -H ldap://ldap -D cn=admin,dc=example,dc=org -w {p} -b dc=example,dc=org",
        "smbclient //nas/backup -U backup%{p}",
        "htpasswd -bc /etc/nginx/.htpasswd ops {p}",
        "mongosh 'mongodb://db:27017' -u root -p {p}",
        "sqlcmd -S db -U sa -P {p}",
        "mosquitto_pub -h broker -u sensor -P {p} -t home/temp -m 21",
        "the master password for the keepass db is {p}",
    ],
)


def ngrok():
    t = alnum(27) + "_" + alnum(21)
    return {"t": t}, [t]


each("ngrok_authtoken", ngrok, ["ngrok config add-authtoken {t}", "ngrok authtoken {t}"])

# Vendor shapes from public secret-scanner rule sets (gitleaks and the vendors' own docs).
LOWER_ALNUM = string.ascii_lowercase + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits


def uuid4() -> str:
    return str(uuid.UUID(int=R.getrandbits(128), version=4))


tokens("adafruit_key", "aio_", lambda: alnum(28))
tokens("alibaba_key", "LTAI", lambda: alnum(20))
tokens("azure_client_secret", "", lambda: alnum(3) + str(R.randint(0, 9)) + "Q~" + pick(ALNUM + "_~.-", 34))
tokens("clojars_token", "CLOJARS_", lambda: pick(LOWER_ALNUM, 60))
tokens("cloudflare_origin_ca_key", "v1.0-", lambda: hexs(24) + "-" + hexs(146))
tokens("dynatrace_token", "dt0c01.", lambda: pick(UPPER_DIGITS, 24) + "." + pick(UPPER_DIGITS, 64))
tokens("easypost_key", "EZAK", lambda: alnum(54))
tokens("frameio_token", "fio-u-", lambda: b64url(64))
tokens("hubspot_token", "pat-na1-", uuid4)
tokens("infracost_key", "ico-", lambda: alnum(32))
tokens("jfrog_token", "AKCp", lambda: alnum(69))
tokens("plaid_token", "access-sandbox-", uuid4)
tokens("readme_key", "rdme_", lambda: pick(LOWER_ALNUM, 70))
tokens("scalingo_token", "tk-us-", lambda: b64url(48))
tokens("yandex_key", "AQVN", lambda: b64url(36))
tokens("defined_networking_key", "dnkey-", lambda: pick(UPPER_DIGITS, 26) + "-" + pick(UPPER_DIGITS, 52))
tokens("huggingface_org_token", "api_org_", lambda: alnum(34))
tokens("launchdarkly_key", "api-", uuid4)
tokens("bitbucket_app_password", "ATBB", lambda: alnum(32))
tokens("payment_api_key", "live_", lambda: alnum(40))
tokens("stripe_client_secret", "pi_", lambda: alnum(24) + "_secret_" + alnum(25))


def teams():
    t = uuid4() + "@" + uuid4() + "/IncomingWebhook/" + hexs(32) + "/" + uuid4()
    return {"t": t}, [t]


each(
    "teams_webhook",
    teams,
    [
        "https://acme.webhook.office.com/webhookb2/{t}",
        "post alerts to https://x.webhook.office.com/webhookb2/{t} please",
    ],
)


def user_pass():
    p = "ops:" + password()
    return {"p": p}, [p.split(":")[1]]


each(
    "bundler_credentials",
    user_pass,
    ["export BUNDLE_GEMS__CONTRIBSYS__COM={p}", "BUNDLE_ENTERPRISE__CONTRIBSYS__COM: {p}"],
)


def livekit():
    t = alnum(43)
    return {"k": "API" + alnum(12), "t": t}, [t]


each("livekit_secret", livekit, ["keys:\n  {k}: {t}", 'LIVEKIT_KEYS="{k}: {t}"'])


def wifi():
    p = password()
    return {"p": p}, [p]


each("wifi_password", wifi, ["WIFI:S:CommunityHall;T:WPA;P:{p};;", "the QR says WIFI:T:WPA;S:Guest;P:{p};H:false;;"])


def env_key():
    t = alnum(32)
    return {"t": t}, [t]


each(
    "env_key_name",
    env_key,
    ["ALGOLIA_ADMIN_KEY={t}", "AIO_KEY: {t}", "AZURE_DEVOPS_PAT={t}", "export GH_PAT='{t}'"],
)
each(
    "named_token_no_verb",
    env_key,
    ["mattermost token {t}", "ZENDESK_API_TOKEN {t}", "here's the api key {t} for staging"],
)
each("prose_pw_no_verb", pw, ["root pw {p}", "ssh in, pw {p}"])
tokens("slack_client_token", "xoxc-", lambda: f"{R.randint(10**9, 10**10)}-{R.randint(10**9, 10**10)}-" + hexs(64))


def slack_cookie():
    t = "xoxd-" + alnum(40) + "%2B" + alnum(30) + "%2F" + alnum(20) + "%3D"
    return {"t": t}, [t]


each("slack_d_cookie", slack_cookie, ['curl -b "d={t}" https://acme.slack.com/api/auth.test', "d cookie: {t}"])


def url_capability():
    t = hexs(64)
    return {"t": t, "c": "4/0A" + b64url(60)}, [t]


each(
    "url_signature",
    url_capability,
    [
        "https://b.s3.amazonaws.com/x.tgz?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=600&X-Amz-Signature={t}",
        "https://storage.googleapis.com/b/o?X-Goog-Date=20261202T000000Z&X-Goog-Signature={t}",
        "https://shop.example.com/cart;jsessionid={t}?step=2",
    ],
)


def oauth_code():
    t = "4/0A" + b64url(60)
    return {"t": t}, [t]


each("oauth_code", oauth_code, ["redirected to http://localhost:8080/callback?code={t}&scope=email"])


def door_code():
    t = str(R.randint(1000, 99999))
    return {"t": t}, [t]


each("door_code", door_code, ["the door code is {t}", "gate code: {t}#", "lockbox code {t}, the key is inside"])
each("prose_password_v5", pw, ["use {p} as the password", "changed my password to {p}", "try logging in with {p}"])


def passphrase_words():
    words = "granite orbit lantern velvet harbor quiet maple signal copper meadow".split()
    t = " ".join(R.choice(words) for _ in range(4))
    return {"t": t}, [t]


each("passphrase_words", passphrase_words, ["the passphrase is {t}", "gpg passphrase: {t}"])


def bare_userinfo():
    p = password()
    return {"p": p}, [p]


each("bare_userinfo", bare_userinfo, ["rsync -av ./site deploy:{p}@10.0.0.5:/srv", "ssh root:{p}@db.internal"])
R.setstate(_MAIN_SEQUENCE)

# ---- benign ------------------------------------------------------------------------------------
BENIGN: list[dict] = []


def benign(kind: str, texts: list[str]) -> None:
    for text in texts:
        BENIGN.append({"kind": kind, "text": text})


def sha() -> str:
    return "".join(R.choice(HEX) for _ in range(40))


def sha256() -> str:
    return "".join(R.choice(HEX) for _ in range(64))


def uid() -> str:
    return str(uuid.UUID(int=R.getrandbits(128), version=4))


def event_id() -> str:
    return "$" + "".join(R.choice(B64URL) for _ in range(43))


benign(
    "issue_false_positive",
    [
        "password=form.password",
        "user = authenticate(username=form.username, password=form.password)",
        "token = credentials.token",
        "creds.refresh(request); token = credentials.token",
        "see you at #ASIAPACIFICSUMMIT2026 👋",
        "lunch vote — pizza: 5, sushi: 3, pass: 2",
        "CI summary: Pass: 112 Fail: 0 Skip: 3",
        "env dump:\nHOME=/home/ci\nPWD=/home/ci/work/huginn\nSHELL=/bin/bash\nLANG=C.UTF-8",
        "nginx:\n  ssl_certificate: /etc/ssl/certs/chat.pem\n  private_key: /etc/ssl/private/chat.key",
        "Authorization: handled-by-the-reverse-proxy",
        "token=token",
        "password = input('Password: ')",
    ],
)
benign(
    "code",
    [
        "token_count = len(tokenizer.encode(text))",
        "if token_count > max_tokens:\n    raise ValueError('too long')",
        "password_field = forms.CharField(widget=forms.PasswordInput)",
        "self.password_field.send_keys(Keys.RETURN)",
        "def check_password(password: str, hashed: bytes) -> bool:\n    return bcrypt.checkpw(password.encode(), hashed)",
        "const token = await getToken();",
        "token: ${{ secrets.GITHUB_TOKEN }}",
        "password: ${DB_PASSWORD}",
        'api_key = os.environ["API_KEY"]',
        "SECRET_KEY = env('SECRET_KEY')",
        "secret = settings.SECRET",
        "passwordMinLength: 12",
        '"password_min_length": 12,',
        "password_hash = hasher.hash(password)",
        "private_key = load_pem_private_key(data, password=None)",
        "token_type: bearer",
        "expires_in: 3600",
        "tokens = text.split()",
        "for token in tokens:\n    print(token)",
        "auth = HTTPBasicAuth(user, password)",
        "bypass = True  # skip the cache",
        "compass: north",
        "secret_santa_budget: 20",
        "key_count = len(keys)",
        "access_key_id = response['Credentials']['AccessKeyId']",
        "let passwordInput = document.querySelector('#password');",
        '<input type="password" name="password" autocomplete="current-password">',
        'PASSWORD_HASHERS = ["django.contrib.auth.hashers.Argon2PasswordHasher"]',
        "fn verify(token: &str) -> Result<Claims, Error> {",
        "SELECT id, password_hash FROM users WHERE email = $1;",
        "kubectl create secret generic db --from-file=password=./password.txt",
        "echo $GITHUB_TOKEN | gh auth login --with-token",
        "docker login -u bob --password-stdin < ~/.pw",
        "vault kv get -field=password secret/db",
        "max_tokens: 500",
        "temperature=0.2, max_tokens=1024",
        "ssh -i ~/.ssh/id_ed25519 deploy@web1",
        "openssl rand -hex 32",
        "pytest -k 'test_password_reset' -q",
        "git commit -m 'fix token refresh race'",
        "grep -rn password_reset src/",
        "np.linalg.norm(a - b, ord=2)",
        "df.groupby('room').agg({'n': 'sum'})",
        "matrix = [[1, 0], [0, 1]]",
        "assert scrub(text) == text",
        "let re = /^[a-z0-9_-]{3,16}$/;",
        "while (i < n && a[i] != key) i++;",
        "x = {'a': 1, 'b': [1, 2]}",
        'println!("{:?}", token.kind);',
        'if err != nil { return fmt.Errorf("auth: %w", err) }',
        "RUN pip install --no-cache-dir -r requirements.txt",
        "ENV PYTHONUNBUFFERED=1",
        "pass",
        "try:\n    run()\nexcept KeyError:\n    pass",
        "password_reset_timeout_days: 3",
        "secret_name: db-credentials",
        "tokenizer: cl100k_base",
        "api_key_header: X-Api-Key",
        "auth_method: oidc",
    ],
)
for _ in range(40):
    benign(
        "git_sha",
        [
            R.choice(
                [
                    "fixed in {s}",
                    "cherry-pick {s} onto release-1.4",
                    "git show {s}:src/app.py",
                    "bisect says {s} is the first bad commit",
                    "commit {s}\nAuthor: Alice <alice@example.org>\nDate:   Mon Nov 30 10:00:00 2026 +0000\n\n    fix token refresh",
                ]
            ).format(s=sha())
        ],
    )
for _ in range(25):
    benign(
        "sha256",
        [
            R.choice(
                [
                    "sha256: {s}",
                    "{s}  huginn-chat-1.2.0.tar.gz",
                    "sha256sum says {s}",
                    "expected checksum {s}, got {t}",
                    "image: ghcr.io/acme/app@sha256:{s}",
                ]
            ).format(s=sha256(), t=sha256())
        ],
    )
benign("sha256", ["\n".join(f"{sha256()}  dist/pkg-{i}.whl" for i in range(4)), "\n".join(sha256() for _ in range(3))])
for _ in range(25):
    benign(
        "uuid",
        [
            R.choice(
                [
                    "request id {u}",
                    "trace_id={u}",
                    '"id": "{u}"',
                    "point {u} is stale",
                    "kubectl delete pod app-{u}",
                ]
            ).format(u=uid())
        ],
    )
for _ in range(15):
    raw = bytes(R.getrandbits(8) for _ in range(R.randint(30, 90)))
    benign(
        "data_uri",
        [
            R.choice(
                [
                    '<img src="data:image/png;base64,iVBORw0KGgo{b}">',
                    "background: url(data:image/gif;base64,R0lGODlh{b});",
                    "data:application/json;base64,{b}",
                ]
            ).format(b=base64.b64encode(raw).decode())
        ],
    )
for _ in range(25):
    benign(
        "matrix_ids",
        [
            R.choice(
                [
                    "@alice:example.org invited @bob:matrix.org to !{r}:example.org",
                    "see event {e} in !{r}:example.org",
                    "join #huginn-dev:example.org or #general:matrix.org",
                    "https://matrix.to/#/!{r}:example.org/{e}?via=example.org",
                    "redacted {e} (reason: spam)",
                    "@_discord_{d}:example.org joined",
                ]
            ).format(r="".join(R.choice(ALNUM) for _ in range(18)), e=event_id(), d=R.randint(10**17, 10**18))
        ],
    )
benign(
    "url",
    [
        "https://github.com/matrix-org/synapse/pull/1234#issuecomment-99",
        "http://localhost:8008/_matrix/client/versions",
        "https://user@example.com/path and ssh://git@github.com:22/o/r.git",
        "http://[::1]:8080/x?y=z#frag",
        "https://docs.python.org/3/library/re.html#re.ASCII",
        "https://example.com/search?q=password+reset&page=2",
        "https://api.example.com/v1/tokens?limit=50",
        "see https://en.wikipedia.org/wiki/Shannon_entropy",
        "postgres://db.internal:5432/app",
        "https://pypi.org/project/detect-secrets/",
        "https://matrix.org/docs/spec/client_server/latest#login",
        "wss://chat.example.org:8448/_matrix/federation/v1/version",
        "mailto:alice@example.org?subject=hi",
        "https://www.youtube.com/watch?v=dQw4w9WgXcQ&t=42s",
        "https://calendar.example.com/event?id=7f3b&token_type=bearer",
        "https://status.example.com/incidents/2026-11-30",
        "git@github.com:acme/huginn.git",
        "https://grafana.example.com/d/abc123/chat?orgId=1&from=now-6h",
        "https://example.com:8443/health",
        "https://example.com/a@b",
    ],
)
benign(
    "prose",
    [
        "I forgot my password again",
        "What's the password for the wifi?",
        "the password is on the fridge",
        "my password is too long for that form",
        "the password is wrong, try again",
        "password is required for that endpoint",
        "Das Passwort ist geheim, frag Anna.",
        "mon mot de passe est trop long",
        "la contraseña es obligatoria",
        "пароль слишком короткий",
        "密码太短了",
        "パスワードを忘れました",
        "he was the bearer of bad news",
        "Bearer tokens are in the Authorization header, see RFC 6750",
        "the token economy is weird",
        "the token is expired, ask for a new one",
        "the token is JWT-based",
        "token is ${TOKEN} in the unit file",
        "the key is to restart synapse first",
        "the key is ctrl+shift+p in vscode",
        "the key is 2x faster with the cache",
        "password reset flow is broken again",
        "password sha256 hashes are not enough, use argon2id",
        "password hashing with argon2id",
        "password v1.2.3 policy is live",
        "pwd /home/ci/work",
        "pip install xai-sdk groq",
        "Basic auth is off on the staging proxy",
        "Basic usage: huginn-chat search QUERY",
        "the private key: ask Anna, it is in the vault",
        "a key-value store would do",
        "the 2fa secret generator lives in the admin panel",
        "the password for bob is wrong, reset it",
        "keep this a secret between us",
        "the API key rotation happens monday",
        "Note: passwords must be 12+ chars",
        "rotate the tokens before friday, the old ones expire",
        "who has the deploy key? I need to ship the hotfix",
        "we should store secrets in vault, not in .env files",
        "login failed: invalid username or password",
        "can't login, password reset mail never arrived",
        "the access token expires after 5 minutes, refresh tokens after 30 days",
        "pass the salt please 🧂",
        "I'll pass on the meeting today",
        "the bus pass is 50 EUR a month",
        "ratio 3:2, time 10:30, score 2-1",
        "a passphrase beats a password, see xkcd 936",
        "the PEM header says BEGIN CERTIFICATE, so it's the public part",
    ],
)
benign(
    "non_latin",
    [
        "héllo wörld — ünïcode ✓ 日本語のテキスト 🙂",
        "Привет всем! Кто-нибудь пробовал новый релиз?",
        "大家好，新版本的索引速度快多了",
        "こんにちは、ビルドが通りました ✅",
        "안녕하세요, 배포는 내일 합니다",
        "مرحبا، هل جرب أحدكم الإصدار الجديد؟",
        "שלום, מישהו ניסה את הגרסה החדשה?",
        "नमस्ते, नया संस्करण ठीक चल रहा है",
        "Γεια σας, το build πέρασε",
        "สวัสดีครับ ทดสอบผ่านแล้ว",
        "Xin chào, bản mới chạy ổn",
        "Merhaba, şifre sıfırlama sayfası çalışmıyor",
    ],
)
benign(
    "math",
    [
        "∑_{i=1}^{n} i = n(n+1)/2",
        "e^{iπ} + 1 = 0",
        "O(n log n) vs O(n²)",
        "the gradient ∇f(x) = 2x for f(x) = x²",
        "P(A|B) = P(B|A)·P(A)/P(B)",
        "x ∈ ℝ, x ≥ 0 ⇒ √x ∈ ℝ",
        "1e-9 < ε ≤ 1/1024",
        "∫_0^1 x dx = 1/2",
        "det(A) = ad − bc",
        "3 × 4 = 12; 12 ÷ 4 = 3",
    ],
)
benign(
    "emoji",
    [
        "🎉🎉🎉 shipped!",
        "👍",
        "lgtm 🚀",
        "🔥 prod is on fire 🔥",
        "🤔🤔",
        "👀 looking",
        "🙏 thanks @alice:example.org",
        "✅ tests green, ❌ lint red",
        "☕ brb",
        "🐛 found it: off by one in the fold",
    ],
)
benign(
    "logs",
    [
        "[2026-11-30 10:02:11] INFO refresh done rooms=12 windows=340 seconds=4.2",
        "ERROR: connection refused (host=db.internal port=5432)",
        "Traceback (most recent call last):\n  File \"app.py\", line 3, in <module>\n    import foo\nModuleNotFoundError: No module named 'foo'",
        "WARN token refresh failed, retrying in 5s",
        '2026-11-30T10:00:00Z level=info msg="login ok" user=@bob:example.org',
        '{"event": "room_refreshed", "room_id": "!abc:example.org", "windows": 3}',
        'HTTP/1.1 401 Unauthorized\nWWW-Authenticate: Bearer realm="example"',
        'npm ERR! code E401\nnpm ERR! Unable to authenticate, need: Basic realm="GitHub Package Registry"',
        "FAILED tests/unit/test_scrub.py::test_prose - AssertionError",
        "=== 112 passed, 3 skipped in 4.20s ===",
        "docker ps\nCONTAINER ID   IMAGE          STATUS\n3f9a8b7c6d5e   synapse:v1.99  Up 2 hours",
        "kubectl get secrets\nNAME          TYPE     DATA   AGE\ndb-password   Opaque   1      3d",
        "pip freeze | grep -i token\ntokenizers==0.15.0\ntiktoken==0.5.2",
        "Nov 30 10:00:00 host systemd[1]: Started huginn-chat refresh.",
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----\n" + "\n".join(b64(64) for _ in range(4)) + "\n-----END CERTIFICATE-----",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + b64(43) + " alice@laptop",
        "pk_live_" + "51H8xYzAbCdEfGhIjKl is the publishable key, that one is public",
        "base64 of hi is aGk= and of hello is aGVsbG8=",
        "git log --oneline | head; git rev-parse HEAD",
    ],
)
benign(
    "scrub4_lookalikes",
    [
        "A" * 90 + "!!! the build is green",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAh",
        "seed phrase: what is it and where do I find it in the wallet?",
        "never paste your recovery phrase in chat, nobody from support will ask for it",
        "the mnemonic is ROY G BIV for the colours",
        "EAA is the European Athletics Association",
        "secret_santa_budget_per_person_in_euros_for_this_year: 20",
        "we rotate the tskey-auth keys every 90 days",
        "docker login --password-stdin < ~/.docker-pw",
        "docker login -u bob registry.example.com",
        "click reset_password link in the mail",
        "oauth: use the device flow for the TV app",
        "wandb login first, then run the sweep",
        "auth = HTTPBasicAuth(user, password)",
        "the psk is in the router's sticker",
        "my security phrase is lost",
        "what is a security phrase? is it the same as the security key?",
        "Set up Secure Backup with a Security Phrase",
        "register_new_matrix_user -c homeserver.yaml http://localhost:8008",
        "client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM4akNDQWRxZ0F3SUJBZ0lJ",
        "Cookie: lang=en; theme=dark",
        "backup codes are in the vault, ask Alice",
        "the recovery code is in your email; error code 403 means the code expired",
        "echo $1$2 and $6$HOME in the script",
        "login with google/github, both work",
        "log in at 10:30am, the login page is at host:8080",
        "see https://serverfault.com/questions/36421/stop-ssh-login-from-printing-motd/38160#38160",
        "GPIO pin is 17, the reset pin: 4",
        "type /msg NickServ IDENTIFY <password> to log in",
        "/msg nickserv identify yourpassword, with your own of course",
        "ldapsearch -x -W -D cn=admin,dc=example,dc=org",
        "the password for the wifi is on the fridge",
        "sha256 of the private key file: " + "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318"[::-1],
        "npub1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5 is my public key",
        "ngrok http 8080",
        "xpub6CUGRUonZSQ4TWtTMmzXdrXDtypWKiKrhko4egpiMZbpiaQL2jkwSB1icqYh2cfDfVxdx4df189oLKnC5fSwqPfgyP3hooxujYzAu3fDVmz",
        "SORT_KEY=created_at, PRIMARY_KEY=id",
        "the token count_per_window_2048 is logged",
        "token endpoint is https://auth.example.org/oauth2/token",
        "live_reload_enabled_for_the_development_server_only = true",
        "aio_pika is the asyncio AMQP client",
        "api-docs are at /api-docs, see api-v2-migration-guide",
        "WIFI: the hall network is down again",
        "APIs are documented in the wiki: see it",
        "the token is rotated weekly; ask for a new token in #ops",
        "see https://example.com/page?code=ABCD&lang=en",
        "https://github.com/search?q=code%3Afoo&type=code",
        "the signature=valid check failed",
        "the passphrase is stored in the vault",
        "changed my password to something stronger",
        "mailto:bob@example.org and xmpp:alice@jabber.example.org",
        "the error code is 403, building code compliance is separate",
        "bypass is enabled, the compass is broken",
        "you can't pass *mut/*const between threads",
    ],
)
# Fill to >300 with mixes of the above shapes in ordinary sentences.
FILLERS = [
    "merged {s} into main, CI is green ✅",
    "can someone review {u}? it's the token_count fix",
    "Room !{r}:example.org has {n} windows after the rebuild",
    "hash mismatch: {h} ≠ {h2}",
    "bumped synapse to 1.{n}.0, changelog at https://github.com/element-hq/synapse/releases",
    "我已经把 {s} 合并了",
    "{n} tokens per window on average, max {n2}",
    "password_field width is {n}px on mobile",
]
while len(BENIGN) < 330:
    benign(
        "mixed",
        [
            R.choice(FILLERS).format(
                s=sha()[:12],
                u=uid(),
                r="".join(R.choice(ALNUM) for _ in range(18)),
                n=R.randint(2, 999),
                n2=R.randint(1000, 4000),
                h=sha256(),
                h2=sha256(),
            )
        ],
    )


def write(name: str, rows: list[dict]) -> None:
    with (HERE / name).open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    write("credentials.jsonl", CREDENTIALS)
    write("benign.jsonl", BENIGN)
    print(f"credentials: {len(CREDENTIALS)} across {len(KINDS)} kinds; benign: {len(BENIGN)}")
