"""`data.source` -> examples: `synthetic:NAME`, `gym:NAME` (reasoning-gym), a .json / .jsonl path
(instruction records), or any other path or name (a Hugging Face dataset; `hf:NAME` forces it).
"""

from __future__ import annotations

from pathlib import Path

from numloss.data import gym, synthetic
from numloss.data.examples import Example
from numloss.data.instructions import (
    DataError,
    load_hf_records,
    read_json_records,
    records_to_examples,
)


def source_kind(source: str) -> str:
    """'synthetic', 'gym', 'json' or 'hf': how `source` will be read (no I/O beyond a stat)."""
    if source.startswith(("synthetic:", "gym:", "hf:")):
        return source.partition(":")[0]
    return "json" if source.endswith((".json", ".jsonl")) else "hf"


def check_source(source: str) -> None:
    """Raise DataError now for a source that cannot work (unknown generator, missing file)."""
    kind, path = source_kind(source), Path(source).expanduser()
    name = source.partition(":")[2]  # of a synthetic: or gym: source
    sets = {"synthetic": (*synthetic.GENERATORS, "mix"), "gym": gym.GYM_SETS}.get(kind)
    if sets is not None and name not in sets:
        raise DataError(
            f"unknown {'synthetic' if kind == 'synthetic' else 'reasoning-gym'} set {name!r} in"
            f" data.source={source!r}; choose one of {', '.join(f'{kind}:{n}' for n in sets)}"
        )
    if kind == "json" and not path.is_file():
        raise DataError(f"data.source {source!r}: no such file")
    if kind == "hf" and source.startswith(("./", "../", "/", "~")) and not path.exists():
        raise DataError(f"data.source {source!r}: no such file or folder")


def load_examples(
    source: str,
    num_examples: int | None = None,
    seed: int = 0,
    split: str = "train",
    subset: str | None = None,
    instruction_field: str = "instruction",
    input_field: str = "input",
    output_field: str = "output",
) -> list[Example]:
    """The examples of `source`: `num_examples` generated (synthetic and gym sets, required
    there), or the first `num_examples` records of a file or dataset (None: all)."""
    check_source(source)
    kind = source_kind(source)
    if kind in ("synthetic", "gym"):
        if num_examples is None:
            raise DataError(f"data.source={source!r} is generated: set data.num_examples")
        module = synthetic if kind == "synthetic" else gym
        return module.generate(source.split(":", 1)[1], num_examples, seed)
    if kind == "json":
        records = read_json_records(Path(source).expanduser())[:num_examples]
    else:
        records = load_hf_records(source.removeprefix("hf:"), split=split, subset=subset)
        if num_examples is not None:
            records = records.select(range(min(num_examples, len(records))))
    fields = (instruction_field, input_field, output_field)
    examples = records_to_examples(records, source, *fields)
    if not examples:
        raise DataError(f"data.source {source!r} holds no examples")
    return examples
