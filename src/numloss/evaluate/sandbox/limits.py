"""What a sandboxed program may use (`SandboxLimits`) and what it did (`ProgramResult`)."""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "error", "timeout", "memory", "output_limit", "blocked"]
Clock = Literal["wall", "cpu"]

CPU_CLOCK_WALL_FACTOR = 4
"""Under the CPU clock, the wall-clock backstop is this many times max(wall_seconds, cpu_seconds):
a program that only waits (a sleep, a dead lock) still ends, and a correct program that a busy
machine gives a quarter of a core still finishes."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for one program. `memory_bytes` 0 disables the address-space limit.

    `output_bytes` caps stdout and stderr each (a program that writes more is killed and reported
    as "output_limit"); `tmpfs_bytes` caps its cwd and /tmp together (and any one file it writes);
    `max_processes` and `open_files` are RLIMIT_NPROC and RLIMIT_NOFILE inside the sandbox;
    `tmpfs_inodes` caps the files and folders of that tmpfs (each costs kernel memory that its
    byte cap does not count). docs/sandbox.md has the whole memory model.

    `clock` says what the time limit is measured on. "wall" (the released executor's): the run
    ends after `wall_seconds` of wall-clock time, and each process after `cpu_seconds` of its
    own CPU time. "cpu": the run ends when all its processes together have used `cpu_seconds`
    of CPU time, so the verdict does not depend on how busy the machine is; the wall clock is
    only a backstop (`wall_limit`).
    """

    wall_seconds: float = 5.0
    cpu_seconds: int = 5
    memory_bytes: int = 1 << 30
    output_bytes: int = 64 * 1024
    max_processes: int = 64
    tmpfs_bytes: int = 16 << 20
    open_files: int = 256
    tmpfs_inodes: int = 4096
    clock: Clock = "wall"

    @property
    def wall_limit(self) -> float:
        """Seconds of wall-clock time after which the run is killed whatever it does."""
        if self.clock == "cpu":
            return float(max(self.wall_seconds, self.cpu_seconds) * CPU_CLOCK_WALL_FACTOR)
        return float(self.wall_seconds)

    def __post_init__(self) -> None:
        if self.clock not in ("wall", "cpu"):
            raise ValueError(f"clock must be 'wall' or 'cpu', got {self.clock!r}")
        if self.wall_seconds <= 0 or self.cpu_seconds <= 0:
            raise ValueError(f"time limits must be positive, got {self}")
        if self.output_bytes < 1024:
            raise ValueError(f"output_bytes must be at least 1024, got {self.output_bytes}")
        if self.tmpfs_bytes < 1 << 16 or self.max_processes < 1 or self.open_files < 16 or self.tmpfs_inodes < 64:
            raise ValueError(f"tmpfs_bytes >= 64 KiB, max_processes >= 1, open_files >= 16 and tmpfs_inodes >= 64 are needed, got {self}")


@dataclass(frozen=True)
class ProgramResult:
    """What one program did. `stdout`/`stderr` are capped at the limit, with NUL bytes and invalid
    UTF-8 replaced by U+FFFD and terminal controls removed (`safe_text`): safe to print or put in
    a report. `raw_stdout`/`raw_stderr` keep the capped bytes as written. `detail` says why it
    failed; `isolation` is the mode it ran under; `pid_namespace` the kernel id of its pid
    namespace (bwrap mode; nothing in it survives)."""

    status: Status
    stdout: str
    returncode: int | None
    wall_seconds: float
    detail: str = ""
    isolation: str = ""
    stderr: str = ""
    pid_namespace: int | None = None
    raw_stdout: bytes = b""
    raw_stderr: bytes = b""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# ESC [ ... final, ESC ] ... BEL/ST, ESC P/X/^/_ ... ST (DCS, SOS, PM, APC), other ESC sequences,
# and the 8-bit C1 forms of the same
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional formatting characters
# (LRM, RLM, ALM, LRE..RLO, LRI..PDI) that make a terminal or a report show text other than it is
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def safe_text(text: str) -> str:
    """`text` without terminal escape sequences (CSI, OSC, DCS, ...), control characters other
    than tab and newline (CR, backspace, BEL, ...) and bidirectional overrides: what a program
    printed, as it can be shown on a terminal or in a report without acting on either. A CR
    before a newline is dropped; a lone CR becomes a newline (so "12\\r34" reads "12\\n34", not
    a line that claims to be "34")."""
    text = _ESCAPES.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS.sub("", text)


