"""The sandbox's seccomp filter, assembled as classic BPF in pure Python (no libseccomp needed)
from the rules of `policy.py`; this module holds only the syscall numbers and the assembler.

`filter_program()` returns the ``struct sock_filter[]`` bytes that ``bwrap --seccomp FD`` loads
just before it executes the interpreter. The filter, in order:

1. kills the process for a syscall from another ABI than the native one (an i386 ``int 0x80``
   would reach syscalls under other numbers), and refuses the x32 ABI on x86_64;
2. refuses (EPERM) the syscalls in `policy.DENIED` (ptrace, mount, bpf, io_uring, memfd, SysV
   IPC, xattrs, inotify, AIO, sync, ...);
3. answers ENOSYS for every syscall number above 450 but `NEWER_ALLOWED`;
4. refuses ``socket``/``socketpair`` for every family but AF_UNIX (EAFNOSUPPORT);
5. refuses `FCNTL_DENIED` commands of ``fcntl`` and `MADVISE_DENIED` advice of ``madvise``;
6. refuses ``clone`` with any CLONE_NEW* flag and answers ``clone3`` with ENOSYS;
7. allows everything else.

bwrap loads `filter_program(allow_mount=True)`; the init uses ``mount`` once (to cap its tmpfs's
inodes) and then stacks `last_filter()`, which refuses ``mount`` and any further filter. Syscall
numbers are the kernel's (syscall_64.tbl; asm-generic/unistd.h for aarch64).
"""

import errno
import platform
import re
import struct
import sys
from functools import lru_cache

from numloss.evaluate.sandbox import policy

# classic BPF opcodes (linux/filter.h, linux/bpf_common.h)
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
# seccomp return values (linux/seccomp.h)
_RET_ALLOW, _RET_ERRNO, _RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
# offsets in struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6] (little endian)
_NR, _ARCH, _ARG0_LOW = 0, 4, 16
PR_SET_SECCOMP, RLIMIT_CORE = 22, 4

# name, x86_64 number, aarch64 number ("-": the architecture lacks it); from 424 on one number
# serves every architecture
_NUMBERS = """
ptrace 101 117  process_vm_readv 310 270  process_vm_writev 311 271  kcmp 312 272  mount 165 40
umount2 166 39  pivot_root 155 41  chroot 161 51  unshare 272 97  setns 308 268  keyctl 250 219
add_key 248 217  request_key 249 218  bpf 321 280  perf_event_open 298 241  userfaultfd 323 282
kexec_load 246 104  kexec_file_load 320 294  init_module 175 105  finit_module 313 273
delete_module 176 106  reboot 169 142  swapon 167 224  swapoff 168 225  acct 163 89
quotactl 179 60  syslog 103 116  lookup_dcookie 212 18  vhangup 153 58  open_by_handle_at 304 265
name_to_handle_at 303 264  settimeofday 164 170  clock_settime 227 112  adjtimex 159 171
clock_adjtime 305 266  sethostname 170 161  setdomainname 171 162  personality 135 92
nfsservctl 180 42  migrate_pages 256 238  move_pages 279 239  iopl 172 -  ioperm 173 -
uselib 134 -  socket 41 198  socketpair 53 199  clone 56 220  fcntl 72 25  memfd_create 319 279
shmget 29 194  shmat 30 196  shmctl 31 195  msgget 68 186  msgsnd 69 189  msgrcv 70 188
msgctl 71 187  semget 64 190  semop 65 193  semctl 66 191  semtimedop 220 192  setxattr 188 5
lsetxattr 189 6  fsetxattr 190 7  removexattr 197 14  lremovexattr 198 15  fremovexattr 199 16
mq_open 240 180  mq_unlink 241 181  mq_timedsend 242 182  mq_timedreceive 243 183
mq_notify 244 184  mq_getsetattr 245 185  inotify_init 253 -  inotify_init1 294 26
inotify_add_watch 254 27  fanotify_init 300 262  fanotify_mark 301 263  mbind 237 235
set_mempolicy 238 237  modify_ldt 154 -  vmsplice 278 75  io_setup 206 0  io_destroy 207 1
io_getevents 208 4  io_submit 209 2  io_cancel 210 3  io_pgetevents 333 292  sync 162 81
syncfs 306 267  fadvise64 221 223  madvise 28 233  seccomp 317 277  prctl 157 167
setrlimit 160 164  prlimit64 302 261
io_uring_setup 425  io_uring_enter 426  io_uring_register 427  open_tree 428  move_mount 429
fsopen 430  fsconfig 431  fsmount 432  fspick 433  clone3 435  pidfd_getfd 438
process_madvise 440  mount_setattr 442  quotactl_fd 443  memfd_secret 447
set_mempolicy_home_node 450  fchmodat2 452  futex_wake 454  futex_wait 455  futex_requeue 456
getxattrat 464  listxattrat 465  file_getattr 468
"""
# machine name -> (AUDIT_ARCH_* value, column of _NUMBERS, x32 bit or 0)
_ARCHES = {"x86_64": (0xC000003E, 1, 0x40000000), "aarch64": (0xC00000B7, 2, 0)}


class SeccompUnsupported(RuntimeError):
    """No filter is known for this machine's architecture."""


def syscall_numbers(machine: str | None = None) -> dict[str, int]:
    """The syscall numbers of `machine` (default: this one) for the names the filters use."""
    column = _arch(machine)[1]
    rows = (entry.split() for entry in re.split(r"  +|\n", _NUMBERS.strip()))
    found = {name: numbers[min(column, len(numbers)) - 1] for name, *numbers in rows}
    return {name: int(number) for name, number in found.items() if number != "-"}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _ret_errno(err: int) -> bytes:
    return _insn(_RET_K, _RET_ERRNO | err)


