"""The program sandbox: right answers from benign programs, the kernel layers as promised, limits
reported as such, the seccomp filter decoded independently, fail-closed without bwrap, and the
opted-in unisolated mode (the old audit-hook child). The hostile suite is
tests/test_eval_sandbox_hostile.py."""

from __future__ import annotations

import errno
import fcntl
import itertools
import json
import os
import random
import select
import selectors
import signal
import stat
import struct
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hostile
import numloss.evaluate as evaluate
from numloss.evaluate import programs, sandbox
from numloss.evaluate.sandbox import (
    ALLOW_UNISOLATED_ENV,
    Isolation,
    SandboxLimits,
    SandboxUnavailable,
    cgroup,
    isolation,
    memory_bound,
    policy,
    run_program,
    run_programs,
)
from numloss.evaluate.sandbox import bwrap as bwrap_mod
from numloss.evaluate.sandbox.limits import Observed, classify, decode_output, safe_text
from numloss.evaluate.sandbox.policy import DENIED, NEWER_ALLOWED
from numloss.evaluate.sandbox.seccomp import filter_program, last_filter, syscall_numbers

LIMITS = SandboxLimits(wall_seconds=3.0, cpu_seconds=2, memory_bytes=512 << 20, output_bytes=16 * 1024)
FULL = isolation().mode == "bwrap+seccomp"
needs_kernel_sandbox = pytest.mark.skipif(not FULL, reason="kernel sandbox unavailable: " + isolation().detail)


@pytest.fixture
def fresh_probe(monkeypatch):
    """Forget the cached probe before and after: a test may make bwrap unavailable."""
    monkeypatch.delenv(ALLOW_UNISOLATED_ENV, raising=False)
    sandbox._kernel_probe.cache_clear()
    yield
    sandbox._kernel_probe.cache_clear()


def test_kernel_isolation_works_on_this_machine():
    # these machines have user namespaces (as root too); a CI without them sets the variable
    # below, and then the kernel-sandbox tests are skipped with the probe's reason
    if os.environ.get("NUMLOSS_TEST_NO_USERNS") == "1":
        pytest.skip("NUMLOSS_TEST_NO_USERNS=1: " + isolation().detail)
    iso = isolation()
    assert iso.mode == "bwrap+seccomp" and iso.available, iso.detail


# ---- the kernel layers as promised ---------------------------------------------------------------

def _foreign(evaluator: int) -> list[str]:
    """Host pids of the evaluator's descendants in another pid namespace than this process's
    (bwrap itself is in ours)."""
    ours = hostile.pid_namespace(str(os.getpid()))
    return [p for p in hostile.descendants(evaluator) if hostile.pid_namespace(p) not in ("", ours)]


def _sandbox_uid(uid: int) -> bool:
    """Whether host uid `uid` is one a sandbox runs as: one of HOST_UID_BASE's for a root evaluator,
    the evaluator's own uid otherwise (an unprivileged user can map only itself)."""
    if os.geteuid() != 0:
        return uid == os.geteuid()
    return bwrap_mod.HOST_UID_BASE <= uid < bwrap_mod.HOST_UID_BASE + (bwrap_mod.SLOTS << 22)


def _uid(pid: str) -> int:
    try:
        return next(int(line.split()[1]) for line in open(f"/proc/{pid}/status", encoding="utf-8") if line.startswith("Uid:"))
    except (OSError, StopIteration):
        return -1


@needs_kernel_sandbox
def test_the_program_is_nobody_in_namespaces_of_its_own_with_the_policys_rlimits_and_the_oom_killers_first_choice():
    """Its host uid: test_two_evaluators_never_share_a_host_uid_...; every process of the sandbox
    starts with the highest oom_score_adj, a floor where the evaluator holds CAP_SYS_RESOURCE."""
    rlimits = policy.rlimits(LIMITS)
    source = ("import os, resource, socket\nst = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n"
              "print(os.getresuid(), os.getresgid(), os.getgroups())\n"
              "print(*(st[k].strip() for k in ('CapPrm', 'CapEff', 'CapAmb', 'NoNewPrivs', 'Seccomp')))\n"
              "print(os.getpid(), os.getppid())\n"
              "print({n: os.readlink(f'/proc/self/ns/{n}') for n in ('ipc', 'uts', 'net', 'pid', 'mnt')})\n"
              f"print(socket.gethostname(), [resource.getrlimit(getattr(resource, n)) for n, _ in {rlimits!r}])\n"
              "score = lambda: open('/proc/self/oom_score_adj').read().strip()\nfirst = score()\n"
              "r, w = os.pipe()\nif os.fork() == 0:\n    os.write(w, score().encode())\n    os._exit(0)\nos.wait()\n"
              "try:\n    open('/proc/self/oom_score_adj', 'w').write('0')\n    lowered = 'lowered'\n"
              "except OSError as e:\n    lowered = 'refused %d' % e.errno\nprint(first, os.read(r, 16).decode(), lowered)")
    result = run_program(source, LIMITS)
    assert result.ok, result
    ids, caps, pid, namespaces, hostname_rlimits, oom = result.stdout.splitlines()
    assert ids == "(65534, 65534, 65534) (65534, 65534, 65534) []"
    assert caps == "0000000000000000 0000000000000000 0000000000000000 1 2"
    assert pid == "2 1"  # the child of the sandbox's init, in its own pid namespace
    inside = eval(namespaces)
    assert all(inside[name] != os.readlink(f"/proc/self/ns/{name}") for name in inside), inside
    assert hostname_rlimits == f"sandbox {[(value, value) for _, value in rlimits]}"
    first, child, lowered = oom.split(maxsplit=2)
    assert first == child == str(policy.OOM_SCORE_ADJ)
    effective = next(int(line.split()[1], 16) for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines() if line.startswith("CapEff:"))
    if effective >> 24 & 1:  # the evaluator holds CAP_SYS_RESOURCE: its write set the floor
        assert lowered == "refused 13", lowered  # EACCES


