"""The sandbox's init: pid 1 of its pid namespace, the trusted program that runs the untrusted one.

bwrap starts it as ``python -I -S -B -c <this file's text> <JSON parameters>`` (`bwrap.command`);
it is never imported by the evaluator (everything runs under the main guard). Before any of the
program exists it: sets its ``oom_score_adj`` (inherited by all it forks), remounts ``/tmp`` with
an inode cap (bwrap's tmpfs option has only a size), drops every capability and, for a root
evaluator, uid 0; re-arms the parent-death signal and checks the evaluator is still alive; stacks
the last seccomp filter (`seccomp.last_filter`: no ``mount``, no further filters); checks it holds
no capability, no_new_privs and both filters; sets the rlimits; reads the program from fd 0 (a
memfd) and makes itself non-dumpable. Then it forks the program, which runs as the module
``__main__`` (as under ``python prog.py``: pickle, and so ``multiprocessing``, finds what it
defines), and waits.

It reports to the host on a pipe the program never holds: ``started``, then ``end WAITSTATUS CPU``
when the program ends, ``deadline`` when its own wall clock ends the namespace, ``cpu USED``
when the processes of the namespace together used more CPU time than the CPU-clock budget, or
``nproc TASKS`` when the namespace stayed at its process limit (RLIMIT_NPROC, threads included)
long enough that a program waiting for a process it could not start would hang. The
program cannot reach it: the kernel drops signals to a namespace's init that has no handler for
them, it is not dumpable (no /proc/1/mem, /proc/1/fd) and ptrace is refused.
"""

from __future__ import annotations

import json
import sys


def _namespace_usage(own_pid: int, ticks: float) -> tuple[float, int]:
    """(CPU seconds, tasks) of this pid namespace, read from its /proc. CPU: each live process's
    user+system time plus that of the children it reaped, the init's own time excepted (its
    reaped children count). Tasks: the threads of every process, the init's included (what
    RLIMIT_NPROC counts for the sandbox's uid)."""
    import os

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


