"""Files a user keeps are written whole or not at all.

`write_bytes_atomic` writes a temporary file in the same folder, fsyncs it, renames it over the
target and fsyncs the folder: a failure or kill leaves the previous file as it was (a kill at
most a `.NAME.PID.tmp`). Every report, log, record and config numloss writes goes through here.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

#: what fsync says when the data did not reach the disk (as opposed to a folder it cannot fsync)
LOST_WRITE_ERRNOS = frozenset({errno.EIO, errno.ENOSPC, errno.EDQUOT})


def fsync_dir(folder: Path) -> None:
    """fsync a folder so a rename in it survives a power cut; a no-op where folders cannot be
    opened or fsynced, an OSError naming the folder where the write-back failed (EIO, ENOSPC,
    EDQUOT: the rename may not survive a crash, so the caller must not report it saved)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno in LOST_WRITE_ERRNOS:
            raise OSError(error.errno, error.strerror, str(folder)) from None
        # some file systems refuse fsync on a folder (EINVAL, ENOTSUP); the rename itself is still
        # atomic
    finally:
        os.close(fd)


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Replace `path` (its folder must exist) with `data`, or on any error leave it untouched and
    remove the temporary."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        # the rename would fail naming the temporary; the folder in the way is what to fix
        raise IsADirectoryError(errno.EISDIR, "a folder is in the way of this file", str(path))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # per process: never shared
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        try:
            tmp.unlink()
        except OSError:
            pass  # never written, or already renamed
        if isinstance(error, OSError) and error.errno and error.filename in (None, str(tmp)):
            # a failed write or fsync names no file, a failed rename the temporary: name the file
            # being written, which is what the user knows
            raise OSError(error.errno, error.strerror, str(path)) from None
        raise
    fsync_dir(path.parent)


def write_text_atomic(path: str | Path, text: str) -> None:
    """`write_bytes_atomic` of `text` as UTF-8."""
    write_bytes_atomic(path, text.encode("utf-8"))


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


def write_json_atomic(
    path: str | Path, payload: Any, compact: bool = False, allow_nan: bool = True
) -> None:
    """`payload` as JSON at `path`, atomically; `compact`: no whitespace and sorted keys (records
    kept in git: small, stable diffs); `allow_nan` False refuses NaN/inf (strict JSON). A payload
    that cannot be serialised raises before anything is written."""
    layout: dict[str, Any] = (
        {"sort_keys": True, "separators": (",", ":")} if compact else {"indent": 1}
    )
    text = json.dumps(payload, default=_json_default, allow_nan=allow_nan, **layout)
    write_text_atomic(path, text + "\n")
