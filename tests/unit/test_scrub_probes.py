"""The scrubber on the tune half of two independent writers' probes (tests/data/scrub/probes/).

Owns: the floor the tune half must keep (secrets removed, the unnamed ones among them, benign
texts byte-identical, per writer) and that the committed split is the one its seed makes. The
held-out half is never asserted: ``bench/scrub_probes.py`` reports it.
"""

from __future__ import annotations

import pytest

from bench.scrub_probes import WRITERS, half, make_split, probes, score, secret_removed, split
from chunker.scrub import scrub

# Reached on the tune half when the told-value rows came in; a change that loses one fails here.
FLOORS = {
    "writerA": {"removed": 77, "unnamed": 29, "intact": 68},
    "writerB": {"removed": 76, "unnamed": 29, "intact": 55},
}


@pytest.mark.parametrize("writer", WRITERS)
def test_the_tune_half_keeps_its_floor(writer: str) -> None:
    result = score(half(writer, "tune"), scrub)
    floor = FLOORS[writer]
    assert result.removed >= floor["removed"], result.leaks
    assert result.unnamed_removed >= floor["unnamed"], result.leaks
    assert result.intact >= floor["intact"], result.eaten


@pytest.mark.parametrize("writer", WRITERS)
def test_the_committed_split_is_the_one_its_seed_makes(writer: str) -> None:
    committed = split()[writer]
    assert committed == make_split(probes(writer))
    tune, held_out = set(committed["tune"]), set(committed["held_out"])
    assert not tune & held_out
    assert tune | held_out == {p.id for p in probes(writer)}
    for stratum in (False, True):
        ids = {p.id for p in probes(writer) if bool(p.secrets) == stratum}
        assert abs(len(ids & tune) - len(ids & held_out)) <= 1, "stratified by benign and secret"


def test_a_secret_is_removed_only_when_no_piece_of_it_survives() -> None:
    from bench.scrub_probes import Probe

    probe = Probe("x", "pw-test", "wifi: Gr4phite&Moth9", ("Gr4phite&Moth9",))
    assert secret_removed(probe, "Gr4phite&Moth9", "wifi: [redacted:told_password]")
    assert not secret_removed(probe, "Gr4phite&Moth9", "wifi: [redacted:told_password]Moth9")
    # "wifi" is the context's, not a piece of the secret that survived.
    probe = Probe("y", "pw-test", "wifi wifi1234!", ("wifi1234!",))
    assert secret_removed(probe, "wifi1234!", "wifi [redacted:told_password]")
