"""Session-wide fixtures shared by every test file. Keep this small: fixtures that serve one
test file live in that file.

``synapse`` starts one real homeserver for the whole run, lazily (only when a test asks for it).
If it cannot start, the tests that need it fail with the server's log tail: never a skip.
Tests register their own users with unique localparts (``synapse.new_actor("alice")``), so
they never collide on the shared server.

The tiers are marked here, so no test can forget its marker: every test under tests/integration
is ``integration``, every test that uses the ``synapse`` fixture is ``synapse``. Under pytest-xdist
(``make test``: ``--dist loadgroup``) the ``synapse`` tests share one worker, so one homeserver
starts per run and not one per worker, and the tests that share a module-scoped fixture share a
worker, so it is built once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

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


INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in item.path.parents:
            item.add_marker(pytest.mark.integration)
        if "synapse" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.synapse)
        if item.get_closest_marker("synapse"):
            item.add_marker(pytest.mark.xdist_group("synapse"))
        elif _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.path.name))


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs[-1].scope in ("module", "package", "class") for defs in info.name2fixturedefs.values() if defs)