@needs_kernel_sandbox
def test_the_filesystem_is_read_only_except_a_capped_tmpfs_and_sh_and_python_are_the_bound_ones():
    # CI puts the venv at <checkout>/.venv: binding it must not show the checkout's other files; nor
    # is the host's /usr/local, /usr/include or /usr/sbin there (a system Python's prefix is /usr)
    absent = [str(Path(__file__).resolve().parents[1] / name) for name in ("pyproject.toml", "src", "tests", "README.md")]
    absent += ["/usr/local", "/usr/include", "/usr/sbin", "/bin/ls"]
    base_site = os.path.join(os.path.realpath(os.path.dirname(os.__file__)), "site-packages")
    limits = SandboxLimits(wall_seconds=20, cpu_seconds=10, tmpfs_bytes=1 << 20)
    result = run_program(
        "import os, sys\nprint(os.getcwd(), sorted(os.listdir('/')))\n"
        "print(sorted(os.listdir(sys.path[-1])))\n"
        "print([os.access(p, os.W_OK) for p in ('/', '/usr/lib', sys.path[1], sys.path[-1], '/dev')])\n"
        "st = os.statvfs('/tmp')\nprint(st.f_blocks * st.f_frsize)\n"
        "print(sorted(os.environ.items()))\n"
        f"print([os.path.exists(p) for p in {absent!r}])\n"
        f"print(os.listdir({base_site!r}) if os.path.isdir({base_site!r}) else [])\n"
        "print(sorted(os.listdir('/usr/bin')))\n"
        "import subprocess\nrun = lambda *a, **k: subprocess.run(*a, capture_output=True, text=True, **k)\n"
        "for name in ('python3', 'python'):\n"
        "    print(run([name, '-c', 'import os, sys, numpy; print(os.path.realpath(sys.executable))']).stdout.strip())\n"
        "print(sys.executable)\nshell = run('echo $((6 * 7)); ls', shell=True)\n"
        "print(shell.stdout.strip(), shell.returncode)\n"
        "try:\n    open(os.path.join(sys.path[-1], 'planted_by_the_program.py'), 'w').write('x = 1')\n"
        "except OSError:\n    pass\n", limits)
    assert result.ok, result
    cwd_root, site, writable, size, env, exists, base_listing, programs, *pythons, shell = result.stdout.splitlines()
    # python3 and python resolve to the bound interpreter, sh to a minimal shell: its builtins, no
    # other program of the host (ls)
    assert pythons == [bwrap_mod.layout().python] * 3
    if bwrap_mod.missing_tools():  # no shell with only the interpreter's libraries here: it says why
        assert "no /bin/sh" in isolation().detail and shell == " 127", (shell, isolation().detail)
    else:
        assert shell == "42 127", shell
    assert exists == str([False] * len(absent))
    if base_site in bwrap_mod.layout().hidden:  # the base interpreter's own site-packages (pip, pytest, ...)
        assert eval(base_listing) == []
    # no program of the host's /usr/bin: only the interpreter's names and the minimal shell
    bound = {os.path.basename(p) for p in bwrap_mod.layout().binds if os.path.dirname(p) in ("/usr/bin", "/bin")}
    assert set(eval(programs)) <= {"python", "python3", "sh"} | bound, programs
    # what the program writes never reaches the host's packages, wherever they live
    assert not any((Path(d) / "planted_by_the_program.py").exists() for d in bwrap_mod.layout().site_dirs)
    # of the host's libraries only files are bound, and of its locales at most C.UTF-8 (under one of its names)
    lay = bwrap_mod.layout()
    assert all(p.endswith(".so") or ".so." in p for p in lay.binds if p.startswith(("/usr/lib/", "/lib")) and not p.startswith("/usr/lib/locale/"))
    assert [p for p in lay.binds if p.startswith("/usr/lib/locale/")] in ([], ["/usr/lib/locale/C.utf8"], ["/usr/lib/locale/C.UTF-8"])
    cwd, root = cwd_root.split(" ", 1)
    assert cwd == "/tmp"
    # the root holds the system folders and the first folder of each read-only bind (a venv inside
    # a checkout at /check/... shows "check"), nothing else
    bound_roots = {path.split(os.sep)[1] for path in bwrap_mod.layout().binds}
    assert set(eval(root)) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "tmp", "usr"} | bound_roots
    assert set(eval(site)) <= {"sympy", "mpmath", "numpy", "numpy.libs", "sympy.libs", "mpmath.libs"}
    # a site folder under /tmp has its parent folders made on the sandbox's own tmpfs; on the
    # non-root path they belong to the sandbox's user (writable there, never on the host: above)
    site_on_tmpfs = bwrap_mod.layout().site_dirs[-1].startswith("/tmp/") and os.geteuid() != 0
    assert eval(writable) == [False, False, False, site_on_tmpfs, False]
    assert int(size) == 1 << 20
    assert dict(eval(env)) == {**policy.ENV, "PWD": "/tmp", "PYTHONPATH": ":".join(bwrap_mod.layout().site_dirs)}


def test_a_system_python_does_not_bind_its_prefix(monkeypatch):
    """With /usr as the prefix (a distribution's Python), binding the prefix would show /usr/bin's
    shells and /usr/local: only the stdlib, libpython and the executable are bound."""
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    monkeypatch.setattr(sys, "prefix", "/usr")
    binds = bwrap_mod.layout.__wrapped__().binds
    for forbidden in ("/usr", "/usr/bin", "/usr/local", "/usr/local/bin", "/bin"):
        assert not bwrap_mod._covered(forbidden, list(binds)), (forbidden, binds)
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    assert bwrap_mod._covered(stdlib, list(binds))
    prefix = os.path.realpath(sys.base_prefix if sys.base_prefix != "/usr" else sys.exec_prefix)
    assert prefix not in binds


def test_the_isolation_line_names_the_memory_bound_and_the_bounds_missing_here(monkeypatch):
    """Block I/O is never bounded; kernel memory and memory as one sum only where a cgroup is."""
    line = memory_bound()  # this machine's
    assert line in isolation().detail or not FULL
    assert (cgroup.support().parent is None) == line.startswith("no cgroup")

    monkeypatch.setattr(sandbox, "_kernel_probe", lambda: sandbox._Probe("bwrap", "bwrap"))
    for parent, kernel_memory in ((None, True), ("/sys/fs/cgroup/x", False)):
        monkeypatch.setattr(cgroup, "support", lambda parent=parent: cgroup.Support(parent, "found"))
        unbounded = isolation().detail.split("not bounded here: ", 1)[1]
        assert "block I/O" in unbounded and ("kernel memory" in unbounded) == kernel_memory, unbounded


