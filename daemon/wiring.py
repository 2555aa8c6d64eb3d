"""Wiring: settings in, adapters built, one command run.

Owns: process start-up. Choosing the adapters from the settings (Edge or server index, the local
or named model, the homeserver), and the glue of `refresh`, `serve` (the index opener, the
embedder factories, the reader service), `follow` and `purge` (`rooms` and `status` live in
``daemon/cli/operator_view.py``): `follow` runs each refresh as a child process forked from
itself, under the refresh lock, so a refresh it starts is the very cycle `refresh` runs, with
its imports already done.

Must not: hold logic of its own that a test would want to reach without a homeserver — that
lives in ``daemon/refresher/``, ``daemon/reader/``, ``scope`` and ``chunker``; nor import an index
writer or the refresher's run at module level: `serve` runs from here and the reader process must
not load a write path (``tests/unit/test_read_side_imports.py`` holds that). Nothing under
``daemon/reader/`` or ``daemon/refresher/`` imports this module (``lint-imports``).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, TextIO, cast

from chunker import chat_version
from chunker.fold import Bounds
from daemon.config import CONFIG_FILE_ENV, ConfigError, Settings, load_settings, read_secret_file, read_token
from daemon.embedder import Bm25Sparse, EmbedderError, FastEmbedder
from daemon.errors import EXIT_FAILED, EXIT_OK, HuginnError, OperationalError, UsageError
from daemon.index.port import IndexReader, IndexUnreadableError
from daemon.ports import Embedder
from daemon.refresher.follow import FollowConfig, FollowLoop
from daemon.refresher.idle import file_digest, file_mark, refresh_cycle, settings_digest
from daemon.refresher.progress import TtyProgress
from daemon.refresher.purges import PURGES_FILE, add_purge
from daemon.refresher.refresh_lock import RefreshLock
from daemon.refresher.retry import RetryPolicy
from daemon.refresher.run_report import RunReport
from daemon.refresher.stopping import STOP_SIGNALS, StopRequest
from daemon.refresher.summary import RunSummary
from daemon.refresher.sync_probe import SyncProbe
from daemon.refresher.sync_state import RunMarks
from daemon.safe_files import PlantedLinkError, require_writable_dir
from scope import Policy, PolicyError, is_alias, is_room_id


def make_policy(settings: Settings) -> Policy:
    try:
        return Policy.build(
            allowed=tuple(settings.rooms),
            exclude=tuple(settings.exclude_rooms),
            bridge_sender_patterns=tuple(settings.bridge_senders),
        )
    except PolicyError as exc:
        setting = {"allowed": "rooms", "exclude": "exclude_rooms", "bridge_sender_patterns": "bridge_senders"}
        raise ConfigError(setting.get(exc.field.split("[")[0], exc.field), str(exc)) from exc


def make_bounds(settings: Settings) -> Bounds:
    return Bounds(max_bytes=settings.window_max_bytes, max_gap_ms=settings.window_max_gap_s * 1000)


def qdrant_client(settings: Settings):
    """A client for the configured Qdrant server, with the key from ``qdrant_api_key_file``
    (the refresher's unit gives it a read-write key, the reader's a read-only one)."""
    # qdrant_client (about 2 s to import) loads only where a Qdrant server is configured.
    from daemon.index.remote import connect

    assert settings.qdrant_url, "only called when qdrant_url is set"
    key = (
        read_secret_file(settings.qdrant_api_key_file, "qdrant_api_key_file") if settings.qdrant_api_key_file else None
    )
    return connect(settings.qdrant_url, key)


def open_index_writer(settings: Settings):
    # Here, not at the top: no index writer in the reader process (it runs `serve` from this
    # module), and qdrant_client or qdrant_edge loads only on a full refresh, never an idle one.
    if settings.qdrant_url:
        from daemon.index.remote_writer import RemoteIndexWriter

        return RemoteIndexWriter(
            qdrant_client(settings),
            settings.qdrant_collection,
            shard_number=settings.qdrant_shard_number,
            replication_factor=settings.qdrant_replication_factor,
        )
    from daemon.index.edge_writer import EdgeIndexWriter

    return EdgeIndexWriter(edge_index_root(settings))


def edge_index_root(settings: Settings) -> Path:
    """The embedded index: the refresher's working shard and the generations it publishes."""
    return Path(settings.state_dir) / "index"


def reader_private_dir(settings: Settings) -> Path:
    """The reader's own writable directory (its copy of a generation, fastembed's cache): the
    state directory is read-only to the reader."""
    return Path(settings.reader_private_dir or Path(settings.state_dir) / "reader")


