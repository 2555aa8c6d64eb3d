"""The reader's query embedder, and which one each index generation gets.

Owns: loading the embedder once at start-up, on a worker thread (when it fails: BM25 query vectors
alone, ``lexical_only``, when ``sparse_factory`` can supply them), calling every embedder from one
thread at a time, and fitting each generation with the embedder its index meta (model and dim)
was built with: the one loaded at start-up, or one ``model_loader(model)`` finds in the model
directory (loaded once, kept). If none matches, the generation ranks lexical-only and every search
on it says ``degraded: "model_mismatch"``; the mismatch is journalled once per (model, dim).

Must not: let a vector from another model rank a query (its nearest neighbours mean nothing),
download a model, or open or swap an index (``daemon.reader.generations`` does).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, Callable

from daemon.ports import Embedder
from daemon.reader.search import EmbedderUnavailable
from daemon.reader.serialized import Serialized

if TYPE_CHECKING:
    from daemon.reader.generations import IndexLease

DEGRADED_MODEL_MISMATCH = "model_mismatch"


class LexicalOnly:
    """Stands in for an embedder that failed to load: no dense vectors, BM25 still works."""

    def __init__(self, sparse_source: Any):
        self._sparse_source = sparse_source

    def embed(self, texts: Any) -> list[list[float]]:
        raise EmbedderUnavailable("dense embedder not loaded")

    def sparse_query(self, text: str) -> Any:
        return self._sparse_source.sparse_query(text)

    def sparse(self, texts: Any) -> Any:
        return self._sparse_source.sparse(texts)


class Embedders:
    """``embedder_factory()`` is called once (``load``); ``sparse_factory()``, if given, supplies
    BM25 query vectors should it fail. ``embedder`` is then the loaded one, and ``state`` says
    which: ``not_loaded``, ``loaded``, ``lexical_only`` or ``failed``."""

    def __init__(
        self,
        embedder_factory: Callable[[], Embedder],
        pool: Executor,
        log: Any,
        *,
        sparse_factory: Callable[[], Any] | None = None,
        model_loader: Callable[[str], Embedder | None] | None = None,
    ):
        self._embedder_factory = embedder_factory
        self._sparse_factory = sparse_factory
        self._model_loader = model_loader
        self._pool = pool
        self._log = log
        self._other_models: dict[str, Any] = {}  # model id -> serialized embedder (None: not found)
        self._mismatches_logged: set[tuple[Any, Any]] = set()
        self.embedder: Any = None
        self.state = "not_loaded"

    async def load(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            embedder = await loop.run_in_executor(self._pool, self._embedder_factory)
        except Exception as exc:  # noqa: BLE001 - serve degraded rather than not at all
            # The loader's message names paths and models, never a query: worth keeping.
            self._log.error("embedder_load_failed", error=type(exc).__name__, detail=str(exc)[:500])
            self.state = "failed"
            if self._sparse_factory is not None:
                try:
                    sparse = await loop.run_in_executor(self._pool, self._sparse_factory)
                except Exception as sparse_exc:  # noqa: BLE001
                    self._log.error("sparse_load_failed", error=type(sparse_exc).__name__)
                else:
                    self.embedder = Serialized(LexicalOnly(sparse), threading.Lock())
                    self.state = "lexical_only"
            return
        self.embedder = Serialized(embedder, threading.Lock())
        self.state = "loaded"

    async def fit(self, lease: IndexLease) -> None:
        """``_match`` on a worker thread; if it fails, the lease ranks lexically."""
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, self._match, lease)
        except Exception as exc:  # noqa: BLE001 - rank lexically rather than with a wrong model
            self._log.error("embedder_fit_failed", error=type(exc).__name__, detail=str(exc)[:500])
            lease.embedder, lease.degraded = self._lexical_only(), DEGRADED_MODEL_MISMATCH

    def _match(self, lease: IndexLease) -> None:
        """Runs on a worker thread: give ``lease`` the embedder its generation was built with."""
        meta = lease.index.read_meta()
        if meta is None or self.embedder is None or self.state != "loaded":
            return  # nothing to compare, or already lexical-only (state says why)
        if (meta.model, meta.dim) == (self.embedder.model_id, self.embedder.dim):
            return
        if meta.model not in self._other_models:
            other = self._model_loader(meta.model) if self._model_loader is not None else None
            self._other_models[meta.model] = Serialized(other, threading.Lock()) if other is not None else None
        other = self._other_models[meta.model]
        if other is not None and other.dim == meta.dim:
            lease.embedder = other
            if (meta.model, meta.dim) not in self._mismatches_logged:
                self._mismatches_logged.add((meta.model, meta.dim))
                self._log.info("embedder_matched", generation=lease.generation, model=meta.model, dim=meta.dim)
            return
        lease.embedder, lease.degraded = self._lexical_only(), DEGRADED_MODEL_MISMATCH
        if (meta.model, meta.dim) not in self._mismatches_logged:
            self._mismatches_logged.add((meta.model, meta.dim))
            self._log.warning(
                "model_mismatch",
                generation=lease.generation,
                index_model=meta.model,
                index_dim=meta.dim,
                embedder_model=self.embedder.model_id,
                embedder_dim=self.embedder.dim,
            )

    def _lexical_only(self) -> Any:
        return Serialized(LexicalOnly(self.embedder), threading.Lock()) if self.embedder is not None else None
