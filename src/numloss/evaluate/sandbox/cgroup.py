"""A cgroup v2 per program (memory.max, pids.max), where the machine delegates one to us.

RLIMIT_AS bounds each process's address space, not the sandbox's memory: kernel memory (tmpfs
inodes, pipe buffers, page tables) and the processes together escape it. A cgroup v2 with the
memory and pids controllers bounds all of it as one budget, and its OOM killer then picks a
process of the sandbox, never the evaluator. `support()` says whether one is usable here:

- the folder named by ``NUMLOSS_SANDBOX_CGROUP``, or else this process's own cgroup v2 (from
  /proc/self/cgroup and /proc/self/mountinfo),
- that has ``memory`` and ``pids`` in its ``cgroup.subtree_control`` (enabled for children) and
  that this process may write to.

Without one (cgroup v1 only, as in many containers; controllers not delegated) the sandbox
relies on the seccomp filter and its rlimits instead (docs/sandbox.md, "Memory"), and
`isolation().detail` says so. Nothing here ever moves the evaluator itself.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from functools import lru_cache

from numloss.evaluate.sandbox.limits import SandboxLimits

ENV_VAR = "NUMLOSS_SANDBOX_CGROUP"
_NEEDED = ("memory", "pids")
_counter = itertools.count()


@dataclass(frozen=True)
class Support:
    """`parent` is the cgroup v2 folder under which each program gets its own, or None; `detail`
    says which memory bound is in force and why."""

    parent: str | None
    detail: str


def _cgroup2_mounts(mountinfo: str) -> list[tuple[str, str]]:
    """(root inside the hierarchy, mount point) of each cgroup2 mount in a mountinfo text."""
    out = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if right.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            out.append((fields[3], fields[4]))
    return out


def find(proc: str = "/proc", environ: dict[str, str] | None = None) -> Support:
    """Whether a delegated cgroup v2 is usable (see the module docstring); `proc` and `environ`
    are parameters for the tests."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV_VAR):
        candidate = environ[ENV_VAR]
        where = f"{ENV_VAR}={candidate}"
    else:
        try:
            with open(f"{proc}/self/cgroup") as f:
                own = next((line[3:].strip() for line in f if line.startswith("0::")), None)
            with open(f"{proc}/self/mountinfo") as f:
                mounts = _cgroup2_mounts(f.read())
        except OSError as error:
            return Support(None, f"no cgroup information ({error})")
        if own is None or not mounts:
            return Support(None, "no cgroup v2 hierarchy (cgroup v1 only)")
        candidate = None
        for root, point in mounts:
            if own == root or own.startswith(root.rstrip("/") + "/"):
                candidate = os.path.join(point, os.path.relpath(own, root)) if own != root else point
                break
        if candidate is None:
            return Support(None, f"this process's cgroup v2 ({own}) is not under a mounted cgroup2 hierarchy")
        where = f"cgroup v2 {candidate}"
    try:
        with open(os.path.join(candidate, "cgroup.subtree_control")) as f:
            enabled = f.read().split()
        with open(os.path.join(candidate, "cgroup.controllers")) as f:
            offered = f.read().split()
    except OSError as error:
        return Support(None, f"{where} is not usable ({error.strerror})")
    missing = [c for c in _NEEDED if c not in enabled]
    if missing:
        return Support(None, f"{where} offers {' '.join(offered) or 'no controllers'} and enables "
                       f"{' '.join(enabled) or 'none'} for children; {' and '.join(missing)} not delegated")
    if not os.access(candidate, os.W_OK):
        return Support(None, f"{where} is not writable by this process")
    return Support(candidate, f"{where}: memory.max and pids.max per program")


@lru_cache(maxsize=1)
def support() -> Support:
    """`find()` once per process."""
    return find()


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class ProgramCgroup:
    """One program's cgroup: made before it starts, its init added, read and removed after."""

    def __init__(self, parent: str, limits: SandboxLimits) -> None:
        self.path = os.path.join(parent, f"numloss-sandbox-{os.getpid()}-{next(_counter)}")
        os.mkdir(self.path)
        try:
            # the address-space limit per process and the tmpfs, for the whole sandbox
            memory = "max" if limits.memory_bytes <= 0 else str(int(limits.memory_bytes + limits.tmpfs_bytes))
            _write(os.path.join(self.path, "memory.max"), memory)
            if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                _write(os.path.join(self.path, "memory.swap.max"), "0")
            _write(os.path.join(self.path, "pids.max"), str(int(limits.max_processes) + 1))  # + its init
        except OSError:
            self.remove()
            raise

    def add(self, pid: int) -> None:
        """Move host process `pid` (the sandbox's init, before it forks the program) in."""
        _write(os.path.join(self.path, "cgroup.procs"), str(pid))

    def oom_kills(self) -> int:
        """How many processes the cgroup's memory limit killed (memory.events: oom_kill)."""
        try:
            with open(os.path.join(self.path, "memory.events")) as f:
                fields = dict(line.split() for line in f if len(line.split()) == 2)
            return int(fields.get("oom_kill", 0))
        except (OSError, ValueError):
            return 0

    def remove(self) -> None:
        """Kill anything left in it and remove it (best effort: an empty folder may stay)."""
        kill = os.path.join(self.path, "cgroup.kill")
        if os.path.exists(kill):
            try:
                _write(kill, "1")
            except OSError:
                pass
        try:
            os.rmdir(self.path)
        except OSError:
            pass