@needs_kernel_sandbox
@pytest.mark.parametrize("shared, passes", [("/etc/ld.so.cache", False), ("stdlib", True)],
                         ids=["ld.so.cache is per run", "a bound stdlib file is shared (documented channel)"])
def test_a_lock_passes_between_concurrent_programs_only_through_a_shared_file(shared, passes):
    """The private copy of /etc/ld.so.cache carries no lock; a file of the bound stdlib does (the
    residual channel docs/sandbox.md names), which also shows that the prober sees one when it is."""
    path = shared if shared.startswith("/") else os.path.realpath(os.__file__)
    holder = (f"import fcntl, time\nf = open({path!r}, 'rb')\nfcntl.flock(f, fcntl.LOCK_EX)\nprint('held')\n"
              "time.sleep(3.5)")
    prober = (f"import fcntl, time\nf = open({path!r}, 'rb')\nbusy = False\nfor _ in range(30):\n    time.sleep(0.1)\n"
              "    try:\n        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n        fcntl.flock(f, fcntl.LOCK_UN)\n"
              "    except BlockingIOError:\n        busy = True\nprint('busy' if busy else 'free')")
    held, probed = run_programs([holder, prober], SandboxLimits(wall_seconds=10, cpu_seconds=5), workers=2)
    assert held.ok and held.stdout == "held\n", held
    assert probed.ok and probed.stdout.strip() == ("busy" if passes else "free"), probed


@needs_kernel_sandbox
def test_an_allowed_package_installed_under_tmp_is_importable(tmp_path, monkeypatch):
    # tmp_path is under the host's /tmp, where the sandbox mounts its own tmpfs (a venv in /tmp)
    package = tmp_path / "site" / "numloss_probe_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("ANSWER = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(policy, "ALLOWED_PACKAGES", policy.ALLOWED_PACKAGES + ("numloss_probe_pkg",))
    bwrap_mod.layout.cache_clear()
    try:
        result = run_program("import numloss_probe_pkg, os\nprint(numloss_probe_pkg.ANSWER, os.listdir('/tmp') != [])", LIMITS)
    finally:
        bwrap_mod.layout.cache_clear()
    assert result.ok, result
    assert result.stdout.split() == ["42", "True"]


