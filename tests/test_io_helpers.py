"""The shared file helpers: one UTF-8 reader, one NaN-to-null walker, one YAML loader, and the
checkpoint check of a safetensors file (safetensors' own header validation)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from numloss.checkpoints import structure_problem
from numloss.textio import jsonable, read_utf8
from numloss.yamlio import load_yaml


class _OwnError(ValueError):
    pass


# an invalid start byte, a pair cut short, a lone continuation byte, an encoded surrogate
@pytest.mark.parametrize("bad", [b"\xe9", b"\xc3(", b"\x80", b"\xed\xa0\x80"])
def test_read_utf8_raises_the_callers_error_naming_file_line_and_column(bad: bytes, tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"ok\nab" + bad + b"c\n")
    with pytest.raises(_OwnError, match=rf"a.jsonl:2: not UTF-8 text \(byte 0x{bad[0]:x} at column 3\)"):
        read_utf8(path, _OwnError)
    with pytest.raises(_OwnError, match="is a folder"):
        read_utf8(tmp_path, _OwnError)
    path.write_text("café\n", encoding="utf-8")
    assert read_utf8(path) == "café\n"


def test_jsonable_nulls_every_nan_and_inf_at_any_depth() -> None:
    value = {"a": math.nan, "b": [1.0, math.inf, (-math.inf, 2)], "c": {"d": math.nan, "e": "x"}}
    assert jsonable(value) == {"a": None, "b": [1.0, None, [None, 2]], "c": {"d": None, "e": "x"}}
    json.dumps(jsonable(value), allow_nan=False)


#: a YAML file load_yaml refuses -> its one line (`empty`: "EMPTY"); the alias bomb would expand
#: to 9**9 nodes
YAML_FAULTS = {
    "a repeated key": ("a: 1\nb: {c: 2}\na: 3\n", r"c.yaml: key 'a' is given twice \(lines 1 and 3\)"),
    "a repeated nested key": ("e: {b: 8, b: 0}\n", r"c.yaml: key 'b' is given twice \(line 1\)"),
    "not YAML": ("a: [1\n", r"c.yaml:2: not valid YAML \(expected ',' or ']'"),
    "not UTF-8": (b"a: 1\n# caf\xe9\n", r"c.yaml:2: not UTF-8 text"),
    "nested 5,000 deep in brackets": ("[" * 5000 + "]" * 5000, r"c.yaml: line \d+: nested more than 100 levels deep"),
    "nested 5,000 deep in blocks": ("a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 5000)),
                                    r"c.yaml: line \d+: nested more than 100 levels deep"),
    "an alias bomb": ("a:\n  b:\n" + "".join(f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else 'x'}]\n" for i in range(9)),
                      r"c.yaml: line 4: YAML aliases \(\*l0\) are not accepted"),
    **{f"{what} where settings are wanted": (text, r"c.yaml: holds no settings \(empty, null or only comments\); EMPTY$")
       for what, text in (("empty", ""), ("null", "null\n"), ("only a comment", "# only a comment\n"))},
}


@pytest.mark.parametrize("fault", YAML_FAULTS)
def test_load_yaml_refuses_a_bad_file_in_one_line(fault: str, tmp_path: Path) -> None:
    text, message = YAML_FAULTS[fault]
    path = tmp_path / "c.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(_OwnError, match=message) as caught:
        load_yaml(path, _OwnError, empty="EMPTY")
    assert "\n" not in str(caught.value)
    path.write_text("# nothing\n")
    assert load_yaml(path) == {}


def test_a_damaged_safetensors_file_is_named(tmp_path: Path) -> None:
    model = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(64), "b": torch.ones(8)}, str(model))
    whole = model.read_bytes()
    assert structure_problem(tmp_path) is None
    model.write_bytes(whole[:-16])
    assert "model.safetensors: not a whole safetensors file" in structure_problem(tmp_path)
    model.write_bytes(whole[:8] + b"#" * 8 + whole[16:])
    assert "invalid JSON" in structure_problem(tmp_path)
