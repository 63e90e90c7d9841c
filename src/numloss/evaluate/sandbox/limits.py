"""What a sandboxed program may use (`SandboxLimits`) and what it did (`ProgramResult`)."""

from __future__ import annotations

import os
import re
import signal
import tempfile
from dataclasses import dataclass, field
from typing import Literal

from numloss.checks import check_choice, check_float, check_int

#: "refused": not run (no isolation here and no opt-in: `programs.ProgramRunner`)
Status = Literal["ok", "error", "timeout", "memory", "output_limit", "blocked", "refused"]
#: statuses of a run the sandbox ended (a clock, the CPU or memory limit, the output cap): such a
#: result has no exit status of the program's own, whichever signal the kernel used
SANDBOX_ENDED: frozenset[str] = frozenset({"timeout", "memory", "output_limit"})
Clock = Literal["wall", "cpu"]

CPU_CLOCK_WALL_FACTOR = 4
"""Under the CPU clock the wall-clock backstop is this many times max(wall_seconds, cpu_seconds):
a program that only waits still ends, one given a quarter of a core still finishes."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for one program (docs/sandbox.md has the memory model).

    `memory_bytes` is RLIMIT_AS (0: none); `output_bytes` caps stdout and stderr each (more is
    "output_limit"); `tmpfs_bytes` and `tmpfs_inodes` cap its cwd and /tmp together;
    `max_processes` and `open_files` are RLIMIT_NPROC and RLIMIT_NOFILE: the kernel counts every
    thread as a task, so `max_processes` bounds processes and threads together (`tasks_limit`).
    `clock` "wall" (the released executor's) ends the run after `wall_seconds` and each process
    after `cpu_seconds` of its CPU time; "cpu" ends it when all its processes together used
    `cpu_seconds`, whatever the machine's load, with the wall clock only a backstop (`wall_limit`).
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
        check_choice("clock", self.clock, ("wall", "cpu"))
        check_float("wall_seconds", self.wall_seconds, 0, low_open=True)
        for name, low in (("cpu_seconds", 1), ("memory_bytes", 0), ("output_bytes", 1024)):
            check_int(name, getattr(self, name), low)
        for name, low in (("max_processes", 1), ("tmpfs_bytes", 1 << 16), ("open_files", 16)):
            check_int(name, getattr(self, name), low)
        check_int("tmpfs_inodes", self.tmpfs_inodes, 64)


class OutputFile:
    """A program's stdout or stderr on disk, as it arrives: an unnamed file in the host's temporary
    folder (gone with this object) holding at most `cap` bytes, so it costs memory only while the
    caller holds its text. `arrived` counts every byte written, `size` the bytes kept."""

    def __init__(self, cap: int) -> None:
        self.cap, self.arrived = cap, 0
        self.file = tempfile.TemporaryFile(prefix="numloss-output-", buffering=0)

    @property
    def size(self) -> int:
        return min(self.cap, self.arrived)

    def write(self, chunk: bytes) -> int:
        """Keep what fits under the cap; returns the bytes arrived so far."""
        view = memoryview(chunk)[: max(0, self.cap - self.arrived)]
        while view:
            view = view[self.file.write(view) :]
        self.arrived += len(chunk)
        return self.arrived

    def raw(self) -> bytes:
        """The bytes as written (capped); one read below 2 GiB, where the kernel cuts a read."""
        chunks, done = [], 0
        while done < self.size and (got := os.pread(self.file.fileno(), self.size - done, done)):
            chunks.append(got)
            done += len(got)
        return b"".join(chunks)

    def tail(self) -> str:
        """The end of the output as text (`classify` quotes its last line); "" once closed."""
        if self.file.closed:
            return ""
        start = max(0, self.size - (1 << 16))
        return decode_output(os.pread(self.file.fileno(), self.size - start, start))

    def result(self) -> tuple[str | OutputFile, bytes | None]:
        """(the text, the raw bytes where they differ from it) for an output up to `INLINE_BYTES`,
        the file then closed; else (this file, None), left on disk."""
        if self.size > INLINE_BYTES:
            return self, None
        try:
            text = decode_output(raw := self.raw())
            return text, (None if text.encode() == raw else raw)
        finally:
            self.file.close()

    def __repr__(self) -> str:
        return f"<output on disk: {self.size} bytes>"


@dataclass(frozen=True)
class ProgramResult:
    """What one program did. `stdout`/`stderr`: capped, safe to print (`decode_output`);
    `raw_stdout`/`raw_stderr`: the capped bytes as written. An output over `INLINE_BYTES` stays on
    disk (`out`/`err` is an `OutputFile`, read again at each access). `returncode` is the program's
    own exit status as under `python prog.py` (negative: the signal that ended it; None when the
    sandbox ended it or it never started). `detail` says why it failed,
    `isolation` the mode it ran under, `pid_namespace` the kernel id of its pid namespace."""

    status: Status
    out: str | OutputFile
    returncode: int | None
    wall_seconds: float
    detail: str = ""
    isolation: str = ""
    err: str | OutputFile = ""
    pid_namespace: int | None = None
    # None: `out` as UTF-8 is what was written
    raw_out: bytes | None = field(default=None, repr=False)
    raw_err: bytes | None = field(default=None, repr=False)

    @property
    def stdout(self) -> str:
        return self.out if isinstance(self.out, str) else decode_output(self.out.raw())

    @property
    def stderr(self) -> str:
        return self.err if isinstance(self.err, str) else decode_output(self.err.raw())

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def raw_stdout(self) -> bytes:
        return _raw(self.out, self.raw_out)

    @property
    def raw_stderr(self) -> bytes:
        return _raw(self.err, self.raw_err)


def _raw(kept: str | OutputFile, raw: bytes | None) -> bytes:
    if isinstance(kept, OutputFile):
        return kept.raw()
    return kept.encode() if raw is None else raw


INLINE_BYTES = 1 << 20
"""Outputs up to this size are decoded and held in memory; larger ones stay on disk."""


# ESC [ ... final, ESC ] ... BEL/ST, ESC P/X/^/_ ... ST (DCS, SOS, PM, APC), other ESC sequences,
# and the 8-bit C1 forms of the same
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
# C0 controls but tab and newline, DEL, C1 controls, Unicode's category Cf (bidirectional
# controls, which make a report show text other than it is; zero-width characters, the BOM, tag
# characters, ...), the combining grapheme joiner and the Hangul fillers, which show as nothing
_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"
    "\u115f\u1160\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufeff\uffa0"
    "\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f]"
)


def safe_text(text: str) -> str:
    """`text` without terminal escape sequences, control characters but tab and newline, and
    invisible formatting characters: safe to show on a terminal or in a report. CRLF becomes a
    newline, and so does a lone CR (so "12\\r34" does not read as "34")."""
    text = _ESCAPES.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    # the line and paragraph separators end a line in some viewers: a newline, as a CR is
    return _CONTROLS.sub("", text).replace("\u2028", "\n").replace("\u2029", "\n")


def decode_output(raw: bytes | bytearray) -> str:
    """Bytes a program wrote, as text that is safe to store and show: invalid UTF-8 and NUL become
    U+FFFD, then `safe_text` removes terminal controls."""
    return safe_text(raw.decode("utf-8", "replace").replace("\x00", "\ufffd"))


def encode_source(source: str) -> bytes:
    """A program's text as UTF-8; a lone surrogate becomes its 3-byte form, which the interpreter
    refuses as that one program's SyntaxError."""
    return source.encode("utf-8", "surrogatepass")


