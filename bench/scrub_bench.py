"""Scrubber benchmark: corpus figures, the 60 KB timing, linearity on adversarial input, and
Yelp's detect-secrets measured on the same corpus beside our rules.

Prints ``name: value`` lines. Run: ``.venv/bin/python bench/scrub_bench.py`` (detect-secrets is
measured only when it is installed: ``.venv/bin/pip install detect-secrets``; it is not a
dependency of huginn-chat, see docs/quality.md, "Scrubbing").

Targets: credentials_removed_pct 100, benign_intact_pct >= 98, scrub_60kb_ms <= 20
(a 60 KB paste of log and chat with three credentials; ``scrub_60kb_dense_ms`` is 60 KB of the
credential corpus itself, hundreds of secrets, every line rescanned after its redactions).
Linearity: every row's trigger repeated to 60 KB and to 600 KB; the 600 KB run must take about
ten times the 60 KB one (``worst_growth`` near 10, never near 100), and must complete.

``--against REV`` also loads the scrubber of git revision REV (its ``chunker/scrub.py`` and
``chunker/scrub_rules/``) and times both on the same 60 KB paste, interleaved, so that a shared
machine's load falls on both alike; it prints each median and their ratio (this / REV).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chunker.scrub import PATTERNS, scrub
from tests.scrub_corpus import benign, credentials, score


def _ms(func, text: str, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        func(text)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _message_of(size: int) -> str:
    """A realistic big paste: corpus messages (credentials and chat) until ``size`` characters."""
    parts: list[str] = []
    pool = [c.text for c in credentials()] + [t for _, t in benign()]
    i = 0
    while sum(len(p) + 1 for p in parts) < size:
        parts.append(pool[i % len(pool)])
        i += 7
    return "\n".join(parts)[:size]


def _paste_of(size: int) -> str:
    """A realistic big paste: a log and chat of ``size`` characters (the corpus's benign
    messages) with three credentials in it, one near the start, middle and end."""
    chat = [t for _, t in benign()]
    secrets = [c.text for c in credentials()][::150][:3]
    parts: list[str] = []
    i = 0
    while sum(len(p) + 1 for p in parts) < size:
        parts.append(chat[i % len(chat)])
        i += 1
    for n, secret in enumerate(secrets):
        parts.insert(n * len(parts) // 3 + 1, secret)
    return "\n".join(parts)[:size]


def _adversarial(size: int) -> dict[str, str]:
    seeds = {
        "eyJ": "eyJ",
        "eyJ.": "eyJaaaaaaaaa.",
        "password=": "password=",
        "url": "http://a:",
        "x://": "x://",
        "token_colon": "token: a:",
        "syt": "syt_a_",
        "begin": "-----BEGIN RSA PRIVATE KEY-----",
        "end": "QUJD\n-----END RSA PRIVATE KEY-----\n",
        "b64_lines": "QUJDRE" * 10 + "\n",
        "curl": "curl -u ",
        "mysql": "mysql ",
        "akia": "AKIA",
        "prose": "my password is ",
        "key_dash": "key-",
        "a_b": "a_b.",
        "camel": "aB",
        "digits_colon": "1234567:AA",
        "ghp": "ghp_",
        "bearer": "bearer a1",
    }
    for row in PATTERNS:
        for trigger in row.triggers:
            seeds.setdefault(f"trigger:{trigger}", trigger + "a1 ")
    return {name: (seed * (size // len(seed) + 1))[:size] for name, seed in seeds.items()}


def scrubber_at(revision: str, folder: Path):
    """The ``scrub`` function of git revision ``revision``, imported as its own package from
    ``folder`` (the two files written there), beside this checkout's."""
    root = Path(__file__).resolve().parent.parent
    package = folder / "scrub_then"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    # The rules are one module (chunker/scrub_rules.py) in older revisions, a package in newer ones.
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-tree", "-r", "--name-only", revision, "chunker/"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for path in listed:
        name = path.removeprefix("chunker/")
        if name != "scrub.py" and not name.startswith("scrub_rules"):
            continue
        source = subprocess.run(
            ["git", "-C", str(root), "show", f"{revision}:{path}"], check=True, capture_output=True, text=True
        ).stdout
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(source.replace("chunker.scrub_rules", "scrub_then.scrub_rules"), encoding="utf-8")
    sys.path.insert(0, str(folder))
    return importlib.import_module("scrub_then.scrub").scrub


def side_by_side(ours, theirs, text: str, rounds: int = 21) -> tuple[float, float]:
    """Median milliseconds of each scrub on ``text``, the two measured in turns."""
    ours_ms, theirs_ms = [], []
    for _ in range(rounds):
        for func, times in ((ours, ours_ms), (theirs, theirs_ms)):
            started = time.perf_counter()
            func(text)
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(ours_ms), statistics.median(theirs_ms)


