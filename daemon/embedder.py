"""The embedder adapter: dense vectors from fastembed, sparse BM25 vectors from Qdrant Edge.

Owns: ``FastEmbedder``, the only implementation of ``daemon.ports.Embedder``. Dense vectors come
from a fastembed ``TextEmbedding`` (mean pooling and L2 normalisation from fastembed's built-in
entry for the model); sparse vectors from ``qdrant_edge.Bm25`` (built-in English stopwords and
Snowball stemmer, no files), documents and queries weighted differently, as BM25 requires, both
analysed through ``lexical_text`` (identifiers split and kept whole).

Must not: download anything when given a local model directory, let onnxruntime or the hub send
telemetry, or write under ``$HOME/.cache`` (see ``TELEMETRY_OFF`` and ``caches_into``). Only when the operator named a
model and gave no directory does fastembed fetch it (and then the operator has network). fastembed,
numpy and qdrant_edge are imported inside the class so ``import daemon.embedder`` stays cheap.

Throughput: texts are embedded in order of length and put back in input order afterwards, so a
batch holds texts of similar length and pads little (measured ~2x on the chat corpus). Batches are
small (8-32 recommended): each ~1000-char text in a batch of 32 already costs ~1-1.6 GB RSS.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Sequence

from daemon import native
from daemon.errors import OperationalError
from daemon.index.port import SparseVector

# No egress it did not ask for. onnxruntime's 1DS telemetry starts when its
# module is imported: it resolves a telemetry host, may upload a process-information event, and
# writes a device id under $XDG_CACHE_HOME or $HOME/.cache (Microsoft/DeveloperTools/.onnxruntime).
# Only ORT_DISABLE_TELEMETRY, set before that import, stops all of it (measured with onnxruntime
# 1.32); disable_telemetry_events() is called too once it is loaded. The Hugging Face Hub
# (fastembed downloads through it) has its own switches; DO_NOT_TRACK is the common one. Set at
# the import of this module: it is what imports fastembed, and through it onnxruntime.
TELEMETRY_OFF = {
    "ORT_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
    "DO_NOT_TRACK": "1",
}


def telemetry_off() -> None:
    os.environ.update(TELEMETRY_OFF)


telemetry_off()


def caches_into(cache_dir: Path, *, offline: bool) -> None:
    """Every cache a library would put under ``$HOME/.cache`` goes under ``cache_dir`` (the
    reader's private directory, the refresher's state directory) instead; with a local model the
    hub is also told it is offline, so nothing even tries to resolve a host."""
    os.environ["XDG_CACHE_HOME"] = str(cache_dir / "xdg")
    os.environ["HF_HOME"] = str(cache_dir / "huggingface")
    if offline:
        os.environ["HF_HUB_OFFLINE"] = "1"


DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MIN_BATCH_SIZE = 1
MAX_BATCH_SIZE = 64

# fastembed cannot load a model directory without these.
REQUIRED_MODEL_FILES = ("model.onnx", "tokenizer.json", "tokenizer_config.json")

SETUP_HINT = "run `make setup` (tools/fetch_model.py) to create it, or set HUGINN_CHAT_EMBED_MODEL_DIR"


class EmbedderError(OperationalError, RuntimeError):
    """The embedding model could not be loaded or used. The message names the path or model."""


# A "compound": a run of non-space characters whose word parts are joined by identifier
# punctuation (snake_case, dotted.names, /paths, a::b, kebab-case, req_123) or by case
# (camelCase, PaymentIntent) or by letter/digit boundaries (E0463 stays one part).
_COMPOUND = re.compile(r"[A-Za-z0-9]+(?:(?:[._/:\\-]+|(?<=[a-z])(?=[A-Z]))[A-Za-z0-9]+)+")
_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+[A-Za-z0-9]*")
_SPLIT = re.compile(r"[._/:\\-]+")
# Every _COMPOUND match holds one of these; most text holds none.
_MAYBE_COMPOUND = re.compile(r"[._/:\\-][A-Za-z0-9]|[a-z](?=[A-Z])")
_MAX_PARTS = 6


def lexical_text(text: str) -> str:
    """The text the BM25 leg analyses: ``text`` itself, then for every compound identifier
    (``payment_intent.last_payment_error``, ``/etc/samba/smb.conf``, ``redirectToCheckout``)
    its camelCase parts and each run of two or more adjacent parts written as one word
    (``paymentintent``, ``lastpaymenterror``, ``sambasmbconf``...). The tokenizer already
    splits on punctuation, so the parts match alone; the joined runs make a whole identifier,
    or any contiguous piece of one, match as a unit and outweigh its scattered parts. Applied
    to documents and queries alike."""
    # Most chat lines hold no compound: a cheap necessary test (a separator before a letter or
    # digit, or a lower-to-upper case change) skips _COMPOUND's backtracking scan for them (the
    # reader runs this over every message of its lexical hits, ~2 ms a query).
    if not _MAYBE_COMPOUND.search(text):
        return text
    return _expanded(text)


def _expanded(text: str) -> str:
    extra: list[str] = []
    for match in _COMPOUND.finditer(text):
        pieces = [p for p in _SPLIT.split(match.group()) if p]
        parts = [part for piece in pieces for part in (_PART.findall(piece) or [piece])]
        if len(parts) > len(pieces):
            extra.extend(parts)  # camelCase words, findable alone
        parts = [p.lower() for p in parts][:_MAX_PARTS]
        for size in range(2, len(parts) + 1):
            for start in range(0, len(parts) - size + 1):
                extra.append("".join(parts[start : start + size]))
    return text if not extra else text + "\n" + " ".join(extra)


# BM25's length normalisation ``b`` for the stored document weights (qdrant_edge's default is
# 0.75; k 1.2 and avg_len 256 stay as it sets them). Full normalisation (1.0): a window's length
# is what the layout cut (a gap, the byte bound), so a term in a short window counts for more.
# Chosen on the dev queries (bench/results.md, "BM25 length normalisation"): more first places
# at equal recall@5 and exact, and never fewer under any score fusion tried.
# Changing it changes every stored sparse vector: bump chunker.windows.CHUNK_VERSION with it.
BM25_B = 1.0


class Bm25Sparse:
    """The lexical half alone: BM25 vectors with no model to load. ``FastEmbedder`` uses it, and
    the reader falls back to it when the dense model cannot be loaded."""

    def __init__(self) -> None:
        from qdrant_edge import Bm25, Bm25Config  # qdrant_edge: off the idle refresh, which imports this module

        self._bm25 = Bm25(Bm25Config(b=BM25_B))

    def sparse(self, texts: Sequence[str]) -> list[SparseVector]:
        """BM25 document vectors (term-frequency weights), one per text, in input order."""
        if isinstance(texts, str):
            raise TypeError("sparse() takes a sequence of texts, not one string")
        return [_to_port(self._bm25.embed_document(lexical_text(text))) for text in texts]

    def sparse_query(self, text: str) -> SparseVector:
        """BM25 query vector: weight 1 per unique term (IDF is applied by the index)."""
        return _to_port(self._bm25.embed_query(lexical_text(text)))


class FastEmbedder:
    """``daemon.ports.Embedder`` over fastembed (dense) and ``qdrant_edge.Bm25`` (sparse).

    ``model_dir`` given: load exactly that directory, offline. ``model_dir`` None: let fastembed
    resolve ``model`` itself (download into ``cache_dir``), for operators who chose another model.
    ``threads`` None lets onnxruntime pick; the reader should pass 1 (lower query latency when the
    other core is busy). ``cpu_mem_arena=False`` (the reader) bounds memory after large queries.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        model_dir: Path | None = None,
        cache_dir: Path | None = None,
        threads: int | None = None,
        batch_size: int = 16,
        cpu_mem_arena: bool = True,
    ) -> None:
        if not isinstance(batch_size, int) or not MIN_BATCH_SIZE <= batch_size <= MAX_BATCH_SIZE:
            raise EmbedderError(
                f"batch_size must be an integer in {MIN_BATCH_SIZE}..{MAX_BATCH_SIZE}, got {batch_size!r}"
            )
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise EmbedderError(f"threads must be a positive integer or None, got {threads!r}")
        if cache_dir is None:
            raise EmbedderError("cache_dir is required (put it under the state dir; fastembed always creates it)")
        self.model_id = model
        self.batch_size = batch_size
        self._dense = _load_dense(
            model, Path(model_dir) if model_dir is not None else None, Path(cache_dir), threads, cpu_mem_arena
        )
        self.dim = _dimension_of(self._dense, model)
        self._lexical = Bm25Sparse()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-length dense vectors, one per text, in input order."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one string")
        if not texts:
            return []
        by_length = sorted(range(len(texts)), key=lambda position: len(texts[position]))
        ordered_texts = [texts[position] for position in by_length]
        try:
            rows = list(self._dense.embed(ordered_texts, batch_size=self.batch_size))
        except Exception as error:  # onnxruntime / tokenizers raise their own types
            raise EmbedderError(f"embedding with {self.model_id} failed: {error}") from error
        if len(rows) != len(texts):
            raise EmbedderError(f"embedding with {self.model_id} returned {len(rows)} vectors for {len(texts)} texts")
        vectors: list[list[float]] = [[] for _ in texts]
        for position, row in zip(by_length, rows):
            vectors[position] = row.tolist()
        return vectors

    def sparse(self, texts: Sequence[str]) -> list[SparseVector]:
        return self._lexical.sparse(texts)

    def sparse_query(self, text: str) -> SparseVector:
        return self._lexical.sparse_query(text)


