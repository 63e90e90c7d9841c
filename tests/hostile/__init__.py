"""Hostile programs for the sandbox: each ``*.py.in`` file tries one escape (its first line says
which); they are templates, hence not ``.py``.

The line after it, ``# expect: a|b``, lists the statuses the sandbox may report for it. Placeholders
``@NAME@`` are filled by the test with the evaluator's real paths, pids and ports, so that a
program aims at live targets; whether it got anywhere is judged from the host side (files,
listeners, processes), not from what it prints. A program prints ``ESCAPED`` when it sees that an
attempt worked, which the test also refuses.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Hostile:
    name: str
    tries: str
    expect: frozenset[str]
    template: str

    def source(self, values: dict[str, str]) -> str:
        """The program with each ``@NAME@`` filled from `values` (a KeyError names one missing)."""
        return re.sub(r"@([A-Z_]+)@", lambda m: values[m[1]], self.template)


def load() -> list[Hostile]:
    """Every hostile program in this folder, sorted by name."""
    out = []
    for path in sorted(HERE.glob("*.py.in")):
        text = path.read_text()
        lines = text.splitlines()
        end = next((i for i, line in enumerate(lines) if line.startswith("# expect: ")), None)
        if not lines[0].startswith("# tries: ") or end is None:
            raise ValueError(f"{path}: must start with '# tries: ...' (may go on over comment lines), then '# expect: ...'")
        tries = " ".join(line.removeprefix("#").strip() for line in lines[:end]).removeprefix("tries: ")
        expect = frozenset(lines[end].removeprefix("# expect: ").strip().split("|"))
        out.append(Hostile(path.name.removesuffix(".py.in"), tries, expect, text))
    return out


# ---- which processes are ours ----------------------------------------------------------------
# The kernel reuses pid-namespace numbers: another evaluator on the machine can start a sandbox
# whose namespace gets the number of one of ours that has ended. So a leftover is a process in
# the namespace *and* a descendant of this test process, which is a child subreaper while the
# programs run: an orphan of ours is reparented to it, never to the host's init.

PR_SET_CHILD_SUBREAPER = 36


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """While it lasts this process is the subreaper of its orphaned descendants (Linux prctl), so
    that a survivor of a sandbox is found below it; afterwards their exit statuses are collected."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    if prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    try:
        yield
    finally:
        prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        reap_orphans()


def descendants(root: int) -> list[str]:
    """Host pids (as strings) of every process below `root`."""
    return [str(child.pid) for child in psutil.Process(root).children(recursive=True)]


def pid_namespace(pid: str) -> str:
    """The pid namespace of host process `pid` ("pid:[N]"), "" once it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return ""


def our_processes_in_pid_namespace(inode: int) -> list[int]:
    """Host pids of this process's descendants in the pid namespace `inode`."""
    return [int(p) for p in descendants(os.getpid()) if pid_namespace(p) == f"pid:[{inode}]"]


def reap_orphans() -> None:
    """Collect the exit status of orphans reparented to this process (no zombies left)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
