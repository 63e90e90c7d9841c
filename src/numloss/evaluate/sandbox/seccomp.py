"""The sandbox's seccomp filter, built as classic BPF in pure Python (no libseccomp needed).

`filter_program()` returns the ``struct sock_filter[]`` bytes that ``bwrap --seccomp FD`` loads
just before it executes the interpreter. The filter, in order:

1. kills the process for a syscall from another ABI than the native one (an i386 ``int 0x80``
   would reach syscalls under other numbers), and refuses the x32 ABI on x86_64;
2. refuses (EPERM) the syscalls in `DENIED`: those no arithmetic program needs that widen the
   kernel attack surface or reach outside the namespaces (ptrace, mount, bpf, io_uring, ...),
   that hold memory no rlimit counts or draw on the evaluator's per-user budgets (memfd, SysV
   IPC, xattrs, POSIX message queues, inotify, ...), or that act on host-wide budgets or files
   (AIO contexts, sync, syncfs, fadvise);
3. answers ENOSYS for every syscall number above 450 but `NEWER_ALLOWED`: a kernel upgrade
   cannot open a new surface behind the filter's back;
4. refuses ``socket``/``socketpair`` for every family but AF_UNIX (EAFNOSUPPORT); a unix socket
   reaches only the sandbox (its own network namespace; `bwrap.layout` binds no socket file);
5. refuses `FCNTL_DENIED` commands of ``fcntl`` and `MADVISE_DENIED` advice of ``madvise``;
6. refuses ``clone`` with any CLONE_NEW* flag and answers ``clone3`` with ENOSYS (its flags lie
   in memory a filter cannot read; glibc then falls back to ``clone``);
7. allows everything else.

bwrap loads `filter_program(allow_mount=True)`; the init uses ``mount`` once (to cap its tmpfs's
inodes) and then stacks `last_filter()`, which refuses ``mount`` and any further filter. Syscall
numbers are the kernel's (syscall_64.tbl; asm-generic/unistd.h for aarch64).
"""

from __future__ import annotations

import errno
import platform
import struct
import sys

# classic BPF opcodes (linux/filter.h, linux/bpf_common.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
# seccomp return values (linux/seccomp.h)
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
# offsets in struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6] (little endian)
_NR, _ARCH, _ARG0_LOW = 0, 4, 16

