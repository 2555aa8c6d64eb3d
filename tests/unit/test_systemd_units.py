"""The shipped systemd units: they verify, they are hardened, the reader cannot write, and the
follow service runs the refresh in the refresh unit's own sandbox.

`systemd-analyze verify` checks that ExecStart's binary exists, so the units are verified in a
temporary copy whose ExecStart points at /bin/true; nothing else is changed.
"""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
SERVICES = ("huginn-chat-refresh.service", "huginn-chat-follow.service", "huginn-chat-reader.service")
WRITERS = ("huginn-chat-refresh.service", "huginn-chat-follow.service")
ALL_UNITS = (*SERVICES, "huginn-chat-refresh.timer", "huginn-chat-reader.socket")
EXEC = "/opt/huginn-chat/.venv/bin/huginn-chat"

needs_systemd = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")


def _settings(unit: str) -> dict[str, list[str]]:
    """Every Key=value of a unit, repeated keys kept in order."""
    out: dict[str, list[str]] = {}
    for line in (UNITS / unit).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


@pytest.fixture(scope="module")
def unit_copy(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("units")
    for name in ALL_UNITS:
        (d / name).write_text((UNITS / name).read_text().replace(EXEC, "/bin/true"))
    return d


@needs_systemd
def test_units_verify(unit_copy):
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *[str(unit_copy / u) for u in ALL_UNITS]],
        capture_output=True,
        text=True,
        cwd=unit_copy,
    )
    assert proc.returncode == 0, proc.stderr
    assert "huginn-chat" not in proc.stderr, proc.stderr  # no warnings about our units either


# The refresher's bound holds with IPAddressDeny=any (a drop-in allow list) and PrivateMounts=yes;
# the reader has no network at all.
EXPOSURE_AT_MOST = {
    "huginn-chat-refresh.service": 1.0,
    "huginn-chat-follow.service": 1.0,
    "huginn-chat-reader.service": 0.4,
}


@needs_systemd
@pytest.mark.parametrize("service", SERVICES)
def test_services_expose_little(unit_copy, service):
    proc = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", service],
        capture_output=True,
        text=True,
        cwd=unit_copy,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout + proc.stderr)
    assert match, proc.stdout + proc.stderr
    assert float(match.group(1)) <= EXPOSURE_AT_MOST[service]


@pytest.mark.parametrize("service", WRITERS)
def test_the_refresher_reaches_only_loopback_and_what_the_drop_in_allows(service):
    s = _settings(service)
    assert s["IPAddressDeny"] == ["any"]
    assert s["IPAddressAllow"] == ["localhost"]
    example = (UNITS / "huginn-chat-refresh.service.d" / "network.conf.example").read_text()
    allowed = [line for line in example.splitlines() if line.startswith("IPAddressAllow=")]
    assert allowed and "[Service]" in example
    readme = (UNITS.parents[1] / "README.md").read_text()
    assert f"{service}.d/network.conf" in readme


# What the follow unit may set differently from the refresh unit: how it runs, not what it may do.
HOW_IT_RUNS = {
    "Type",
    "ExecStart",
    "SuccessExitStatus",
    "TimeoutStartSec",
    "KillMode",
    "Restart",
    "RestartSec",
    "WantedBy",
}


def test_the_follow_service_runs_refreshes_in_the_refresh_units_sandbox():
    refresh, follow = _settings("huginn-chat-refresh.service"), _settings("huginn-chat-follow.service")
    assert {k: v for k, v in follow.items() if k not in HOW_IT_RUNS and k != "Description"} == {
        k: v for k, v in refresh.items() if k not in HOW_IT_RUNS and k != "Description"
    }
    assert follow["Type"] == ["simple"] and follow["Restart"] == ["on-failure"]
    assert follow["ExecStart"][0].endswith("huginn-chat follow --config /etc/huginn-chat/huginn-chat.toml")
    # SIGTERM to the follow process only: it passes it on once to the refresh it runs, which then
    # stops at a safe point (a second signal would end that run at once).
    assert follow["KillMode"] == ["mixed"]


def test_the_reader_connection_cap_stays_below_its_descriptor_limit_and_the_backlog_is_set():
    from daemon.reader.sockets import DEFAULT_MAX_CONNECTIONS, FD_RESERVE

    nofile = int(_settings("huginn-chat-reader.service")["LimitNOFILE"][0])
    assert DEFAULT_MAX_CONNECTIONS + FD_RESERVE <= nofile
    assert int(_settings("huginn-chat-reader.socket")["Backlog"][0]) >= 1024


@pytest.mark.parametrize("service", SERVICES)
def test_hardening_options_are_present(service):
    s = _settings(service)
    for key, value in {
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "PrivateDevices": "yes",
        "RestrictNamespaces": "yes",
        "LockPersonality": "yes",
    }.items():
        assert s.get(key) == [value], key
    assert "@system-service" in s["SystemCallFilter"]
    assert s["CapabilityBoundingSet"] == [""]
    assert s.get("MemoryMax"), "a memory bound"
    assert s.get("RestrictAddressFamilies")