def decode_output(raw: bytes) -> str:
    """Bytes a program wrote, as text that is safe to store and show: invalid UTF-8 and NUL become
    U+FFFD, then `safe_text` removes terminal controls."""
    return safe_text(raw.decode("utf-8", "replace").replace("\x00", "\ufffd"))


def encode_source(source: str) -> bytes:
    """A program's text as UTF-8; lone surrogates (which no UTF-8 text can hold) are written as
    their 3-byte forms, which the interpreter then refuses as that one program's SyntaxError."""
    return source.encode("utf-8", "surrogatepass")


CPU_EVIDENCE = 0.8
"""A SIGKILL/SIGXCPU is the CPU limit's when the program had used this share of its CPU seconds
(the rusage the init reads runs a little behind the kernel's limit check, by up to ~0.2 s on a
loaded machine); below it, the signal is reported as just a signal."""


@dataclass(frozen=True)
class Observed:
    """What the evaluator itself saw of one bwrap run, the only input of `classify`.

    `killed` is "timeout" or "flood" when the host killed the run; `started` whether the
    sandbox's init reported the program started (else the run failed in set-up and `setup`
    says why); `wait_status` the program's raw wait status as its init reaped it (None when no
    report came); `cpu_seconds` its CPU time from the same wait; `deadline` whether the init's
    own wall clock ended it; `memory_events` the cgroup's OOM kills (None: no cgroup);
    `cpu_exceeded` the CPU seconds the namespace had used when its init ended it under the CPU
    clock (None: it did not); `process_limit` whether its init ended it for staying at its process
    limit.
    """

    killed: str | None = None
    started: bool = False
    setup: str = ""
    wait_status: int | None = None
    cpu_seconds: float = 0.0
    deadline: bool = False
    memory_events: int | None = None
    cpu_exceeded: float | None = None
    process_limit: bool = False


_PROCESS_LIMIT_MARKS = ("can't start new thread", "BlockingIOError: [Errno 11]")
"""How CPython reports a thread or a fork that RLIMIT_NPROC refused."""


def classify(seen: Observed, stderr: str, limits: SandboxLimits) -> tuple[Status, str]:
    """Status and detail of a finished bwrap run, decided only from what the evaluator observed.

    The status never depends on what the program printed or on an exit code it chose: exit 0
    is "ok" whatever its stderr says; "timeout" needs the host's or the init's wall clock, or
    the kernel's CPU limit (a SIGKILL/SIGXCPU after the program used its CPU seconds); "memory"
    needs the cgroup's OOM count; "output_limit" the host's output cap. A program that fails on
    its own is "error", and `detail` quotes the last line of its stderr as its own account.
    """
    if seen.cpu_exceeded is not None and seen.killed != "flood":
        return "timeout", (f"killed by the CPU-time limit of {limits.cpu_seconds} s (all its processes together "
                           f"used {seen.cpu_exceeded:.2f} s)")
    if seen.process_limit and seen.killed is None:
        return "error", (f"stopped at the sandbox's limit of {limits.max_processes} processes and threads "
                         "(a multiprocessing.Pool(n) needs about n + 4)")
    if seen.killed == "timeout" or seen.deadline:
        return "timeout", f"killed after the wall-clock limit of {limits.wall_limit:g} s"
    if seen.killed == "flood":
        return "output_limit", f"wrote more than {limits.output_bytes} bytes to stdout or stderr"
    if not seen.started:  # nothing of the program ran: stderr is bwrap's or the init's own
        first = stderr.strip().splitlines()[0] if stderr.strip() else "the sandbox exited before the program started"
        return "error", "sandbox setup failed: " + (seen.setup or first)
    if seen.wait_status is None:
        return "error", "the sandbox ended without its init reporting how the program ended"
    code = os.waitstatus_to_exitcode(seen.wait_status)
    said = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if code == 0:
        return "ok", ""
    if seen.memory_events:
        return "memory", f"the sandbox's memory limit was hit ({seen.memory_events} OOM kill(s) in its cgroup)"
    if code < 0:
        signum = -code
        if signum in (signal.SIGXCPU, signal.SIGKILL) and seen.cpu_seconds >= CPU_EVIDENCE * limits.cpu_seconds:
            return "timeout", f"killed by the CPU-time limit of {limits.cpu_seconds} s"
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = "unknown"
        return "error", f"killed by signal {signum} ({name})"
    hint = ""
    if any(mark in said for mark in _PROCESS_LIMIT_MARKS):  # its own account, so only a hint
        hint = f" (the sandbox allows {limits.max_processes} processes and threads)"
    return "error", f"exit status {code}" + (f"; its stderr ends: {said}" if said else "") + hint