def _arch(machine: str | None) -> tuple[int, int, int]:
    machine = machine or platform.machine()
    if machine not in _ARCHES or sys.byteorder != "little":
        raise SeccompUnsupported(
            f"no seccomp filter for the {machine} architecture (have: {', '.join(_ARCHES)})"
        )
    return _ARCHES[machine]


def _prologue(audit_arch: int) -> list[bytes]:
    return [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ_K, audit_arch, jt=1),
        _insn(_RET_K, _RET_KILL_PROCESS),
        _insn(_LD_W_ABS, _NR),
    ]


def _refuse(names: tuple[str, ...], table: dict[str, int], err: int = errno.EPERM) -> list[bytes]:
    return [
        insn
        for name in names
        if name in table
        for insn in (_insn(_JEQ_K, table[name], jf=1), _ret_errno(err))
    ]


@lru_cache(maxsize=4)
def filter_program(machine: str | None = None, allow_mount: bool = False) -> bytes:
    """The BPF program (``struct sock_filter[]``, little endian) for `machine`; `allow_mount`
    leaves ``mount`` allowed (the filter bwrap loads, before the init stacks `last_filter`).

    Raises SeccompUnsupported on an architecture without a syscall table here or a big-endian
    host: the sandbox then refuses to run rather than run without the filter.
    """
    audit_arch, _, x32_bit = _arch(machine)
    table = syscall_numbers(machine)
    prog = _prologue(audit_arch)
    if x32_bit:
        prog += [_insn(_JGE_K, x32_bit, jf=1), _ret_errno(errno.EPERM)]
    prog += _refuse(tuple(n for n in policy.DENIED if not (allow_mount and n == "mount")), table)
    for name in policy.NEWER_ALLOWED:
        prog += [_insn(_JEQ_K, table[name], jf=1), _insn(_RET_K, _RET_ALLOW)]
    prog += [_insn(_JGE_K, policy.LAST_CLASSIC + 1, jf=1), _ret_errno(errno.ENOSYS)]
    prog += _refuse(("clone3",), table, errno.ENOSYS)
    for name in ("socket", "socketpair"):  # the address family is the first argument
        prog += _by_arg(table[name], 0, (policy.AF_UNIX,), errno.EAFNOSUPPORT, only=True)
    prog += _by_arg(table["fcntl"], 1, policy.FCNTL_DENIED)
    prog += _by_arg(table["madvise"], 2, policy.MADVISE_DENIED)
    prog += [
        _insn(_JEQ_K, table["clone"], jf=3),
        _insn(_LD_W_ABS, _ARG0_LOW),
        _insn(_JSET_K, policy.CLONE_NEW_FLAGS, jf=1),
        _ret_errno(errno.EPERM),
    ]
    prog.append(_insn(_RET_K, _RET_ALLOW))
    return b"".join(prog)


@lru_cache(maxsize=4)
def last_filter(machine: str | None = None) -> bytes:
    """The filter the init stacks last (`policy.LAST_DENIED`): it refuses (EPERM) ``mount``,
    ``seccomp()`` and ``prctl(PR_SET_SECCOMP)``, so no process of the sandbox can stack a filter,
    and setting RLIMIT_CORE (``setrlimit``, and ``prlimit64`` with a new limit; reading it is
    allowed), which the init set to `policy.CORE_LIMIT` first. It also kills other ABIs."""
    audit_arch, _, _ = _arch(machine)
    table = syscall_numbers(machine)
    prog = _prologue(audit_arch) + _refuse(policy.LAST_DENIED, table)
    prog += _by_arg(table["setrlimit"], 0, (RLIMIT_CORE,))
    # prlimit64(pid, resource, new, old): refused when resource is RLIMIT_CORE and new is not NULL
    body = [
        _insn(_LD_W_ABS, _ARG0_LOW + 8),
        _insn(_JEQ_K, RLIMIT_CORE, jf=5),
        _insn(_LD_W_ABS, _ARG0_LOW + 16),
        _insn(_JEQ_K, 0, jf=2),
        _insn(_LD_W_ABS, _ARG0_LOW + 20),
        _insn(_JEQ_K, 0, jt=1),
        _ret_errno(errno.EPERM),
        _insn(_RET_K, _RET_ALLOW),
    ]
    prog += [_insn(_JEQ_K, table["prlimit64"], jf=len(body))] + body
    prog += _by_arg(table["prctl"], 0, (PR_SET_SECCOMP,))
    prog.append(_insn(_RET_K, _RET_ALLOW))
    return b"".join(prog)


def _by_arg(
    nr: int, arg: int, values: tuple[int, ...], err: int = errno.EPERM, only: bool = False
) -> list[bytes]:
    """If the syscall is `nr`: refuse it with `err` when the low 32 bits of argument `arg` are one
    of `values` (`only`: unless they are one of them), allow it otherwise (every branch returns:
    the accumulator no longer holds nr)."""
    allow, refuse = _insn(_RET_K, _RET_ALLOW), _ret_errno(err)
    body = [_insn(_LD_W_ABS, _ARG0_LOW + 8 * arg)]
    for value in values:
        body += [_insn(_JEQ_K, value, jf=1), allow if only else refuse]
    body.append(refuse if only else allow)
    return [_insn(_JEQ_K, nr, jf=len(body))] + body