def _load_dense(model: str, model_dir: Path | None, cache_dir: Path, threads: int | None, arena: bool = True) -> Any:
    telemetry_off()
    caches_into(cache_dir, offline=model_dir is not None)
    # After the environment above (onnxruntime reads its telemetry switch as it is imported), and
    # fastembed, onnxruntime and numpy load only when a model does: never on an idle refresh.
    import onnxruntime
    from fastembed import TextEmbedding

    onnxruntime.disable_telemetry_events()
    # onnxruntime's CPU arena keeps the peak of the largest batch it ever ran for the life of the
    # session; a long-running reader turns it off (fastembed passes this one session option on).
    options: dict[str, Any] = {} if arena else {"enable_cpu_mem_arena": False}

    if model_dir is None:
        try:
            return _own_session(
                TextEmbedding(model, cache_dir=str(cache_dir), threads=threads, lazy_load=True, **options),
                threads,
                arena,
            )
        except Exception as error:
            raise EmbedderError(
                f"could not load embedding model {model!r} through fastembed (no local model dir was given, "
                f"so it must be downloadable): {error}"
            ) from error

    if not model_dir.is_dir():
        raise EmbedderError(f"embedding model directory {model_dir} does not exist; {SETUP_HINT}")
    missing = [name for name in REQUIRED_MODEL_FILES if not (model_dir / name).is_file()]
    if missing:
        raise EmbedderError(
            f"embedding model directory {model_dir} is incomplete (missing {', '.join(missing)}); {SETUP_HINT}"
        )
    try:
        return _own_session(
            TextEmbedding(
                model,
                specific_model_path=str(model_dir),
                cache_dir=str(cache_dir),
                threads=threads,
                lazy_load=True,
                **options,
            ),
            threads,
            arena,
        )
    except Exception as error:
        raise EmbedderError(
            f"could not load embedding model {model!r} from {model_dir}: {error}; {SETUP_HINT}"
        ) from error


