"""The sandbox's init: pid 1 of its pid namespace, the trusted program that runs the untrusted one.

bwrap runs it as ``python -I -S -B -c <this file's text> <JSON parameters>`` (`bwrap.command`);
the evaluator never imports it. It sets the sandbox up (failing closed), forks the program as
the module ``__main__`` and reports on a pipe the program never holds: ``started``, then ``end
WAITSTATUS CPU``, ``deadline`` (its own wall clock), ``cpu USED`` (the CPU-clock budget) or
``nproc TASKS`` (a stay at RLIMIT_NPROC); ``setup REASON`` instead of ``started``. The program
cannot reach it: the kernel drops signals to a namespace's init without a handler, it is not
dumpable and ptrace is refused.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import struct
import sys
import time


def _say(status: int, text: str) -> None:
    os.write(status, text.encode() + b"\n")


def _fail(status: int, why: str) -> None:
    _say(status, "setup " + why)
    os._exit(125)


def _namespace_usage(own_pid: int, ticks: float) -> tuple[float, int]:
    """(CPU seconds, tasks) of this pid namespace from its /proc. CPU: each live process's
    user+system time plus its reaped children's, the init's own time excepted. Tasks: the threads
    of every process, the init's included (what RLIMIT_NPROC counts for the sandbox's uid)."""
    total, tasks = 0.0, 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields[0] is stat's field 3 (state): utime..cstime are fields 14-17, num_threads 20
        utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
        total += (cutime + cstime) if int(entry) == own_pid else (utime + stime + cutime + cstime)
        tasks += int(fields[17]) if fields[0] != b"Z" else 0
    return total / ticks, tasks


def _drop_privileges(params: dict, libc: ctypes.CDLL, status: int) -> int:
    """Cap /tmp's inodes, drop every capability and uid 0, re-arm the parent-death signal;
    returns the uid (= gid) the program runs as."""
    # the OOM killer takes the sandbox's processes first (its children inherit this): where the
    # host runs out of memory, or a memory limit holds the evaluator and its sandboxes together, a
    # program is killed before the evaluator, whose model makes it the largest process by far
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="utf-8") as f:
            f.write(str(int(params["oom_score_adj"])))
    except OSError as error:
        _fail(status, "oom_score_adj: " + str(error))
    # bwrap's --tmpfs has no nr_inodes: remount its /tmp with one (flags bwrap set must be repeated)
    flags = 32 | 2 | 4  # MS_REMOUNT | MS_NOSUID | MS_NODEV
    if libc.mount(b"none", b"/tmp", None, flags, b"nr_inodes=%d" % int(params["inodes"])) != 0:
        _fail(status, "remount /tmp with nr_inodes: errno " + str(ctypes.get_errno()))
    for cap in range(64):  # the bounding set, while CAP_SETPCAP is held (EINVAL past the last cap)
        if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # PR_CAPBSET_DROP
            _fail(status, "dropping capability " + str(cap) + " from the bounding set")
    uid = int(params["uid"])
    if os.getuid() == 0:  # root-started evaluator (see bwrap.py): leave uid 0 before anything else
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    # capset's header (version 3, this thread), then its data: 2 x (effective, permitted,
    # inheritable), all 0
    header = ctypes.create_string_buffer(struct.pack("=Ii", 0x20080522, 0))
    if libc.capset(header, bytes(24)) != 0 or libc.prctl(47, 4, 0, 0, 0) != 0:
        _fail(status, "clearing capabilities")  # capset to nothing, PR_CAP_AMBIENT_CLEAR_ALL
    # a change of uid clears the parent-death signal that bwrap's --die-with-parent set: arm it
    # again, then make sure the evaluator did not die before that (the lifeline reads EOF then)
    if libc.prctl(1, 9, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG, SIGKILL
        _fail(status, "PR_SET_PDEATHSIG")
    if select.select([int(params["lifeline"])], [], [], 0)[0]:
        os._exit(125)
    return uid


def _lock_down(params: dict, libc: ctypes.CDLL, status: int, uid: int) -> None:
    """Set the rlimits, stack the last seccomp filter (it refuses changing RLIMIT_CORE, so the
    limits come first), check uid, capabilities and filters."""
    for name, value in params["rlimits"]:
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        # a limit that cannot be set: the program must not run
        except (OSError, ValueError) as error:
            _fail(status, "setrlimit(" + name + ", " + str(value) + "): " + str(error))
    last = bytes.fromhex(params["last_filter"])
    buffer = ctypes.create_string_buffer(last, len(last))
    prog = struct.pack("@HP", len(last) // 8, ctypes.addressof(buffer))  # struct sock_fprog
    if libc.prctl(22, 2, prog, 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        _fail(status, "stacking the last seccomp filter: errno " + str(ctypes.get_errno()))
    with open("/proc/self/status", encoding="utf-8") as f:
        st = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    if (
        os.getresuid() != (uid,) * 3
        or os.getresgid() != (uid,) * 3
        or os.getgroups()
        or any(int(st[k].strip(), 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"))
        or st["NoNewPrivs"].strip() != "1"
        or st["Seccomp"].strip() != "2"
        or int(st.get("Seccomp_filters", "2")) < 2
    ):
        _fail(status, "uid/caps/seccomp not as required")


def _read_program(keep: tuple[int, int]) -> bytes:
    """The program's text from fd 0 (a memfd); then fd 0 is /dev/null and only 0-2 and `keep`
    (status, lifeline) stay open (bwrap leaves some of its own descriptors, userns and info, open).
    """
    with open(0, "rb", closefd=False) as f:
        source = f.read()
    os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
    for low, high in zip(
        (3, *(fd + 1 for fd in sorted(keep))), (*sorted(keep), 1 << 16), strict=True
    ):
        os.closerange(low, high)
    return source


def _supervise(pid: int, params: dict, started_at: float, status: int) -> None:
    """Reap until the program ends, the deadline, the CPU budget, a stay at the process limit or
    the evaluator's end (its lifeline reads EOF); report which, and exit (the kernel then kills
    every process of the namespace)."""
    deadline = started_at + float(params["deadline"])
    cpu_budget = params["cpu_budget"]  # None: no whole-namespace CPU clock
    max_tasks, at_cap_for = int(params["max_tasks"]), float(params["at_cap_seconds"])
    poll, ticks = float(params["poll"]), float(os.sysconf("SC_CLK_TCK"))
    lifeline = int(params["lifeline"])
    own = os.getpid()
    at_cap_since, scanned = None, 0.0
    while True:
        now = time.monotonic()
        if now >= deadline:
            _say(status, "deadline")
            os._exit(0)
        signal.sigtimedwait([signal.SIGCHLD], min(deadline - now, poll))
        if select.select([lifeline], [], [], 0)[0]:  # no evaluator is left to read a report
            os._exit(0)
        # reap everything (orphans are reparented here), the program last
        with contextlib.suppress(ChildProcessError):
            while (reaped := os.wait4(-1, os.WNOHANG))[0]:
                if reaped[0] == pid:
                    _say(status, f"end {reaped[1]} {reaped[2].ru_utime + reaped[2].ru_stime:.3f}")
                    os._exit(0)
        # at most one scan of /proc per poll: orphans exiting in a loop wake the init for each
        # one, and a scan per wake-up is CPU the program makes the init spend beside its budget
        if time.monotonic() - scanned < poll:
            continue
        scanned = time.monotonic()
        used, tasks = _namespace_usage(own, ticks)
        if cpu_budget is not None and used > float(cpu_budget):
            _say(status, f"cpu {used:.3f}")
            os._exit(0)
        # a program held at the process limit has (almost always) lost a fork or a thread it
        # waits for (multiprocessing.Pool(60) waits for ever): end it with that reason now
        at_cap_since = None if tasks < max_tasks else at_cap_since or time.monotonic()
        if at_cap_since is not None and time.monotonic() - at_cap_since >= at_cap_for:
            _say(status, f"nproc {tasks}")
            os._exit(0)


PROGRAM_FILE = "/tmp/prog.py"


def _as_python_prog_py(source: bytes, site_dirs: list[str]) -> object:
    """Make the program's process look as under ``python prog.py`` run in its own folder (the
    init itself runs as ``python -I -S -c``), and return its fresh ``__main__`` module.

    The program's text is saved as `PROGRAM_FILE` in its cwd (its own tmpfs, counted in its
    budget): ``__file__``, ``inspect.getsource``, tracebacks with source lines and the spawn start
    method of multiprocessing (which re-runs the main module's file) then work. ``sys.argv`` is
    ``["prog.py"]`` (argparse would otherwise read the init's parameters), the program's folder
    comes first on the import path, and the site module's builtins (``exit``, ``quit``, ``help``,
    ``copyright``, ``credits``, ``license``), which ``-S`` leaves out, are there. A program too
    large for its tmpfs runs as ``<program>``, without the file.
    """
    import site

    sys.path[:] = [p for p in sys.path if p] + site_dirs
    main_module = type(sys)("__main__")
    main_module.__dict__.update(__builtins__=__builtins__, __spec__=None)
    try:
        with open(PROGRAM_FILE, "xb") as f:  # buffered: all of it is written, or OSError
            f.write(source)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(PROGRAM_FILE)
    else:
        main_module.__dict__["__file__"] = PROGRAM_FILE
        sys.path.insert(0, os.path.dirname(PROGRAM_FILE))
    sys.argv[:] = [os.path.basename(PROGRAM_FILE)]
    sys.orig_argv[:] = [sys.executable, os.path.basename(PROGRAM_FILE)]
    for add in (site.setquit, site.setcopyright, site.sethelper):
        add()
    # a fresh module named __main__ holds the program's globals, as under `python prog.py`:
    # pickle (multiprocessing, concurrent.futures) finds the functions and classes it defines
    sys.modules["__main__"] = main_module
    return main_module


def main(params: dict) -> None:
    """Set the sandbox up (failing closed with a "setup" report), fork the program, supervise it."""
    started_at = time.monotonic()
    libc = ctypes.CDLL(None, use_errno=True)
    status = int(params["status"])
    uid = _drop_privileges(params, libc, status)
    _lock_down(params, libc, status, uid)
    source = _read_program((status, int(params["lifeline"])))
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no /proc/1/mem, /proc/1/fd for the program
    # no handler for any signal (the kernel then drops those the program sends to its init; Python
    # has one for SIGINT), and SIGCHLD blocked: it only wakes sigtimedwait
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
    _say(status, "started")
    pid = os.fork()
    if pid == 0:  # the program
        os.close(status)
        os.close(int(params["lifeline"]))
        libc.prctl(4, 1, 0, 0, 0)
        libc.prctl(1, 9, 0, 0, 0)  # dies with the init
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.dont_write_bytecode = True
        main_module = _as_python_prog_py(source, list(params["site_dirs"]))
        # dont_inherit: this file's `from __future__ import annotations` must not reach the program
        # (its annotations would become strings: a dataclass in a function body then fails)
        name = main_module.__dict__.get("__file__", "<program>")
        code = compile(source, name, "exec", dont_inherit=True)
        del source
        exec(code, main_module.__dict__)
        sys.exit(0)
    del source
    os.dup2(0, 1)
    os.dup2(0, 2)
    _supervise(pid, params, started_at, status)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
