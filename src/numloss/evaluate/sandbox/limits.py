"""What a sandboxed program may use (`SandboxLimits`) and what it did (`ProgramResult`)."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "error", "timeout", "memory", "output_limit", "blocked"]


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for one program. `memory_bytes` 0 disables the address-space limit.

    `output_bytes` caps stdout and stderr each (a program that writes more is killed and reported
    as "output_limit"); `tmpfs_bytes` caps its cwd and /tmp together (and any one file it writes);
    `max_processes` and `open_files` are RLIMIT_NPROC and RLIMIT_NOFILE inside the sandbox.
    """

    wall_seconds: float = 5.0
    cpu_seconds: int = 5
    memory_bytes: int = 1 << 30
    output_bytes: int = 64 * 1024
    max_processes: int = 64
    tmpfs_bytes: int = 16 << 20
    open_files: int = 256

    def __post_init__(self) -> None:
        if self.wall_seconds <= 0 or self.cpu_seconds <= 0:
            raise ValueError(f"time limits must be positive, got {self}")
        if self.output_bytes < 1024:
            raise ValueError(f"output_bytes must be at least 1024, got {self.output_bytes}")
        if self.tmpfs_bytes < 1 << 16 or self.max_processes < 1 or self.open_files < 16:
            raise ValueError(f"tmpfs_bytes >= 64 KiB, max_processes >= 1 and open_files >= 16 are needed, got {self}")


@dataclass(frozen=True)
class ProgramResult:
    """What one program did. `stdout`/`stderr` are capped at the limit, NUL bytes and invalid
    UTF-8 replaced by U+FFFD; `detail` says why it failed; `isolation` is the mode it ran under;
    `pid_namespace` the kernel id of its pid namespace (bwrap mode; nothing in it survives)."""

    status: Status
    stdout: str
    returncode: int | None
    wall_seconds: float
    detail: str = ""
    isolation: str = ""
    stderr: str = ""
    pid_namespace: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def decode_output(raw: bytes) -> str:
    """Bytes a program wrote, as text that is safe to store: invalid UTF-8 and NUL become U+FFFD."""
    return raw.decode("utf-8", "replace").replace("\x00", "\ufffd")


_BLOCKED_ERRNOS = ("[Errno 1]", "[Errno 13]", "[Errno 30]", "[Errno 97]", "[Errno 101]")
"""EPERM, EACCES, EROFS, EAFNOSUPPORT, ENETUNREACH: the kernel refused what the program tried."""


def classify(returncode: int | None, why: str | None, signum: int | None, stderr: str, limits: SandboxLimits) -> tuple[Status, str]:
    """Status and detail of a finished program (bwrap mode).

    `why` is "timeout" or "flood" when the host killed it; `signum` the signal that ended it.
    """
    last_line = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if why == "timeout":
        return "timeout", f"killed after the wall-clock limit of {limits.wall_seconds:g} s"
    if why == "flood":
        return "output_limit", f"wrote more than {limits.output_bytes} bytes to stdout or stderr"
    if signum in (signal.SIGXCPU, signal.SIGKILL):
        return "timeout", f"killed by the CPU-time limit of {limits.cpu_seconds} s"
    if "MemoryError" in last_line or "Cannot allocate memory" in stderr:
        return "memory", f"exceeded the address-space limit of {limits.memory_bytes >> 20} MiB"
    if signum == signal.SIGXFSZ or "File too large" in last_line:
        return "output_limit", f"wrote a file over {limits.tmpfs_bytes} bytes"
    if last_line.startswith("PermissionError") or any(e in last_line for e in _BLOCKED_ERRNOS):
        return "blocked", last_line
    if signum is not None:
        try:
            return "error", f"killed by signal {signum} ({signal.Signals(signum).name})"
        except ValueError:
            return "error", f"killed by signal {signum}"
    if returncode != 0:
        return "error", last_line or f"exit status {returncode}"
    return "ok", ""
