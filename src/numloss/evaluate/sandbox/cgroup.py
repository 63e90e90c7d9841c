"""A cgroup per program (memory, CPU, processes), where the machine lets us make one.

RLIMIT_AS bounds each process, not the sandbox: a memory cgroup bounds its processes and kernel
memory as one budget (its OOM killer then picks a process of the sandbox, never the evaluator),
and a CPU cgroup shares the CPU between programs, not sessions, capping each at
`policy.CPU_PER_PROGRAM` CPUs. `support()` finds a cgroup v2 (``NUMLOSS_SANDBOX_CGROUP`` or this
process's own, delegating memory and pids), else cgroup v1 for a root evaluator. Without either
the sandbox relies on seccomp and rlimits (docs/sandbox.md, "Memory") and `missing()` names the
absent bounds. Nothing here ever moves the evaluator itself.
"""

from __future__ import annotations

import glob
import itertools
import os
import secrets
import signal
import time
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from functools import cache, lru_cache

from numloss.evaluate.sandbox import policy
from numloss.evaluate.sandbox.limits import SandboxLimits

ENV_VAR = "NUMLOSS_SANDBOX_CGROUP"
_NEEDED = ("memory", "pids")
_V1_NEEDED = ("memory", "cpu", "pids")
_counter = itertools.count()
_PERIOD_US = 100_000


@dataclass(frozen=True)
class Support:
    """`parent`: the folder under which each program gets its cgroup (v1: the memory
    hierarchy's), None when no cgroup is usable; `detail`: which bound is in force and why;
    `v1`: each v1 controller's parent folder (empty for v2)."""

    parent: str | None
    detail: str
    v1: dict[str, str] = field(default_factory=dict)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(value)


def _try_write(path: str, value: str) -> None:
    """A write that the kernel may refuse without harm (memory.kmem.limit_in_bytes, which newer
    kernels no longer take: they charge kernel memory to memory.limit_in_bytes anyway)."""
    with suppress(OSError):
        _write(path, value)


def _mounted_at(path: str, root: str, point: str) -> str | None:
    """Where cgroup `path` lies in a hierarchy whose `root` is mounted at `point` (or None)."""
    if path != root and not path.startswith(root.rstrip("/") + "/"):
        return None
    return os.path.normpath(os.path.join(point, os.path.relpath(path, root)))


