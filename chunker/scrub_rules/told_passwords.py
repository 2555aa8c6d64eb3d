"""Scrubber rows: passwords told in words, in many languages.

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
    _PROSE_KEY_LEAD,
    _PROSE_PLAIN_VALUE,
    SecretPattern,
    _not_a_snake_name,
    _rx,
    refine_strong_password,
    refine_told_value,
)

ROWS: tuple[SecretPattern, ...] = (
    SecretPattern(
        "prose_secret",
        re.compile(_PROSE_KEY_LEAD + _PROSE_PLAIN_VALUE),
        "a key, token or secret told in words (the api key is 9f8e…, the password for the NAS -> X, the pw for"
        " the wifi: X), when the value is shaped like one or is one long word (a passphrase run together)",
        (
            "key",
            "token",
            "secret",
            "pass",
            "pw",
            "p/w",
            "psk",
            "pat",
            "pasword",
            "access code",
            "access-code",
            "access_code",
            "secret word",
            "magic word",
            "safe word",
            "secret-word",
            "magic-word",
            # Where a match of two words starts: so that every match opens with a trigger.
            "api key",
            "api-key",
            "api_key",
            "apikey",
            "access key",
            "access-key",
            "access_key",
            "accesskey",
            "accesscode",
            "magic_word",
            "magicword",
            "safe-word",
            "safe_word",
            "safeword",
        ),
        refine_told_value,
        not_after=_ALNUM,  # "monkey is", "bypass is": a longer word
        folded=True,
        starts_at_trigger=True,
        examples=(
            ("the master password for the keepass db is S3cr3tPassw0rd", "S3cr3tPassw0rd"),
            (
                "passphrase for the shared key is correcthorsebatterystaple (yes really)",
                "correcthorse" + "batterystaple",
            ),
            ("password for the test account -> Qwerty!234", "Qwerty!234"),
            ("the pwd is dragon1234", "dragon1234"),
            ('the password to the shared drive is "iLoveMyDog2"', "iLoveMyDog2"),
            ("new pw for the jitsi room: Rocket-Launch-22", "Rocket-L" + "aunch-22"),
            (
                "bamboo PAT for the deploy script: NjExMjY5NTg3MDQ3OqQewka0PlhmxfYzuzDbHBk1ZhpM",
                "NjExMjY5NTg3MDQ3OqQewk" + "a0PlhmxfYzuzDbHBk1ZhpM",
            ),
            (
                "verification token from the dashboard is e033b469-c6a5-47bd-aa1d-2f42944cf916, do i compare it",
                "e033b469-c6a5-47bd" + "-aa1d-2f42944cf916",
            ),
            ("passwrod for grafana is grafanaRocks!11 i think", "grafanaRocks!11"),
            ("factorio server pw changed: Lakers@2004", "Lakers@2004"),
            ("Pw for the pdf: ivory-quill-umber-dune", "ivory-quill" + "-umber-dune"),
            ("master pass for the shared vaultwarden org is bluebird0401 🙈", "bluebird0401"),
            (
                "as_token for the signal bridge = Hq3WiJnIz3xrDobTpWIUpG9W2DPddk61q2SBMSqGf0e9f5Hl",
                "Hq3WiJnIz3xrDobTpWIUpG9W" + "2DPddk61q2SBMSqGf0e9f5Hl",
            ),
            ("wifi pwd's Qwertyziggy1 btw, the 5GHz one is faster", "Qwertyziggy1"),
            ("secret word for the meetup door is persimmon, say it to the guy at the bar", "persimmon"),
            ("the pass to the pdf with last month's minutes: M@ng0_2002", "M@ng0_2002"),
            ("yo passcode for the vpn profile is sh@dow98", "sh@dow98"),
            ("the p/w is Qwertyanna1", "Qwertyanna1"),
            ("the pw to get into the discord bot dashboard is Coco1207", "Coco1207"),
            ("access code for the livestream backend is Mu$hr00m_1972", "Mu$hr00m_1972"),
            ("the magic word is iLoveLobster123", "iLoveLobster123"),
            (
                "Mastodon bot access token (@quillnote@fosstodon.org): 6Zv07C10biWqJcbIOXLWVQbrjR_CzH-XRboOOPtYZrS",
                "6Zv07C10biWqJcbIOXLWV" + "QbrjR_CzH-XRboOOPtYZrS",
            ),
        ),
        lookalikes=(
            "#   * Heap key is *negative* size (so that larger SCCs appear first).",
            "key is *never* `repr` -ed.",
            ":return: Dictionary of operator key to processor. Key is 'domain:operator (e.g. ai.onnx:Cast)'.",
            '"No modifier key is invalid.\\n"',
            "the token is rotated weekly; ask for a new token in #ops",
            "the 2FA setup key is printed under the QR code",
            "the token -> next pointer",
            "the key is (runtime_agent_id, connector type, connector name)",
            "my SSH public key for the box: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIurelgUjlBAuBaFyy00hiFD0xqZt9CrJ hanna@laptop",
            (
                "pass that client_secret to the client and use handleCardPayment to authenticate the payment:"
                " https://stripe.com/docs/stripe-js/reference#stripe-handle-card-payment"
            ),
            "the magic word is please",
            "the secret word for the meetup door is on the invite",
            "master key (public): Oc/8dnK2rJkT6JfLX44uw2TpZeXqZBoMCK7USHudDHA",
        ),
    ),
    SecretPattern(
        "prose_secret",
        _rx(
            r"(?:token|secret|api[ _-]?key|access[ _-]?key|apikey)[ \t]+[\"'`]?"
            r"(?P<secret>(?=[a-z0-9_+=-]*[0-9])(?=[a-z0-9_+=-]*[a-z])[a-z0-9_+=-]{16,})(?![a-z0-9_+=./-])"
        ),
        "a key, token or secret named without a verb (mattermost token k3j9…, ZENDESK_API_TOKEN k3J9…):"
        " 16+ letters and digits, not a snake_case name, a path, a URL or a dotted name",
        ("token", "secret", "key"),
        _not_a_snake_name,
        not_after=_ALNUM,
        folded=True,
        examples=(
            ("mattermost token k3j9qlm2pz8rt5vw1yb7nc4hd6", "k3j9qlm2pz8rt" + "5vw1yb7nc4hd6"),
            (
                "ZENDESK_API_TOKEN k3J9qLm2Pz8Rt5Vw1Yb7Nc4Hd6Fg0aQs2Wd3Ef4R",
                "k3J9qLm2Pz8Rt5Vw1Yb7" + "Nc4Hd6Fg0aQs2Wd3Ef4R",
            ),
        ),
        lookalikes=("the token count_per_window_2048 is logged",),
    ),
    SecretPattern(
        "prose_password",
        _rx(
            r"(?:try|use|default(?:[ \t]+(?:is|was|one))?|(?:set|changed|reset)[ \t]+it[ \t]+to|it['’]s|it[ \t]+is)"
            r"[ \t]+[\"'`]?(?P<secret>[^\s\"'`,;]+)"
        ),
        "a password offered without its name (try P@ssw0rd123, the default is Adm1n!2024): only a value"
        " with a capital, a small letter, a digit and a symbol, so 'try python3.11' stays",
        ("try", "use", "default", "it to", "it's", "it’s", "it is"),
        refine_strong_password,
        not_after=_ALNUM,
        folded=False,
        examples=(
            ("try P@ssw0rd123, that's the default on those boxes", "P@ssw0rd123"),
            ("the default is Adm1n!2024 on the appliance", "Adm1n!2024"),
            ("i set it to TempTemp2024!! for now so we can all get in", "TempTemp2024!!"),
            ("printer web ui wants a password, it's Ajax#2005 (the brother one)", "Ajax#2005"),
        ),
        lookalikes=(
            "cargo login --registry my-registry",
            "try python3.11 with the new venv",
            "use C++17 for the bridge, try again later",
            "the default is 8080",
            "net use Z: \\\\nas01\\media * /user:kodi",
            "Gorth, did you create a user for yourself?",
            "Can that second binary get launched without user interaction though?",
            "client('default')",
        ),
    ),
)
