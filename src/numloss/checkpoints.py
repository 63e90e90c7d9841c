"""What a `numloss train` run folder holds on disk, and how each part is known to be whole.

A checkpoint or `final/` counts only when its marker `numloss_checkpoint.json` (written last,
atomically) lists every file with its size and SHA-256 and they match. `final/` is written as
`final.partial/`, marked and renamed; `recover_final` finishes a rename a kill interrupted.
`run_entries` and `move_aside` find and set aside another run's files without deleting them.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import zipfile
from pathlib import Path
from typing import Any

from numloss.atomic import fsync_dir, write_json_atomic
from numloss.identity import sha256_uncached as sha256_file
from numloss.textio import read_json_object

#: written last into a checkpoint or final folder: its files, their sizes and SHA-256
MARKER = "numloss_checkpoint.json"
FINAL = "final"
FINAL_PARTIAL = "final.partial"
#: the record of a finished run inside final/
FINAL_RECORD = "numloss_train.json"
#: names numloss or the Trainer writes at the top of a run folder
RUN_FILES = (
    FINAL,
    FINAL_PARTIAL,
    *"""
    config.yaml inputs.json log.csv log_history.json tensorboard merged runs trainer_state.json
    training_args.bin model.safetensors adapter_model.safetensors pytorch_model.bin
    """.split(),
)
RUN_PATTERNS = ("checkpoint-*", "partial-checkpoint-*", "final-step-*", "config-before-*.yaml")


def write_marker(folder: Path, step: int) -> None:
    """Record every file of `folder` (size and SHA-256), atomically and last."""
    # not the marker, nor a temporary file a killed earlier marking left (numloss.atomic's names)
    files = {
        str(path.relative_to(folder)): {"size": path.stat().st_size, "sha256": sha256_file(path)}
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.name.startswith((MARKER, f".{MARKER}"))
    }
    write_json_atomic(folder / MARKER, {"step": step, "files": files})


def marker_step(folder: Path) -> int | None:
    """The step recorded in `folder`'s marker (None without a readable one)."""
    step = (read_json_object(folder / MARKER) or {}).get("step")
    return step if isinstance(step, int) else None


def folder_problem(folder: Path, *, require_marker: bool = True) -> str | None:
    """None when `folder` is whole, else what is wrong in a few words: every file its marker
    lists with that size and SHA-256 (sizes only for an older marker; no marker needed when not
    `require_marker`), and the structure `structure_problem` checks."""
    marker = folder / MARKER
    if not folder.is_dir():
        return "it is not a folder"
    if marker.is_file():
        files = (read_json_object(marker) or {}).get("files")
        if not isinstance(files, dict):
            return "its completion marker is unreadable"
        for name, recorded in files.items():
            path = folder / name
            if not path.is_file():
                return f"{name} is missing"
            size = recorded.get("size") if isinstance(recorded, dict) else recorded
            actual = path.stat().st_size
            if actual != size:
                return f"{name} is damaged ({actual} bytes, {size} when it was saved)"
            digest = recorded.get("sha256") if isinstance(recorded, dict) else None
            if digest is not None and sha256_file(path) != digest:
                return f"{name} changed since it was saved (its SHA-256 differs; same size)"
    elif require_marker:
        return "it has no completion marker (the run was killed while saving it)"
    return structure_problem(folder)


