"""The Personas' fast launcher (tools/cli_launcher.py): search/window start without ``site``;
every other command reaches the installed console script unchanged."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("cli_launcher", REPO / "tools" / "cli_launcher.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def launcher(tmp_path: Path) -> Path:
    bindir = Path(sys.executable).parent
    console = bindir / "huginn-chat"
    if not console.exists():
        pytest.skip(f"no console script at {console} (run `make setup`)")
    return _tool().write_launcher(bindir / "python", REPO, console, tmp_path / "huginn-chat-fast")


def test_search_runs_without_site_and_answers_like_the_console_script(launcher: Path, tmp_path: Path):
    assert launcher.read_text().splitlines()[0].endswith(" -IS")
    env = {"HUGINN_CHAT_SOCKET": str(tmp_path / "none.sock"), "PATH": "/usr/bin:/bin"}
    got = subprocess.run([str(launcher), "search", "--top-k", "99", "hello"], env=env, capture_output=True, text=True)
    assert got.returncode == 2 and "top_k" in got.stderr
    got = subprocess.run([str(launcher), "search", "hello"], env=env, capture_output=True, text=True)
    assert got.returncode == 1 and "not running" in got.stderr
    # Without site, nothing from site-packages is importable: the client must not need it.
    probe = subprocess.run(
        [*launcher.read_text().splitlines()[0][2:].split(), "-c", "import sys; print('site' in sys.modules)"],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "False"


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "--help"],
        ["window", "--help"],
        ["--help"],
        ["search", "--top-k", "99", "hello"],
        ["search", "hello", "--sort", "sideways"],
        ["search", "hello", "--no-such-flag"],
        ["window"],
        ["search", "hello"],
        ["bogus"],
    ],
)
def test_the_launcher_answers_exactly_as_the_console_script(launcher: Path, tmp_path: Path, argv: list[str]):
    """Same stdout, stderr and exit code: the launcher only changes how python starts."""
    env = {"HUGINN_CHAT_SOCKET": str(tmp_path / "none.sock"), "PATH": "/usr/bin:/bin", "COLUMNS": "100"}
    console = Path(sys.executable).parent / "huginn-chat"
    fast = subprocess.run([str(launcher), *argv], env=env, capture_output=True, text=True, timeout=60)
    slow = subprocess.run([str(console), *argv], env=env, capture_output=True, text=True, timeout=60)
    assert (fast.returncode, fast.stdout, fast.stderr) == (slow.returncode, slow.stdout, slow.stderr)
    assert fast.returncode in (0, 1, 2) and (fast.stdout or fast.stderr)


def test_other_commands_go_to_the_console_script(launcher: Path):
    got = subprocess.run([str(launcher), "status", "--help"], capture_output=True, text=True)
    assert got.returncode == 0 and "usage: huginn-chat status" in got.stdout


def test_paths_with_whitespace_are_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="python"):
        _tool().write_launcher(Path("/opt/my venv/bin/python"), REPO, Path("/x/huginn-chat"), tmp_path / "l")