def _hierarchies(proc: str) -> dict[str, str]:
    """Controller ("" for cgroup v2) -> the folder of this process's own cgroup in that
    controller's hierarchy, for each hierarchy mounted where this process sees it."""
    own: dict[str, str] = {}
    for line in _read(f"{proc}/self/cgroup").splitlines():
        _, controllers, path = (line.strip().split(":", 2) + ["", ""])[:3]
        own.update(dict.fromkeys(controllers.split(",") if controllers else [""], path))
    found: dict[str, str] = {}
    for line in _read(f"{proc}/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and tail[:1] in (["cgroup"], ["cgroup2"]):
            for c in tail[2].split(",") if tail[0] == "cgroup" and len(tail) >= 3 else [""]:
                if c in own and (folder := _mounted_at(own[c], fields[3], fields[4])) is not None:
                    found.setdefault(c, folder)
    return found


def find(proc: str = "/proc", environ: dict[str, str] | None = None) -> Support:
    """Whether a delegated cgroup v2 (else v1) is usable; `proc` and `environ` are for the tests."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV_VAR):
        candidate, where = environ[ENV_VAR], f"{ENV_VAR}={environ[ENV_VAR]}"
    else:
        try:
            candidate = _hierarchies(proc).get("")
        except OSError as error:
            return Support(None, f"no cgroup information ({error})")
        if candidate is None:
            return find_v1(proc, "no cgroup v2 hierarchy (cgroup v1 only)")
        where = f"cgroup v2 {candidate}"
    try:
        enabled = _read(os.path.join(candidate, "cgroup.subtree_control")).split()
        offered = _read(os.path.join(candidate, "cgroup.controllers")).split()
    except OSError as error:
        return Support(None, f"{where} is not usable ({error.strerror})")
    missing = [c for c in _NEEDED if c not in enabled]
    if missing:
        return find_v1(
            proc,
            f"{where} offers {' '.join(offered) or 'no controllers'} and enables "
            f"{' '.join(enabled) or 'none'} for children; {' and '.join(missing)} not delegated",
        )
    if not os.access(candidate, os.W_OK):
        return find_v1(proc, f"{where} is not writable by this process")
    cpu = " (and cpu.max, cpu.weight)" if "cpu" in enabled else ""
    # the folder is `parent`; the detail, which reports print, names no path of this machine
    return Support(candidate, f"cgroup v2: memory.max and pids.max{cpu} per program")


def find_v1(proc: str = "/proc", why_not_v2: str = "", euid: int | None = None) -> Support:
    """The cgroup v1 folders (memory, cpu, pids) under which a root evaluator makes one cgroup per
    program: this process's own cgroup in each hierarchy. `why_not_v2` starts the detail."""
    if (os.geteuid() if euid is None else euid) != 0:
        return Support(None, f"{why_not_v2}; cgroup v1 needs a root evaluator")
    try:
        found = _hierarchies(proc)
    except OSError as error:
        return Support(None, f"{why_not_v2}; no cgroup v1 information ({error})")
    missing = [c for c in _V1_NEEDED if c not in found]
    if missing:
        return Support(None, f"{why_not_v2}; cgroup v1 lacks {' and '.join(missing)}")
    parents = {c: found[c] for c in _V1_NEEDED}
    for parent in parents.values():
        if not os.access(parent, os.W_OK):
            return Support(None, f"{why_not_v2}; cgroup v1 {parent} is not writable")
    return Support(
        parents["memory"],
        f"cgroup v1 ({', '.join(parents)}): memory.limit_in_bytes "
        "(kernel memory included), cpu.cfs_quota_us and pids.max per program",
        parents,
    )


def missing() -> list[str]:
    """The bounds no mechanism holds here, one phrase each (the isolation line lists them)."""
    absent = [
        "block I/O (no io or blkio limit: a program's O_DIRECT reads of the bound files slow the"
        " host's disk reads)"
    ]
    if support().parent is None:
        absent.insert(
            0,
            "kernel memory and memory as one sum (page tables, the futex hash, POSIX locks, epoll"
            " watches, unix socket buffers: only RLIMIT_AS per process), the CPU share against"
            " other programs and processes beyond RLIMIT_NPROC, as no cgroup is usable (v2"
            " delegated, or v1 as root)",
        )
    return absent


@lru_cache(maxsize=1)
def support() -> Support:
    """`find()` once per process."""
    return find()


PREFIX = "numloss-sandbox-"
STALE_SECONDS = 600.0
"""A program's cgroup left this long, empty, by an evaluator that no longer runs is removed."""


def sweep_stale(parents: Iterable[str], min_age: float = STALE_SECONDS) -> list[str]:
    """Remove the program cgroups that an evaluator left behind when it died (they
    would stay for ever, each holding kernel memory): folders in `parents` named
    ``numloss-sandbox-PID-...`` whose PID is not a live process here, unchanged for `min_age`
    seconds and empty (the kernel refuses to remove a cgroup with a process in it). Returns the
    folders removed; anything it cannot read or remove is left as it is."""
    removed = []
    for parent in parents:
        for path in glob.glob(os.path.join(glob.escape(parent), PREFIX + "*")):
            owner = os.path.basename(path)[len(PREFIX) :].split("-", 1)[0]
            # a live owner (its evaluator, or a process with its pid) is not ours to judge
            with suppress(OSError, ValueError):
                stale = time.time() - os.stat(path).st_mtime >= min_age
                if stale and not os.path.exists(f"/proc/{int(owner)}"):
                    os.rmdir(path)
                    removed.append(path)
    return removed


@cache
def _sweep_once(parent: str) -> None:
    """`sweep_stale` of `parent` the first time this evaluator uses it (two threads may both
    sweep it then: what one removes the other finds gone)."""
    sweep_stale([parent])


class ProgramCgroup:
    """One program's cgroup (v2: one folder; v1: one in each of memory, cpu and pids): made with
    its limits before it starts, its init added, read and removed after."""

    def __init__(
        self, parent: str, limits: SandboxLimits, v1: dict[str, str] | None = None
    ) -> None:
        parents = list(v1.values()) if v1 else [parent]
        for folder in parents:
            _sweep_once(folder)
        # a random part as well: a leftover of a dead evaluator with this pid never collides
        name = f"{PREFIX}{os.getpid()}-{next(_counter)}-{secrets.token_hex(4)}"
        self.v1 = bool(v1)
        self.path = os.path.join(parents[0], name)  # v2: the cgroup; v1: its memory cgroup
        self.paths: list[str] = []  # those made (v1: memory, cpu, pids, as `find_v1` orders them)
        try:
            for folder in parents:
                os.mkdir(path := os.path.join(folder, name))
                self.paths.append(path)
            memory, pids = policy.cgroup_limits(limits)
            (_limit_v1 if v1 else _limit_v2)(*self.paths, memory, str(pids))
        except OSError:
            self.remove()
            raise

    def add(self, pid: int) -> None:
        """Move host process `pid` (the sandbox's init, before it forks the program) in."""
        for path in self.paths:
            _write(os.path.join(path, "cgroup.procs"), str(pid))

    def oom_kills(self) -> int:
        """How many processes the memory limit killed (v2 memory.events, v1 memory.oom_control)."""
        name = "memory.oom_control" if self.v1 else "memory.events"
        with suppress(OSError, ValueError):
            pairs = [line.split() for line in _read(os.path.join(self.path, name)).splitlines()]
            return int(dict(pair for pair in pairs if len(pair) == 2).get("oom_kill", 0))
        return 0

    def remove(self) -> None:
        """Kill anything left in it and remove it (best effort: an empty folder may stay)."""
        for path in self.paths:
            kill = os.path.join(path, "cgroup.kill")
            if os.path.exists(kill):
                _try_write(kill, "1")
            else:  # v1 has no cgroup.kill: the namespace is gone by now, this is for stragglers
                for pid in _procs(path):
                    with suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            for _ in range(50):  # a killed process leaves its cgroup a moment after
                with suppress(OSError):
                    os.rmdir(path)
                if not os.path.exists(path):
                    break
                time.sleep(0.02)


def _limit_v2(path: str, memory: int | None, pids: str) -> None:
    _write(os.path.join(path, "memory.max"), "max" if memory is None else str(memory))
    if os.path.exists(os.path.join(path, "memory.swap.max")):
        _write(os.path.join(path, "memory.swap.max"), "0")
    _write(os.path.join(path, "pids.max"), pids)
    if os.path.exists(os.path.join(path, "cpu.weight")):  # 1..10000, 100 = nice 0
        _write(os.path.join(path, "cpu.weight"), str(max(1, _session_weight() * 100 // 1024)))
    if os.path.exists(os.path.join(path, "cpu.max")):
        _write(os.path.join(path, "cpu.max"), f"{_PERIOD_US * policy.CPU_PER_PROGRAM} {_PERIOD_US}")


def _limit_v1(mem: str, cpu: str, pid: str, memory: int | None, pids: str) -> None:
    if memory is not None:
        _write(os.path.join(mem, "memory.limit_in_bytes"), str(memory))
        _try_write(os.path.join(mem, "memory.memsw.limit_in_bytes"), str(memory))  # no swap
        _try_write(os.path.join(mem, "memory.kmem.limit_in_bytes"), str(memory))
    # the weight the program's session would have had without a cgroup: one autogroup's (nice 0)
    # where the kernel groups sessions, else the evaluator's own nice weight; a group at a nice-19
    # weight of 15 was measured 20x slower to start than the same program in its autogroup on a
    # loaded machine
    _write(os.path.join(cpu, "cpu.shares"), str(max(2, _session_weight())))
    _write(os.path.join(cpu, "cpu.cfs_period_us"), str(_PERIOD_US))
    _write(os.path.join(cpu, "cpu.cfs_quota_us"), str(_PERIOD_US * policy.CPU_PER_PROGRAM))
    _write(os.path.join(pid, "pids.max"), pids)


def _session_weight() -> int:
    """The scheduler weight a program in a session of its own gets without a cgroup: an
    autogroup's (nice 0, 1024) where autogroups are on, else the evaluator's nice weight (the
    kernel's sched_prio_to_weight: 1024 / 1.25 ** nice, within 3 %)."""
    with suppress(OSError), open("/proc/sys/kernel/sched_autogroup_enabled", encoding="utf-8") as f:
        if f.read().strip() == "1":
            return 1024
    return round(1024 / 1.25 ** min(19, max(-20, os.getpriority(os.PRIO_PROCESS, 0))))


def _procs(path: str) -> list[int]:
    with suppress(OSError, ValueError):
        return [int(pid) for pid in _read(os.path.join(path, "cgroup.procs")).split()]
    return []
