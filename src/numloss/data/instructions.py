"""Training records from files and Hugging Face datasets, in three layouts.

Instruction records (`instruction`, optional `input`, `output`; MathInstruct, fields remappable),
prompt/completion records (strings, or TRL's conversational lists), and conversations
(`messages`; the assistant turns are learnt). A .json file holds a list, a .jsonl one record per
line; another path is opened with `datasets`, and anything else is a hub dataset name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from numloss.checks import shown
from numloss.data.examples import Conversation, Example, PromptCompletion, TrainingRecord
from numloss.textio import DuplicateKeyError, read_utf8, unique_keys


class DataError(ValueError):
    """The data cannot be read as training records; the message says what to fix."""


FORMATS_HINT = (
    "a record needs instruction/output (MathInstruct), prompt/completion, or messages (a list of"
    " {role, content}); set data.instruction_field / data.output_field if the columns are named"
    " differently"
)


def _messages(value: Any, source: str, i: int, key: str) -> list[dict[str, str]]:
    """`value` checked as a list of {role, content} string mappings."""
    if not isinstance(value, (list, tuple)) or not value:
        raise DataError(
            f"{source}: record {i}: {key!r} must be a non-empty list of {{role, content}} messages"
        )
    messages, keys = [], ("role", "content")
    for j, message in enumerate(value):
        if not isinstance(message, Mapping) or not all(
            isinstance(message.get(k), str) for k in keys
        ):
            raise DataError(
                f"{source}: record {i}: {key}[{j}] is not a {{role, content}} message with string"
                f" values: {message!r}"
            )
        messages.append({"role": message["role"], "content": message["content"]})
    return messages


def _text(value: Any, source: str, i: int, key: str, learnt: bool = False) -> str:
    """A record's text field: a string, or an integer (written exactly); anything else (a list, a
    mapping, a float whose digits JSON may already have changed, a bool) is a DataError. The part a
    record teaches (`learnt`) may not be empty or only whitespace: the model would learn to answer
    with nothing, without a word."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        hint = "write the number as a string" if isinstance(value, float) else "it must be a string"
        raise DataError(f"{source}: record {i}: {key!r} is {shown(value)}; {hint}")
    if learnt and not value.strip():
        raise DataError(
            f"{source}: record {i}: {key!r} is {'empty' if not value else 'only whitespace'}, so"
            " there is nothing to learn; fill it in or drop the record"
        )
    return value


def _training_record(
    record: Mapping[str, Any], source: str, i: int, fields: tuple[str, str, str]
) -> TrainingRecord:
    """One record in whichever of the three layouts it has (instruction fields first); `fields`:
    the names of the instruction, input and output fields."""
    instruction_field, input_field, output_field = fields
    if not isinstance(record, Mapping):
        raise DataError(
            f"{source}: record {i} is a {type(record).__name__}, expected an object; {FORMATS_HINT}"
        )
    # an output without another layout's key is an instruction record short of its instruction
    alone = record.get(output_field) is not None and {"messages", "completion"}.isdisjoint(record)
    if record.get(instruction_field) is not None or alone:
        missing = [f for f in (instruction_field, output_field) if record.get(f) is None]
        if missing:
            raise DataError(
                f"{source}: record {i} has no {' or '.join(map(repr, missing))} (its keys: "
                f"{', '.join(map(repr, record))}); set data.instruction_field / data.output_field "
                "if the columns are named differently"
            )
        extra = record.get(input_field)
        return Example(
            instruction=_text(record[instruction_field], source, i, instruction_field),
            output=_text(record[output_field], source, i, output_field, learnt=True),
            input="" if extra is None else _text(extra, source, i, input_field),
        )
    if record.get("messages") is not None:
        messages = _messages(record["messages"], source, i, "messages")
        if not any(m["role"] == "assistant" for m in messages):
            raise DataError(f"{source}: record {i}: no assistant message, so nothing to learn")
        return Conversation.from_messages(messages)
    if record.get("prompt") is not None and record.get("completion") is not None:
        prompt, completion = record["prompt"], record["completion"]
        if isinstance(prompt, str) and isinstance(completion, str):
            return PromptCompletion(
                prompt=prompt, completion=_text(completion, source, i, "completion", learnt=True)
            )
        if isinstance(prompt, (list, tuple)) and isinstance(completion, (list, tuple)):
            before = _messages(prompt, source, i, "prompt")
            after = _messages(completion, source, i, "completion")
            return Conversation.from_messages(
                before + after, [False] * len(before) + [True] * len(after)
            )
        raise DataError(
            f"{source}: record {i}: prompt and completion must both be strings or both lists of"
            f" messages, got {type(prompt).__name__} and {type(completion).__name__}"
        )
    raise DataError(
        f"{source}: record {i} has none of the known layouts (its keys:"
        f" {', '.join(map(repr, record))}); {FORMATS_HINT}"
    )