def open_embedder(
    settings: Settings,
    *,
    threads: int | None = None,
    cache_dir: Path | None = None,
    cpu_mem_arena: bool = True,
    batch_size: int | None = None,
) -> FastEmbedder:
    return FastEmbedder(
        model=settings.embed_model,
        model_dir=settings.embed_model_dir,
        cache_dir=cache_dir or Path(settings.state_dir) / "fastembed-cache",
        threads=threads if threads is not None else settings.embed_threads,
        batch_size=batch_size if batch_size is not None else settings.embed_batch_size,
        cpu_mem_arena=cpu_mem_arena,
    )


# Query texts are embedded one at a time (make_embedder_factory says why).
QUERY_BATCH_SIZE = 1


def make_index_opener(settings: Settings) -> Callable[[], IndexReader | None]:
    """The Qdrant server (read-only key) when ``qdrant_url`` is set, else the newest published
    Edge generation, copied into the reader's private directory."""
    if settings.qdrant_url:

        def open_server() -> IndexReader | None:
            from daemon.index.remote_reader import RemoteIndexReader  # qdrant_client: only when serving from it

            return RemoteIndexReader(qdrant_client(settings), settings.qdrant_collection)

        return open_server

    leftovers_discarded = False
    unreadable: IndexUnreadableError | None = None

    def open_edge() -> IndexReader | None:
        nonlocal leftovers_discarded, unreadable
        # qdrant_edge loads only when the reader opens a generation, never on a refresh.
        from daemon.index.edge import read_current
        from daemon.index.edge_reader import EdgeIndexReader

        private_dir = reader_private_dir(settings)
        root = edge_index_root(settings)
        if not leftovers_discarded:
            # The first open comes after ReaderService.start() took the socket, so no other reader
            # uses the private directory: copies left there by one that died without closing would
            # otherwise pile up, and a live reader's copies are never touched.
            EdgeIndexReader.discard_copies(private_dir)
            leftovers_discarded = True
        if unreadable is not None and unreadable.generation is not None:
            # A generation never changes once published: one that did not open will not, and
            # copying it again at every check would cost its whole size each time.
            try:
                unchanged = read_current(root) == unreadable.generation
            except Exception:  # noqa: BLE001 - open_latest says what is wrong with CURRENT
                unchanged = False
            if unchanged:
                raise IndexUnreadableError(unreadable.generation, unreadable.where, unreadable.reason)
        try:
            return EdgeIndexReader.open_latest(root, private_dir)
        except IndexUnreadableError as exc:
            unreadable = exc
            raise

    return open_edge


def make_embedder_factory(settings: Settings) -> Callable[[], Embedder]:
    def load() -> Embedder:
        # No onnxruntime arena: the reader's RSS must come back down after a max-size query. One
        # text per run: a batch of eight 1,000-byte texts padded together raised the peak sharply
        # (attention over the whole padded batch), and with one thread a batch is no faster.
        return open_embedder(
            settings,
            threads=1,
            cache_dir=reader_private_dir(settings) / "fastembed-cache",
            cpu_mem_arena=False,
            batch_size=QUERY_BATCH_SIZE,
        )

    return load


def make_model_loader(settings: Any) -> Callable[[str], Embedder | None]:
    """Loads another model a generation was built with, when the model directory's parent holds
    it (``<models>/<last part of the model id>/model.onnx``, as ``make setup`` lays them out).
    Never downloads: None when it is not there."""

    def load(model: str) -> Embedder | None:
        base = getattr(settings, "embed_model_dir", None)
        if not base or not model:
            return None
        candidate = Path(base).parent / model.rstrip("/").rsplit("/", 1)[-1]
        if not (candidate / "model.onnx").is_file():
            return None
        return FastEmbedder(
            model=model,
            model_dir=candidate,
            cache_dir=reader_private_dir(settings) / "fastembed-cache",
            threads=1,
            batch_size=QUERY_BATCH_SIZE,
            cpu_mem_arena=False,
        )

    return load


def make_sparse_factory() -> Callable[[], Any]:
    """BM25 query vectors without the dense model, for when the model fails to load."""

    def load() -> Any:
        return Bm25Sparse()

    return load


