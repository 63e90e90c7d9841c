"""The sandbox's policy as plain data: what a program may see, call and use.

The mechanism applies it and holds no policy of its own: `bwrap.py` builds the command line and
the read-only view from `ENV`, `ALLOWED_PACKAGES`, `DEVICES`, `SHELLS`, `LOCALES` and
`LIBRARY_LINKS`; `seccomp.py` assembles the filter from the syscall rules below; `pid1.py` sets
`rlimits()`; `cgroup.py` writes `cgroup_limits()`. The per-run figures are `SandboxLimits`
(limits.py). docs/sandbox.md says why each rule is there.
"""

from __future__ import annotations

from numloss.evaluate.sandbox.limits import SandboxLimits

# ---- what a program sees ---------------------------------------------------------------------
ALLOWED_PACKAGES = ("sympy", "mpmath", "numpy")
"""Third-party packages a program may import (MAmmoTH-style programs use sympy and numpy)."""
SANDBOX_UID = SANDBOX_GID = 65534  # "nobody"
ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
DEVICES = ("null", "zero", "full", "random", "urandom")
"""/dev holds these only: no /dev/pts or /dev/ptmx (ptys are a host-wide budget)."""
SHM_DIR = "/tmp/.shm"
"""/dev/shm points here: POSIX semaphores and shared memory live in the program's capped tmpfs."""
LOCALES = ("/usr/lib/locale/C.utf8", "/usr/lib/locale/C.UTF-8")
"""Where glibc looks for the C.UTF-8 locale (Debian, Ubuntu, Fedora); whichever exists is bound."""
LIBRARY_LINKS = ("/lib", "/lib64", "/lib32", "/libx32", "/usr/lib64", "/usr/lib32", "/usr/libx32")
"""Library folders that are a symlink on a merged-/usr system (/lib -> usr/lib): the sandbox has the
same links, so that the loader and libraries are found by their usual paths."""
SHELLS = ("/usr/bin/dash", "/bin/dash")
"""Shells the sandbox may offer as /bin/sh (only one that loads no library the interpreter does
not: see `bwrap.minimal_shell`)."""
UNPROBED = ("_tkinter", "readline", "_curses", "_curses_panel", "ossaudiodev", "nis", "spwd")
"""Extension modules of the stdlib whose libraries are not bound (a GUI, terminal handling): a
program importing them gets an ImportError."""

# ---- what a program may use ------------------------------------------------------------------
CORE_LIMIT = 1
"""RLIMIT_CORE, which the program cannot change. 1, not 0: the kernel ignores 0 where
core_pattern pipes to a helper (systemd-coredump, apport); 1 stops dumps of both kinds."""
SIGPENDING = 64
"""Signals a sandbox may have queued at once (the per-user default is shared with the evaluator)."""
OOM_SCORE_ADJ = 1000
"""The OOM killer takes a sandbox's processes before any other (as root also a floor)."""
CPU_PER_PROGRAM = 1
"""CPUs one program may use at once under a cgroup (cpu.max / cpu.cfs_quota_us)."""
INIT_GRACE = 0.5
"""The init ends the namespace this long after the wall-clock limit, whatever the host does."""
POLL_SECONDS = 0.1
"""How often the init sums its namespace's CPU time and tasks and checks that its evaluator
lives."""
AT_CAP_SECONDS = 2.0
"""How long the namespace may stay at its process limit before the init ends it."""


def rlimits(limits: SandboxLimits) -> list[tuple[str, int]]:
    """The rlimits the init sets before it forks the program: those of `limits`, no core dumps,
    locked memory or real-time priority, and small budgets of queued signals and message-queue
    bytes (the kernel charges those to the evaluator's user as well)."""
    out = [
        ("RLIMIT_CPU", int(limits.cpu_seconds)),
        ("RLIMIT_FSIZE", int(limits.tmpfs_bytes)),
        ("RLIMIT_NOFILE", int(limits.open_files)),
        ("RLIMIT_NPROC", int(limits.max_processes)),
        ("RLIMIT_CORE", CORE_LIMIT),
        ("RLIMIT_MEMLOCK", 0),
        ("RLIMIT_RTPRIO", 0),
        ("RLIMIT_SIGPENDING", SIGPENDING),
        ("RLIMIT_MSGQUEUE", 0),
    ]
    return out + ([("RLIMIT_AS", int(limits.memory_bytes))] if limits.memory_bytes > 0 else [])