@needs_kernel_sandbox
@pytest.mark.parametrize("fault, wall", [("killed", 60.0), ("frozen", 3.0)])
def test_two_evaluators_never_share_a_host_uid_and_no_sandbox_outlives_its_evaluator_killed_or_frozen(fault, wall):
    """Two evaluators each run two programs with three setsid children each: no process of theirs
    is the host's root, and as root each sandbox has a host uid of its own, derived from its
    evaluator's pid (a non-root evaluator's run as its own uid). Then the first evaluator is killed mid-run (the lifeline ends its sandboxes long
    before their 60 s wall clock) or stopped: no pipe reads EOF and no parent dies, so neither the
    lifeline nor --die-with-parent nor the host's timer acts, and only the init's own deadline ends
    the namespace, at the wall clock (as root and non-root)."""
    sleepers = "import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n        os.setsid()\n        break\ntime.sleep(600)"
    code = (f"from numloss.evaluate.sandbox import run_programs, SandboxLimits\n"
            f"run_programs([{sleepers!r}] * 2, SandboxLimits(wall_seconds={wall}, cpu_seconds=60), workers=2)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    evaluators = [subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True) for _ in range(2)]
    left: list[str] = []
    try:
        for _ in range(2400):  # until each runs its programs: an init, the program and three children each (a loaded machine is slow)
            time.sleep(0.05)
            uids = [{p: _uid(p) for p in _foreign(e.pid)} for e in evaluators]
            if all(len(found) >= 10 for found in uids):
                break
        assert all(len(found) >= 10 for found in uids), "the sandboxed programs never started"
        # no process of a sandbox is the host's root (as root, set-up is until the preamble drops it)
        assert all(_sandbox_uid(uid) for found in uids for uid in found.values() if uid != -1), uids
        if os.geteuid() == 0:
            hosts = [set(found.values()) - {-1} for found in uids]
            owners = [{(uid - bwrap_mod.HOST_UID_BASE) // bwrap_mod.SLOTS for uid in found} for found in hosts]
            assert [len(found) for found in hosts] == [2, 2] and owners == [{e.pid} for e in evaluators], hosts
        namespaces = {hostile.pid_namespace(p) for p in uids[0]}
        started = time.monotonic()
        os.kill(evaluators[0].pid, signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
        while time.monotonic() - started < 3.0 + policy.INIT_GRACE + 3:
            if not (left := [p for p in os.listdir("/proc") if p.isdigit() and hostile.pid_namespace(p) in namespaces]):
                break
            time.sleep(0.1)
    finally:
        for e in evaluators:
            e.kill()
            e.wait()
    assert left == [], f"sandboxed processes outlived their {fault} evaluator"
    if fault == "killed":  # its cgroups are left empty, and the next evaluator's sweep removes them
        found = cgroup.support()
        parents = list(found.v1.values()) if found.v1 else [found.parent] if found.parent else []
        stray = {f"{p}/{n}" for p in parents for n in os.listdir(p) if n.startswith(f"numloss-sandbox-{evaluators[0].pid}-")}
        assert set(cgroup.sweep_stale(parents, min_age=0)) >= stray


def test_each_prepared_namespace_of_an_evaluator_has_a_slot_of_its_own(monkeypatch):
    made: list[int] = []
    monkeypatch.setattr(bwrap_mod, "_prepared_userns", lambda host_id: made.append(host_id) or os.open("/dev/null", 0))
    monkeypatch.setattr(bwrap_mod, "_userns_free", [])
    monkeypatch.setattr(bwrap_mod, "_slots", {})
    monkeypatch.setattr(bwrap_mod.os, "geteuid", lambda: 0)
    fds = [bwrap_mod._lease_userns() for _ in range(bwrap_mod.SLOTS)]
    base = bwrap_mod.HOST_UID_BASE + os.getpid() * bwrap_mod.SLOTS
    assert made == [base + n for n in range(bwrap_mod.SLOTS)] and all(map(_sandbox_uid, made))
    with pytest.raises(OSError, match="sandboxes at once"):  # fails closed rather than share a uid
        bwrap_mod._lease_userns()
    bwrap_mod._return_userns(fds[3], reusable=False)  # its slot is free again, under a new namespace
    fds[3] = bwrap_mod._lease_userns()
    assert made[-1] == base + 3
    bwrap_mod._return_userns(fds[5], reusable=True)  # pooled: handed out again as it is
    assert bwrap_mod._lease_userns() == fds[5] and len(made) == bwrap_mod.SLOTS + 1
    for fd in fds:
        os.close(fd)


# ---- limits and output ---------------------------------------------------------------------------

#: (name, program, status, a phrase of its detail, its exit status: None when the sandbox ended it)
ENDINGS = [
    # a lone surrogate is one program's error, never an exception (in a comment it is harmless)
    ("a lone surrogate", "print('\ud800')", "error", "SyntaxError", 1),
    ("a lone surrogate in a comment", "print(1) # \udcff\ud83d", "ok", "", 0),
    ("infinite loop", "while True:\n    pass", "timeout", "limit", None),
    ("sleep past the wall limit, with a setsid child", "import os, time\nif os.fork() == 0:\n    os.setsid()\n"
     "    time.sleep(60)\ntime.sleep(60)", "timeout", "wall-clock", None),
    ("huge stdout", "while True:\n    print('x' * 1000)", "output_limit", "bytes", None),
    ("huge stderr", "import sys\nwhile True:\n    sys.stderr.write('x' * 1000)", "output_limit", "stderr", None),
    ("sys.exit with a status", "import sys\nsys.exit(3)", "error", "exit status 3", 3),
    ("killed by a signal", "import os\nos.kill(os.getpid(), 9)", "error", "signal 9", -9),
    ("crash", "print(1 / 0)", "error", "ZeroDivisionError", 1),
    ("syntax error", "print(1", "error", "SyntaxError", 1),
    ("a network socket", "import socket\nsocket.socket().connect(('127.0.0.1', 9))", "error", "Errno 97", 1),
    ("write outside", "open('/numloss-escape', 'w')", "error", "Read-only file system", 1),
    ("lift its own limits", "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (100, 100))", "error", "ValueError", 1),
]


@needs_kernel_sandbox
def test_each_ending_is_reported_from_one_pool_in_order(monkeypatch):
    # with its user's epoll watches used up: a non-root evaluator shares fs.epoll.max_user_watches
    # with its programs, and a program's processes can make millions of watches (about 0.9 M per
    # CPU second): the evaluator's own waits must not need one (ENOSPC would fail every run)
    def used_up(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    for module, name in ((select, "epoll"), (selectors, "EpollSelector"), (selectors, "DefaultSelector")):
        monkeypatch.setattr(module, name, used_up)
    done: list[int] = []
    with hostile.subreaper():  # an orphan of a run is reparented here, so it is found
        results = run_programs([row[1] for row in ENDINGS], LIMITS, workers=3, on_done=lambda i, r: done.append(i))
        for (name, _, status, detail, code), result in zip(ENDINGS, results, strict=True):
            assert (result.status, result.returncode) == (status, code) and detail in result.detail, (name, result)
            assert result.wall_seconds < LIMITS.wall_seconds + 2, (name, result)
            assert hostile.our_processes_in_pid_namespace(result.pid_namespace) == [], name
    assert sorted(done) == list(range(len(ENDINGS)))


@needs_kernel_sandbox
def test_a_large_program_arrives_whole_and_runs_without_its_file_when_its_tmpfs_is_too_small():
    # the program's text is saved as /tmp/prog.py (its __file__) when the tmpfs has room; when it
    # has not, the program still runs, as "<program>", and the tmpfs is left empty for it
    # (only its own entries are asserted: binds of a venv under /tmp show there too)
    program = ("import os\nprint('__file__' in globals(), 'prog.py' in os.listdir('.'))\ntotal = 0\n"
               + "".join(f"total += {i}\n" for i in range(20000)) + "print(total)\n")
    total = sum(range(20000))
    for tmpfs, seen in ((64 << 10, "False False"), (16 << 20, "True True")):
        result = run_program(program, SandboxLimits(wall_seconds=20, cpu_seconds=10, tmpfs_bytes=tmpfs))
        assert result.ok and result.stdout == f"{seen}\n{total}\n", result


@pytest.mark.parametrize("field, value", [("wall_seconds", 0), ("wall_seconds", float("nan")), ("cpu_seconds", "5"),
                                          ("output_bytes", 10), ("tmpfs_bytes", 10), ("clock", "sun"),
                                          ("workers", 0), ("workers", 100_000), ("workers", True), ("workers", 2.5)])
def test_limits_and_a_worker_count_that_cannot_be_honoured_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        run_programs(["print(1)"], LIMITS, workers=value) if field == "workers" else SandboxLimits(**{field: value})


# ---- the seccomp filter, decoded by an independent classic-BPF interpreter ----------------------

def run_bpf(program: bytes, nr: int, arch: int, args: tuple[int, ...] = (0,) * 6) -> int:
    """The kernel's classic BPF semantics for the opcodes a seccomp filter may use (subset)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    for _ in range(len(insns) + 1):
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35, 0x45):  # jeq / jge / jset #k
            taken = acc == k if code == 0x15 else acc >= k if code == 0x35 else bool(acc & k)
            pc += 1 + (jt if taken else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")
    raise AssertionError("the filter does not terminate")


X86_64, AARCH64 = 0xC000003E, 0xC00000B7
ALLOW, KILL = 0x7FFF0000, 0x80000000


def verdict(program: bytes, nr: int, *args: int, arch: int = X86_64) -> int | str:
    """"allow", "kill" or the errno the filter returns for syscall `nr` with `args`."""
    value = run_bpf(program, nr, arch, args or (0,))
    if value in (ALLOW, KILL):
        return "allow" if value == ALLOW else "kill"
    assert value & 0xFFFF0000 == 0x00050000, hex(value)  # SECCOMP_RET_ERRNO
    return value & 0xFFFF


@pytest.mark.parametrize("allow_mount", [False, True], ids=["program", "bwrap-loaded"])
def test_the_seccomp_filter_denies_what_it_promises(allow_mount):
    prog = filter_program("x86_64", allow_mount=allow_mount)
    nr = syscall_numbers("x86_64")
    for name in DENIED:  # EPERM; bwrap itself may mount before the program's filter
        assert verdict(prog, nr[name]) == ("allow" if allow_mount and name == "mount" else 1), name
    assert set(DENIED) >= {"memfd_create", "memfd_secret", "shmget", "shmat", "msgget", "semget", "semop", "setxattr", "fsetxattr",
                           "lsetxattr", "mq_open", "inotify_init", "inotify_init1", "fanotify_init", "mbind", "modify_ldt", "io_setup",
                           "sync", "syncfs", "fadvise64"}
    for allowed in (0, 1, 2, 57, 59, 60, 62, 231, 434, 424):  # read write open fork execve exit kill exit_group pidfd_*
        assert verdict(prog, allowed) == "allow", allowed
    allowed = {nr[name] for name in NEWER_ALLOWED}
    assert allowed == {452, 454, 455, 456, 464, 465, 468}  # fchmodat2, futex_*, getxattrat, listxattrat, file_getattr
    for number in (*range(451, 471), 500, 1000, 0x3FFFFFFF):  # newer than 450: only the listed ones; the rest as an old kernel
        assert verdict(prog, number) == ("allow" if number in allowed else 38), number
    # every socket type of AF_UNIX; INET, INET6, NETLINK, PACKET, VSOCK (and high bits) refused
    for call, family, kind in itertools.product(("socket", "socketpair"), (1, 2, 10, 16, 17, 40, 1 << 32 | 2), (1, 2, 5, 0x80001)):
        assert verdict(prog, nr[call], family, kind, 0) == ("allow" if family == 1 else 97), (call, family, kind)
    # F_SETPIPE_SZ, F_SETLEASE, F_NOTIFY refused; F_DUPFD..F_SETFL, locks, F_GETLEASE, F_DUPFD_CLOEXEC, F_GETPIPE_SZ not
    denied = (fcntl.F_SETPIPE_SZ, fcntl.F_SETLEASE, fcntl.F_NOTIFY)
    for cmd in (*denied, 0, 1, 2, 3, 4, 5, 6, 7, 36, 37, 38, 1025, 1030, 1032):
        assert verdict(prog, nr["fcntl"], 3, cmd) == (1 if cmd in denied else "allow"), cmd
    for advice in (20, 21, 0, 3, 4, 8, 14):  # MADV_COLD, MADV_PAGEOUT refused; NORMAL, WILLNEED, DONTNEED, FREE, HUGEPAGE not
        assert verdict(prog, nr["madvise"], 0, 4096, advice) == (1 if advice in (20, 21) else "allow"), advice
    assert verdict(prog, nr["clone"], 0x003D0F00) == verdict(prog, nr["clone"], 0x01200011) == "allow"  # threads, fork
    for flag in (0x10000000, 0x20000000, 0x40000000, 0x00020000, 0x08000000, 0x04000000, 0x02000000, 0x80):  # CLONE_NEW*
        assert verdict(prog, nr["clone"], 0x01200011 | flag) == 1, hex(flag)
    assert verdict(prog, nr["clone3"]) == 38  # ENOSYS: glibc falls back to clone
    assert verdict(prog, 0x40000000 + 1) == 1  # x32 ABI
    assert verdict(prog, 1, arch=0x40000003) == "kill"  # i386 ABI from a 64-bit process
    assert verdict(filter_program("aarch64"), 117, arch=AARCH64) == 1  # ptrace
    with pytest.raises(sandbox.SeccompUnsupported):
        filter_program("mips")


def test_the_last_filter_refuses_mount_and_any_further_filter_only():
    nr = syscall_numbers("x86_64")
    prog = last_filter("x86_64")
    assert verdict(prog, nr["mount"]) == verdict(prog, nr["seccomp"], 1, 0, 0) == 1  # SECCOMP_SET_MODE_FILTER
    for option in (22, 1, 4, 15, 21, 38):  # PR_SET_SECCOMP refused; PDEATHSIG, DUMPABLE, SET_NAME, GET_SECCOMP, NO_NEW_PRIVS not
        assert verdict(prog, nr["prctl"], option, 2, 0) == (1 if option == 22 else "allow"), option
    assert all(verdict(prog, n) == "allow" for n in (0, 1, 56, nr["umount2"], 500))
    assert verdict(prog, 1, arch=0x40000003) == "kill"
    # RLIMIT_CORE (4) may be read, never set: setrlimit, and prlimit64 with a new limit (the
    # pointer's low or high half non-zero); every other limit (RLIMIT_AS: 9) is the kernel's to decide
    assert verdict(prog, nr["setrlimit"], 4, 0x7FFF0000) == 1 and verdict(prog, nr["setrlimit"], 9, 0x7FFF0000) == "allow"
    for new in (0x7FFF0000, 0x7FFF << 32, 1):
        assert verdict(prog, nr["prlimit64"], 0, 4, new, 0) == 1 and verdict(prog, nr["prlimit64"], 0, 9, new, 0) == "allow", hex(new)
    assert verdict(prog, nr["prlimit64"], 0, 4, 0, 0x7FFF0000) == "allow"  # getrlimit
    aarch64 = last_filter("aarch64")
    assert verdict(aarch64, 261, 0, 4, 0x7FFF0000, 0, arch=AARCH64) == 1  # prlimit64
    assert verdict(aarch64, 164, 4, 0x7FFF0000, arch=AARCH64) == 1  # setrlimit


# ---- fail closed ---------------------------------------------------------------------------------

def _fake_bwrap(tmp_path, body: str) -> str:
    path = tmp_path / "bwrap"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize("case", ["not linux", "none found", "missing binary", "fails to create namespaces", "does not isolate"])
def test_without_a_working_bwrap_execution_is_refused_with_one_clear_line(fresh_probe, monkeypatch, tmp_path, case):
    if case == "not linux":
        monkeypatch.setattr(sys, "platform", "darwin")
    # (bwrap candidates: a path, or the body of a fake bwrap; what the line says): a sandbox that
    # fails to start is an error result the line quotes, never a crash
    candidates, said = {
        "not linux": ([], "needs Linux namespaces and this is darwin"),
        "none found": ([], "no bwrap found"),
        "missing binary": ([str(tmp_path / "nonexistent" / "bwrap")], "No such file or directory"),
        "fails to create namespaces": (["echo 'bwrap: No permissions to create new namespace' >&2; exit 1"],
                                       "sandbox setup failed: bwrap: No permissions to create new namespace"),
        # runs the interpreter as the caller with none of the isolation: the probe must notice
        "does not isolate": (['while [ "$1" != "--" ]; do shift; done; shift; exec "$@"'], "bwrap cannot create the sandbox here"),
    }[case]
    candidates = [c if c.startswith("/") else _fake_bwrap(tmp_path, c) for c in candidates]
    monkeypatch.setattr(bwrap_mod, "bwrap_candidates", lambda: candidates)
    iso = isolation()
    assert iso == Isolation("unavailable", iso.detail) and not iso.available
    assert said in iso.detail and ("Linux" in iso.detail) == (case == "not linux"), iso.detail
    with pytest.raises(SandboxUnavailable) as caught:
        run_program("print(1)", LIMITS)
    message = str(caught.value)
    assert "\n" not in message and "--allow-unisolated-exec" in message and f"{ALLOW_UNISOLATED_ENV}=1" in message
    with pytest.raises(SandboxUnavailable):
        run_programs(["print(1)", "print(2)"], LIMITS)


def test_the_opt_in_runs_the_audit_hook_child_and_says_so(fresh_probe, monkeypatch):
    monkeypatch.setattr(bwrap_mod, "bwrap_candidates", lambda: [])
    result = run_program("print(6 * 7)", LIMITS, allow_unisolated=True)
    assert result.ok and result.stdout.strip() == "42" and result.isolation == "unisolated"
    # the values numloss eval accepts are the ones isolation() accepts: one rule
    for value, allowed in (("0", False), ("true", True), ("YES", True), ("no", False), ("", False), (" 1 ", True)):
        monkeypatch.setenv(ALLOW_UNISOLATED_ENV, value)
        assert programs.ProgramRunner().allow is allowed and (isolation().mode == "unisolated") is allowed, value
    assert [r.stdout.strip() for r in run_programs(["print(1)", "print(2)"], LIMITS)] == ["1", "2"]


@needs_kernel_sandbox
def test_the_system_bwrap_is_preferred_and_the_bundled_one_is_the_fallback(monkeypatch, tmp_path):
    assert bwrap_mod.bundled_bwrap() is not None and os.access(bwrap_mod.bundled_bwrap(), os.X_OK)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert bwrap_mod.bwrap_candidates() == [bwrap_mod.bundled_bwrap()]
    _fake_bwrap(tmp_path, "exit 1")
    assert bwrap_mod.bwrap_candidates() == [str(tmp_path / "bwrap"), bwrap_mod.bundled_bwrap()]


# ---- the unisolated mode keeps the old audit-hook guard ---------------------------------------

@pytest.mark.parametrize(
    "name, source, status, detail",
    [
        ("fork bomb", "import os\nwhile True:\n    os.fork()", "blocked", "os.fork"),
        ("read /etc/passwd", "print(open('/etc/passwd').read())", "blocked", "/etc/passwd"),
        ("open a socket", "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 9))", "blocked", "socket"),
        ("memory bomb", "x = bytearray(8 * 10**9)", "memory", "address-space"),
        ("huge output", "while True:\n    print('x' * 1000)", "output_limit", "bytes"),
        ("a lone surrogate", "print('\ud800')", "error", ""),
        # what it writes to stderr after its answer does not undo an exit 0
        ("an answer, then stderr noise", "import sys\nprint(42)\nsys.stderr.write('MemoryError\\n[Errno 30] x\\n')", "ok", ""),
    ],
)
def test_the_unisolated_mode_still_guards(name, source, status, detail):
    result = sandbox.audithook.run(source, LIMITS)
    assert result.status == status and detail in result.detail, (name, result)
    assert result.isolation == "unisolated"


# ---- eval records the isolation and fails closed to chain of thought ----------------------------

def test_without_a_sandbox_eval_says_programs_are_not_run_and_records_it(fresh_probe, monkeypatch, tmp_path, capsys):
    """Without a sandbox, evaluating a model and `numloss eval --score-outputs` say on the console
    that programs are not run, and record it (--allow-unisolated-exec: test_the_opt_in_runs_the_audit_hook_child_and_says_so,
    and test_eval_runner's CLI run records the isolation it ran under)."""
    from numloss.evaluate import cli
    from test_eval_faults import Echo

    monkeypatch.setattr(bwrap_mod, "bwrap_candidates", lambda: [])
    monkeypatch.setenv(ALLOW_UNISOLATED_ENV, "0")  # the CLI's opt-in sets it; undone after the test
    data = str(Path(__file__).parent / "fixtures" / "benchmarks")
    report = evaluate.evaluate(Echo(), "gsm8k", data_dir=data, limit=2, digit_stats=False)
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text(json.dumps({"benchmark": "gsm8k", "id": "0", "output": "```python\nprint(7)\n```"}) + "\n")
    evaluated = capsys.readouterr().err
    assert cli.main(["--data-dir", data, "--out", str(tmp_path / "out"), "--score-outputs", str(outputs)]) == 0
    recorded = json.loads((tmp_path / "out" / "results.json").read_text())["isolation"]
    assert f"Program sandbox: {recorded['mode']}" in (tmp_path / "out" / "report.md").read_text()
    for isolation_, err in ((report.isolation, evaluated), (recorded, capsys.readouterr().err)):
        assert isolation_["mode"] == "unavailable" and isolation_.get("program_of_thought", False) is False
        assert "not run" in err and "--allow-unisolated-exec" in err and "chain" in err, err


# ---- statuses come from observations; output is safe to show ------------------------------------

_NOISE = ["MemoryError", "[Errno 30] Read-only file system", "bwrap: Can't mount proc", "NUMLOSS_SANDBOX_SETUP_FAILED: x",
          "PermissionError: [Errno 1]", "Killed", "File too large", "Cannot allocate memory", "timeout", ""]
_OBSERVED = st.builds(
    Observed, killed=st.sampled_from([None, "timeout", "flood"]), started=st.booleans(), setup=st.sampled_from(["", "x"]),
    wait_status=st.sampled_from([None, 0, 1 << 8, 137 << 8, 125 << 8, signal.SIGKILL, signal.SIGXCPU, signal.SIGSEGV, signal.SIGXFSZ]),
    cpu_seconds=st.sampled_from([0.0, 0.5, 2.0, 5.0]), deadline=st.booleans(), memory_events=st.sampled_from([None, 0, 1]),
    cpu_exceeded=st.sampled_from([None, 2.5]), process_limit=st.booleans())


@settings(max_examples=200, deadline=None)
@given(seen=_OBSERVED, stderrs=st.lists(st.lists(st.sampled_from(_NOISE), max_size=4).map("\n".join), min_size=2, max_size=4))
def test_a_status_never_depends_on_what_the_program_wrote(seen, stderrs):
    """For every observation, any stderr (random lines, forged markers) gives the same status; an
    exit 0 that nothing ended is "ok"; "timeout" only with a timer or the CPU limit."""
    statuses = {classify(seen, stderr, LIMITS)[0] for stderr in stderrs}
    assert len(statuses) == 1, statuses
    status = statuses.pop()
    ended = seen.killed or seen.deadline or seen.memory_events or seen.cpu_exceeded is not None or seen.process_limit
    assert status == "ok" or not (seen.started and seen.wait_status == 0 and not ended)
    cpu = seen.cpu_exceeded is not None or seen.cpu_seconds >= 0.8 * LIMITS.cpu_seconds
    assert status != "timeout" or seen.killed == "timeout" or seen.deadline or cpu
    assert status != "memory" or seen.memory_events
    assert status != "output_limit" or seen.killed == "flood"


@pytest.mark.parametrize("raw, shown", [
    ("\x1b[31m42\x1b[0m\n", "42\n"),
    ("\x1b]0;title\x0742", "42"),
    ("\x1b]52;c;ZXZpbA==\x1b\\42", "42"),
    ("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "link"),
    ("\x1bP1$r\x1b\\4\x1bc2", "42"),
    ("\x9b2J42\x9d0;t\x9c", "42"),
    ("wrong\rright", "wrong\nright"),
    ("a\r\nb", "a\nb"),
    ("12\x08\x083", "123"),
    ("tab\tand\nnewline stay; \u00e9 \u4e2d \U0001f600 stay", "tab\tand\nnewline stay; \u00e9 \u4e2d \U0001f600 stay"),
    ("bell\x07 nul\x00 del\x7f", "bell nul del"),
])
def test_terminal_controls_are_removed_from_what_is_shown(raw, shown):
    assert safe_text(raw) == shown.replace("\x00", "")
    assert "\x1b" not in decode_output(raw.encode("utf-8", "surrogatepass"))


def test_safe_text_leaves_no_control_or_invisible_character_whatever_the_input():
    # every format character (category Cf: bidi controls, zero-width characters, tags, ...) that
    # this interpreter's Unicode database knows, found independently of the sanitiser's list
    invisible = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    invisible += ["\u034f", "\u115f", "\u1160", "\u3164", "\uffa0", "\u2028", "\u2029"]
    # all go; the line and paragraph separators end a line each, as a CR does
    assert safe_text("".join(invisible)) == "\n\n"
    rng = random.Random(3)
    alphabet = [chr(c) for c in range(0x00, 0xA0)] + invisible + ["4", "2", "[", "]", ";"]
    for _ in range(2000):
        text = safe_text("".join(rng.choices(alphabet, k=rng.randint(0, 40))))
        assert not any((ord(c) < 32 and c not in "\t\n") or 0x7F <= ord(c) <= 0x9F or c in invisible for c in text), repr(text)


# ---- a cgroup v2 per program where the machine delegates one ------------------------------------

def _fake_proc(tmp_path, cgroups: str, mounts: list[tuple[str, str]]) -> str:
    """A fake /proc under `tmp_path`: `cgroups` as self/cgroup and, in self/mountinfo, each of `mounts`
    (a folder made under `tmp_path`, the filesystem and its options: "cgroup2 rw", "cgroup rw,memory")."""
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text(cgroups)
    lines = ["25 1 0:22 / /sys rw - sysfs sysfs rw"]
    for n, (folder, kind) in enumerate(mounts):
        (tmp_path / folder).mkdir(parents=True)
        lines.append(f"{30 + n} 25 0:{40 + n} / {tmp_path / folder} rw,nosuid - {kind.split()[0]} {kind}")
    (tmp_path / "proc" / "self" / "mountinfo").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "proc")


def test_a_delegated_cgroup_v2_or_a_root_evaluators_v1_is_found_and_an_unusable_one_is_said_why(tmp_path):
    for case, enabled, offered in (("a", "memory pids", "cpu memory pids"), ("b", "cpu", "hugetlb")):
        _fake_proc(tmp_path / case, "12:memory:/x\n0::/box\n", [("cgroup2", "cgroup2 rw")])
        (tmp_path / case / "cgroup2" / "box").mkdir()
        (tmp_path / case / "cgroup2" / "box" / "cgroup.subtree_control").write_text(enabled + "\n")
        (tmp_path / case / "cgroup2" / "box" / "cgroup.controllers").write_text(offered + "\n")
    folder = str(tmp_path / "a" / "cgroup2" / "box")
    found = cgroup.find(str(tmp_path / "a" / "proc"), environ={})
    assert found.parent == folder and "memory.max and pids.max" in found.detail
    found = cgroup.find(str(tmp_path / "b" / "proc"), environ={})
    assert found.parent is None and "memory and pids not delegated" in found.detail and "hugetlb" in found.detail
    assert cgroup.find(str(tmp_path / "b" / "proc"), environ={cgroup.ENV_VAR: folder}).parent == folder
    found = cgroup.find(_fake_proc(tmp_path / "c", "4:memory:/x\n0::/\n", [("memory", "cgroup rw,memory")]), environ={})
    assert found.parent is None and found.detail.startswith("no cgroup v2 hierarchy (cgroup v1 only); ")
    hierarchies = [("memory", "cgroup rw,memory"), ("cpu,cpuacct", "cgroup rw,cpu,cpuacct"), ("pids", "cgroup rw,pids")]
    proc = _fake_proc(tmp_path / "v1", "9:pids:/\n4:memory:/job/7\n2:cpu,cpuacct:/\n0::/\n", hierarchies)
    (tmp_path / "v1" / "memory" / "job" / "7").mkdir(parents=True)
    found = cgroup.find_v1(proc, "no v2", euid=0)
    assert found.v1 == {"memory": str(tmp_path / "v1/memory/job/7"), "cpu": str(tmp_path / "v1/cpu,cpuacct"),
                        "pids": str(tmp_path / "v1/pids")}
    assert found.parent == found.v1["memory"] and "cpu.cfs_quota_us" in found.detail
    assert cgroup.find_v1(proc, "no v2", euid=1000) == cgroup.Support(None, "no v2; cgroup v1 needs a root evaluator")
    proc = _fake_proc(tmp_path / "lacking", "4:memory:/\n0::/\n", hierarchies[:1])
    assert cgroup.find_v1(proc, "no v2", euid=0).detail == "no v2; cgroup v1 lacks cpu and pids"


def test_cgroups_left_by_a_dead_evaluator_are_swept_and_new_names_never_collide(tmp_path):
    # an evaluator that is killed leaves its programs' (empty) cgroups for ever;
    # a later evaluator with the same pid used to fail to make its own (mkdir: File exists)
    dead = subprocess.Popen(["true"])
    dead.wait()
    old = time.time() - 2 * cgroup.STALE_SECONDS
    folders = {
        "stale": f"numloss-sandbox-{dead.pid}-1", "recent": f"numloss-sandbox-{dead.pid}-2",
        "live": f"numloss-sandbox-{os.getpid()}-1", "busy": f"numloss-sandbox-{dead.pid}-3",
        "other": "not-ours-1", "bad": "numloss-sandbox-x-1",
    }
    for kind, name in folders.items():
        (tmp_path / name).mkdir()
        if kind == "busy":
            (tmp_path / name / "cgroup.procs").write_text("5\n")  # rmdir refuses it, as the kernel would
        if kind != "recent":
            os.utime(tmp_path / name, (old, old))
    assert cgroup.sweep_stale([str(tmp_path), str(tmp_path / "missing")]) == [str(tmp_path / folders["stale"])]
    assert sorted(os.listdir(tmp_path)) == sorted(n for k, n in folders.items() if k != "stale")
    # two cgroups of one evaluator under a parent holding a leftover of a dead one with its pid
    parent = tmp_path / "parent"
    parent.mkdir()
    (parent / f"numloss-sandbox-{os.getpid()}-0").mkdir()
    made = [cgroup.ProgramCgroup(str(parent), SandboxLimits()).path for _ in range(2)]
    assert len(set(made)) == 2 and all(map(os.path.isdir, made))


@needs_kernel_sandbox
def test_each_program_gets_its_cgroup_an_oom_kill_reads_as_memory_and_a_failed_set_up_step_runs_nothing(tmp_path, monkeypatch):
    """The plumbing, on a folder standing in for a delegated cgroup (the kernel side needs one;
    where this machine has none, memory_bound() says so). A set-up step that fails (an rlimit
    too high to set, a cgroup it cannot join) is a setup failure, and the program never runs."""
    parent = tmp_path / "delegated"
    parent.mkdir()
    sandbox._kernel_probe()  # a probe not cached yet (fresh_probe clears it) would run a program there too
    monkeypatch.setattr(cgroup, "support", lambda: cgroup.Support(str(parent), "test"))
    result = run_program("print(1)", LIMITS)
    assert result.ok, result
    (group,) = parent.iterdir()
    assert (group / "memory.max").read_text() == str(LIMITS.memory_bytes + LIMITS.tmpfs_bytes)
    assert (group / "pids.max").read_text() == str(LIMITS.max_processes + 1)
    assert int((group / "cgroup.procs").read_text()) > 1  # the init's host pid, before it forked
    monkeypatch.setattr(cgroup.ProgramCgroup, "oom_kills", lambda self: 1)
    killed = run_program("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", LIMITS)
    assert killed.status == "memory" and "OOM" in killed.detail

    def refuse(self, pid):
        raise PermissionError(13, "Permission denied")
    unsettable = run_program("print('ran')", SandboxLimits(open_files=1 << 40))
    monkeypatch.setattr(cgroup.ProgramCgroup, "add", refuse)
    for failed, step in ((unsettable, "setrlimit(RLIMIT_NOFILE"), (run_program("print('ran')", LIMITS), "cgroup")):
        assert failed.status == "error" and failed.stdout == "" and failed.detail.startswith("sandbox setup failed"), failed
        assert step in failed.detail, failed


def test_the_inits_reports_are_read_as_they_came():
    seen = bwrap_mod.observed(None, b"started\nend 256 0.120\n")
    assert seen.started and seen.wait_status == 256 and seen.cpu_seconds == pytest.approx(0.12)
    assert bwrap_mod.observed(None, b"started\nend 25").wait_status is None  # cut short by a kill
    assert bwrap_mod.observed("timeout", b"started\ndeadline\n").deadline


class _Injected(BaseException):
    """A fault injected into the host's set-up (a BaseException, like Ctrl-C: nothing catches it)."""


@needs_kernel_sandbox
@pytest.mark.parametrize("point", ["close-fds", "spool", "watch"])
def test_a_set_up_failure_after_bwrap_started_leaves_no_sandbox_behind(monkeypatch, point):
    # bwrap waits on --block-fd until the host says go; the host's cleanup closes that pipe, which
    # bwrap reads as go. A failure between starting bwrap and watching it must end the sandbox
    # first, or the program would run with no host clock and outside its cgroup

    bwrap_path = sandbox._kernel_probe().bwrap or ""  # probed before any fault is injected
    started: list[subprocess.Popen] = []
    real_popen, real_close = subprocess.Popen, os.close

    def recording_popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    def fail(*args, **kwargs):
        raise _Injected(point)

    with hostile.subreaper():  # a sandbox orphaned by the failure is reparented here, so it is found
        monkeypatch.setattr(bwrap_mod.subprocess, "Popen", recording_popen)
        if point == "close-fds":
            monkeypatch.setattr(bwrap_mod.os, "close", lambda fd: fail() if started else real_close(fd))
        else:
            monkeypatch.setattr(bwrap_mod, "OutputFile" if point == "spool" else "_Watch", fail)
        with pytest.raises(_Injected):
            bwrap_mod.run("import time\ntime.sleep(60)", LIMITS, bwrap_path)
        monkeypatch.undo()
        launched = [proc for proc in started if proc.args[0] == bwrap_path]
        assert len(launched) == 1 and launched[0].poll() is not None, "bwrap outlived the failed set-up"
        assert launched[0].stdout.closed and launched[0].stderr.closed
        time.sleep(1.0)  # time for an orphaned sandbox to read the closed pipe as go
        hostile.reap_orphans()  # the killed ones: only a living process counts
        assert _foreign(os.getpid()) == [], "a sandbox outlived the failed set-up"