def main(params: dict) -> None:
    import ctypes
    import os
    import resource
    import select
    import signal
    import time

    started_at = time.monotonic()
    libc = ctypes.CDLL(None, use_errno=True)
    status = int(params["status"])

    def say(text: str) -> None:
        os.write(status, text.encode() + b"\n")

    def fail(why: str) -> None:
        say("setup " + why)
        os._exit(125)

    # the OOM killer takes the sandbox's processes first (its children inherit this): where the
    # host runs out of memory, or a memory limit holds the evaluator and its sandboxes together, a
    # program is killed before the evaluator, whose model makes it the largest process by far
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(int(params["oom_score_adj"])))
    except OSError as error:
        fail("oom_score_adj: " + str(error))
    # bwrap's --tmpfs has no nr_inodes: remount its /tmp with one (flags bwrap set must be repeated)
    if libc.mount(b"none", b"/tmp", None, 32 | 2 | 4, b"nr_inodes=%d" % int(params["inodes"])) != 0:
        fail("remount /tmp with nr_inodes: errno " + str(ctypes.get_errno()))  # MS_REMOUNT|NOSUID|NODEV
    for cap in range(64):  # the bounding set, while CAP_SETPCAP is held (EINVAL past the last cap)
        if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # PR_CAPBSET_DROP
            fail("dropping capability " + str(cap) + " from the bounding set")
    uid = gid = int(params["uid"])
    if os.getuid() == 0:  # root-started evaluator (see bwrap.py): leave uid 0 before anything else
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    none = (ctypes.c_uint32 * 6)()
    if libc.capset(ctypes.byref(Header(0x20080522, 0)), none) != 0 or libc.prctl(47, 4, 0, 0, 0) != 0:
        fail("clearing capabilities")  # capset to nothing, PR_CAP_AMBIENT_CLEAR_ALL
    # a change of uid clears the parent-death signal that bwrap's --die-with-parent set: arm it
    # again, then make sure the evaluator did not die before that (the lifeline reads EOF then)
    if libc.prctl(1, 9, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG, SIGKILL
        fail("PR_SET_PDEATHSIG")
    if select.select([int(params["lifeline"])], [], [], 0)[0]:
        os._exit(125)

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    last = bytes.fromhex(params["last_filter"])
    buffer = ctypes.create_string_buffer(last, len(last))
    if libc.prctl(22, 2, ctypes.byref(Prog(len(last) // 8, ctypes.addressof(buffer))), 0, 0) != 0:
        fail("stacking the last seccomp filter: errno " + str(ctypes.get_errno()))  # PR_SET_SECCOMP, FILTER
    with open("/proc/self/status") as f:
        st = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    if (os.getresuid() != (uid,) * 3 or os.getresgid() != (gid,) * 3 or os.getgroups()
            or any(int(st[k].strip(), 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"))
            or st["NoNewPrivs"].strip() != "1" or st["Seccomp"].strip() != "2"
            or int(st.get("Seccomp_filters", "2")) < 2):
        fail("uid/caps/seccomp not as required")
    for name, value in params["rlimits"]:
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (OSError, ValueError) as error:  # a limit that cannot be set: the program must not run
            fail("setrlimit(" + name + ", " + str(value) + "): " + str(error))
    chunks = []
    while chunk := os.read(0, 1 << 20):
        chunks.append(chunk)
    source = b"".join(chunks)
    del chunks
    os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
    os.closerange(3, status)  # bwrap leaves some of its own descriptors (userns, info) open
    os.closerange(status + 1, 1 << 16)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no /proc/1/mem, /proc/1/fd for the program
    # no handler for any signal (the kernel then drops those the program sends to its init; Python
    # has one for SIGINT), and SIGCHLD blocked: it only wakes sigtimedwait below
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
    say("started")
    pid = os.fork()
    if pid == 0:  # the program
        os.close(status)
        libc.prctl(4, 1, 0, 0, 0)
        libc.prctl(1, 9, 0, 0, 0)  # dies with the init
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path[:] = [p for p in sys.path if p] + list(params["site_dirs"])
        sys.dont_write_bytecode = True
        code = compile(source, "<program>", "exec")
        # a fresh module named __main__ holds the program's globals, as under `python prog.py`:
        # pickle (multiprocessing, concurrent.futures) finds the functions and classes it defines
        main_module = type(sys)("__main__")
        main_module.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = main_module
        del source
        exec(code, main_module.__dict__)
        sys.exit(0)
    del source
    os.dup2(0, 1)
    os.dup2(0, 2)
    deadline = started_at + float(params["deadline"])
    cpu_budget = params["cpu_budget"]  # None: no whole-namespace CPU clock
    max_tasks, at_cap_for = int(params["max_tasks"]), float(params["at_cap_seconds"])
    poll = float(params["poll"])
    ticks = float(os.sysconf("SC_CLK_TCK"))
    own = os.getpid()
    at_cap_since = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            say("deadline")
            os._exit(0)  # the kernel then kills every process of the namespace
        signal.sigtimedwait([signal.SIGCHLD], min(deadline - now, poll))
        while True:  # reap everything (orphans are reparented here), the program last
            try:
                reaped, wait_status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                reaped = 0
            if reaped == 0:
                break
            if reaped == pid:
                say(f"end {wait_status} {usage.ru_utime + usage.ru_stime:.3f}")
                os._exit(0)
        used, tasks = _namespace_usage(own, ticks)
        if cpu_budget is not None and used > float(cpu_budget):
            say(f"cpu {used:.3f}")
            os._exit(0)
        # a program held at the process limit has (almost always) lost a fork or a thread it
        # waits for (multiprocessing.Pool(60) waits for ever): end it with that reason now
        if tasks >= max_tasks:
            at_cap_since = time.monotonic() if at_cap_since is None else at_cap_since
            if time.monotonic() - at_cap_since >= at_cap_for:
                say(f"nproc {tasks}")
                os._exit(0)
        else:
            at_cap_since = None


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