def serve_main(settings: Settings) -> int:
    """Entry point of ``huginn-chat serve``. Returns the exit code."""
    # The reader's modules and structlog (about 100 ms to import) stay off the idle refresh,
    # `status`, `scope` and `purge`, which import this module too.
    from daemon import journal
    from daemon.reader.service import ReaderService

    journal.configure()
    service = ReaderService(
        make_index_opener(settings),
        make_embedder_factory(settings),
        settings,
        sparse_factory=make_sparse_factory(),
        model_loader=make_model_loader(settings),
        follow=None if settings.qdrant_url else current_file(settings),
    )
    return asyncio.run(service.run(path=settings.socket))


def current_file(settings: Settings) -> Path:
    """The embedded index's ``generations/CURRENT``, which every publication replaces."""
    return edge_index_root(settings).joinpath(*EDGE_CURRENT)


def refresh_main(settings: Settings, *, lock: RefreshLock | None = None) -> int:
    """One refresh cycle. ``lock``: the refresh lock, already held by whoever forked this
    process (``follow``); None: take it here, or end at once if another refresh holds it."""
    # First: from here on SIGTERM and SIGINT ask the run to stop at a safe point.
    stop = StopRequest().install()
    try:
        return _refresh(settings, stop, lock)
    finally:
        stop.restore()


def _refresh(settings: Settings, stop: StopRequest, held: RefreshLock | None = None) -> int:
    # structlog (about 100 ms to import) stays off `status`, `scope` and `purge`, which import
    # this module and keep no journal.
    from daemon import journal

    progress = TtyProgress() if TtyProgress.wanted() else None
    # On a terminal the run ends with a readable summary of its decisions; under systemd the
    # journal is the record and nothing more is printed.
    report = RunReport() if progress and journal.renders_for_people(progress.stream) else None
    # The bar's stream has write, flush and isatty: all the journal's handlers use.
    journal.configure(
        stream=cast(TextIO, progress.journal_stream()) if progress else None,
        observer=report.observe if report else None,
    )
    log = journal.get_logger()
    settings.require_refresh()
    token = read_token(settings)
    policy = make_policy(settings)
    # Before anything is asked or loaded: the sync state and the model's cache live under the
    # state dir, and a state dir that cannot be written would otherwise surface as a model that
    # "could not load".
    if not _state_dir_writable(settings, log):
        return EXIT_FAILED

    async def full_run() -> tuple[RunSummary, str | None]:
        # Imported and opened only now: an idle run imports no Matrix client library (nio), loads
        # no model and opens no index writer, and `serve` never loads the refresher's write path.
        from daemon.refresher.matrix import NioMatrixSource
        from daemon.refresher.run import Refresher, RefreshOptions

        options = RefreshOptions(
            bounds=make_bounds(settings),
            page_size=settings.page_size,
            state_dir=Path(settings.state_dir),
            retry=RetryPolicy(),
        )
        try:
            embedder = open_embedder(settings)
        except EmbedderError as exc:  # e.g. the offline model directory is missing
            log.error("embedder_unavailable", error=str(exc))
            return _failed_run("embedder_unavailable"), None
        try:
            index = open_index_writer(settings)
        except Exception as exc:  # noqa: BLE001 - e.g. another refresh holds the shard
            log.error("index_unavailable", error=str(exc))
            return _failed_run("index_unavailable"), None
        if stop.requested:  # while the model loaded: nothing was read or written
            index.close()
            log.warning("run_interrupted", signal=stop.signal_name, rooms_done=0, rooms_remaining=None)
            return _interrupted_run(stop.signal_name), None
        matrix = NioMatrixSource(str(settings.homeserver), token)
        try:
            refresher = Refresher(
                matrix=matrix,
                index=index,
                embedder=embedder,
                policy=policy,
                log=log,
                options=options,
                progress=progress.update if progress else None,
                stop=stop,
            )
            summary = await refresher.run()
            published = getattr(index, "last_publish", None)
            if published:  # copy: reflink (in proportion to change) or copy (the whole shard)
                log.info("generation_published", **published)
            # A stopped run read only part of the rooms: no sync token, so the next run is full.
            return summary, None if summary.interrupted else refresher.sync_next_batch
        finally:
            await matrix.close()
            index.close()

    async def run() -> int:
        try:
            outcome = await refresh_cycle(
                SyncProbe(str(settings.homeserver), token),
                state_dir=Path(settings.state_dir),
                marks=run_marks(settings),
                index_mark=lambda: index_mark(settings),
                scope_recheck_s=settings.scope_recheck_s,
                full_run=full_run,
                log=log,
            )
            return outcome.summary.exit_code
        finally:
            if progress:
                progress.done()
            if report and report.events:
                print("\n".join(report.lines()), file=progress.stream if progress else None, flush=True)

    lock = held or RefreshLock(Path(settings.state_dir))
    if not lock.acquire():
        # The timer's run while `follow` runs one (or the other way round): the one holding the
        # lock reads everything there is; this one would only find the index writer taken.
        log.info("run_skipped", why="another_refresh_running", lock=str(lock.path))
        return EXIT_OK
    try:
        return asyncio.run(run())
    except Exception as exc:  # noqa: BLE001 - the run as a whole could not proceed
        log.error("run_failed", error=f"{type(exc).__name__}: {exc}")
        return EXIT_FAILED
    finally:
        if held is None:
            lock.release()


