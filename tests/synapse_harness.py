"""Kept for the tests' imports: the Synapse harness lives in ``daemon/devserver.py`` (``make demo`` uses it too)."""
from daemon.devserver import *  # noqa: F401,F403
from daemon.devserver import PUPPET_PREFIX, Account, Actor, HarnessError, SynapseServer  # noqa: F401