CPU_EVIDENCE = 0.8
"""A SIGKILL/SIGXCPU is the CPU limit's when the program had used this share of its CPU seconds
(the init's rusage lags the kernel's check by up to ~0.2 s on a loaded machine)."""


@dataclass(frozen=True)
class Observed:
    """What the evaluator itself saw of one bwrap run, the only input of `classify`."""

    killed: str | None = None  # "timeout" or "flood" when the host killed the run
    started: bool = False  # the init reported the program started (else `setup` says why not)
    setup: str = ""
    wait_status: int | None = None  # as the init reaped the program (None: no report came)
    cpu_seconds: float = 0.0  # the program's, from the same wait
    deadline: bool = False  # the init's own wall clock ended it
    memory_events: int | None = None  # the cgroup's OOM kills (None: no cgroup)
    cpu_exceeded: float | None = None  # the namespace's CPU seconds when the CPU clock ended it
    process_limit: bool = False  # the init ended it for staying at its process limit


_PROCESS_LIMIT_MARKS = ("can't start new thread", "BlockingIOError: [Errno 11]")
"""How CPython reports a thread or a fork that RLIMIT_NPROC refused."""


def tasks_limit(limits: SandboxLimits) -> str:
    """What the process limit counts, for a message: threads and processes alike, one budget."""
    return (
        f"the sandbox's limit of {limits.max_processes} tasks, threads and processes counted alike "
        "(RLIMIT_NPROC: a ThreadPoolExecutor(n) or multiprocessing.Pool(n) needs about n + 4)"
    )