def records_to_examples(
    records: Iterable[Mapping[str, Any]],
    source: str,
    instruction_field: str = "instruction",
    input_field: str = "input",
    output_field: str = "output",
) -> list[TrainingRecord]:
    """Training records from mapping records; one of no known layout is an error naming it."""
    fields = (instruction_field, input_field, output_field)
    return [_training_record(r, source, i, fields) for i, r in enumerate(records)]


def _parse(text: str, path: Path, line: int | None = None) -> Any:
    """`text` as JSON: line `line` of a .jsonl file `path`, or (None) the whole of a .json one;
    invalid JSON or a key given twice in an object is a DataError naming the file and line."""
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as error:
        hint = "" if line else "; use .jsonl for one record per line"
        where = f"{path}:{line or error.lineno}"
        raise DataError(f"{where}: not valid JSON ({error.msg}){hint}") from None
    except DuplicateKeyError as error:
        raise DataError(
            f"{path}:{line}: {error}" if line else f"{path}: a record's {error}"
        ) from None


def read_json_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Records of a .json (a list, or {"data": [...]}) or .jsonl file, with line numbers in
    errors."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file {str(path)!r} does not exist")
    text = read_utf8(path, DataError)
    if path.suffix == ".jsonl":
        lines = enumerate(text.splitlines(), start=1)
        return [_parse(line, path, number) for number, line in lines if line.strip()]
    data = _parse(text, path)
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of records, got a {type(data).__name__}")
    return data


#: a data file's suffix -> the `datasets` builder that reads it
_BUILDERS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}


def load_hf_records(name_or_path: str, split: str = "train", subset: str | None = None) -> Any:
    """A `datasets.Dataset` split from a hub name or a local path (offline, an uncached name is an
    error saying so)."""
    import datasets

    path = Path(name_or_path).expanduser()
    try:
        saved = ("dataset_info.json", "state.json", "dataset_dict.json")  # save_to_disk's files
        if path.is_dir() and any((path / name).is_file() for name in saved):
            loaded = datasets.load_from_disk(str(path))
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise DataError(f"{path}: no split {split!r}; it has {', '.join(loaded)}")
                loaded = loaded[split]
            return loaded
        if path.is_file():
            builder = _BUILDERS.get(path.suffix)
            if builder is None:
                raise DataError(
                    f"{path}: unknown data file type {path.suffix!r} (use .json, .jsonl, .parquet"
                    " or .csv)"
                )
            if builder != "parquet":  # a named line, not a decoder traceback from inside datasets
                read_utf8(path, DataError)
            return datasets.load_dataset(builder, data_files=str(path), split=split)
        return datasets.load_dataset(
            str(path) if path.exists() else name_or_path, subset, split=split
        )
    except DataError:
        raise
    except (ValueError, OSError) as error:  # a connection error is an OSError
        offline = "1" in (os.environ.get("HF_DATASETS_OFFLINE"), os.environ.get("HF_HUB_OFFLINE"))
        hint = (
            " Running offline (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE=1): download it once where the"
            " hub is reachable (`datasets.load_dataset(name).save_to_disk(DIR)`) and set"
            " data.source to DIR, or point data.source at a local JSON/JSONL file."
        )
        raise DataError(
            f"cannot load dataset {name_or_path!r} (split {split!r}): {error}."
            + (hint if offline else "")
        ) from error
