"""`make demo` end to end: the same ``run_demo`` the Makefile runs, on its own throwaway Synapse.

Every assertion is on the text a person running ``make demo`` reads: the refusals with their
reasons, search hits from the room that holds the answer, the window lookup, and what must never
show (the pasted secrets, the deleted message, anything from a refused room).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from devtools import demo

HEADER = re.compile(r"^== \d+\. (.*?) =+$", re.MULTILINE)


def _sections(output: str) -> dict[str, str]:
    """Section title -> the text under it, as the demo prints them."""
    parts = HEADER.split(output)
    return {title: body for title, body in zip(parts[1::2], parts[2::2])}


def _section(sections: dict[str, str], starts: str) -> str:
    matching = [body for title, body in sections.items() if title.startswith(starts)]
    assert len(matching) == 1, (starts, list(sections))
    return matching[0]


def _hit_rooms(body: str) -> list[str]:
    """The alias of each hit, from its header line: ``[n] <room name> (<alias>, <room id>)``."""
    headers = re.findall(r"^\s+\[\d+\] (.*)$", body, re.MULTILINE)
    return [found.group(1) for line in headers if (found := re.search(r"(#[^\s,()]+)", line))]


@pytest.fixture(scope="module")
def demo_run() -> tuple[int, str]:
    out = io.StringIO()
    code = demo.run_demo(out=out, keep=False)
    return code, out.getvalue()


@pytest.mark.synapse
def test_the_demo_succeeds_and_cleans_up(demo_run):
    code, output = demo_run
    assert code == 0, output[-4000:]
    data_dir = re.search(r"working directory (\S+)", output)
    assert data_dir, output[:2000]
    assert not Path(data_dir.group(1)).exists(), "the demo left its temporary directory behind"
    assert "DEMO FAILED" not in output


@pytest.mark.synapse
def test_every_refusal_is_shown_with_its_reason(demo_run):
    _, output = demo_run
    refresh = _section(_sections(output), "Refresh")
    for alias, reason in [
        ("DM with @maya", "dm"),
        ("#discord-makers:riverside.test", "bridged"),
        ("#gaming-night:riverside.test", "bridged"),
        ("#board:riverside.test", "encrypted"),
        ("#members:riverside.test", "excluded"),
    ]:
        assert f"refused  {alias} (reason: {reason} — signal " in refresh, (alias, refresh)
    assert "puppet_member" in refresh and "m.bridge" in refresh
    # Decided before joining: no refused room is ever joined (nor left: it was never entered) ...
    for alias in (
        "DM with @maya",
        "#discord-makers:riverside.test",
        "#board:riverside.test",
        "#members:riverside.test",
        "#gaming-night:riverside.test",
    ):
        assert f"joined   {alias}" not in refresh and f"left     {alias}" not in refresh, (alias, refresh)
    for alias in (
        "DM with @maya",
        "#discord-makers:riverside.test",
        "#board:riverside.test",
        "#members:riverside.test",
    ):
        line = next(line for line in refresh.splitlines() if f"refused  {alias} " in line)
        assert line.endswith("— before joining: never joined"), line
    # ... and the room the operator put the service user in is refused from inside, and kept.
    assert re.search(r"refused  #gaming-night:riverside.test .* — the operator's room: not left", refresh)
    joined_line = next(line for line in refresh.splitlines() if "@huginn is now joined to:" in line)
    assert sorted(joined_line.split(": ", 1)[1].split(", ")) == sorted(
        f"#{name}:riverside.test" for name in ("general", "garden", "infra", "bookclub", "gaming-night")
    )
    for alias in ("#general", "#garden", "#infra", "#bookclub"):
        assert f"admitted {alias}:riverside.test" in refresh
    assert re.search(r"run summary: 4 rooms admitted, 5 refused, 0 failed; \d+ events read, [1-9]\d* windows", refresh)


@pytest.mark.synapse
def test_searches_find_the_room_that_holds_the_answer(demo_run):
    _, output = demo_run
    sections = _sections(output)
    wifi = _section(sections, "By meaning: 'problems with the wifi'")
    assert _hit_rooms(wifi)[0] == "#infra:riverside.test", wifi
    assert "The internet keeps dropping in the workshop" in wifi  # found by meaning: no shared word
    tools = _section(sections, "By meaning: 'who is bringing tools")
    assert "#general:riverside.test" in _hit_rooms(tools)
    assert "cordless drill" in tools

    exact = _section(sections, "By exact word: an error code")
    assert _hit_rooms(exact)[0] == "#infra:riverside.test"
    marked = r"^\s+> .*ERR_CONN_RESET.*  \((dense|lexical)(\+lexical)?\)\n\s+\$\S+  https://matrix\.to/#/!"
    assert re.search(marked, exact, re.MULTILINE), exact
    ticket = _section(sections, "By exact word: a ticket number")
    assert re.search(r"^\s+> .*ticket #4521", ticket, re.MULTILINE), ticket

    fused = _section(sections, "Several texts at once")
    assert _hit_rooms(fused)[0] == "#garden:riverside.test"
    filtered = _section(sections, "Filtered to one room")
    assert "--room '#bookclub:riverside.test'" in filtered
    assert set(_hit_rooms(filtered)) == {"#bookclub:riverside.test"}
    listing = _section(sections, "A listing, oldest first")
    assert "more: repeat with --cursor " in listing and len(_hit_rooms(listing)) == 2
    # The seeded history carries its own dates (spring 2025), not the minute it was sent.
    assert re.search(r"^\s+2025-03-2\d \d\d:\d\d:\d\d UTC  .*\(@", listing, re.MULTILINE), listing


@pytest.mark.synapse
def test_the_window_lookup_shows_the_cited_message_among_its_neighbours(demo_run):
    _, output = demo_run
    window = _section(_sections(output), "A cited message and its neighbours")
    cited = re.search(r"huginn-chat window '(\$\S+)'", window)
    assert cited, window
    assert "(#infra:riverside.test, " in window
    lines = window.splitlines()
    marked = [i for i, line in enumerate(lines) if line.lstrip().startswith("> ")]
    assert len(marked) == 1 and "ERR_CONN_RESET" in lines[marked[0]] and cited.group(1) in lines[marked[0] + 1]
    assert "The internet keeps dropping" in window  # a neighbour before it
    assert "access point above the laser cutter" in window  # a neighbour after it


@pytest.mark.synapse
def test_secrets_deleted_text_and_refused_rooms_never_show(demo_run):
    _, output = demo_run
    assert "[redacted:github_token]" in output and "[redacted:password]" in output
    for secret in demo.SECRETS.values():
        assert secret not in output
    assert demo.REDACTED_TEXT not in output
    assert demo.EDITED_TO in output and demo.EDITED_FROM not in output
    for key in demo.REFUSED_ROOMS:
        for thread in demo.THREADS[key]:
            for step in thread:
                if isinstance(step, demo.Say):
                    assert step.text not in output, (key, step.text)
    checks = _section(_sections(output), "What the index holds")
    assert checks.count("\n  ok  ") == 5 and "NOT" not in checks


# Without a homeserver: the seeded conversation and the failure path.


def test_the_operator_view_matches_the_refresh(demo_run):
    _, output = demo_run
    view = _section(_sections(output), "The operator's view")
    assert "4 admitted, 5 refused, 0 undecided" in view
    assert re.search(r"#members:\S+\s+refused\s+excluded", view)
    assert re.search(r"#infra:\S+\s+admitted", view)
    assert "generation  1, published" in view
    assert "4 admitted, 5 refused, 0 failed" in view


def test_the_conversation_is_the_same_every_time_and_in_time_order():
    first, second = demo.conversation(), demo.conversation()
    assert first == second
    messages = [step for steps in first.values() for step in steps if isinstance(step, demo.Say)]
    assert 200 <= len(messages) <= 400
    for room, steps in first.items():
        stamps = [step.at_ms for step in steps if not isinstance(step, demo.Redact)]
        assert all(stamps) and stamps == sorted(stamps), room
    assert demo.conversation(seed=1) != first


def test_a_failed_step_says_which_and_leaves_nothing_behind(monkeypatch):
    from devtools import synapse as devserver

    def broken_start(self):
        raise RuntimeError("Synapse exited with code 1 before it was ready; log tail:\nboom")

    monkeypatch.setattr(devserver.SynapseServer, "start", broken_start)
    out = io.StringIO()
    assert demo.run_demo(out=out) == demo.EXIT_FAILED
    output = out.getvalue()
    assert "DEMO FAILED at step 'synapse': Synapse exited with code 1 before it was ready" in output
    data_dir = re.search(r"working directory (\S+)", output)
    assert data_dir and not Path(data_dir.group(1)).exists()
