"""Seeding an eval corpus mutes its users: without that, Synapse stores a notification row for
every room member with every message, and a corpus whose rooms have hundreds of members seeds
slower and slower (bench/README.md). Checked through the members' own notification lists on a
real Synapse of its own (``seed`` registers fixed users, so it cannot share the session's)."""

from __future__ import annotations

import pytest

from bench.corpus import CorpusMessage, nick_localparts
from bench.seed import seed
from devtools.synapse import Account, SynapseServer

pytestmark = pytest.mark.synapse


def test_seeded_members_are_notified_of_nothing_and_their_master_rule_is_on(tmp_path) -> None:
    nicks = ["ann", "bob", "cid"]
    # Each line names the next speaker, so a member would get mentions as well as messages.
    messages = [
        CorpusMessage(
            "#mute/0", f"mute/0:{i}", nicks[i % 3], 1_600_000_000_000 + 1000 * i, f"{nicks[(i + 1) % 3]}: line {i}"
        )
        for i in range(9)
    ]
    with SynapseServer(data_dir=tmp_path / "synapse", history_appservice=True) as server:
        record = seed(server, messages, log=lambda _: None)
        assert len(record["event_ids"]) == 9
        for localpart in nick_localparts(nicks).values():
            member = server.history_actor(Account(f"@{localpart}:{server.server_name}", ""))
            assert member.call("GET", "/_matrix/client/v3/notifications")["notifications"] == []
            rule = member.call("GET", "/_matrix/client/v3/pushrules/global/override/.m.rule.master/enabled")
            assert rule["enabled"] is True