def test_the_refresher_is_a_oneshot_with_its_token_as_a_credential():
    s = _settings("huginn-chat-refresh.service")
    assert s["Type"] == ["oneshot"]
    assert "matrix-token:/etc/huginn-chat/matrix-token" in s["LoadCredential"]
    assert s["StateDirectory"] == ["huginn-chat"]
    assert s["ExecStart"][0].endswith("huginn-chat refresh --config /etc/huginn-chat/huginn-chat.toml")


def test_a_run_a_signal_stopped_is_not_a_failed_unit():
    from daemon.errors import EXIT_INTERRUPTED

    assert _settings("huginn-chat-refresh.service")["SuccessExitStatus"] == [str(EXIT_INTERRUPTED)]


def test_the_reader_has_no_token_and_cannot_write_the_index():
    s = _settings("huginn-chat-reader.service")
    assert not any("matrix-token" in c for c in s.get("LoadCredential", []))
    # "-": a state directory the first refresh has not made yet must not fail the reader's start.
    assert s["ReadOnlyPaths"] == ["-/var/lib/huginn-chat"]
    assert any(p.lstrip("-") == "/var/lib/huginn-chat/index/work" for p in s["InaccessiblePaths"])
    assert "StateDirectory" not in s  # systemd would make a state directory writable
    assert not any("/var/lib/huginn-chat" in p for p in s.get("ReadWritePaths", []))
    # Its private copy of a generation lives in its own cache directory.
    assert s["CacheDirectory"] == ["huginn-chat-reader"]
    assert s["Environment"].count("HUGINN_CHAT_READER_PRIVATE_DIR=/var/cache/huginn-chat-reader") == 1
    assert s["PrivateNetwork"] == ["yes"] and s["RestrictAddressFamilies"] == ["AF_UNIX"]
    assert s["ExecStart"][0].endswith("huginn-chat serve --config /etc/huginn-chat/huginn-chat.toml")


def test_the_socket_is_for_the_personas_group_only():
    s = _settings("huginn-chat-reader.socket")
    assert s["ListenStream"] == ["/run/huginn-chat/reader.sock"]
    assert s["SocketMode"] == ["0660"]
    assert s["SocketGroup"] == ["huginn-personas"]


def test_the_timer_is_persistent_and_spread():
    parser = configparser.ConfigParser(strict=False)
    parser.read(UNITS / "huginn-chat-refresh.timer")
    assert parser["Timer"]["Persistent"] == "true"
    assert parser["Timer"]["RandomizedDelaySec"]
    assert parser["Timer"].get("OnUnitInactiveSec") or parser["Timer"].get("OnCalendar")


def _seconds(value: str) -> float:
    """A systemd time span of the forms the timer uses (``20s``, ``2min``, ``1h``) in seconds."""
    units = {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value.strip())
    assert match, value
    return float(match.group(1)) * units[match.group(2) or "s"]


def test_the_backstop_timer_alone_still_reads_scope_facts_within_two_recheck_periods():
    # With the follow service stopped, the timer's runs are the only ones: a run starts at most
    # one period (plus its random delay and accuracy) after the facts became due.
    from daemon.config import Settings

    timer = configparser.ConfigParser(strict=False)
    timer.read(UNITS / "huginn-chat-refresh.timer")
    t = timer["Timer"]
    period = _seconds(t["OnUnitInactiveSec"]) + _seconds(t["RandomizedDelaySec"]) + _seconds(t["AccuracySec"])
    assert period <= Settings.model_fields["scope_recheck_s"].default


def test_the_follow_service_is_installed_beside_the_timer():
    follow = _settings("huginn-chat-follow.service")
    assert follow["WantedBy"] == ["multi-user.target"]
    for doc in ("README.md", "docs/deployment.md"):
        text = (UNITS.parents[1] / doc).read_text()
        assert "huginn-chat-follow.service" in text and "huginn-chat-refresh.timer" in text, doc


def test_the_example_config_loads():
    from daemon.config import load_settings

    settings = load_settings(UNITS.parent / "huginn-chat.toml.example")
    assert settings.rooms and settings.socket == Path("/run/huginn-chat/reader.sock")


MDWE_PROBE = r"""
import ctypes, sys, tempfile
from pathlib import Path
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN (Linux 6.3+)
    sys.exit(77)
from daemon.config import default_model_dir
from daemon.embedder import FastEmbedder
embedder = FastEmbedder(model_dir=default_model_dir(), cache_dir=Path(tempfile.mkdtemp()), threads=1)
print(len(embedder.embed(["the kettle is broken"])[0]))
"""


@pytest.mark.slow
def test_the_embedder_runs_under_memory_deny_write_execute():
    """Both units set MemoryDenyWriteExecute=yes; onnxruntime must still load and embed. The
    kernel's own W^X switch (prctl PR_SET_MDWE) is the same rule systemd enforces."""
    proc = subprocess.run([sys.executable, "-c", MDWE_PROBE], capture_output=True, text=True, cwd=UNITS.parents[1])
    if proc.returncode == 77:
        pytest.skip("this kernel has no PR_SET_MDWE (Linux < 6.3)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "384"
