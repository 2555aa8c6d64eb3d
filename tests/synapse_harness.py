"""Kept for the tests' imports: the Synapse harness lives in ``devtools/synapse.py`` (``make demo`` uses it too)."""
from devtools.synapse import *  # noqa: F401,F403
from devtools.synapse import PUPPET_PREFIX, Account, Actor, HarnessError, SynapseServer  # noqa: F401
