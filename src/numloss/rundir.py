"""An exclusive lock on a run folder, held for the whole of a `numloss train` or `numloss compare`.

`hold_run_dir(folder, command)` takes a `flock` on `folder/.numloss.lock` and writes who holds it,
so a second process stops at once naming the holder. The kernel drops a `flock` when its holder
dies, so a lock file left by a dead process is stale by construction and taken over. On a file
system without `flock` it refuses to start unless `NUMLOSS_NO_RUN_LOCK=1`.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from numloss.textio import read_json_object

logger = logging.getLogger(__name__)

#: the lock file's name inside the run folder
LOCK_NAME = ".numloss.lock"


class RunDirBusy(RuntimeError):
    """Another live process holds the run folder's lock; the message names it."""


class RunDirLockError(RuntimeError):
    """The lock could not be taken for another reason (no `flock` on this file system, no
    access)."""


def _holder_text(holder: dict[str, Any]) -> str:
    if not holder:
        return "another process (its lock file names no holder yet)"
    since = holder.get("started")
    when = "?"
    if isinstance(since, (int, float)):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
    return (
        f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} ({holder.get('command', '?')},"
        f" since {when})"
    )


#: what a non-blocking flock says when another open file holds the lock
_HELD_ELSEWHERE = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


def _busy(folder: Path) -> RunDirBusy:
    return RunDirBusy(
        f"{str(folder)!r} is in use by {_holder_text(read_holder(folder))}: wait for it to finish, "
        "or choose another output folder"
    )


def read_holder(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """What `folder`'s lock file says about its (last) holder; {} when there is none or it is
    unreadable."""
    return read_json_object(Path(folder) / LOCK_NAME) or {}


def _write_holder(fd: int, holder: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode(), 0)


@contextmanager
def hold_run_dir(folder: str | os.PathLike[str], command: str) -> Iterator[Path]:
    """Hold an exclusive lock on `folder` (created when missing) for the `with` body; RunDirBusy
    names a live holder, RunDirLockError a folder or file system that cannot be locked. A dead
    holder's lock is taken over with a warning; the file stays to say who ran last.
    """
    path = Path(folder)
    try:
        path.mkdir(parents=True, exist_ok=True)
        # not through a symlink: the holder's record is written over the lock file's contents
        fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise RunDirLockError(
                f"cannot lock {str(path)!r}: its lock file {LOCK_NAME} is a symbolic link (numloss"
                " writes the holder into it, and would write through the link); remove the link"
            ) from None
        raise RunDirLockError(f"cannot lock {str(path)!r}: {error.strerror or error}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno in _HELD_ELSEWHERE:
                raise _busy(path) from None
            if os.environ.get("NUMLOSS_NO_RUN_LOCK") == "1":
                logger.warning(
                    f"cannot lock {path} ({error}); running without a lock (NUMLOSS_NO_RUN_LOCK=1)"
                )
            else:
                raise RunDirLockError(
                    f"cannot lock {str(path)!r}: this file system refuses flock"
                    f" ({error.strerror or error}); use a local folder, or set"
                    " NUMLOSS_NO_RUN_LOCK=1 to run unprotected"
                ) from None
        previous = read_holder(path)
        if previous.get("pid") and not previous.get("released"):
            holder = _holder_text(previous)
            logger.warning(f"{path}: taking over the lock of {holder}, which is no longer running")
        me = dict(pid=os.getpid(), host=socket.gethostname(), command=command, started=time.time())
        _write_holder(fd, me)
        try:
            yield path
        finally:
            _write_holder(fd, {**me, "released": time.time()})
    finally:
        os.close(fd)  # closing the descriptor drops the flock


def check_not_busy(folder: str | os.PathLike[str]) -> None:
    """Raise RunDirBusy, naming the holder, when a live process holds `folder`'s lock; creates
    and changes nothing (for dry runs: the lock is only probed, and released at once)."""
    path = Path(folder) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # no lock file: nobody holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in _HELD_ELSEWHERE:
            raise _busy(Path(folder)) from None
    finally:
        os.close(fd)
