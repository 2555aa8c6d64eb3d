"""Scrubber precision on real text nobody wrote for its tests: code, configuration and chat.

Owns: reading the corpora (the Python standard library and the installed packages' sources,
Synapse's generated sample configuration and log configuration, the IRC eval corpora), running
``chunker.scrub.find_secrets`` over them one "message" at a time, and reporting the share of
lines changed per corpus plus a reproducible sample of changes to classify by hand.

Must not: write anywhere but the sample file it is told to write; change the scrubber.

A message is what a person would paste: a 20-line block of a source file that names a
credential (password, passwd, token, secret, key), the whole generated configuration, or one
chat message. A changed line is a line of a message that a redaction touches.

Run: ``nice .venv/bin/python bench/scrub_precision.py [--sample 200] [--seed N] [--sample-out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import sysconfig
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chunker.scrub import find_secrets

_ROOT = Path(__file__).resolve().parent.parent
_IRC = sorted(Path("/work/shared/eval").glob("irc-disentanglement*/messages.jsonl"))
_NAMES_A_CREDENTIAL = re.compile(r"passw|passwd|token|secret|key", re.IGNORECASE)
_BLOCK_LINES = 20


def _source_blocks(root: Path, skip: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """Each 20-line block of each ``.py`` file under ``root`` that names a credential."""
    for path in sorted(root.rglob("*.py")):
        if any(part in skip for part in path.parts):
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        for first in range(0, len(lines), _BLOCK_LINES):
            block = "\n".join(lines[first : first + _BLOCK_LINES])
            if _NAMES_A_CREDENTIAL.search(block):
                yield f"{path.relative_to(root)}:{first + 1}", block


def _synapse_config() -> Iterator[tuple[str, str]]:
    """Synapse's generated homeserver.yaml (secrets generated, as a new server has them) and its
    default log configuration."""
    from synapse.config.homeserver import HomeServerConfig
    from synapse.config.logger import DEFAULT_LOG_CONFIG

    config = HomeServerConfig()
    yield (
        "homeserver.yaml",
        config.generate_config(
            config_dir_path="/etc/synapse",
            data_dir_path="/var/lib/synapse",
            server_name="example.com",
            generate_secrets=True,
            report_stats=False,
        ),
    )
    yield "log.config", DEFAULT_LOG_CONFIG.substitute(log_file="/var/log/synapse/homeserver.log")


def _irc() -> Iterator[tuple[str, str]]:
    for path in _IRC:
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                message = json.loads(line)
                yield f"{path.parent.name}:{message['id']}", message["body"]


def corpora() -> dict[str, Iterator[tuple[str, str]]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    purelib = Path(sysconfig.get_paths()["purelib"])
    return {
        "stdlib": _source_blocks(stdlib, skip=("site-packages",)),
        "site_packages": _source_blocks(purelib),
        "synapse_config": _synapse_config(),
        "irc": _irc(),
    }


def changed_lines(text: str) -> list[tuple[int, str, str]]:
    """Per line a redaction touches: its number, the kinds, and the line with each span shown."""
    spans = find_secrets(text)
    if not spans:
        return []
    starts = [0]
    for n, char in enumerate(text):
        if char == "\n":
            starts.append(n + 1)
    touched: dict[int, list[tuple[str, int, int]]] = {}
    for kind, start, end in spans:
        for number, line_start in enumerate(starts):
            line_end = starts[number + 1] - 1 if number + 1 < len(starts) else len(text)
            if start <= line_end and end > line_start:
                touched.setdefault(number, []).append((kind, start, end))
    out = []
    for number, hits in sorted(touched.items()):
        line_start = starts[number]
        line_end = starts[number + 1] - 1 if number + 1 < len(starts) else len(text)
        line = text[line_start:line_end]
        shown = line
        for _kind, start, end in sorted(hits, key=lambda h: -h[1]):
            a, b = max(start, line_start) - line_start, min(end, line_end) - line_start
            shown = shown[:a] + "⟦" + shown[a:b] + "⟧" + shown[b:]
        out.append((number, ",".join(sorted({k for k, _, _ in hits})), shown))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=200, help="changes to write for classification")
    parser.add_argument("--sample-out", type=Path, default=Path("/tmp/scrub_precision_sample.jsonl"))
    parser.add_argument("--all-out", type=Path, default=None, help="write every change here too")
    parser.add_argument("--only", default=None, help="comma-separated corpus names")
    parser.add_argument("--seed", type=int, default=29, help="the sample's random seed")
    args = parser.parse_args(argv)
    changes: list[dict[str, object]] = []
    total_lines = total_changed = 0
    for name, messages in corpora().items():
        if args.only and name not in args.only.split(","):
            continue
        lines = changed_count = count = 0
        for where, text in messages:
            count += 1
            lines += text.count("\n") + 1
            for number, kinds, shown in changed_lines(text):
                changed_count += 1
                changes.append({"corpus": name, "where": f"{where}+{number}", "kinds": kinds, "line": shown[:300]})
        total_lines += lines
        total_changed += changed_count
        share = 100 * changed_count / lines if lines else 0.0
        print(f"{name}: messages {count} lines {lines} changed {changed_count} ({share:.4f}%)")
    print(f"total: lines {total_lines} changed {total_changed}")
    rng = random.Random(args.seed)
    sample = rng.sample(changes, min(args.sample, len(changes)))
    args.sample_out.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in sample), encoding="utf-8")
    if args.all_out:
        args.all_out.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in changes), encoding="utf-8")
    print(f"sample: {len(sample)} changes written to {args.sample_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