def detect_secrets_scrubber():
    """A scrub made of detect-secrets' default plugins and filters (its file scan): every value it
    reports is cut out of the text. None when detect-secrets is not installed."""
    try:
        from detect_secrets import SecretsCollection
        from detect_secrets.settings import default_settings
    except ImportError:
        return None

    def ds_scrub(text: str) -> str:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "message.txt"
            path.write_text(text, encoding="utf-8")
            found = SecretsCollection()
            with default_settings():
                found.scan_file(str(path))
            values = {s.secret_value for ss in found.data.values() for s in ss if s.secret_value}
        for value in sorted(values, key=len, reverse=True):
            text = text.replace(value, "[redacted:ds]")
        return text

    return ds_scrub


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="REV", help="time this scrubber beside the one of git revision REV")
    args = parser.parse_args()
    if args.against:
        with tempfile.TemporaryDirectory() as folder:
            then = scrubber_at(args.against, Path(folder))
            paste = _paste_of(60_000)
            now_ms, then_ms = side_by_side(scrub, then, paste)
            print(f"scrub_60kb_ms_this: {now_ms:.2f}")
            print(f"scrub_60kb_ms_{args.against}: {then_ms:.2f}")
            print(f"scrub_60kb_ratio_this_over_{args.against}: {now_ms / then_ms:.2f}")
            dense = _message_of(60_000)
            now_ms, then_ms = side_by_side(scrub, then, dense, 9)
            print(f"scrub_60kb_dense_ms_this: {now_ms:.2f}")
            print(f"scrub_60kb_dense_ms_{args.against}: {then_ms:.2f}")
        return
    ours = score(scrub)
    kinds = {c.kind for c in credentials()}
    print(f"corpus_credentials: {ours.credentials}")
    print(f"corpus_credential_kinds: {len(kinds)}")
    print(f"corpus_benign: {ours.benign}")
    print(f"credentials_removed_pct: {ours.removed_pct:.1f}")
    print(f"benign_intact_pct: {ours.intact_pct:.1f}")
    for kind, _text, pieces in ours.leaks:
        print(f"leak: {kind}: {pieces[:3]}")
    for kind, text, _out in ours.eaten:
        print(f"eaten: {kind}: {text[:60]!r}")

    paste = _paste_of(60_000)
    print(f"scrub_60kb_ms: {_ms(scrub, paste, 9):.2f}")
    big = _message_of(60_000)
    print(f"scrub_60kb_dense_ms: {_ms(scrub, big, 9):.2f} ({scrub(big).count('[redacted:')} secrets)")
    plain = ("the quick brown fox jumps over the lazy dog, see #room:example.org 🙂 " * 1000)[:60_000]
    print(f"scrub_60kb_plain_ms: {_ms(scrub, plain):.2f}")
    worst_name, worst_60, growths = "", 0.0, []
    small, large = _adversarial(60_000), _adversarial(600_000)
    for name in small:
        t60 = _ms(scrub, small[name], 3)
        if t60 > worst_60:
            worst_name, worst_60 = name, t60
        if t60 >= 1.0:  # below a millisecond the ratio is noise
            growths.append((_ms(scrub, large[name], 1) / t60, name))
    growths.sort(reverse=True)
    print(f"adversarial_inputs: {len(small)}")
    print(f"adversarial_60kb_worst_ms: {worst_60:.2f} ({worst_name})")
    print(f"adversarial_600kb_over_60kb_worst_growth: {growths[0][0]:.1f} ({growths[0][1]})")
    print(f"adversarial_600kb_over_60kb_median_growth: {statistics.median(g for g, _ in growths):.1f}")

    ds = detect_secrets_scrubber()
    if ds is None:
        print("detect_secrets: not installed")
        return
    from importlib.metadata import version

    theirs = score(ds)
    print(f"detect_secrets_version: {version('detect-secrets')}")
    print(f"detect_secrets_credentials_removed_pct: {theirs.removed_pct:.1f}")
    print(f"detect_secrets_benign_intact_pct: {theirs.intact_pct:.1f}")
    missed = sorted({kind for kind, _, _ in theirs.leaks})
    print(f"detect_secrets_kinds_leaked: {len(missed)}")
    eaten = sorted({kind for kind, _, _ in theirs.eaten})
    print(f"detect_secrets_benign_kinds_eaten: {', '.join(eaten)}")
    print(f"detect_secrets_60kb_ms: {_ms(ds, big, 3):.2f}")
    both = score(lambda text: ds(scrub(text)))
    print(f"ours_then_detect_secrets_benign_intact_pct: {both.intact_pct:.1f}")


if __name__ == "__main__":
    main()
