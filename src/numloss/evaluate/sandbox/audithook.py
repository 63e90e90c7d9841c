"""The unisolated mode: the audit-hook child interpreter (numloss before kernel isolation).

Used only when the caller opts in because bubblewrap cannot run here, and by bench/sandbox.py as
the baseline. It is NOT a security boundary: the program runs as the evaluator's user, and an
in-interpreter guard can be undone from inside. Each program runs in a fresh ``python -I -S``
whose preamble sets rlimits and installs an audit hook (PEP 578) refusing sockets, fork/exec,
ctypes calls and file access outside its working directory but reads of the Python installation;
the evaluator adds a wall clock that SIGKILLs the process group, and output capped by RLIMIT_FSIZE.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from contextlib import suppress

from numloss.evaluate.sandbox.limits import (
    SANDBOX_ENDED,
    ProgramResult,
    SandboxLimits,
    Status,
    decode_output,
    encode_source,
)
from numloss.evaluate.sandbox.policy import ENV

VIOLATION_MARKER = "NUMLOSS_SANDBOX_VIOLATION"

# The preamble runs inside the child before the program. It is formatted with repr()-quoted
# values, so it never interpolates untrusted text; the program itself arrives on stdin.
_PREAMBLE = r"""
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
"""  # noqa: E501


def _read_roots() -> list[str]:
    """Directories a program may read: the Python installation and the evaluator's packages."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= {sys.base_prefix + "/lib", sys.prefix + "/lib"}
    return sorted(r for r in roots if os.path.isdir(r))


def _preamble(limits: SandboxLimits) -> str:
    return _PREAMBLE.format(
        cpu=int(limits.cpu_seconds),
        mem=int(limits.memory_bytes),
        fsize=int(limits.output_bytes),
        nproc=int(limits.max_processes),
        # the evaluator's import path but the current directory and the project's own source
        sys_path=repr([p for p in sys.path if p and os.path.isdir(p) and not p.endswith("/src")]),
        read_roots=repr(_read_roots()),
        marker=repr(VIOLATION_MARKER),
    )


def _classify(
    returncode: int | None, timed_out: bool, stdout_size: int, stderr: str, limits: SandboxLimits
) -> tuple[Status, str]:
    last_line = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if timed_out:
        return "timeout", f"killed after the wall-clock limit of {limits.wall_seconds:g} s"
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return "timeout", f"killed by the CPU-time limit of {limits.cpu_seconds} s"
    if returncode == 0 and stdout_size < limits.output_bytes:
        return "ok", ""  # what it wrote to stderr after its answer does not undo an exit 0
    if VIOLATION_MARKER in stderr:
        line = next(s for s in reversed(stderr.splitlines()) if VIOLATION_MARKER in s)
        return "blocked", line.split(VIOLATION_MARKER + ": ", 1)[-1].strip()
    if "MemoryError" in last_line or "Cannot allocate memory" in stderr:
        return "memory", f"exceeded the address-space limit of {limits.memory_bytes >> 20} MiB"
    if (
        stdout_size >= limits.output_bytes
        or "File too large" in stderr
        or returncode == -signal.SIGXFSZ
    ):
        return "output_limit", f"wrote more than {limits.output_bytes} bytes"
    return "error", last_line or f"exit status {returncode}"  # an exit 0 is "ok" above


def run(source: str, limits: SandboxLimits, python: str | None = None) -> ProgramResult:
    """Run one program in a fresh audit-hooked interpreter and report what it printed and how it
    ended. Never raises for anything the program does; only when the interpreter cannot start."""
    start = time.perf_counter()
    # unnamed files outside the work dir: the program cannot reach its own output files
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        with tempfile.TemporaryDirectory(
            prefix="numloss-sandbox-", ignore_cleanup_errors=True
        ) as work:
            proc = subprocess.Popen(
                [python or sys.executable, "-I", "-S", "-c", _preamble(limits)],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                cwd=work,
                env={**ENV, "HOME": work, "TMPDIR": work},
                start_new_session=True,
            )
            timed_out = False
            try:
                proc.communicate(encode_source(source), timeout=limits.wall_seconds)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                # the whole session: children a program managed to fork die with it
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        raw_out, raw_err = (os.pread(f.fileno(), limits.output_bytes, 0) for f in (out, err))
        stdout_size = os.fstat(out.fileno()).st_size
    stdout, stderr = decode_output(raw_out), decode_output(raw_err)
    status, detail = _classify(proc.returncode, timed_out, stdout_size, stderr, limits)
    return ProgramResult(
        status,
        stdout,
        None if status in SANDBOX_ENDED else proc.returncode,
        time.perf_counter() - start,
        detail,
        isolation="unisolated",
        err=stderr,
        raw_out=raw_out,
        raw_err=raw_err,
    )
