"""One caller at a time for an object whose library promises no more.

Owns: ``Serialized``, which calls every method of the object it wraps under one lock. The reader
wraps each index reader and each embedder in one: neither qdrant-edge nor fastembed says it may be
called from several threads at once, while requests on different generations run in parallel.

Must not: queue, time out or retry a call; hold the lock across anything but the call itself.
"""

from __future__ import annotations

import threading
from typing import Any


class Serialized:
    """Calls every method of ``target`` under one lock: neither qdrant-edge nor fastembed says
    it may be called from several threads at once."""

    def __init__(self, target: Any, lock: threading.Lock):
        self._target = target
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return value(*args, **kwargs)

        return locked
