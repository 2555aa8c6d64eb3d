"""Scrubber rows: private keys (PEM, PuTTY, Bitcoin, Nostr), password hashes and crypto keys.

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
    _PEM_LABEL,
    SecretPattern,
    _decodes_to_private_key,
    _not_a_header_constant,
    _pem_body_above_end,
    _pem_body_lines,
    _prefixed,
    _rx,
    _wif_key,
)

ROWS: tuple[SecretPattern, ...] = (
    # -- private keys --------------------------------------------------------------------------
    SecretPattern(
        "private_key",
        _rx(rf"-----BEGIN {_PEM_LABEL}-----(?:.*?-----END {_PEM_LABEL}-----|.*\Z)", re.DOTALL),
        "PEM/OpenSSH/PGP private keys and Element key exports, whole block; a BEGIN without END redacts to the end of text",
        ("-----begin",),
        _not_a_header_constant,
        examples=(
            (
                'KEY = (\n    b"-----BEGIN RSA PRIVATE KEY-----\\n"\n    b"MIIEpAIBAAKCAQEAx4RgE2luCoRNt/u56x+Ixcd8i6vTo2hLOVwC6nivu9/OTZS4\\n"\n)',
                '-----BEGIN RSA PRIVATE KEY-----\\n"\n    b"MIIEpAIBAAKCAQEAx4RgE2luCoRNt/u56x+Ixcd8i6vTo2hLOVwC6nivu9/OTZS4\\n"\n)',
            ),
            (
                "-----BEGIN MEGOLM SESSION DATA-----\nAXY2ZXJzaW9uIjoxLCJzZXNzaW9ucyI6W3siYWxn\n-----END MEGOLM SESSION DATA-----",
                "-----BEGIN MEGOLM SESSION DATA-----\nAXY2ZXJzaW9uIjoxLCJz"
                + "ZXNzaW9ucyI6W3siYWxn\n-----END MEGOLM SESSION DATA-----",
            ),
            (
                (
                    "-----BEGIN OpenVPN Static key V1-----\n"
                    + "f74421f5ed14e4366e430b770bec3dc8\n" * 3
                    + "-----END OpenVPN Static key V1-----"
                ),
                "-----BEGIN OpenVPN Static key V1-----\nf74421f5ed14e436"
                + "6e430b770bec3dc8\nf74421f5ed14e4366e430b770bec3dc8\nf74421f5ed14e4366e430b770bec3dc8\n-----END OpenVPN Static key V1-----",
            ),
            (
                "here it is:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZX"
                + "ktdjEAAAAABG5v\nbmUAAAAEbm9uZQAAAAAAAAAB",
                "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZX" + "ktdjEAAAAABG5v\nbmUAAAAEbm9uZQAAAAAAAAAB",
            ),
        ),
        lookalikes=(
            '        assert pem.startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----\\n")',
            '    return (\n        b"-----BEGIN OPENSSH PRIVATE KEY-----\\n"\n        + base64.encodebytes(encoded)\n        + b"-----END OPENSSH PRIVATE KEY-----\\n"\n    )',
            '        MLDSA.import_key(b"-----BEGIN PRIVATE KEY-----\\n\\xff\\xff\\n-----END PRIVATE KEY-----\\n")',
            "    The format is:\n\n        -----BEGIN OPENSSH PRIVATE KEY-----\n        <base64-encoded SSH protocol string>\n        -----END OPENSSH PRIVATE KEY-----",
            '        self.assertEqual(b"-----BEGIN OPENSSH PRIVATE KEY-----", new_key_data.splitlines()[0])',
        ),
    ),
    SecretPattern(
        "private_key",
        _rx(rf"-----END {_PEM_LABEL}-----"),
        "a PEM body pasted without its BEGIN line (it came in an earlier message): the base64 lines"
        " above an END line, found by walking back line by line (a regex would retry every line)",
        ("-----end",),
        _pem_body_above_end,
        examples=(
            (
                "-----BEGIN RSA PRIVATE KEY-----\nN5maswiOVWeETOTaHQtDK7DjUKCBHTPJ"
                + "O3AAyTvGPdETRIhJ5kgSakcHpc2/ydjC\n4rZYLC18UHVTI07kv7cAf+ZRKlLjpZpz1Nc6kJTRnXCfaZB3v/NLjkpHPRC1FJCu\nY5NNm9LL5fPULrgOiAfDQi6R91C9Rg5zRM+KR7PF4uGKQGkoE5s9UjxF92yx7FRp\n5n9ii9b+DrtuqFJKKPnT1usLwAUSavknzp8xBZkxHyARIWh7LPnMS9zuia9JkgpF\ni6ntyjgV9uJHKkxtUukB66WD950yw0Fbhg39JvTNDGsMGZsj2K6lgoGZ62zL39ex\n1Q82vx0bbs1tUWEXzci5fLPtikyM+koiYsYbQGfNZPqVMciw1C3BSYsUWw8P3cjd\n3XD/o8PIko8tz3dMQbkynXZu6qY7AcGGTDzcWop2==\n-----END RSA PRIVATE KEY-----",
                "-----BEGIN RSA PRIVATE KEY-----\nN5maswiOVWeETOTaHQtDK7DjUKCBHTPJ"
                + "O3AAyTvGPdETRIhJ5kgSakcHpc2/ydjC\n4rZYLC18UHVTI07kv7cAf+ZRKlLjpZpz1Nc6kJTRnXCfaZB3v/NLjkpHPRC1FJCu\nY5NNm9LL5fPULrgOiAfDQi6R91C9Rg5zRM+KR7PF4uGKQGkoE5s9UjxF92yx7FRp\n5n9ii9b+DrtuqFJKKPnT1usLwAUSavknzp8xBZkxHyARIWh7LPnMS9zuia9JkgpF\ni6ntyjgV9uJHKkxtUukB66WD950yw0Fbhg39JvTNDGsMGZsj2K6lgoGZ62zL39ex\n1Q82vx0bbs1tUWEXzci5fLPtikyM+koiYsYbQGfNZPqVMciw1C3BSYsUWw8P3cjd\n3XD/o8PIko8tz3dMQbkynXZu6qY7AcGGTDzcWop2==\n-----END RSA PRIVATE KEY-----",
            ),
            (
                "rest of it:\nb3BlbnNzaC1rZX"
                + "ktdjEAAAAABG5v\nbmUAAAAEbm9uZQAAAAAAAAAB\n-----END OPENSSH PRIVATE KEY-----",
                "b3BlbnNzaC1rZX" + "ktdjEAAAAABG5v\nbmUAAAAEbm9uZQAAAAAAAAAB\n-----END OPENSSH PRIVATE KEY-----",
            ),
        ),
    ),
    SecretPattern(
        "private_key",
        _rx(
            r"\n[ \t]*[A-Za-z0-9+/]{48,80}(?=[ \t]*(?:\r?\n|\Z))(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/]{48,80}(?=[ \t]*(?:\r?\n|\Z)))*"
        ),
        "two or more full PEM body lines (48-80 base64 chars, both cases and digits, not hex) on their own",
        ("\n",),
        _pem_body_lines,
        examples=(
            (
                "[2026-11-30 10:02:11] DEBUG loaded settings\n[2026-11-30 10:02:11] DEBUG 6gFPdihxr7Q8em0Pmlart+MPGIjNa8Pi"
                + "6hB9Fnsj1nPdnBPLcT0gIuy3Os4C4IM3\n3EFnQkpM3Wz/69G7HBsPHPARGw+Nzgfc6JUVmS/w2Yqt31rohLNTs9eeEPQyHCPK\nL9ppAl8xJRuHS45RD7kNnGYFT5k+CfTFn8sPufgjZ//1SqnQifnehTd/dToM4jsD\nP3dDxBmN/eicUO4VoHfj7okNgGou7NWbCOmHYftfpXJKRkdpPECv9e/+oUViT9nn\n9E09LvCq38mJie1l3BnfZ4yl7llj86K9+ID5Ahi7sjNCgqP5mPLFvSRxggjyHoKA\n[2026-11-30 10:02:12] ERROR connection refused",
                "6gFPdihxr7Q8em0Pmlart+MPGIjNa8Pi"
                + "6hB9Fnsj1nPdnBPLcT0gIuy3Os4C4IM3\n3EFnQkpM3Wz/69G7HBsPHPARGw+Nzgfc6JUVmS/w2Yqt31rohLNTs9eeEPQyHCPK\nL9ppAl8xJRuHS45RD7kNnGYFT5k+CfTFn8sPufgjZ//1SqnQifnehTd/dToM4jsD\nP3dDxBmN/eicUO4VoHfj7okNgGou7NWbCOmHYftfpXJKRkdpPECv9e/+oUViT9nn\n9E09LvCq38mJie1l3BnfZ4yl7llj86K9+ID5Ahi7sjNCgqP5mPLFvSRxggjyHoKA",
            ),
        ),
        lookalikes=(
            "A1UECxMCUkQxHDAaBgkqhkiG9w0BCQEWDXNwYW1AYWNtZS5vcmcxEzARBgNVBAcT\nCk1ldHJvcG9saXMxETAPBgNVBAgTCE5ldyBZb3JrMQswCQYDVQQGEwJVUzENMAsG\nA1UEAxMEdGVzdDAeFw0xNDA3MTExOTU3MjRaFw0xNzA0MDYxOTU3MjRaME0xCzAJ",
            "        YXJ5IGd1bms+AAECAzxsb3RzIG9mIGJpbmFyeSBndW5rPgABAgM8bG90cyBv\n        ZiBiaW5hcnkgZ3Vuaz4AAQIDPGxvdHMgb2YgYmluYXJ5IGd1bms+AAECAzxs\n        b3RzIG9mIGJpbmFyeSBndW5rPgABAgM8bG90cyBvZiBiaW5hcnkgZ3Vuaz4A",
            "> what's the wifi password?\nask ops",
        ),
    ),
    SecretPattern(
        "private_key",
        _rx(r"LS0tLS1CRUdJTi[A-Za-z0-9+/]{20,}={0,2}"),
        "a PEM private key as one base64 run (kubeconfig client-key-data, a Kubernetes secret's tls.key):"
        " base64 of '-----BEGIN' whose label says PRIVATE KEY; a certificate's (public) stays",
        ("ls0tls1crudjti",),
        _decodes_to_private_key,
        not_after=_ALNUM + "+/",
        examples=(
            (
                "    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFcEFJQkFBS0NBUUVB",
                "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBL" + "RVktLS0tLQpNSUlFcEFJQkFBS0NBUUVB",
            ),
        ),
        lookalikes=("client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM4akNDQWRxZ0F3SUJBZ0lJ",),
    ),
    SecretPattern(
        "private_key",
        _rx(
            r"private-lines:[ \t]*\d+[ \t]*\r?\n"
            r"(?P<secret>[a-z0-9+/=]+(?=[ \t]*\r?(?:\n|\Z))(?:[ \t]*\r?\n[a-z0-9+/=]+(?=[ \t]*\r?(?:\n|\Z)))*)"
        ),
        "a PuTTY key file's Private-Lines (the public lines and the comment stay)",
        ("private-lines",),
        folded=True,
        examples=(
            (
                "Private-Lines: 1\nAAAAIBk3J9qLm2Pz8Rt5Vw1Yb7Nc4Hd6Fg0aQs2Wd3Ef4Rg5T\nPrivate-MAC: 4f8e2a1c9b7d",
                "AAAAIBk3J9qLm2Pz8Rt5Vw1Y" + "b7Nc4Hd6Fg0aQs2Wd3Ef4Rg5T",
            ),
        ),
    ),
    SecretPattern(
        "password_hash",
        _rx(
            r"\$(?:2[abxy]\$\d\d\$[./A-Za-z0-9]{53}"
            r"|(?:1|5|6|apr1|md5|sha1)\$(?:rounds=\d+\$)?[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{20,}"
            r"|y\$[./A-Za-z0-9]+\$[./A-Za-z0-9]+\$[./A-Za-z0-9]{20,}"
            r"|argon2(?:id|i|d)\$v=\d+\$m=\d+,t=\d+,p=\d+\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]{16,})"
            r"|pbkdf2_sha(?:1|256)\$\d+\$[A-Za-z0-9./+]+\$[A-Za-z0-9./+=]{20,}"
        ),
        "password hashes (bcrypt $2b$, md5-crypt $1$/$apr1$, sha-crypt $5$/$6$, yescrypt $y$, argon2,"
        " Django pbkdf2): a shadow, htpasswd or Synapse users-table line is cracked offline",
        (
            "$2a$",
            "$2b$",
            "$2x$",
            "$2y$",
            "$1$",
            "$5$",
            "$6$",
            "$apr1$",
            "$md5$",
            "$sha1$",
            "$y$",
            "$argon2",
            "pbkdf2_sha",
        ),
        examples=(
            ("alice:$apr1$r31vJ7Tq$HqJZimcKQFAMYayBlzkrA/", "$apr1$r31vJ7Tq$HqJZimcKQFA" + "MYayBlzkrA/"),
            (
                "@admin:example.org | $2b$12$" + "KIXQJfT6hQ7Xc9Xl1q3b8e" * 2 + "Q3j4D2l0p",
                "$2b$12$KIXQJfT6hQ7Xc9Xl1q3b8eKIXQ" + "JfT6hQ7Xc9Xl1q3b8eQ3j4D2l0p",
            ),
        ),
        lookalikes=("echo $1$2 and $6$HOME",),
    ),
    SecretPattern(
        "crypto_private_key",
        _rx(r"[xyzt]prv[1-9A-HJ-NP-Za-km-z]{60,}"),
        "BIP32 extended private keys (xprv/yprv/zprv/tprv; the xpub is public)",
        ("xprv", "yprv", "zprv", "tprv"),
        not_after=_ALNUM,
        examples=(
            (
                "xprv9s21ZrQH143K3QTDL4LXw2F7HEK3wJUD2nW2nRk4stbPy6cq3jPPqjiChkVvvNKmPGJx",
                "xprv9s21ZrQH143K3QTDL4LXw2F7HEK3wJUD" + "2nW2nRk4stbPy6cq3jPPqjiChkVvvNKmPGJx",
            ),
        ),
    ),
    SecretPattern(
        "crypto_private_key",
        _rx(r"(?:5[HJK][1-9A-HJ-NP-Za-km-z]{49}|[KL][1-9A-HJ-NP-Za-km-z]{51})(?![A-Za-z0-9])"),
        "Bitcoin (mainnet) private keys in wallet import format, only when the base58 checksum holds (so"
        " a random 51-character id stays). No trigger: no literal. It opens with 5, K or L, which the"
        " engine skips to fast (a look-behind first would run it at every position); bounded, so linear."
        " Testnet keys (9, c: a common letter) hold nothing of value and are left",
        (),
        _wif_key,
        not_after=_ALNUM,
        examples=(
            (
                "importprivkey 5HueCGU8rMjxEXxiPuD5BDku4" + "MkFqeZyd4dZ1jvhTVqvbTLvyTJ",
                "5HueCGU8rMjxEXxiPuD5BDku4" + "MkFqeZyd4dZ1jvhTVqvbTLvyTJ",
            ),
        ),
        lookalikes=("5HueCGU8rMjxEXxiPuD5BDku4" + "MkFqeZyd4dZ1jvhTVqvbTLvyTK",),
    ),
    _prefixed(
        "crypto_private_key",
        ("nsec1",),
        "Nostr private keys (nsec1 and bech32)",
        body=r"[02-9ac-hj-np-z]{50,}",
        examples=(
            (
                "проверьте пожалуйста, что не так:\nmy nsec is nsec1t3ejpdrvcsg4lguzydxyzwhhng"
                + "a68wx0a0z9835vwd82pvpgczzn4n0z3f",
                "nsec1t3ejpdrvcsg4lguzydxyzwhhng" + "a68wx0a0z9835vwd82pvpgczzn4n0z3f",
            ),
        ),
    ),
    SecretPattern(
        "crypto_private_key",
        _rx(
            r"(?:private|priv|secret|signing)[ _-]?key[\"']?[ \t]*(?:is|:|=)?[ \t]*[\"'`]?"
            r"(?P<secret>(?:0x)?[0-9a-f]{64})(?![0-9a-z])"
        ),
        "a 64-hex private key after its label (Ethereum, a raw ed25519 seed): private key: 0x4c08…",
        tuple(f"{what}{sep}key" for what in ("private", "priv", "secret", "signing") for sep in ("", " ", "_", "-")),
        folded=True,
        examples=(
            (
                "private key: 0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318",
                "0x4c0883a69102937d6231471b5dbb620" + "4fe5129617082792ae468d01a3f362318",
            ),
            (
                "[2026-11-30 10:02:11] DEBUG loaded settings\n[2026-11-30 10:02:11] DEBUG PRIVATE_KEY 0xef4e5bf3e92eab728b91bbb57cdb8dd"
                + "750a136df3d6b7c31ca7b5da89fa571ea\n[2026-11-30 10:02:12] ERROR connection refused",
                "0xef4e5bf3e92eab728b91bbb57cdb8dd" + "750a136df3d6b7c31ca7b5da89fa571ea",
            ),
        ),
        lookalikes=(
            "sha256 of the private key file: 4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318",
        ),
    ),
    SecretPattern(
        "age_key",
        _rx(r"AGE-SECRET-KEY-1[0-9A-Z]{20,}"),
        "age encryption secret keys",
        ("age-secret-key-",),
        examples=(
            (
                "¿alguien sabe por qué no conecta? tengo esto:\n\nuse AGE-SECRET-KEY-1YMU5WJP95KWEUXJFLH4NQ"
                + "2V8DXHH7LWQFLY82ZACZGJM2W0825SGT28ES5 for now, I'll rotate it later",
                "AGE-SECRET-KEY-1YMU5WJP95KWEUXJFLH4NQ" + "2V8DXHH7LWQFLY82ZACZGJM2W0825SGT28ES5",
            ),
        ),
    ),
    SecretPattern(
        "synapse_signing_key",
        _rx(r"ed25519[ \t]+a_[A-Za-z0-9_]+[ \t]+(?P<secret>[A-Za-z0-9+/]{40,}={0,2})"),
        "a Synapse signing key file line: ed25519 a_<id> <base64 seed>",
        ("ed25519",),
        examples=(
            (
                "¿alguien sabe por qué no conecta? tengo esto:\n\ned25519 a_0j2D 6S6Fu6KE2+G+WEDL/WPht"
                + "POysmcLI17kNJRPvv5c60P",
                "6S6Fu6KE2+G+WEDL/WPht" + "POysmcLI17kNJRPvv5c60P",
            ),
        ),
    ),
    SecretPattern(
        "element_security_key",
        _rx(r"E[sS][1-9A-HJ-NP-Za-km-z]{2}(?:[ \t]+[1-9A-HJ-NP-Za-km-z]{4}){11}(?![A-Za-z0-9])"),
        "Element/Matrix secure backup recovery keys: 12 groups of 4 base58 characters starting Es",
        (),
        not_after=_ALNUM,
        examples=(
            (
                'Traceback (most recent call last):\n  File "deploy.py", line 41, in <module>\n    main()\nRuntimeError: auth failed with EsL4 3iLE 9F8x P8e7 YPC7 tT9V 4VPd xeA6 8qpK dm2f 3MQZ 9ZQg',
                "EsL4 3iLE 9F8x P8e7 YPC7 tT9V 4VPd xeA6 8qpK dm2f 3MQZ 9ZQg",
            ),
        ),
    ),
)
