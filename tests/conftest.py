"""Session-wide fixtures shared by every test file. Keep this small: fixtures that serve one
test file live in that file.

``synapse`` starts one real homeserver for the whole run, lazily (only when a test asks for it).
If it cannot start, the tests that need it fail with the server's log tail: never a skip.
Tests register their own users with unique localparts (``synapse.new_actor("alice")``), so
they never collide on the shared server.

The tiers are marked here, so no test can forget its marker: every test under tests/integration
is ``integration``, every test that uses the ``synapse`` fixture is ``synapse``. Under pytest-xdist
(``make test``: ``--dist loadfile``) a file's tests run on one worker in the file's order, so a
module-scoped fixture is built once and a test may read what an earlier one left in its state.
Each worker that runs a ``synapse`` test starts its own homeserver (seconds), so the Synapse files
spread over the cores instead of queuing on one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
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
# The fast loop (`make check` passes --hypothesis-profile=check) tries at most this many examples
# per property, whatever the test asks for: the same properties and assertions over a smaller
# search. `make test` and CI try the number each test sets.
FAST_LOOP_EXAMPLES = 25
settings.register_profile("check", parent=settings.get_profile("local"), max_examples=FAST_LOOP_EXAMPLES)

# Test directories live in memory where the machine has room: every Edge commit publishes a
# generation with an fsync of each file and Edge msyncs its maps, and on a disk those waits were
# most of the Edge tests' time (seconds a test) while proving nothing the tests assert: what they
# check is the files' content, modes and layout, and the durability tests count the fsync calls.
# `--basetemp` or PYTEST_DEBUG_TEMPROOT set by hand wins; a small /dev/shm (a container's 64 MiB)
# is not used.
MEMORY_TEMP_ROOT = Path("/dev/shm")
MEMORY_TEMP_MIN_FREE = 2 << 30


def pytest_configure(config: pytest.Config) -> None:
    if config.option.basetemp or os.environ.get("PYTEST_DEBUG_TEMPROOT"):
        return
    try:
        stat = os.statvfs(MEMORY_TEMP_ROOT)
    except OSError:
        return
    if stat.f_bavail * stat.f_frsize >= MEMORY_TEMP_MIN_FREE and os.access(MEMORY_TEMP_ROOT, os.W_OK | os.X_OK):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(MEMORY_TEMP_ROOT)


@pytest.fixture
def disk_tmp_path() -> Iterator[Path]:
    """A temporary directory on the disk, for a test that asserts what a disk does: Edge's own
    files are sparse there and fully allocated on tmpfs, where ``tmp_path`` may live."""
    path = Path(tempfile.mkdtemp(prefix="huginn-disk-", dir=tempfile.gettempdir()))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def synapse() -> Iterator[SynapseServer]:
    with SynapseServer(history_appservice=True) as server:  # bench seeding sends with ?ts=
        yield server


INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    fast_loop = settings.get_current_profile_name() == "check"
    for item in items:
        if fast_loop:
            _cap_examples(item, FAST_LOOP_EXAMPLES)
        if INTEGRATION_DIR in item.path.parents:
            item.add_marker(pytest.mark.integration)
        if "synapse" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.synapse)


def _cap_examples(item: pytest.Item, most: int) -> None:
    """A test's own ``@settings(max_examples=...)`` wins over a profile, so the cap is applied to
    the settings Hypothesis reads from the test function when it runs."""
    test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
    if not getattr(test, "is_hypothesis_test", False):
        return
    own = test._hypothesis_internal_use_settings
    if own.max_examples > most:
        test._hypothesis_internal_use_settings = settings(own, max_examples=most)
