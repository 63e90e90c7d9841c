"""The one-line errors of a training run: a full disk, a checkpoint that cannot be loaded."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from numloss.config import ConfigError


class DiskFullError(OSError):
    """A save ran out of space (ENOSPC, a quota, RLIMIT_FSIZE); the message names the path."""


_DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
# torch.save reports a short write as "enforce fail ... file write failed", "... unexpected pos
# N vs M" (the bytes it meant to have written) or, when the write that fails is its stream's
# first, C++'s "basic_ios::clear: iostream error", with the errno lost on the way
_DISK_FULL_TEXT = (
    "No space left on device",
    "File too large",
    "Disk quota exceeded",
    "file write failed",
    "StorageFull",
    "FileTooLarge",
    "unexpected pos",
    "PytorchStreamWriter failed",
    "iostream error",
)


def disk_full_error(error: BaseException, where: Path) -> DiskFullError | None:
    """A DiskFullError for `error` (or anything in its chain) if it is a full disk or a file-size
    limit: OSError ENOSPC/EFBIG/EDQUOT, torch.save's "enforce fail ... file write failed",
    safetensors' SafetensorError; None for any other error. `where`: what was being written."""
    chain = [error]
    while (cause := chain[-1].__cause__ or chain[-1].__context__) and cause not in chain:
        chain.append(cause)
    full = next((e for e in chain if isinstance(e, OSError) and e.errno in _DISK_FULL_ERRNOS), None)
    text = " ".join(str(item) for item in chain)
    if full is not None:
        path, reason = Path(full.filename) if full.filename else where, os.strerror(full.errno)
    elif any(marker in text for marker in _DISK_FULL_TEXT):
        fallback = "a write failed (no space, or a file-size limit)"
        path, reason = where, next((m for m in _DISK_FULL_TEXT[:3] if m in text), fallback)
    else:
        return None
    return DiskFullError(
        f"disk full at {path}: {reason}; free space (or raise the file-size limit)"
    )


def first_line(error: BaseException) -> str:
    """`Type: first line of the message`, for an error quoted inside a one-line refusal."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def train_error(
    error: Exception,
    output_dir: Path,
    trainer: Any,
    checkpoint: Path | None,
    saving: Path | None = None,
) -> Exception:
    """The one-line error for what went wrong inside training or the final save, or `error`
    itself when it is not one numloss can explain (a bug: its traceback is wanted)."""
    if isinstance(error, (ConfigError, DiskFullError)):
        return error
    where = saving if saving is not None else output_dir / f"checkpoint-{trainer.state.global_step}"
    if (full := disk_full_error(error, where)) is not None:
        return full
    # the objective's check_finite: the run diverged (its fix in the text)
    if isinstance(error, FloatingPointError):
        return ConfigError(
            f"training stopped at step {trainer.state.global_step}: {first_line(error)}"
        )
    text = str(error)
    if (
        checkpoint is not None
        and isinstance(error, RuntimeError)
        and ("size mismatch" in text or "state_dict" in text)
    ):
        detail = next(
            (line.strip() for line in text.splitlines() if "size mismatch" in line),
            first_line(error),
        )
        return ConfigError(
            f"train.resume: {checkpoint} was saved from a model of another shape ({detail}); resume"
            " with the model settings it was trained with"
        )
    if checkpoint is not None and (
        isinstance(error, (ValueError, KeyError, OSError, EOFError))
        or type(error).__name__ in ("SafetensorError", "UnpicklingError", "JSONDecodeError")
    ):
        return ConfigError(f"train.resume: {checkpoint} cannot be loaded: {first_line(error)}")
    return error
