"""Run model-written Python programs in separate, limited processes; never in the evaluator's own.

Each program runs in a fresh interpreter started as ``python -I -S`` (isolated: no environment
variables, no user site, no ``site`` module) with a preamble that, before the program runs:

- sets resource limits: CPU seconds (RLIMIT_CPU), address space (RLIMIT_AS), size of any file it
  writes, stdout/stderr included (RLIMIT_FSIZE: this is the output cap), and the number of
  processes (RLIMIT_NPROC; the kernel ignores it for root, so fork is also refused below);
- installs an audit hook (PEP 578) that refuses: socket creation and name lookups (no network),
  fork / exec / spawn / subprocess / os.system (no child processes), calls into native code through
  ctypes (it could bypass the hook; importing ctypes, which sympy does, stays allowed), and file
  access outside policy;
- **file policy**: a program may read, write, create and delete files only inside its own empty
  temporary working directory. Outside it, it may only *read* the Python installation (stdlib and
  the evaluator's site-packages, so ``import math`` / ``import sympy`` work). Everything else,
  ``/etc/passwd`` or any other file on the machine included, is refused with PermissionError.

The evaluator side adds a wall-clock limit (the whole process group is killed with SIGKILL, so
forked children die too), captures stdout/stderr through files capped by RLIMIT_FSIZE, and
removes the working directory afterwards. A pool of threads, each waiting on one child process,
runs many programs at once.

This contains what model-written code does by accident or by naive hostility (loops, memory
bombs, fork bombs, stray file writes, network calls). It is not a security boundary against a
determined attacker: there is no seccomp filter or namespace, so a program that finds a native
code path around the audit hook runs with the evaluator's user rights. Run evaluations of
untrusted models inside a container if that matters.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "error", "timeout", "memory", "output_limit", "blocked"]

VIOLATION_MARKER = "NUMLOSS_SANDBOX_VIOLATION"

# The preamble runs inside the child before the program. It is formatted with repr()-quoted
# values, so it never interpolates untrusted text; the program itself arrives on stdin.
_PREAMBLE = r'''
import sys, resource
_cpu, _mem, _fsize, _nproc = {cpu}, {mem}, {fsize}, {nproc}
resource.setrlimit(resource.RLIMIT_CPU, (_cpu, _cpu + 1))
if _mem > 0:
    resource.setrlimit(resource.RLIMIT_AS, (_mem, _mem))
resource.setrlimit(resource.RLIMIT_FSIZE, (_fsize, _fsize))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
try:
    resource.setrlimit(resource.RLIMIT_NPROC, (_nproc, _nproc))
except (ValueError, OSError):
    pass
sys.path[:] = {sys_path}
sys.dont_write_bytecode = True
_source = sys.stdin.read()
import os
_work = os.path.realpath(os.getcwd())
_read_roots = tuple(os.path.realpath(p) for p in {read_roots})
_MARK = {marker}
_DENY = frozenset((
    "socket.__new__", "socket.bind", "socket.connect", "socket.getaddrinfo", "socket.gethostbyname",
    "socket.gethostbyaddr", "socket.sendto", "socket.sendmsg", "os.fork", "os.forkpty", "os.system",
    "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "pty.spawn", "os.startfile",
    "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function", "ctypes.cdata", "ctypes.string_at",
    "ctypes.wstring_at", "ctypes.cdata/buffer", "os.kill", "os.killpg",
    "signal.pthread_kill", "resource.setrlimit", "resource.prlimit", "sys.addaudithook",
    "os.chdir", "os.chroot", "webbrowser.open",
))
_PATH_WRITE = frozenset(("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
    "os.link", "os.symlink", "os.truncate", "os.utime", "shutil.rmtree", "shutil.move",
    "shutil.copyfile", "shutil.copytree", "os.setxattr", "os.removexattr"))
_realpath, _fspath, _isinstance = os.path.realpath, os.fspath, isinstance
def _inside(path, roots):
    try:
        if _isinstance(path, int):
            return True  # an already-open descriptor was checked when it was opened
        p = _realpath(_fspath(path))
    except Exception:
        return False
    return any(p == r or p.startswith(r + "/") for r in roots)
def _refuse(what):
    raise PermissionError(_MARK + ": " + what)
def _hook(event, args):
    if event in _DENY:
        _refuse(event + " is not allowed in the sandbox")
    if event == "open":
        path, mode, flags = args[0], args[1], args[2]
        if path is None:
            return
        writing = (_isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags & 0o3103) != 0
        if _inside(path, (_work,)):
            return
        if not writing and _inside(path, _read_roots):
            return
        _refuse(("writing " if writing else "reading ") + repr(path) + " outside the working directory")
    elif event in _PATH_WRITE:
        for a in args[:2]:
            if _isinstance(a, (str, bytes)) or hasattr(a, "__fspath__"):
                if not _inside(a, (_work,)):
                    _refuse(event + " on " + repr(a) + " outside the working directory")
    elif event in ("os.listdir", "os.scandir", "glob.glob"):
        if args and args[0] is not None and not _inside(args[0] or ".", (_work,) + _read_roots):
            _refuse("listing " + repr(args[0]) + " outside the working directory")
sys.addaudithook(_hook)
del os
_code = compile(_source, "<program>", "exec")
del _source
_globals = {{"__name__": "__main__", "__builtins__": __builtins__}}
exec(_code, _globals)
'''


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for one program. `memory_bytes` 0 disables the address-space limit."""

    wall_seconds: float = 5.0
    cpu_seconds: int = 5
    memory_bytes: int = 1 << 30
    output_bytes: int = 64 * 1024
    max_processes: int = 64

    def __post_init__(self) -> None:
        if self.wall_seconds <= 0 or self.cpu_seconds <= 0:
            raise ValueError(f"time limits must be positive, got {self}")
        if self.output_bytes < 1024:
            raise ValueError(f"output_bytes must be at least 1024, got {self.output_bytes}")


