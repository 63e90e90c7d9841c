"""The per-item results file: JSON lines, appended batch by batch, read back to resume.

Each line is one item under one protocol (`ItemResult.to_json()`), keyed by (model, benchmark,
protocol, id, settings hash) and carrying `model_identity` (`model_identity`), so another model
saved at the same path is not resumed from. A batch is one write, flushed and fsynced: a kill
loses at most the batch in flight, and its torn last line is ignored and cut off before the next
append; any other bad line is an error naming the file and line. docs/evaluation.md, "Resuming
and re-scoring".
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from numloss.atomic import write_text_atomic
from numloss.evaluate.benchmarks import BenchmarkError
from numloss.identity import json_sha256
from numloss.models.load import model_folder
from numloss.textio import DuplicateKeyError, jsonable, unique_keys

KEY_FIELDS = ("model", "benchmark", "protocol", "id", "settings")

# the type of every field numloss writes (None: may be null); a record read back must match
_STR, _INT, _NUM, _NONE = (str,), (int,), (int, float), (type(None),)
_TEXT_FIELDS = (
    "model benchmark protocol settings kind gold style output prediction program_status"
    " program_stdout program_stdout_raw fallback_program_status question isolation decided_by"
)
RESULT_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(_TEXT_FIELDS.split(), _STR),
    **dict.fromkeys(("fallback_output", "model_identity", "model_sha256"), _STR + _NONE),
    **dict.fromkeys(("seed", "set_size"), _INT + _NONE),
    **dict.fromkeys(("correct", "needs_fallback", "cut_at_stop"), (bool,)),
    "id": _STR + _INT,
    "value": _NUM + _NONE,
    "generation": (dict,),
}
RESULT_REQUIRED = (*KEY_FIELDS, "kind", "gold", "style", "output", "prediction", "correct")
_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    dict: "an object",
    type(None): "null",
}


def _type_error(record: Mapping[str, Any], key: str, types: tuple[type, ...]) -> str | None:
    value = record[key]
    # bool is an int to Python, not to a reader
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
        return None
    wanted = " or ".join(
        dict.fromkeys(_TYPE_NAMES[t] for t in types if t is not int or float not in types)
    )
    return f"field {key!r} must be {wanted}, got {json.dumps(value, ensure_ascii=False)[:60]}"


def check_result_record(record: Mapping[str, Any], where: str) -> None:
    """Raise BenchmarkError naming `where` and the field when a results-file record lacks a field
    resuming needs or holds one of the wrong type (a hand edit, another tool's file)."""
    for key in RESULT_REQUIRED:
        if key not in record:
            raise BenchmarkError(
                f"{where}: missing field {key!r}; this is not a numloss results record (fix or"
                " delete the line)"
            )
    for key, types in RESULT_TYPES.items():
        if key in record and (problem := _type_error(record, key, types)):
            raise BenchmarkError(f"{where}: {problem} (fix or delete the line)")
    if record["kind"] not in ("number", "choice", "math"):
        raise BenchmarkError(
            f"{where}: field 'kind' must be 'number', 'choice' or 'math', got {record['kind']!r}"
        )


def check_output_record(record: Mapping[str, Any], where: str) -> None:
    """Raise BenchmarkError naming `where` and the field when a record to score (`score_outputs`)
    lacks benchmark, id or output, or holds a field of the wrong type."""
    needs = "each record needs benchmark, id, output[, fallback_output]"
    for key in ("benchmark", "id", "output"):
        if key not in record or record[key] is None:
            raise BenchmarkError(f"{where}: missing field {key!r} ({needs})")
    for key in ("benchmark", "id", "output", "fallback_output", "question", "seed", "set_size"):
        # None is missing for the first three, refused above
        if key in record and (problem := _type_error(record, key, RESULT_TYPES[key] + _NONE)):
            raise BenchmarkError(f"{where}: {problem} ({needs})")


def settings_key(settings: dict[str, Any]) -> str:
    """A short stable hash of the generation settings (12 hex digits of `json_sha256`)."""
    return json_sha256(settings)[7:19]


def torn_record(tail: bytes) -> bool:
    """True when `tail`, an unterminated last line, is what a kill mid-append leaves: the start
    of a JSON record, or the zeros a crash leaves in a file's unwritten end. Anything else (a
    file that is not numloss's, say, reached through a symlink) is never cut as a torn write."""
    head = tail.lstrip(b" \t\r")
    return not head or head.startswith(b"{") or not head.strip(b"\0")


def read_lines(
    path: Path, check: Callable[[Mapping[str, Any], str], None] | None = None
) -> list[dict[str, Any]]:
    """The records of a JSONL file (none when it does not exist); a torn last line (`torn_record`)
    is skipped, a bad line elsewhere (not JSON, not UTF-8, not an object, or refused by
    `check(record, "FILE:LINE")`) is an error naming the file and line, as is a folder."""
    if not path.exists():
        return []
    try:
        data = path.read_bytes()
    except OSError as error:
        raise BenchmarkError(f"{path}: cannot read it ({error.strerror or error})") from None
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")  # a UTF-8 byte-order mark is no record
    torn_last = not data.endswith(b"\n") and torn_record(lines[-1])
    records = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"), object_pairs_hook=unique_keys)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            if torn_last and number == len(lines):
                break  # a write cut short by a kill (maybe mid-character): its item is redone
            what = (
                f"byte 0x{raw[error.start]:02x} at column {error.start + 1} is not UTF-8"
                if isinstance(error, UnicodeDecodeError)
                else f"not a JSON record ({error.msg})"
            )
            raise BenchmarkError(f"{path}:{number}: {what}; fix or delete that line") from None
        except DuplicateKeyError as error:
            raise BenchmarkError(
                f"{path}:{number}: field {error.key!r} is given twice (JSON keeps the last "
                "silently); fix or delete that line"
            ) from None
        if not isinstance(record, dict):
            raise BenchmarkError(f"{path}:{number}: expected a JSON object per line")
        if check is not None:
            check(record, f"{path}:{number}")
        records.append(record)
    return records


class ResultsFile:
    """Append-only per-item results (module doc)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def records(self) -> list[dict[str, Any]]:
        """Every record, each checked by `check_result_record`."""
        return read_lines(self.path, check_result_record)

    def _cut_torn_tail(self) -> None:
        if not self.path.is_file():
            return
        with open(self.path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(size - 1, 0))
            if f.read(1) in (b"", b"\n"):  # empty, or ends with its last record
                return
            f.seek(0)
            data = f.read()
            start = data.rfind(b"\n") + 1
            try:  # a whole record that only lacks its newline (a hand edit) is kept, and ended
                whole = isinstance(json.loads(data[start:].decode("utf-8")), dict)
            except ValueError:
                whole = False
            if whole:
                f.seek(size)
                f.write(b"\n")
            elif torn_record(data[start:]):
                f.truncate(start)  # torn by a kill mid-write: records() skipped it too
            else:  # records() refuses it first; never cut what numloss did not write
                raise BenchmarkError(
                    f"{self.path}: its last line is not a results record; fix or delete it"
                )

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Write `records` as one batch: one write, flushed and fsynced."""
        lines = _jsonl(records)
        if not lines:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._cut_torn_tail()
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(lines)
                f.flush()
                os.fsync(f.fileno())
        except OSError as error:  # a failed write or fsync names no file: the line should
            if error.filename is not None or error.errno is None:
                raise
            raise OSError(error.errno, error.strerror, str(self.path)) from None

    def drop(self, matches: Callable[[dict[str, Any]], bool]) -> tuple[int, Path | None]:
        """Rewrite the file without the records `matches` selects, after writing those records to
        `FILE.overwritten-<UTC time>` beside it; (how many were moved, that file or None)."""
        records = self.records()
        keep = [r for r in records if not matches(r)]
        if len(keep) == len(records):
            return 0, None
        moved = [r for r in records if matches(r)]
        aside = aside_path(self.path)
        write_text_atomic(aside, _jsonl(moved))
        write_text_atomic(self.path, _jsonl(keep))
        return len(moved), aside


def aside_path(path: Path) -> Path:
    """Where `--overwrite` keeps `path`: `PATH.overwritten-<UTC time>` (`-2`, `-3`, ... when that
    is taken)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside, n = path.with_name(f"{path.name}.overwritten-{stamp}"), 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.overwritten-{stamp}-{n}")
    return aside


def _jsonl(records: Iterable[dict[str, Any]]) -> str:
    """`records` as JSON lines (UTF-8 text, NaN and inf as null)."""
    return "".join(json.dumps(jsonable(r), ensure_ascii=False) + "\n" for r in records)


# ---------------------------------------------------------------- model identity


def folder_identity(folder: Path) -> str:
    """A hash of the (name, size, modification time) of every file directly in `folder` (symlinks
    followed, as in a Hugging Face cache snapshot): weights, config, tokenizer, adapter. Saving
    another model there changes it; so does copying the same files anew (new times)."""
    entries = []
    for child in sorted(folder.iterdir()):
        try:
            st = child.stat()
        except OSError:  # a dangling link
            continue
        if child.is_file():
            entries.append([child.name, st.st_size, st.st_mtime_ns])
    return "files:" + hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:16]


def parameters_identity(model: Any) -> str:
    """A hash of a torch model's parameters and buffers (names, dtypes, shapes and bytes)."""
    import torch

    digest = hashlib.blake2b(digest_size=8)
    for name, tensor in model.state_dict().items():
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return "params:" + digest.hexdigest()


def model_identity(model_or_path: Any) -> str | None:
    """What identifies the model behind the outputs, known before it loads: the model folder's
    files for a name or path, the weights for a `(model, tokenizer)` pair, a torch model or 'tiny'
    (built here: it is small), a generator's own `identity` attribute; None when nothing is known
    (a generator without one, a hub id not in the cache: then only the name keys the records)."""
    if isinstance(model_or_path, (str, Path)):
        if str(model_or_path) == "tiny":
            from numloss.models.load import load_model_and_tokenizer

            return parameters_identity(load_model_and_tokenizer("tiny")[0])
        folder = model_folder(str(model_or_path))
        return folder_identity(folder) if folder is not None and folder.is_dir() else None
    model = model_or_path[0] if isinstance(model_or_path, tuple) else model_or_path
    if hasattr(model, "state_dict"):
        return parameters_identity(model)
    identity = getattr(model_or_path, "identity", None)
    return str(identity) if identity is not None else None


def recorded_set(
    rows: Iterable[Mapping[str, Any]], benchmark: str, seed: int | None = None
) -> tuple[int | None, int | None]:
    """(seed, set size) that the records of a synthetic `benchmark` were generated with: the
    recorded seed, else `seed` (`--seed`), else None; several seeds among the records, or a `seed`
    other than the recorded one, is an error."""
    rows = [r for r in rows if r.get("benchmark") == benchmark]
    seeds = sorted({r["seed"] for r in rows if r.get("seed") is not None})
    if len(seeds) > 1:
        raise BenchmarkError(
            f"the records of {benchmark} come from {len(seeds)} seeds"
            f" ({', '.join(map(str, seeds))}); score each seed's records on its own"
        )
    if seeds and seed is not None and seed != seeds[0]:
        raise BenchmarkError(
            f"the records of {benchmark} were generated with seed {seeds[0]}, not --seed {seed}; "
            "omit --seed to score them on their own items"
        )
    sizes = [r["set_size"] for r in rows if r.get("set_size") is not None]
    return (seeds[0] if seeds else seed), (max(sizes) if sizes else None)
