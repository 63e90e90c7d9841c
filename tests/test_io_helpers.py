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


def test_read_utf8_raises_the_callers_error_naming_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"ok\nab\xe9c\n")
    with pytest.raises(_OwnError, match=r"a.jsonl:2: not UTF-8 text \(byte 0xe9 at column 3\)"):
        read_utf8(path, _OwnError)
    with pytest.raises(_OwnError, match="is a folder"):
        read_utf8(tmp_path, _OwnError)
    path.write_text("café\n", encoding="utf-8")
    assert read_utf8(path) == "café\n"


def test_jsonable_nulls_every_nan_and_inf_at_any_depth() -> None:
    value = {"a": math.nan, "b": [1.0, math.inf, (-math.inf, 2)], "c": {"d": math.nan, "e": "x"}}
    assert jsonable(value) == {"a": None, "b": [1.0, None, [None, 2]], "c": {"d": None, "e": "x"}}
    json.dumps(jsonable(value), allow_nan=False)


def test_load_yaml_refuses_a_repeated_key_and_bad_yaml_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("a: 1\nb: {c: 2}\na: 3\n")
    with pytest.raises(_OwnError, match=r"c.yaml: key 'a' is given twice \(lines 1 and 3\)"):
        load_yaml(path, _OwnError)
    path.write_text("a: [1\n")
    with pytest.raises(_OwnError, match="not valid YAML") as caught:
        load_yaml(path, _OwnError)
    assert "\n" not in str(caught.value)
    path.write_text("")
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
    model.write_bytes(whole[:4])
    assert "not a whole safetensors file" in structure_problem(tmp_path)