def classify(seen: Observed, stderr: str, limits: SandboxLimits) -> tuple[Status, str]:
    """Status and detail of a finished bwrap run, decided only from what the evaluator observed.

    Never from what the program printed or an exit code it chose: exit 0 is "ok" unless the
    cgroup's OOM killer ended one of its processes; "timeout" needs the host's or the init's
    clock, or the CPU limit's signal after the program used its CPU seconds; "memory" the OOM
    count; "output_limit" the host's cap. Otherwise "error", quoting its stderr's last line.
    """
    cpu_limit = f"killed by the CPU-time limit of {limits.cpu_seconds} s"
    if seen.cpu_exceeded is not None and seen.killed != "flood":
        return "timeout", f"{cpu_limit} (all its processes together used {seen.cpu_exceeded:.2f} s)"
    if seen.process_limit and seen.killed is None:
        return "error", f"stopped at {tasks_limit(limits)}"
    if seen.killed == "timeout" or seen.deadline:
        return "timeout", f"killed after the wall-clock limit of {limits.wall_limit:g} s"
    if seen.killed == "flood":
        return "output_limit", f"wrote more than {limits.output_bytes} bytes to stdout or stderr"
    if not seen.started:  # nothing of the program ran: stderr is bwrap's or the init's own
        first = (stderr.strip() or "the sandbox exited before the program started").splitlines()[0]
        return "error", "sandbox setup failed: " + (seen.setup or first)
    if seen.wait_status is None:
        return "error", "the sandbox ended without its init reporting how the program ended"
    code = os.waitstatus_to_exitcode(seen.wait_status)
    said = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    # even at exit 0: a process of the program was killed for memory, so its output is what was
    # left after the limit cut part of it away
    if seen.memory_events:
        oom = f"{seen.memory_events} OOM kill(s) in its cgroup"
        return "memory", f"the sandbox's memory limit was hit ({oom})"
    if code == 0:
        return "ok", ""
    if code < 0:
        used_its_cpu = seen.cpu_seconds >= CPU_EVIDENCE * limits.cpu_seconds
        if -code in (signal.SIGXCPU, signal.SIGKILL) and used_its_cpu:
            return "timeout", cpu_limit
        name = next((s.name for s in signal.Signals if s == -code), "unknown")
        return "error", f"killed by signal {-code} ({name})"
    hint = ""
    if any(mark in said for mark in _PROCESS_LIMIT_MARKS):  # its own account, so only a hint
        hint = f" (it reached {tasks_limit(limits)})"
    return "error", f"exit status {code}" + (f"; its stderr ends: {said}" if said else "") + hint
