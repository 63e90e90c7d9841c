"""What a sandboxed program may use (`SandboxLimits`) and what it did (`ProgramResult`)."""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass, field
from typing import BinaryIO, Literal

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


class OutputFile:
    """A program's capped stdout or stderr left on disk (an unnamed file, gone once this object
    is): a large output costs the evaluator no memory until its text is asked for, and then only
    for as long as the caller keeps it."""

    def __init__(self, file: BinaryIO, size: int) -> None:
        self.file, self.size = file, size

    def raw(self) -> bytes:
        """The bytes as written (capped)."""
        return bytes(self._read())

    def _read(self) -> bytearray:
        data = bytearray(self.size)
        view, done = memoryview(data), 0
        while done < self.size:
            got = os.pread(self.file.fileno(), self.size - done, done)
            if not got:
                break
            view[done:done + len(got)] = got
            done += len(got)
        del view
        del data[done:]
        return data

    def text(self) -> str:
        """`decode_output` of the bytes (decoded from one buffer: no second copy of them)."""
        return decode_output(self._read())

    def __repr__(self) -> str:
        return f"<output on disk: {self.size} bytes>"


@dataclass(frozen=True)
class ProgramResult:
    """What one program did. `stdout`/`stderr` are capped at the limit, with NUL bytes and invalid
    UTF-8 replaced by U+FFFD and terminal controls removed (`safe_text`): safe to print or put in
    a report. `raw_stdout`/`raw_stderr` give the capped bytes as written. An output larger than
    `INLINE_BYTES` stays on disk (`out`/`err` is then an `OutputFile`) and each read of
    `stdout`/`raw_stdout` reads it again: hold the text only while it is needed. `detail` says
    why it failed; `isolation` is the mode it ran under; `pid_namespace` the kernel id of its pid
    namespace (bwrap mode; nothing in it survives)."""

    status: Status
    out: str | OutputFile
    returncode: int | None
    wall_seconds: float
    detail: str = ""
    isolation: str = ""
    err: str | OutputFile = ""
    pid_namespace: int | None = None
    raw_out: bytes | None = field(default=None, repr=False)  # None: `out` as UTF-8 is what was written
    raw_err: bytes | None = field(default=None, repr=False)

    @property
    def stdout(self) -> str:
        return self.out if isinstance(self.out, str) else self.out.text()

    @property
    def stderr(self) -> str:
        return self.err if isinstance(self.err, str) else self.err.text()

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def raw_stdout(self) -> bytes:
        if isinstance(self.out, OutputFile):
            return self.out.raw()
        return self.out.encode() if self.raw_out is None else self.raw_out

    @property
    def raw_stderr(self) -> bytes:
        if isinstance(self.err, OutputFile):
            return self.err.raw()
        return self.err.encode() if self.raw_err is None else self.raw_err


INLINE_BYTES = 1 << 20
"""Outputs up to this size are decoded and held in memory; larger ones stay on disk."""


_NOT_PLAIN = re.compile(rb"[^\t\n\x20-\x7e]")


def decode_kept(raw: bytes) -> tuple[str, bytes | None]:
    """(`decode_output(raw)`, the raw bytes to keep beside it): None where the text is the bytes
    (printable ASCII, tab and newline only), so that a large plain output is held once."""
    if _NOT_PLAIN.search(raw) is None:
        return raw.decode("ascii"), None
    return decode_output(raw), raw


# ESC [ ... final, ESC ] ... BEL/ST, ESC P/X/^/_ ... ST (DCS, SOS, PM, APC), other ESC sequences,
# and the 8-bit C1 forms of the same
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
# C0 controls but tab and newline, DEL, C1 controls, and every invisible formatting character:
# Unicode's category Cf (the bidirectional controls LRM, RLM, ALM, LRE..RLO, LRI..PDI, which make
# a terminal or a report show text other than it is; zero-width space, joiners and word joiner;
# the BOM; soft hyphen; invisible operators; tag characters), the combining grapheme joiner and
# the Hangul fillers, which show as nothing: a report must show what a program printed
_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"
    "\u115f\u1160\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufeff\uffa0"
    "\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f]"
)


def safe_text(text: str) -> str:
    """`text` without terminal escape sequences (CSI, OSC, DCS, ...), control characters other
    than tab and newline (CR, backspace, BEL, ...) and invisible formatting characters
    (bidirectional controls, zero-width characters, the BOM, tag characters): what a program
    printed, as it can be shown on a terminal or in a report without acting on either. A CR
    before a newline is dropped; a lone CR becomes a newline (so "12\\r34" reads "12\\n34", not
    a line that claims to be "34")."""
    text = _ESCAPES.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    # the line and paragraph separators end a line in some viewers: a newline, as a CR is
    return _CONTROLS.sub("", text).replace("\u2028", "\n").replace("\u2029", "\n")


def decode_output(raw: bytes | bytearray) -> str:
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
    is "ok" whatever its stderr says, unless the cgroup's OOM killer ended any of its processes; "timeout" needs the host's or the init's wall clock, or
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
    if seen.memory_events:  # even at exit 0: a process of the program was killed for memory, so its
        # output is what was left after the limit cut part of it away
        return "memory", f"the sandbox's memory limit was hit ({seen.memory_events} OOM kill(s) in its cgroup)"
    if code == 0:
        return "ok", ""
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