# onnxruntime's intra-op threads spin between and after parallel steps by default. With the
# homeserver and the refresher's own reading on the same cores that spinning takes the CPU the
# others need and the embedder then waits for them: 640 short texts on 2 busy cores took 24 s
# without spinning against 42 s with it (and 7 against 12 CPU seconds; docs/performance.md,
# bench/results.md). A session of one thread (the reader's) has no pool, so this changes nothing there.
SPINNING = "session.intra_op.allow_spinning"


def _own_session(dense: Any, threads: int | None, arena: bool) -> Any:
    """``dense`` (made with ``lazy_load=True``: fastembed has found the model and loaded no session)
    with its onnxruntime session made here: fastembed's own options (every graph optimisation, the
    threads, the arena) plus intra-op spinning and memory patterns off, which fastembed does not
    pass on. Made once: fastembed's session built first and replaced raised the reader's start-up
    high-water mark by ~30 MB (its transient, then this one's). A fastembed whose layout differs
    loads its own session, as it would have. CPU only, as the embedder everywhere here."""
    import onnxruntime  # only once a model loads, after _load_dense set its telemetry switch

    inner: Any = getattr(dense, "model", None)
    model_dir = getattr(inner, "_model_dir", None)
    description = getattr(inner, "model_description", None)
    ensure_tokenizer = getattr(inner, "_ensure_tokenizer", None)
    if model_dir is None or description is None or not callable(ensure_tokenizer):
        load = getattr(inner, "load_onnx_model", None)
        if callable(load) and getattr(inner, "model", None) is None:
            load()
        return dense
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = threads
    options.enable_cpu_mem_arena = arena
    options.add_session_config_entry(SPINNING, "0")
    # Memory patterns are planned and kept per input shape, and chat lines come in every length,
    # so nearly every batch is a new shape: with the arena the refresher grew without bound
    # (4,800 varied lines: 1.1 GB and still rising with patterns, a 729 MB plateau without; the
    # same CPU time). docs/performance.md, bench/results.md.
    options.enable_mem_pattern = False
    ensure_tokenizer()
    inner.model = onnxruntime.InferenceSession(
        str(Path(model_dir) / description.model_file), sess_options=options, providers=["CPUExecutionProvider"]
    )
    native.malloc_trim()
    return dense


def _dimension_of(dense: Any, model: str) -> int:
    """fastembed's own description when it lists the model; otherwise the length of one probe."""
    try:
        return int(dense.embedding_size)
    except Exception:  # noqa: BLE001 - not listed (or not a number): the probe below decides
        pass
    try:
        probe = next(iter(dense.embed(["dimension probe"], batch_size=1)))
    except Exception as error:
        raise EmbedderError(f"could not determine the dimension of {model!r}: {error}") from error
    return int(len(probe))


def _to_port(vector: Any) -> SparseVector:
    return SparseVector(indices=tuple(int(i) for i in vector.indices), values=tuple(float(v) for v in vector.values))
