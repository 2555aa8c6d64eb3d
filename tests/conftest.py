"""Session-wide fixtures shared by every test file. Keep this small: fixtures that serve one
test file live in that file.

``synapse`` starts one real homeserver for the whole run, lazily (only when a test asks for it).
If it cannot start, the tests that need it fail with the server's log tail: never a skip.
Tests register their own users with unique localparts (``synapse.new_actor("alice")``), so
they never collide on the shared server.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.synapse_harness import SynapseServer


@pytest.fixture(scope="session")
def synapse() -> Iterator[SynapseServer]:
    with SynapseServer() as server:
        yield server