AF_UNIX = 1
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME."""

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp",
    "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "unshare", "setns",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "lookup_dcookie", "vhangup",
    "open_by_handle_at", "name_to_handle_at", "settimeofday", "clock_settime", "adjtimex",
    "clock_adjtime", "sethostname", "setdomainname", "personality", "nfsservctl",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "migrate_pages", "move_pages",
    "iopl", "ioperm", "uselib",
    # memory outside RLIMIT_AS, and per-user budgets charged to the evaluator's user
    "memfd_create", "memfd_secret", "shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl",
    # SysV semaphore sets: kernel memory beside every rlimit (kernel.sem allows 32,000 sets of
    # 32,000 per ipc namespace, about 2.3 MiB a set); multiprocessing uses POSIX semaphores
    "semget", "semop", "semctl", "semtimedop",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark",
    "mbind", "set_mempolicy", "set_mempolicy_home_node", "modify_ldt", "vmsplice",
    # host-wide budgets or work: AIO contexts (fs.aio-max-nr is one count for the whole host), sync()
    "io_setup", "io_destroy", "io_getevents", "io_submit", "io_cancel", "io_pgetevents", "sync",
    # host-wide effects on files every sandbox and the host share: syncfs() flushes the whole host
    # filesystem, fadvise(DONTNEED) evicts the host's page cache of a bound file (refused for all
    # advice: no arithmetic program needs it)
    "syncfs", "fadvise64",
)
"""Syscalls refused with EPERM (those an architecture lacks are skipped)."""

_NEWER = {  # up to file_setattr, Linux 6.17
    "cachestat": 451, "fchmodat2": 452, "map_shadow_stack": 453, "futex_wake": 454, "futex_wait": 455,
    "futex_requeue": 456, "statmount": 457, "listmount": 458, "lsm_get_self_attr": 459,
    "lsm_set_self_attr": 460, "lsm_list_modules": 461, "mseal": 462, "setxattrat": 463, "getxattrat": 464,
    "listxattrat": 465, "removexattrat": 466, "open_tree_attr": 467, "file_getattr": 468, "file_setattr": 469,
}
NEWER_ALLOWED = ("fchmodat2", "futex_wake", "futex_wait", "futex_requeue", "getxattrat", "listxattrat", "file_getattr")
"""Syscalls above 450 that are allowed (glibc may use them; they read, or act on the caller's own
files); every other number above 450 gets ENOSYS (statmount, listmount, open_tree_attr,
setxattrat, lsm_*, ... included)."""
_LAST_CLASSIC = 450
F_SETPIPE_SZ, F_SETLEASE, F_NOTIFY = 1031, 1024, 1026
FCNTL_DENIED = (F_SETPIPE_SZ, F_SETLEASE, F_NOTIFY)
"""fcntl commands refused: growing a pipe (its pages are charged to the evaluator's user), a lease
(a write lease on a bound file stalls every other opener, the host's imports included) and
dnotify (it would see the host's file activity in a bound folder)."""
MADV_COLD, MADV_PAGEOUT = 20, 21
MADVISE_DENIED = (MADV_COLD, MADV_PAGEOUT)
"""madvise advice refused: both push pages of a mapped file out of the host's page cache."""
PR_SET_SECCOMP = 22
RLIMIT_CORE = 4

# numbers from 424 on are the same on every architecture
_COMMON = {
    "process_madvise": 440, "pidfd_getfd": 438, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "quotactl_fd": 443,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "clone3": 435,
    "memfd_secret": 447, "set_mempolicy_home_node": 450
}
_X86_64 = {
    **_COMMON,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "mount": 165,
    "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "keyctl": 250,
    "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163,
    "quotactl": 179, "syslog": 103, "lookup_dcookie": 212, "vhangup": 153, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "settimeofday": 164, "clock_settime": 227, "adjtimex": 159,
    "clock_adjtime": 305, "sethostname": 170, "setdomainname": 171, "personality": 135,
    "nfsservctl": 180, "migrate_pages": 256, "move_pages": 279, "iopl": 172, "ioperm": 173,
    "uselib": 134, "socket": 41, "socketpair": 53, "clone": 56, "fcntl": 72, "memfd_create": 319,
    "shmget": 29, "shmat": 30, "shmctl": 31, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
    "semget": 64, "semop": 65, "semctl": 66, "semtimedop": 220, "setxattr": 188, "lsetxattr": 189,
    "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "mq_open": 240,
    "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244,
    "mq_getsetattr": 245, "inotify_init": 253, "inotify_init1": 294, "inotify_add_watch": 254,
    "fanotify_init": 300, "fanotify_mark": 301, "mbind": 237, "set_mempolicy": 238,
    "modify_ldt": 154, "vmsplice": 278, "io_setup": 206, "io_destroy": 207, "io_getevents": 208,
    "io_submit": 209, "io_cancel": 210, "io_pgetevents": 333, "sync": 162, "syncfs": 306,
    "fadvise64": 221, "madvise": 28, "seccomp": 317, "prctl": 157, "setrlimit": 160, "prlimit64": 302
}
_AARCH64 = {
    **_COMMON,
    "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "mount": 40,
    "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268, "keyctl": 219,
    "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
    "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
    "delete_module": 106, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89, "quotactl": 60,
    "syslog": 116, "lookup_dcookie": 18, "vhangup": 58, "open_by_handle_at": 265,
    "name_to_handle_at": 264, "settimeofday": 170, "clock_settime": 112, "adjtimex": 171,
    "clock_adjtime": 266, "sethostname": 161, "setdomainname": 162, "personality": 92,
    "nfsservctl": 42, "migrate_pages": 238, "move_pages": 239, "socket": 198, "socketpair": 199,
    "clone": 220, "fcntl": 25, "memfd_create": 279, "shmget": 194, "shmat": 196, "shmctl": 195,
    "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187, "semget": 190, "semctl": 191,
    "semtimedop": 192, "semop": 193, "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7,
    "removexattr": 14, "lremovexattr": 15, "fremovexattr": 16, "mq_open": 180, "mq_unlink": 181,
    "mq_timedsend": 182, "mq_timedreceive": 183, "mq_notify": 184, "mq_getsetattr": 185,
    "inotify_init1": 26, "inotify_add_watch": 27, "fanotify_init": 262, "fanotify_mark": 263,
    "mbind": 235, "set_mempolicy": 237, "vmsplice": 75, "io_setup": 0, "io_destroy": 1,
    "io_submit": 2, "io_cancel": 3, "io_getevents": 4, "io_pgetevents": 292, "sync": 81,
    "syncfs": 267, "fadvise64": 223, "madvise": 233, "seccomp": 277, "prctl": 167, "setrlimit": 164,
    "prlimit64": 261
}
# machine name -> (AUDIT_ARCH_* value, syscall table, x32 bit or 0)
_ARCHES = {
    "x86_64": (0xC000003E, _X86_64, 0x40000000),
    "aarch64": (0xC00000B7, _AARCH64, 0),
}


class SeccompUnsupported(RuntimeError):
    """No filter is known for this machine's architecture."""


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _ret_errno(err: int) -> bytes:
    return _insn(_RET_K, _RET_ERRNO | err)


def _arch(machine: str | None) -> tuple[int, dict[str, int], int]:
    machine = machine or platform.machine()
    if machine not in _ARCHES or sys.byteorder != "little":
        raise SeccompUnsupported(f"no seccomp filter for the {machine} architecture (have: {', '.join(_ARCHES)})")
    return _ARCHES[machine]


def _prologue(audit_arch: int) -> list[bytes]:
    return [_insn(_LD_W_ABS, _ARCH), _insn(_JEQ_K, audit_arch, jt=1), _insn(_RET_K, _RET_KILL_PROCESS),
            _insn(_LD_W_ABS, _NR)]


def filter_program(machine: str | None = None, allow_mount: bool = False) -> bytes:
    """The BPF program (``struct sock_filter[]``, little endian) for `machine`; `allow_mount`
    leaves ``mount`` allowed (the filter bwrap loads, before the init stacks `last_filter`).

    Raises SeccompUnsupported on an architecture without a syscall table here or a big-endian
    host: the sandbox then refuses to run rather than run without the filter.
    """
    audit_arch, table, x32_bit = _arch(machine)
    prog = _prologue(audit_arch)
    if x32_bit:
        prog += [_insn(_JGE_K, x32_bit, jf=1), _ret_errno(errno.EPERM)]
    for name in DENIED:
        if name in table and not (allow_mount and name == "mount"):
            prog += [_insn(_JEQ_K, table[name], jf=1), _ret_errno(errno.EPERM)]
    for name in NEWER_ALLOWED:
        prog += [_insn(_JEQ_K, _NEWER[name], jf=1), _insn(_RET_K, _RET_ALLOW)]
    prog += [_insn(_JGE_K, _LAST_CLASSIC + 1, jf=1), _ret_errno(errno.ENOSYS)]
    prog += [_insn(_JEQ_K, table["clone3"], jf=1), _ret_errno(errno.ENOSYS)]
    for name in ("socket", "socketpair"):  # the address family is the first argument
        prog += _only_value(table[name], 0, AF_UNIX, errno.EAFNOSUPPORT)
    prog += _refuse_values(table["fcntl"], 1, FCNTL_DENIED)
    prog += _refuse_values(table["madvise"], 2, MADVISE_DENIED)
    prog += [_insn(_JEQ_K, table["clone"], jf=3), _insn(_LD_W_ABS, _ARG0_LOW),
             _insn(_JSET_K, CLONE_NEW_FLAGS, jf=1), _ret_errno(errno.EPERM)]
    prog.append(_insn(_RET_K, _RET_ALLOW))
    return b"".join(prog)


def last_filter(machine: str | None = None) -> bytes:
    """The filter the init stacks last: it refuses (EPERM) ``mount``, ``seccomp()`` and
    ``prctl(PR_SET_SECCOMP)`` (and kills other ABIs). No process of the sandbox can then stack a
    filter: each costs kernel memory (about 6.6 KB) that no rlimit counts.

    It also refuses setting RLIMIT_CORE (``setrlimit``, and ``prlimit64`` with a new limit;
    reading it is allowed). The init sets it to 1 before stacking this filter: a limit of 1 stops
    every core dump, to a file and to a ``|helper`` core_pattern alike, which ignores a limit of 0
    and would run the host's crash handler (systemd-coredump, apport) for each crash."""
    audit_arch, table, _ = _arch(machine)
    prog = _prologue(audit_arch)
    for name in ("mount", "seccomp"):
        prog += [_insn(_JEQ_K, table[name], jf=1), _ret_errno(errno.EPERM)]
    prog += _refuse_values(table["setrlimit"], 0, (RLIMIT_CORE,))
    # prlimit64(pid, resource, new, old): refused when resource is RLIMIT_CORE and new is not NULL
    body = [_insn(_LD_W_ABS, _ARG0_LOW + 8), _insn(_JEQ_K, RLIMIT_CORE, jf=5),
            _insn(_LD_W_ABS, _ARG0_LOW + 16), _insn(_JEQ_K, 0, jf=2),
            _insn(_LD_W_ABS, _ARG0_LOW + 20), _insn(_JEQ_K, 0, jt=1), _ret_errno(errno.EPERM),
            _insn(_RET_K, _RET_ALLOW)]
    prog += [_insn(_JEQ_K, table["prlimit64"], jf=len(body))] + body
    prog += _refuse_values(table["prctl"], 0, (PR_SET_SECCOMP,))
    prog.append(_insn(_RET_K, _RET_ALLOW))
    return b"".join(prog)


def _refuse_values(nr: int, arg: int, values: tuple[int, ...], err: int = errno.EPERM) -> list[bytes]:
    """If the syscall is `nr`: refuse it with `err` when the low 32 bits of argument `arg` are one
    of `values`, allow it otherwise (every branch returns: the accumulator no longer holds nr)."""
    body = [_insn(_LD_W_ABS, _ARG0_LOW + 8 * arg)]
    for value in values:
        body += [_insn(_JEQ_K, value, jf=1), _ret_errno(err)]
    body.append(_insn(_RET_K, _RET_ALLOW))
    return [_insn(_JEQ_K, nr, jf=len(body))] + body


def _only_value(nr: int, arg: int, value: int, err: int) -> list[bytes]:
    """If the syscall is `nr`: allow it when argument `arg` (low 32 bits) is `value`, else refuse
    it with `err`."""
    body = [_insn(_LD_W_ABS, _ARG0_LOW + 8 * arg), _insn(_JEQ_K, value, jf=1), _insn(_RET_K, _RET_ALLOW),
            _ret_errno(err)]
    return [_insn(_JEQ_K, nr, jf=len(body))] + body
