"""Session-wide fixtures shared by every test file. Keep this small: fixtures that serve one
test file live in that file.

``synapse`` starts one real homeserver for the whole run, lazily (only when a test asks for it).
If it cannot start, the tests that need it fail with the server's log tail: never a skip.
Tests register their own users with unique localparts (``synapse.new_actor("alice")``), so
they never collide on the shared server.
"""

from __future__ import annotations

from typing import Iterator

import os

import pytest
from hypothesis import HealthCheck, settings

from devtools.synapse import SynapseServer

# Property tests: no timing-based health checks (two loaded cores are slow, not wrong), and in CI a
# fixed seed per test, so a run is repeatable; locally each run explores new examples.
settings.register_profile("local", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", parent=settings.get_profile("local"), derandomize=True, database=None)
settings.load_profile("ci" if os.environ.get("CI") else "local")


@pytest.fixture(scope="session")
def synapse() -> Iterator[SynapseServer]:
    with SynapseServer(history_appservice=True) as server:  # bench seeding sends with ?ts=
        yield server
