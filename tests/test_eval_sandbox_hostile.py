"""The hostile suite: every program of tests/hostile/ is contained, judged from the host side.

All programs run once, in parallel, against live targets the test sets up: a secret folder in the
host's /tmp, the evaluator's cwd, $HOME and data dir holding a canary, the canary in the
evaluator's environment, a victim process, TCP/UDP/DNS listeners on the loopback, and a unix
socket at a host path and at an abstract name. Afterwards the host checks that nothing changed,
nothing arrived, nothing of the canary came out, no process of any sandbox is left, and the
evaluator (this process) and the victim are alive.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import sympy

from hostile import Hostile, load, our_processes_in_pid_namespace, reap_orphans, set_child_subreaper
from numloss.evaluate.sandbox import SandboxLimits, isolation, run_program, run_programs

pytestmark = pytest.mark.skipif(not isolation().mode == "bwrap+seccomp",
                                reason="kernel sandbox unavailable here: " + isolation().detail)

LIMITS = SandboxLimits(wall_seconds=3.0, cpu_seconds=2, memory_bytes=512 << 20, output_bytes=16 * 1024,
                       max_processes=32, tmpfs_bytes=8 << 20)
CANARY = "numloss-canary-7f3a9c"
HOSTILE = load()


def snapshot(folder: Path) -> dict[str, bytes]:
    out = {}
    for path in sorted(folder.rglob("*")):
        out[str(path.relative_to(folder))] = path.read_bytes() if path.is_file() else b"<dir>"
    return out


def escapes_on_host() -> list[str]:
    return sorted(glob.glob("/tmp/numloss-hostile-escape*") + glob.glob("/numloss-*"))


@pytest.fixture(scope="module")
def suite():
    base = Path(tempfile.mkdtemp(prefix="numloss-hostile-"))
    secret, cwd, home, data = (base / n for n in ("secret", "cwd", "home", "data"))
    for folder in (secret, cwd, home, data):
        folder.mkdir()
        (folder / "secret.txt").write_text(CANARY)
    (data / "gold.jsonl").write_text(json.dumps({"answer": CANARY}) + "\n")
    listeners = {
        "tcp": socket.create_server(("127.0.0.1", 0)),
        "udp": socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
        "dns": socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
        "unix": socket.socket(socket.AF_UNIX, socket.SOCK_STREAM),
        "abstract": socket.socket(socket.AF_UNIX, socket.SOCK_STREAM),
    }
    listeners["udp"].bind(("127.0.0.1", 0))
    listeners["dns"].bind(("127.0.0.1", 0))
    listeners["unix"].bind(str(secret / "evaluator.sock"))
    listeners["unix"].listen()
    abstract = f"numloss-hostile-{os.getpid()}"
    listeners["abstract"].bind("\0" + abstract)
    listeners["abstract"].listen()
    for s in listeners.values():
        s.setblocking(False)
    victim = subprocess.Popen(["sleep", "300"])
    values = {
        "SECRET_DIR": str(secret), "CWD": str(cwd), "HOME": str(home), "DATA_DIR": str(data),
        "EVALUATOR_PID": str(os.getpid()), "EVALUATOR_PGID": str(os.getpgid(0)), "VICTIM_PID": str(victim.pid),
        "TCP_PORT": str(listeners["tcp"].getsockname()[1]), "UDP_PORT": str(listeners["udp"].getsockname()[1]),
        "DNS_PORT": str(listeners["dns"].getsockname()[1]), "UNIX_SOCK": str(secret / "evaluator.sock"),
        "ABSTRACT": abstract,
    }
    sympy_init = Path(sympy.__file__)
    before = {"secret": snapshot(secret), "cwd": snapshot(cwd), "home": snapshot(home), "data": snapshot(data),
              "sympy": hashlib.sha256(sympy_init.read_bytes()).hexdigest(), "escapes": escapes_on_host()}
    old_cwd, old_env = os.getcwd(), dict(os.environ)
    os.chdir(cwd)
    os.environ.update(HOME=str(home), NUMLOSS_SECRET_TOKEN=CANARY)
    set_child_subreaper(True)  # a survivor of ours is reparented here: see hostile/__init__.py
    try:
        started = time.perf_counter()
        results = run_programs([h.source(values) for h in HOSTILE], LIMITS, workers=4)
        seconds = time.perf_counter() - started
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)
    time.sleep(0.3)  # anything that survived would have had time to act
    yield {
        "results": dict(zip((h.name for h in HOSTILE), results, strict=True)), "seconds": seconds,
        "before": before, "listeners": listeners, "victim": victim,
        "dirs": {"secret": secret, "cwd": cwd, "home": home, "data": data}, "sympy": sympy_init,
    }
    victim.kill()
    victim.wait()
    set_child_subreaper(False)
    reap_orphans()
    for s in listeners.values():
        s.close()
    shutil.rmtree(base, ignore_errors=True)


def test_the_suite_covers_at_least_forty_escapes():
    assert len(HOSTILE) >= 40
    assert all(h.expect <= {"ok", "error", "timeout", "memory", "output_limit", "blocked"} for h in HOSTILE)


@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda h: h.name)
def test_each_hostile_program_is_contained(suite, hostile: Hostile):
    result = suite["results"][hostile.name]
    context = (hostile.tries, result)
    assert result.isolation == "bwrap+seccomp"
    assert result.status in hostile.expect, context
    assert "ESCAPED" not in result.stdout, context
    assert CANARY not in result.stdout and CANARY not in result.stderr, context
    assert result.wall_seconds < LIMITS.wall_seconds + 3, context
    assert result.pid_namespace is not None and os.readlink("/proc/self/ns/pid") != f"pid:[{result.pid_namespace}]"
    assert our_processes_in_pid_namespace(result.pid_namespace) == [], f"{hostile.name}: processes outlived the call"


def test_the_host_is_unchanged_after_the_suite(suite):
    before = suite["before"]
    for name, folder in suite["dirs"].items():
        assert snapshot(folder) == before[name], f"the {name} folder changed"
    assert escapes_on_host() == before["escapes"]
    assert hashlib.sha256(suite["sympy"].read_bytes()).hexdigest() == before["sympy"]


def test_no_connection_or_datagram_reached_the_host(suite):
    listeners = suite["listeners"]
    for name in ("tcp", "unix", "abstract"):
        with pytest.raises(BlockingIOError):
            listeners[name].accept()
    for name in ("udp", "dns"):
        with pytest.raises(BlockingIOError):
            listeners[name].recvfrom(512)


def test_the_evaluator_and_the_victim_survive_and_go_on(suite):
    assert suite["victim"].poll() is None, "a sandboxed program killed a host process"
    after = run_program("import fractions\nprint(fractions.Fraction(1, 3) + fractions.Fraction(1, 6))", LIMITS)
    assert after.ok and after.stdout.strip() == "1/2"


def test_limits_breaches_are_reported_as_such(suite):
    results = suite["results"]
    assert results["huge_stdout"].status == results["huge_stderr"].status == "output_limit"
    assert len(results["huge_stdout"].stdout.encode()) <= LIMITS.output_bytes
    assert results["memory_bytearray"].status == "memory"
    assert results["close_output_and_run"].status == "timeout"
    assert "No space left" in results["fill_tmpfs"].detail or results["fill_tmpfs"].status == "output_limit"
    binary = results["binary_output"]
    assert "\x00" not in binary.stdout and binary.stdout.splitlines()[-1] == "42" and "\ufffd" in binary.stdout


def test_the_suite_runs_in_parallel_in_bounded_time(suite):
    # 57 programs, the slowest ones held to the 3 s wall clock, 4 at a time
    assert suite["seconds"] < 90, suite["seconds"]
