"""Scrubber rows: payment and AI providers' keys.

Owns: ``ROWS``, this family's rows in the order the engine runs them, each with its evidence
(``examples``: texts it must remove and the exact span; ``lookalikes``: texts it must leave).
Adding a rule of this family is one row here, with its evidence.

Must not: do I/O or keep any text; reorder rows without checking the scrubber's output is unchanged
(the engine merges overlapping spans under the kind of the row that runs first).
"""

from __future__ import annotations

from chunker.scrub_rules.common import _ALNUM, SecretPattern, _rx

ROWS: tuple[SecretPattern, ...] = (
    # -- payments and AI ------------------------------------------------------------------------
    SecretPattern(
        "stripe_key",
        _rx(r"(?:(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{8,}|whsec_[A-Za-z0-9]{8,})"),
        "Stripe secret and restricted keys, webhook secrets (pk_ publishable keys are public)",
        ("sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"),
        not_after=_ALNUM,
        lookalikes=("def mark_test_complete(self, node, item_index):",),
        examples=(
            (
                "je comprends pas, ça marche pas avec ça :\nuse sk_live_51aV7nCtydSpy3qusKLXXSfceBHr1aGuST2Zfdtn8yNCf"
                + "UgEPlhWtAnqUs1r1v8EdEWTMfzpPus1zia7ZYW2tzX6FYd6dOhzrW1 for now, I'll rotate it later",
                "sk_live_51aV7nCtydSpy3qusKLXXSfceBHr1aGuST2Zfdtn8yNCf"
                + "UgEPlhWtAnqUs1r1v8EdEWTMfzpPus1zia7ZYW2tzX6FYd6dOhzrW1",
            ),
        ),
    ),
    SecretPattern(
        "stripe_key",
        _rx(r"(?:pi|seti|src)_[A-Za-z0-9]{14,30}_secret_[A-Za-z0-9]{16,}"),
        "Stripe PaymentIntent / SetupIntent / Source client secrets (<id>_secret_<random>): they confirm a payment",
        ("_secret_",),
        not_after=_ALNUM,
        examples=(
            (
                "my client secret pi_1FFHUdD2793idGB6e6b2XfMO_secret_FEvScb2Z9ACdfmzmcoKuetfuU",
                "pi_1FFHUdD2793idGB6e6b2XfMO_se" + "cret_FEvScb2Z9ACdfmzmcoKuetfuU",
            ),
            (
                "je comprends pas, ça marche pas avec ça :\nuse pi_fZYUi8lL4eBVXBVeoitAjTW7_se"
                + "cret_Nxg9CYRxpA96IeYMbN23H3Zj2 for now, I'll rotate it later",
                "pi_fZYUi8lL4eBVXBVeoitAjTW7_se" + "cret_Nxg9CYRxpA96IeYMbN23H3Zj2",
            ),
        ),
    ),
    SecretPattern(
        "square_token",
        _rx(r"(?:EAAA[A-Za-z0-9_-]{40,}|sq0(?:atp|csp)-[A-Za-z0-9_-]{16,})"),
        "Square access tokens and OAuth secrets",
        ("eaaa", "sq0atp-", "sq0csp-"),
        not_after=_ALNUM,
        examples=(
            (
                "這個設定哪裡錯了？\nuse EAAAC6NdeRe368cHm0KkuJTJfWn6a_U1"
                + "bIDPeKpPH3OAR3x1Q0xcMjiVeDToWxAA for now, I'll rotate it later",
                "EAAAC6NdeRe368cHm0KkuJTJfWn6a_U1" + "bIDPeKpPH3OAR3x1Q0xcMjiVeDToWxAA",
            ),
        ),
    ),
    SecretPattern(
        "api_key",
        _rx(r"sk-(?<![A-Za-z0-9_-]sk-)(?!ssh-|ecdsa-)(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{20,}"),
        "OpenAI/Anthropic style keys (sk-, sk-proj-, sk-ant-api03-); needs a digit, so sk-learn stays,"
        " and sk-ssh-ed25519-cert-v01 (an OpenSSH security-key algorithm) is a name",
        ("sk-",),
        examples=(
            (
                'Traceback (most recent call last):\n  File "deploy.py", line 41, in <module>\n    main()\nRuntimeError: auth failed with use sk-proj-c7tH4JQXcWjRI7VGPRsrZSox0Wxjons23rth7Q6bvFJ6G4mE'
                + "T3BlbkFJE8CPiN1IP6JRA60YUKlnFytqa4T2RyaCCqMpTojVWJ3SpHm8 for now, I'll rotate it later",
                "sk-proj-c7tH4JQXcWjRI7VGPRsrZSox0Wxjons23rth7Q6bvFJ6G4mE"
                + "T3BlbkFJE8CPiN1IP6JRA60YUKlnFytqa4T2RyaCCqMpTojVWJ3SpHm8",
            ),
        ),
        lookalikes=('if data.startswith(b"sk-ssh-ed25519-cert-v01@openssh.com"):',),
    ),
    SecretPattern(
        "jwt",
        _rx(r"eyJ[A-Za-z0-9_-]*+(?P<rest>\.eyJ[A-Za-z0-9_-]*+\.?[A-Za-z0-9_-]*+)?"),
        'JSON Web Tokens (base64url {" header, {" payload, signature), glued to text or not. Every'
        " part is possessive and optional, so a match always takes the whole run and the search goes"
        " on after it: a run of eyJeyJ... is scanned once (the old rule retried it from each eyJ:"
        " quadratic); the veto keeps only header.payload shapes",
        ("eyj",),
        lambda match, text: match.span() if match.group("rest") and match.start("rest") - match.start() >= 11 else None,
        examples=(
            (
                "ok so I ran\n    use eyJhbGciOiJIUzI1Ni"
                + "IsInR5cCI6IkpXVCJ9.eyJV7Rn8q2glHNqvi5J-tkEf2GDisaeR59hncOZ1qjOeEM_6rwk-LSzJjzR9fjE9Wv3d14F7j0nW3j7jvBw.H3c_rMsAR7JDCOhtI9xMuY3BrU4FjOmSIKIF4-6Co6h for now, I'll rotate it later\nand got 401",
                "eyJhbGciOiJIUzI1Ni"
                + "IsInR5cCI6IkpXVCJ9.eyJV7Rn8q2glHNqvi5J-tkEf2GDisaeR59hncOZ1qjOeEM_6rwk-LSzJjzR9fjE9Wv3d14F7j0nW3j7jvBw.H3c_rMsAR7JDCOhtI9xMuY3BrU4FjOmSIKIF4-6Co6h",
            ),
        ),
    ),
)