def structure_problem(folder: Path) -> str | None:
    """None when the files the Trainer reads back from `folder` parse; else the first problem."""
    state = folder / "trainer_state.json"
    if state.is_file():
        try:
            payload = json.loads(state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return "trainer_state.json is not valid JSON"
        if not isinstance(payload, dict) or not isinstance(payload.get("global_step"), int):
            return "trainer_state.json has no global_step"
    for path in sorted(folder.glob("*.safetensors")):
        if problem := _safetensors_problem(path):
            return f"{path.name}: {problem}"
    for path in sorted([*folder.glob("*.pt"), *folder.glob("*.bin")]):
        if path.stat().st_size == 0:
            return f"{path.name} is empty"
        if zipfile.is_zipfile(path):
            try:
                with zipfile.ZipFile(path) as archive:
                    archive.infolist()
            except (zipfile.BadZipFile, OSError):
                return f"{path.name} is not a whole zip archive"
        elif path.suffix == ".pt":
            return f"{path.name} is not a whole torch archive"
    return None


def _safetensors_problem(path: Path) -> str | None:
    """Why `path` is not a whole safetensors file (safetensors checks the header and that every
    tensor lies inside the file), or None."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt") as handle:
            handle.keys()
    except (SafetensorError, OSError) as error:
        return f"not a whole safetensors file ({error})"
    return None


def checkpoint_step(folder: Path) -> int:
    """N of `checkpoint-N` (-1 for another name)."""
    try:
        return int(folder.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def newest_intact_checkpoint(output_dir: Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """(the whole checkpoint with the highest step or None, [(newer damaged or partial one,
    why)])."""
    if not output_dir.is_dir():
        return None, []
    folders = [f for f in output_dir.glob("checkpoint-*") if f.is_dir() and checkpoint_step(f) >= 0]
    skipped: list[tuple[Path, str]] = []
    for folder in sorted(folders, key=checkpoint_step, reverse=True):
        problem = folder_problem(folder)
        if problem is None:
            return folder, skipped
        skipped.append((folder, problem))
    return None, skipped


def _unused(path: Path) -> Path:
    target, number = path, 1
    while target.exists():
        number += 1
        target = path.with_name(f"{path.name}.{number}")
    return target


def set_aside(folder: Path) -> Path:
    """Rename a damaged or partial checkpoint to partial-checkpoint-N (kept for inspection, out
    of the Trainer's way: it would otherwise be overwritten in place or rotated as if whole)."""
    target = _unused(folder.with_name(f"partial-{folder.name}"))
    folder.rename(target)
    return target


# -- final/ ----------------------------------------------------------------------------------------
def begin_final(output_dir: Path) -> Path:
    """The empty folder the final model is written into (an earlier, interrupted one is removed:
    a final.partial/ without its marker is a torn copy of weights the run still has)."""
    partial = output_dir / FINAL_PARTIAL
    if partial.exists():
        shutil.rmtree(partial)
    return partial


def commit_final(output_dir: Path, step: int) -> Path:
    """Mark final.partial/ complete and rename it to final/; an older final/ (a run continued
    past its end with --resume-changed) is kept as final-step-N/. Returns final/."""
    partial, final = output_dir / FINAL_PARTIAL, output_dir / FINAL
    write_marker(partial, step)
    if final.exists():
        old = marker_step(final)
        final.rename(_unused(output_dir / f"final-step-{old if old is not None else 'unknown'}"))
    os.replace(partial, final)
    fsync_dir(output_dir)
    return final


def recover_final(output_dir: Path) -> bool:
    """Finish a commit that a kill interrupted after its marker (final.partial/ whole, final/
    gone); True when it did. A torn final.partial/ is left for `begin_final` to remove."""
    partial, final = output_dir / FINAL_PARTIAL, output_dir / FINAL
    if final.exists() or not partial.is_dir() or folder_problem(partial) is not None:
        return False
    os.replace(partial, final)
    fsync_dir(output_dir)
    return True


def final_record(output_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(final/numloss_train.json's record, None) when final/ is whole; (None, why) otherwise;
    (None, None) when there is no final/."""
    final = output_dir / FINAL
    if not final.is_dir():
        return None, None
    # a final/ without a marker was written by an older numloss: its record is trusted as it is
    problem = folder_problem(final) if (final / MARKER).is_file() else None
    if problem is not None:
        return None, problem
    record = read_json_object(final / FINAL_RECORD)
    if record is None:
        return None, f"{FINAL_RECORD} is missing or unreadable"
    return record, None


# -- a run folder as a whole ----------------------------------------------------------------------
def run_entries(output_dir: Path) -> list[Path]:
    """What numloss or the Trainer wrote at the top of `output_dir` (others' files not included)."""
    if not output_dir.is_dir():
        return []
    found = {output_dir / name for name in RUN_FILES if (output_dir / name).exists()}
    for pattern in RUN_PATTERNS:
        found.update(output_dir.glob(pattern))
    return sorted(found)


def move_aside(output_dir: Path, entries: list[Path]) -> Path:
    """Move `entries` of `output_dir` into output_dir/overwritten-<UTC time>/ (nothing deleted)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = _unused(output_dir / f"overwritten-{stamp}")
    target.mkdir()
    for entry in entries:
        entry.rename(target / entry.name)
    fsync_dir(output_dir)
    return target
