"""Scrubber rows: HTTP headers and URLs: Authorization, cookies, passwords in URLs.

Owns: ``ROWS``, this family's rows in the order the engine runs them, each with its evidence
(``examples``: texts it must remove and the exact span; ``lookalikes``: texts it must leave).
Adding a rule of this family is one row here, with its evidence.

Must not: do I/O or keep any text; reorder rows without checking the scrubber's output is unchanged
(the engine merges overlapping spans under the kind of the row that runs first).
"""

from __future__ import annotations

import re

from chunker.scrub_rules.common import SecretPattern, _cookie_values, _needs_digit, _not_placeholder, _rx, _url_password

ROWS: tuple[SecretPattern, ...] = (
    # -- headers, URLs, command lines --------------------------------------------------------------
    SecretPattern(
        "authorization",
        _rx(
            r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?"
            r"(?:(?:bearer|basic|token|digest|negotiate|mac|apikey|sso-key)[ \t]+(?P<secret>[^\s\"',;\[\]]{8,})"
            r"|(?P<secret_bare>(?=[A-Za-z0-9._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{16,}))"
        ),
        "Authorization headers: the credential after the scheme (the scheme stays); a bare value"
        " needs a digit, so 'handled-by-the-reverse-proxy' stays; Bearer <ACCESS_TOKEN> and $TOKEN are placeholders",
        ("authorization",),
        _not_placeholder,
        folded=True,
        examples=(
            (
                "curl -H 'Authorization: Bearer ghp_B4r6bSr0pFBOPCWB"
                + "RDFOxEzf5FJtRBZRAJyu' https://api.example.com/v1/me",
                "ghp_B4r6bSr0pFBOPCWB" + "RDFOxEzf5FJtRBZRAJyu",
            ),
        ),
        lookalikes=("curl -H 'Authorization: Bearer <ACCESS_TOKEN>' https://matrix.example.org/",),
    ),
    SecretPattern(
        "cli_password",
        _rx(
            r"(?:docker[ \t]+login|register_new_matrix_user)(?=[ \t])[^\n]{0,200}?[ \t](?:-p|--password)[ \t=]+(?P<secret>[^\s\"']+|\"[^\"\n]+\"|'[^'\n]+')"
        ),
        "docker login -p <password>, register_new_matrix_user -p <password>, within 200 characters (a line"
        " of repeats stays linear; --password-stdin has no value; -p $CI_JOB_TOKEN stays)",
        ("docker", "register_new_matrix_user"),
        _not_placeholder,
        examples=(("register_new_matrix_user -u admin -p Adm1n-Pa55 -a -c homeserver.yaml", "Adm1n-Pa55"),),
        lookalikes=(
            "docker login -u gitlab-ci-token -p $CI_JOB_TOKEN $CI_REGISTRY",
            "$ docker login -u ci-bot -p ***\nWARNING! Using --password via the CLI is insecure.\nLogin Succeeded",
        ),
    ),
    SecretPattern(
        "code_password",
        _rx(
            r"(?:auth[ \t]*=[ \t]*[(\[]|basicauth[ \t]*\(|digestauth[ \t]*\()[ \t]*[\"'][^\"'\n]*[\"'][ \t]*,[ \t]*"
            r"[\"'](?P<secret>[^\"'\n]+)[\"']"
        ),
        "a password given to an HTTP client in code: auth=('user', 'pw'), HTTPBasicAuth('user', 'pw')",
        ("auth",),
        folded=True,
        examples=(("requests.get(url, auth=('admin', 'ZzuDM7x0zz!klc3'))", "ZzuDM7x0zz!klc3"),),
    ),
    SecretPattern(
        "cookie",
        _rx(r"cookie[\"']?[ \t]*:[ \t]*(?P<secret>[^\s=;\"']+=[^\n\"']*)"),  # Set-Cookie: too
        "Cookie and Set-Cookie headers when a cookie holds a session-length value (16+ characters):"
        " the whole value goes, the header name stays",
        ("cookie",),
        _cookie_values,
        folded=True,
        examples=(
            (
                "curl -H 'Cookie: sessionid=k3J9qLm2Pz8Rt5Vw1Yb7Nc4Hd6Fg0aQs' https://x",
                "sessionid=k3J9qLm2Pz8" + "Rt5Vw1Yb7Nc4Hd6Fg0aQs",
            ),
        ),
        lookalikes=(
            "Cookie: lang=en; theme=dark",
            "I love cookie: chocolate chip=best",
        ),
    ),
    SecretPattern(
        "session_token",
        _rx(r"(?:bw_session|op_session_[a-z0-9_]+)[\"']?[ \t]*[=:][ \t]*[\"']?(?P<secret>[a-z0-9+/=_-]{20,})"),
        "Bitwarden (BW_SESSION) and 1Password (OP_SESSION_<account>) CLI session keys",
        ("bw_session", "op_session_"),
        folded=True,
        examples=(
            (
                "export BW_SESSION=k3J9qLm2Pz8Rt5Vw1Yb7Nc4Hd6Fg0aQs2Wd3Ef4Rg5Th6Yj7Uk8Il==",
                "k3J9qLm2Pz8Rt5Vw1Yb7Nc4Hd6F" + "g0aQs2Wd3Ef4Rg5Th6Yj7Uk8Il==",
            ),
        ),
    ),
    SecretPattern(
        "cli_password",
        _rx(r"ngrok[ \t]+(?:config[ \t]+add-authtoken|authtoken)[ \t]+(?P<secret>[A-Za-z0-9_]{20,})"),
        "ngrok agent authtokens given on its command line",
        ("ngrok",),
        examples=(
            (
                "ngrok config add-authtoken 2Xk3J9qLm2Pz8Rt5Vw1Yb7Nc4Hd_6Fg0aQs",
                "2Xk3J9qLm2Pz8Rt5V" + "w1Yb7Nc4Hd_6Fg0aQs",
            ),
        ),
        lookalikes=("ngrok http 8080",),
    ),
    SecretPattern(
        "bearer",
        _rx(r"bearer[ \t]+(?=[A-Za-z0-9._~+/-]*[0-9])(?P<secret>[A-Za-z0-9._~+/-]{20,}=*)"),
        "Bearer <token> outside a header; needs 20+ chars with a digit, so prose stays",
        ("bearer",),
        folded=True,
        examples=(
            (
                "curl -H 'Authorization: Bearer ghp_B4r6bSr0pFBOPCWB"
                + "RDFOxEzf5FJtRBZRAJyu' https://api.example.com/v1/me",
                "ghp_B4r6bSr0pFBOPCWB" + "RDFOxEzf5FJtRBZRAJyu",
            ),
            ("use Bearer eyZ9aB3dE5gH7j" + "K9mN1pQ3sT5vW7 to call it", "eyZ9aB3dE5gH7j" + "K9mN1pQ3sT5vW7"),
        ),
    ),
    SecretPattern(
        "url_password",
        _rx(r"://[^\s:/?#@\[\]]*:(?P<secret>[^\s/@]+(?:@[^\s/@]+)*)@(?=[A-Za-z0-9\[])"),
        "user:password@ in URLs: only the password goes (it may hold # ? @); scheme, user, host stay",
        ("://",),
        _url_password,
        examples=(
            (
                "why does this fail? 🤔\npostgres://app:M5e7ds5T0v*Nm_2@db.internal:5432/app\nit worked yesterday",
                "M5e7ds5T0v*Nm_2",
            ),
        ),
        lookalikes=(
            "mongodb+srv://<username>:<password>@cluster0.example.mongodb.net/",
            "DATABASE_URL=postgres://synapse:${PGPASS}@db:5432/synapse",
            "DATABASE_URL=postgres://user:password@localhost:5432/app",
        ),
    ),
    SecretPattern(
        "url_credential",
        _rx(
            r"[?&;](?:x-amz-signature|x-goog-signature|signature|code|jsessionid|phpsessid|sessionid|session_id|appid|auth|key)="
            r"(?P<secret>(?=[a-z0-9/_.~%+-]*[0-9])[a-z0-9/_.~%+-]{16,})"
        ),
        "capabilities in a URL's query: signed-URL signatures (S3, GCS), OAuth authorization codes"
        " (?code=, 16+ characters with a digit: ?code=ABCD stays), session ids (;jsessionid=, ?PHPSESSID=)"
        " and keys named appid or auth (OpenWeather, Firebase's REST ?auth=)",
        ("signature=", "code=", "sessionid=", "phpsessid=", "session_id=", "appid=", "auth=", "key="),
        folded=True,
        examples=(
            (
                "http://localhost:8080/callback?code=4/0AX4XfWhk3J9qLm2Pz8Rt5Vw1Yb7Nc4&state=xyz",
                "4/0AX4XfWhk3J9qL" + "m2Pz8Rt5Vw1Yb7Nc4",
            ),
            (
                "https://b.s3.amazonaws.com/f?X-Amz-Signature=4f8e2a1c9b7d3e5f6a0b8c2d4e6f1a3b",
                "4f8e2a1c9b7d3e5f" + "6a0b8c2d4e6f1a3b",
            ),
            (
                "https://api.openweathermap.org/data/2.5/weather?q=Berlin&appid=cg9mq1pe8xc2oxczrohjov1h",
                "cg9mq1pe8xc2" + "oxczrohjov1h",
            ),
            (
                '"map_style_url": "https://api.maptiler.com/maps/streets/style.json?key=aski6ARDqgZmlFeqpVBG"',
                "aski6ARDqg" + "ZmlFeqpVBG",
            ),
        ),
    ),
    SecretPattern(
        "url_token_user",
        _rx(r"://(?P<secret>[A-Za-z0-9_.~-]{16,})@"),
        "a token as the whole userinfo (Sentry DSN keys, https://<token>@host): needs a digit; an ssh://"
        " URL's user is a login name, not a token",
        ("://",),
        lambda match, text: (
            None
            if re.search(r"(?:ssh|sftp|scp)\Z", text[max(0, match.start() - 8) : match.start()], re.IGNORECASE)
            else _needs_digit(match, text)
        ),
        examples=(
            (
                "je comprends pas, ça marche pas avec ça :\ngit clone https://ghp_5BKaCKvsYFJGufE"
                + "0w6HjwXmDMwmctuUHtirN@github.com/acme/infra.git",
                "ghp_5BKaCKvsYFJGufE0" + "w6HjwXmDMwmctuUHtirN",
            ),
            (
                "dsn https://3f9a8b7c6d5e4f3" + "a2b1c0d9e8f7a6b5c@o450123.ingest.sentry.io/55",
                "3f9a8b7c6d5e4f3a" + "2b1c0d9e8f7a6b5c",
            ),
        ),
        lookalikes=('SSH endpoint of the Job, e.g. `"ssh://687fb701029421ae5549d998@ssh.hf.jobs"`.',),
    ),
)