def cgroup_limits(limits: SandboxLimits) -> tuple[int | None, int]:
    """(memory bytes or None for none, pids) of a program's cgroup: the address-space limit per
    process and the tmpfs for the whole sandbox; its processes and threads and its init."""
    memory = None if limits.memory_bytes <= 0 else int(limits.memory_bytes + limits.tmpfs_bytes)
    return memory, int(limits.max_processes) + 1


# ---- what a program may call (seccomp.py) ----------------------------------------------------
DENIED = tuple(
    """
    ptrace process_vm_readv process_vm_writev process_madvise pidfd_getfd kcmp
    mount umount2 pivot_root chroot open_tree move_mount fsopen fsconfig fsmount fspick
    mount_setattr unshare setns keyctl add_key request_key bpf perf_event_open userfaultfd
    kexec_load kexec_file_load init_module finit_module delete_module reboot swapon swapoff acct
    quotactl quotactl_fd syslog lookup_dcookie vhangup open_by_handle_at name_to_handle_at
    settimeofday clock_settime adjtimex clock_adjtime sethostname setdomainname personality
    nfsservctl io_uring_setup io_uring_enter io_uring_register migrate_pages move_pages
    iopl ioperm uselib
    memfd_create memfd_secret shmget shmat shmctl msgget msgsnd msgrcv msgctl
    semget semop semctl semtimedop
    setxattr lsetxattr fsetxattr removexattr lremovexattr fremovexattr
    mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify mq_getsetattr
    inotify_init inotify_init1 inotify_add_watch fanotify_init fanotify_mark
    mbind set_mempolicy set_mempolicy_home_node modify_ldt vmsplice
    io_setup io_destroy io_getevents io_submit io_cancel io_pgetevents sync syncfs fadvise64
""".split()
)
"""Syscalls refused with EPERM (those an architecture lacks are skipped), in groups: those that
widen the kernel surface or reach outside the namespaces; memory outside RLIMIT_AS and per-user
budgets charged to the evaluator's user (memfd, SysV IPC: a semaphore set is ~2.3 MiB of kernel
memory, xattrs, POSIX message queues, inotify, NUMA policy); host-wide budgets and effects (AIO
contexts, sync, syncfs, fadvise, which evicts the host's page cache of a bound file)."""
LAST_CLASSIC = 450
"""Every syscall number above this gets ENOSYS but `NEWER_ALLOWED`: a kernel upgrade cannot open
a new surface behind the filter's back."""
NEWER_ALLOWED = tuple(
    "fchmodat2 futex_wake futex_wait futex_requeue getxattrat listxattrat file_getattr".split()
)
"""Syscalls above 450 that are allowed (glibc may use them; they read, or act on the caller's own
files); statmount, listmount, open_tree_attr, setxattrat, lsm_*, ... get ENOSYS."""
AF_UNIX = 1
"""The one socket family allowed: a unix socket reaches only the sandbox (its own network
namespace; no socket file is bound). Every other family gets EAFNOSUPPORT."""
FCNTL_DENIED = (1031, 1024, 1026)
"""F_SETPIPE_SZ (pipe pages are charged to the evaluator's user), F_SETLEASE (a lease on a bound
file stalls every other opener, the host's imports included), F_NOTIFY (dnotify would see the
host's file activity in a bound folder)."""
MADVISE_DENIED = (20, 21)
"""MADV_COLD, MADV_PAGEOUT: both push pages of a mapped file out of the host's page cache."""
CLONE_NEW_FLAGS = (
    0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80
)
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME: refused in
``clone``; ``clone3`` (flags in memory a filter cannot read) gets ENOSYS, and glibc falls back."""
LAST_DENIED = ("mount", "seccomp")
"""The init stacks a last filter after its one ``mount`` (capping /tmp's inodes): it refuses these,
``prctl(PR_SET_SECCOMP)`` (a filter costs ~6.6 KB of kernel memory no rlimit counts) and setting
RLIMIT_CORE (`CORE_LIMIT`)."""
