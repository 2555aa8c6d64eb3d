"""daemon.errors: one root for every error the product raises, each carrying its exit code, the
exit codes defined once, and one place (daemon.cli.main) that prints the line and exits."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import pytest

import chunker
import daemon
import scope
from daemon.cli.main import main
from daemon.errors import EXIT_FAILED, EXIT_USAGE, HuginnError, OperationalError, UsageError

REPO = Path(__file__).resolve().parents[2]

# Error classes in modules another branch is rewriting; the lead empties this after merging it.
PENDING = {"daemon.index.edge_writer.IndexLockedError"}


def product_modules(*packages: ModuleType) -> list[str]:
    names = []
    for package in packages:
        names.append(package.__name__)
        names += [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    return names


def error_classes(module_names: list[str]) -> list[type[Exception]]:
    found = []
    for name in module_names:
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == name and issubclass(cls, Exception):
                found.append(cls)
    return found


def test_every_error_class_in_the_shell_derives_from_the_root() -> None:
    strays = [
        f"{c.__module__}.{c.__qualname__}"
        for c in error_classes(product_modules(daemon))
        if not issubclass(c, HuginnError)
    ]
    assert sorted(set(strays) - PENDING) == []


def test_the_cores_errors_are_its_own_and_the_shell_maps_them() -> None:
    """The pure core (scope, chunker) imports nothing from the shell, so its errors are plain Python
    errors; the shell turns each into one of its own where it calls the core."""
    core_errors = error_classes(product_modules(scope, chunker))
    assert [c.__qualname__ for c in core_errors] == ["PolicyError"]
    assert not any(issubclass(c, HuginnError) for c in core_errors)
    assert issubclass(scope.PolicyError, ValueError)


def test_each_family_carries_its_exit_code() -> None:
    from daemon.config import ConfigError, Settings
    from daemon.ports import MatrixError
    from daemon.reader.search import QueryError
    from daemon.wiring import make_policy
    from scope import PolicyError

    assert HuginnError.exit_code == OperationalError.exit_code == EXIT_FAILED == 1
    assert UsageError.exit_code == EXIT_USAGE == 2
    assert ConfigError("rooms", "bad").exit_code == QueryError("top_k", "bad").exit_code == 2
    # The core's PolicyError reaches the operator as the setting's ConfigError (exit 2).
    unchecked = Settings.model_construct(rooms=["!ok:hs.test"], exclude_rooms=["users"], bridge_senders=[])
    with pytest.raises(ConfigError) as caught:
        make_policy(unchecked)
    assert caught.value.exit_code == 2 and caught.value.field == "exclude_rooms"
    assert isinstance(caught.value.__cause__, PolicyError)
    assert str(caught.value) == "config: exclude_rooms: exclude[0] 'users': " + caught.value.__cause__.problem
    assert MatrixError("whoami", None).exit_code == 1


def test_exit_codes_are_defined_only_in_daemon_errors() -> None:
    assignment = re.compile(r"^\s*EXIT_\w+(\s*,\s*EXIT_\w+)*\s*=", re.MULTILINE)
    sources = [p for folder in ("daemon", "scope", "chunker", "devtools") for p in (REPO / folder).rglob("*.py")]
    defining = sorted(str(p.relative_to(REPO)) for p in sources if assignment.search(p.read_text()))
    assert defining == ["daemon/errors.py"]


def test_main_prints_one_line_and_returns_the_errors_exit_code(monkeypatch, tmp_path, capsys) -> None:
    for key in [k for k in __import__("os").environ if k.startswith("HUGINN_CHAT_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HUGINN_CHAT_STATE_DIR", str(tmp_path))
    # An OperationalError from the command: no index yet.
    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("huginn-chat: no index published yet; run huginn-chat refresh (looked in the state dir ")
    assert str(tmp_path) in err and err.count("\n") == 1
    # A UsageError from the command: no homeserver to survey.
    assert main(["scope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("huginn-chat: config: homeserver: required for scope") and err.count("\n") == 1


def test_a_command_raising_an_error_of_its_own_kind_is_printed_the_same_way(monkeypatch, capsys) -> None:
    from daemon.cli import client

    class Odd(OperationalError):
        exit_code = 3

    def fail(args: object) -> int:
        raise Odd("the reader is on fire")

    monkeypatch.setattr(client, "run_client", fail)
    assert main(["search", "x"]) == 3
    assert capsys.readouterr().err == "huginn-chat search: the reader is on fire\n"


@pytest.mark.parametrize("module", ["daemon.errors"])
def test_the_errors_module_imports_only_the_standard_library(module: str) -> None:
    tree = (REPO / (module.replace(".", "/") + ".py")).read_text()
    imports = re.findall(r"^(?:from|import) (\S+)", tree, re.MULTILINE)
    assert imports == ["__future__"]
