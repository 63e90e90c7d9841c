"""Instruction data from files and Hugging Face datasets (the MathInstruct layout).

Each record has `instruction`, an optional `input` and `output` (other columns are ignored; the
field names can be remapped). JSON files hold a list of records (MathInstruct's own
`MathInstruct.json`); JSONL files one record per line. Anything else that is a path is opened
with `datasets` (a folder written by `save_to_disk`, or a folder/file of parquet, csv, json);
anything that is not a path is a Hugging Face dataset name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from numloss.data.examples import Example


class DataError(ValueError):
    """The data cannot be read as instruction examples; the message says what to fix."""


def records_to_examples(
    records: Iterable[Mapping[str, Any]],
    source: str,
    instruction_field: str = "instruction",
    input_field: str = "input",
    output_field: str = "output",
) -> list[Example]:
    """Examples from mapping records; a record without the instruction or output is an error."""
    examples = []
    for i, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise DataError(f"{source}: record {i} is a {type(record).__name__}, expected an object with "
                            f"{instruction_field!r} and {output_field!r}")
        missing = [f for f in (instruction_field, output_field) if record.get(f) is None]
        if missing:
            raise DataError(
                f"{source}: record {i} has no {' or '.join(map(repr, missing))} (its keys: "
                f"{', '.join(map(repr, record))}); set data.instruction_field / data.output_field "
                "if the columns are named differently"
            )
        extra = record.get(input_field) or ""
        examples.append(
            Example(
                instruction=str(record[instruction_field]),
                output=str(record[output_field]),
                input=str(extra),
            )
        )
    return examples


def read_json_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Records of a .json (a list, or {"data": [...]}) or .jsonl file, with line numbers in errors."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file {str(path)!r} does not exist")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        records = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise DataError(f"{path}:{number}: not valid JSON ({error.msg})") from None
        return records
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise DataError(f"{path}:{error.lineno}: not valid JSON ({error.msg}); use .jsonl for one record per line") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of records, got a {type(data).__name__}")
    return data


def load_hf_records(name_or_path: str, split: str = "train", subset: str | None = None) -> Any:
    """A `datasets.Dataset` split from a hub name or a local path (folder or data file).

    Offline (HF_DATASETS_OFFLINE=1) a name that is not in the local cache is an error saying so.
    """
    import datasets

    path = Path(name_or_path).expanduser()
    try:
        if path.is_dir() and ((path / "dataset_info.json").is_file() or (path / "state.json").is_file()
                             or (path / "dataset_dict.json").is_file()):
            loaded = datasets.load_from_disk(str(path))
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise DataError(f"{path}: no split {split!r}; it has {', '.join(loaded)}")
                loaded = loaded[split]
            return loaded
        if path.is_file():
            builder = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}.get(path.suffix)
            if builder is None:
                raise DataError(f"{path}: unknown data file type {path.suffix!r} (use .json, .jsonl, .parquet or .csv)")
            return datasets.load_dataset(builder, data_files=str(path), split=split)
        return datasets.load_dataset(str(path) if path.exists() else name_or_path, subset, split=split)
    except DataError:
        raise
    except (FileNotFoundError, ConnectionError, ValueError, OSError) as error:
        offline = os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = (
            " Running offline (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE=1): download it once where the hub is "
            "reachable (`datasets.load_dataset(name).save_to_disk(DIR)`) and set data.source to DIR, or "
            "point data.source at a local JSON/JSONL file."
            if offline
            else ""
        )
        raise DataError(f"cannot load dataset {name_or_path!r} (split {split!r}): {error}.{hint}") from error