@dataclass(frozen=True)
class ProgramResult:
    """What one program did. `stdout` is capped at the limit; `detail` says why it failed."""

    status: Status
    stdout: str
    returncode: int | None
    wall_seconds: float
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _read_roots() -> list[str]:
    """Directories a program may read: the Python installation and the evaluator's packages."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= {sys.base_prefix + "/lib", sys.prefix + "/lib"}
    return sorted(r for r in roots if os.path.isdir(r))


def _child_sys_path() -> list[str]:
    """The evaluator's import path minus the current directory and the project's own source."""
    return [p for p in sys.path if p and os.path.isdir(p) and not p.endswith("/src")]


def _preamble(limits: SandboxLimits) -> str:
    return _PREAMBLE.format(
        cpu=int(limits.cpu_seconds),
        mem=int(limits.memory_bytes),
        fsize=int(limits.output_bytes),
        nproc=int(limits.max_processes),
        sys_path=repr(_child_sys_path()),
        read_roots=repr(_read_roots()),
        marker=repr(VIOLATION_MARKER),
    )


def _classify(returncode: int | None, timed_out: bool, stdout_size: int, stderr: str, limits: SandboxLimits) -> tuple[Status, str]:
    last_line = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if timed_out:
        return "timeout", f"killed after the wall-clock limit of {limits.wall_seconds:g} s"
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return "timeout", f"killed by the CPU-time limit of {limits.cpu_seconds} s"
    if VIOLATION_MARKER in stderr:
        line = next(s for s in reversed(stderr.splitlines()) if VIOLATION_MARKER in s)
        return "blocked", line.split(VIOLATION_MARKER + ": ", 1)[-1].strip()
    if "MemoryError" in last_line or "Cannot allocate memory" in stderr:
        return "memory", f"exceeded the address-space limit of {limits.memory_bytes >> 20} MiB"
    if stdout_size >= limits.output_bytes or "File too large" in stderr or returncode == -signal.SIGXFSZ:
        return "output_limit", f"wrote more than {limits.output_bytes} bytes"
    if returncode != 0:
        return "error", last_line or f"exit status {returncode}"
    return "ok", ""


def run_program(source: str, limits: SandboxLimits | None = None, python: str | None = None) -> ProgramResult:
    """Run one program in a fresh sandboxed interpreter and report what it printed and how it ended.

    Never raises for anything the program does; raises only when the interpreter cannot start.
    """
    limits = limits or SandboxLimits()
    work = tempfile.mkdtemp(prefix="numloss-sandbox-")
    io_dir = tempfile.mkdtemp(prefix="numloss-sandbox-io-")  # outside the work dir: unreachable
    start = time.perf_counter()
    try:
        with open(os.path.join(io_dir, "out"), "wb+") as out, open(os.path.join(io_dir, "err"), "wb+") as err:
            env = {"PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8",
                   "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            proc = subprocess.Popen(
                [python or sys.executable, "-I", "-S", "-c", _preamble(limits)],
                stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=work, env=env,
                start_new_session=True, close_fds=True,
            )
            timed_out = False
            try:
                proc.communicate(source.encode("utf-8", "replace"), timeout=limits.wall_seconds)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                # the whole session: children a program managed to fork die with it
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
            out.seek(0)
            stdout = out.read(limits.output_bytes).decode("utf-8", "replace")
            stdout_size = os.fstat(out.fileno()).st_size
            err.seek(0)
            stderr = err.read(limits.output_bytes).decode("utf-8", "replace")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(io_dir, ignore_errors=True)
    status, detail = _classify(proc.returncode, timed_out, stdout_size, stderr, limits)
    return ProgramResult(status, stdout, proc.returncode, time.perf_counter() - start, detail)


def run_programs(
    sources: Sequence[str],
    limits: SandboxLimits | None = None,
    workers: int | None = None,
    on_done: Callable[[int, ProgramResult], None] | None = None,
) -> list[ProgramResult]:
    """Run many programs, `workers` at a time (default: the CPU count), results in input order."""
    workers = max(1, workers or os.cpu_count() or 1)
    results: list[ProgramResult | None] = [None] * len(sources)

    def one(index: int) -> None:
        results[index] = run_program(sources[index], limits)
        if on_done is not None:
            on_done(index, results[index])

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, range(len(sources))))
    return [r for r in results if r is not None]