class _Stopped(BaseException):
    """SIGTERM or SIGINT reached the follow process while no refresh of its ran. Not an error
    (a BaseException, as KeyboardInterrupt is): no ``except Exception`` on the way may swallow it."""


PRELOADED = (
    "daemon.embedder",
    "daemon.journal",
    "daemon.refresher.idle",
    "daemon.refresher.matrix",
    "daemon.refresher.progress",
    "daemon.refresher.retry",
    "daemon.refresher.run",
    "daemon.refresher.run_report",
    "daemon.refresher.sync_probe",
)


def preload_refresh(settings: Settings) -> None:
    """Import what a refresh run imports, so that each run ``follow`` forks starts with them
    loaded (the Matrix client, the refresher, the embedded index's writer). Nothing that starts a
    thread when imported (numpy, and with it fastembed, onnxruntime and the Qdrant server's
    client): a process forked while another thread holds a lock inherits it held for ever."""
    # daemon.embedder is the module only: fastembed is imported inside its class. The Qdrant
    # server's client imports numpy: each run imports it itself.
    for module in (*PRELOADED, *(() if settings.qdrant_url else ("daemon.index.edge_writer",))):
        importlib.import_module(module)


def follow_main(settings: Settings, config_file: Path | None) -> int:
    """``huginn-chat follow``: until SIGTERM or SIGINT, long-poll the homeserver and run a
    refresh cycle whenever ``daemon.refresher.follow.FollowLoop`` says so, each in a child
    process forked from this one while it holds the refresh lock."""

    # structlog stays off `status`, `scope` and `purge`, which import this module too.
    from daemon import journal

    journal.configure()
    log = journal.get_logger()
    settings.require_refresh()
    read_token(settings)  # a missing or empty token file: exit 2 now, not in every child
    if not _state_dir_writable(settings, log):
        return EXIT_FAILED
    preload_refresh(settings)
    follow = _FollowSettings(settings, config_file, log)
    child: list[int] = []  # the pid of the refresh running now, if any
    asked: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        asked.append(signum)
        if child:
            os.kill(child[0], signum)  # the run stops at its next safe point, as under systemctl stop
            return
        raise _Stopped

    def run_cycle() -> int:
        settings_now = follow.settings
        lock = RefreshLock(Path(settings_now.state_dir))
        while not lock.acquire():  # the timer's run (or one by hand) holds it: ours follows it
            time.sleep(0.5)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                pid = os.fork()
                if pid == 0:
                    _refresh_child(settings_now, lock, mask)
                child.append(pid)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            _, status = os.waitpid(pid, 0)
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            child.clear()
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        finally:
            lock.release()
        code = os.waitstatus_to_exitcode(status)
        if code < 0:  # killed (the OOM killer, a SIGKILL): it could say nothing itself
            log.error("follow_refresh_killed", signal=signal.Signals(-code).name)
        return code

    previous = {signum: signal.signal(signum, on_signal) for signum in STOP_SIGNALS}
    loop = FollowLoop(config=follow.config, run_cycle=run_cycle, log=log, stopping=lambda: bool(asked))
    try:
        loop.run()
    except _Stopped:
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return EXIT_OK


