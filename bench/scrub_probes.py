"""The scrubber on probes written by two independent writers who never saw its code.

Owns: the probe files (tests/data/scrub/probes/writerA.jsonl, writerB.jsonl: one JSON object a
line, ``{"id", "kind", "text", "secrets"}``; empty ``secrets`` means the text must stay
byte-identical), their split into a tune half and a held-out half (``split.json`` beside them,
made once by ``--write-split``: per writer, at random with seed 20261204, stratified by benign and
secret), and the figures per writer and half: secrets removed, the unnamed ones (passwords told
without a vendor's shape) separately, benign texts intact.

Must not: change the scrubber or the probes; choose anything by the held-out half (it is reported,
never asserted: tests/unit/test_scrub_probes.py holds the tune half to its floor).

A secret is removed when no run of 4 of its characters survives that the text around it (the text
with every listed secret cut out) did not already hold, the rule of tests/scrub_corpus.py.

Run: ``nice .venv/bin/python bench/scrub_probes.py [--against REV] [--half tune|held_out|both]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.scrub_corpus import PIECE, leaked_pieces_of, without_markers, without_secrets

PROBES = Path(__file__).resolve().parent.parent / "tests" / "data" / "scrub" / "probes"
WRITERS = ("writerA", "writerB")
SEED = 20261204


@dataclass(frozen=True)
class Probe:
    id: str
    kind: str
    text: str
    secrets: tuple[str, ...]

    @property
    def unnamed(self) -> bool:
        """A password told without a vendor's shape (the writers' own kind names say which)."""
        return self.kind.startswith(("unnamed_pw", "pw-"))


def probes(writer: str) -> list[Probe]:
    with (PROBES / f"{writer}.jsonl").open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [Probe(r["id"], r["kind"], r["text"], tuple(r["secrets"])) for r in rows]


def make_split(items: list[Probe], seed: int = SEED) -> dict[str, list[str]]:
    """Half of the benign and half of the secret probes (by id) to tune on, the rest held out."""
    rng = random.Random(seed)
    tune: list[str] = []
    held_out: list[str] = []
    for stratum in (False, True):
        ids = sorted(p.id for p in items if bool(p.secrets) == stratum)
        rng.shuffle(ids)
        tune += sorted(ids[: len(ids) // 2])
        held_out += sorted(ids[len(ids) // 2 :])
    return {"tune": tune, "held_out": held_out}


def split() -> dict[str, dict[str, list[str]]]:
    return json.loads((PROBES / "split.json").read_text(encoding="utf-8"))


def half(writer: str, name: str) -> list[Probe]:
    wanted = set(split()[writer][name])
    return [p for p in probes(writer) if p.id in wanted]


def secret_removed(probe: Probe, secret: str, scrubbed: str) -> bool:
    context = without_secrets(probe.text, probe.secrets)
    residue = without_markers(scrubbed)
    if len(secret) < PIECE:
        return residue.count(secret) <= context.count(secret)
    return not leaked_pieces_of(secret, context, residue)


@dataclass
class Score:
    secrets: int = 0
    removed: int = 0
    unnamed: int = 0
    unnamed_removed: int = 0
    benign: int = 0
    intact: int = 0
    leaks: list[tuple[str, str]] = field(default_factory=list)
    eaten: list[tuple[str, str]] = field(default_factory=list)


def score(items: list[Probe], scrub: Callable[[str], str]) -> Score:
    result = Score()
    for probe in items:
        out = scrub(probe.text)
        if not probe.secrets:
            result.benign += 1
            if out == probe.text:
                result.intact += 1
            else:
                result.eaten.append((probe.id, out))
            continue
        for secret in probe.secrets:
            gone = secret_removed(probe, secret, out)
            result.secrets += 1
            result.removed += gone
            if probe.unnamed:
                result.unnamed += 1
                result.unnamed_removed += gone
            if not gone:
                result.leaks.append((probe.id, secret))
    return result


def _line(label: str, s: Score) -> str:
    return (
        f"{label}: secrets removed {s.removed}/{s.secrets}, unnamed {s.unnamed_removed}/{s.unnamed},"
        f" benign intact {s.intact}/{s.benign}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-split", action="store_true", help="make split.json (once; refuses to redo it)")
    parser.add_argument("--against", metavar="REV", help="also score the scrubber of git revision REV")
    parser.add_argument("--half", choices=("tune", "held_out", "both"), default="both")
    parser.add_argument("--show", action="store_true", help="list the leaks and the benign texts changed")
    args = parser.parse_args(argv)
    if args.write_split:
        target = PROBES / "split.json"
        if target.exists():
            print(f"{target}: exists; a set is split once", file=sys.stderr)
            return 2
        made = {writer: make_split(probes(writer)) for writer in WRITERS}
        target.write_text(json.dumps(made, indent=1) + "\n", encoding="utf-8")
        print(f"split written: {target}")
        return 0
    from chunker.scrub import scrub

    scrubbers: list[tuple[str, Callable[[str], str]]] = [("this", scrub)]
    with tempfile.TemporaryDirectory() as folder:
        if args.against:
            from bench.scrub_bench import scrubber_at

            scrubbers.append((args.against, scrubber_at(args.against, Path(folder))))
        halves = ("tune", "held_out") if args.half == "both" else (args.half,)
        for writer in WRITERS:
            for name in halves:
                items = half(writer, name)
                for label, func in scrubbers:
                    result = score(items, func)
                    print(_line(f"{writer} {name} {label}", result))
                    if args.show and label == "this":
                        for probe_id, secret in result.leaks:
                            print(f"  leak {probe_id}: {secret!r}")
                        for probe_id, out in result.eaten:
                            print(f"  eaten {probe_id}: {out[:160]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