def _refresh_child(settings: Settings, lock: RefreshLock, mask: Any) -> None:
    """The forked refresh: the cycle ``refresh`` runs, under the lock its parent holds; never
    returns into the parent's code."""

    code = EXIT_FAILED
    try:
        # A stop asked before the run installs its own handler ends this process as the signal
        # would: nothing has been read or written yet.
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        # Its own process group: Ctrl-C on a terminal reaches the parent alone, which passes
        # it on once (twice would be "the operator insists": an immediate end, not a safe point).
        os.setpgid(0, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        code = refresh_main(settings, lock=lock)
    except HuginnError as exc:
        print(f"huginn-chat follow: {exc}", file=sys.stderr)
        code = exc.exit_code
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class _FollowSettings:
    """The follow process's settings, loaded again when the config file changes, so the polls,
    the marks it compares and the runs it forks never act on settings the timer's runs no longer
    use (they would find "settings_changed" against each other on every turn)."""

    def __init__(self, settings: Settings, config_file: Path | None, log: Any):
        self.settings = settings
        named = config_file or (Path(os.environ[CONFIG_FILE_ENV]) if os.environ.get(CONFIG_FILE_ENV) else None)
        self._file = named
        self._file_mark = self._mark()
        self._log = log
        self._config: FollowConfig | None = None

    def _mark(self) -> str | None:
        return file_mark(self._file) if self._file is not None else None

    def config(self) -> FollowConfig:
        mark = self._mark()
        if mark != self._file_mark:
            settings = load_settings(self._file)  # a ConfigError ends the process: exit 2
            settings.require_refresh()
            self.settings, self._file_mark, self._config = settings, mark, None
            self._log.info("follow_settings_reloaded", config=str(self._file))
        if self._config is None:
            settings = self.settings

            def marks() -> RunMarks:
                return run_marks(settings)

            self._config = FollowConfig(
                state_dir=Path(settings.state_dir),
                probe=SyncProbe(str(settings.homeserver), read_token(settings)),
                marks=marks,
                scope_recheck_s=settings.scope_recheck_s,
                poll_s=settings.follow_poll_s,
            )
        return self._config


def _state_dir_writable(settings: Settings, log: Any) -> bool:
    """Whether the state dir can be written; if not, one journal line naming it and why."""
    try:
        require_writable_dir(settings.state_dir)
    except (OSError, PlantedLinkError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        log.error("state_dir_unwritable", path=str(settings.state_dir), error=reason)
        return False
    return True


def _interrupted_run(signal_name: str | None) -> RunSummary:
    return RunSummary(interrupted=signal_name or "signal")


def _failed_run(why: str) -> RunSummary:
    summary = RunSummary(rooms_failed=1)
    summary.failures[why] = 1
    return summary


def run_marks(settings: Settings) -> RunMarks:
    """What the last full run's outcome depends on besides the homeserver (``refresher.idle``):
    the settings that shape scope and the index, the chat version (the scrubber's and chunker's
    versions), the purge list and the published index."""
    values = {
        "homeserver": settings.homeserver,
        "rooms": settings.rooms,
        "exclude_rooms": settings.exclude_rooms,
        "bridge_senders": settings.bridge_senders,
        "embed_model": settings.embed_model,
        "chat_version": chat_version(make_bounds(settings)),
        "qdrant_url": settings.qdrant_url,
        "qdrant_collection": settings.qdrant_collection,
    }
    return RunMarks(
        settings=settings_digest(values),
        purges=file_digest(Path(settings.state_dir) / PURGES_FILE),
        index=index_mark(settings),
    )


# daemon.index.edge's GENERATIONS_DIR / CURRENT_FILE, named here so an idle run does not import
# the index engine to stat one file (tests/unit/test_idle_refresh.py holds them equal).
EDGE_CURRENT = ("generations", "CURRENT")


def index_mark(settings: Settings) -> str | None:
    """The embedded index's published generation as a stat of ``generations/CURRENT`` tells it
    (a publish replaces the file; removing the index removes it). None for a Qdrant server."""
    if settings.qdrant_url:
        return None
    return file_mark(edge_index_root(settings).joinpath(*EDGE_CURRENT)) or "unpublished"


def purge_main(settings: Settings, room: str, ts_from: str, ts_to: str) -> int:
    # The reader's query modules (about 15 ms to import) stay off the idle refresh's start.
    from daemon.reader.search import parse_time

    if not (is_room_id(room) or is_alias(room)):
        raise UsageError(f"room: {room!r} is not a room id (!…) or an alias (#name:server)")
    start = parse_time(ts_from, "from")
    end = parse_time(ts_to, "to")
    assert start is not None and end is not None, "--from and --to are required: never None"
    try:
        added = add_purge(Path(settings.state_dir), room, start, end)
    except OSError as exc:  # e.g. a state dir this user cannot write: an operator fault, not usage
        where = exc.filename or settings.state_dir
        raise OperationalError(f"purge: cannot record it under {where}: {exc.strerror or type(exc).__name__}") from None
    print(f"purge {'recorded' if added else 'already recorded'}: {room} {start}..{end}; the next refresh applies it")
    return EXIT_OK
