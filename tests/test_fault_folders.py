"""Broken model folders: the API's loader refuses each in one line naming the file, what is wrong
and the fix (numloss.models.load.check_model_folder), and every command that loads a model (train,
compare, eval, demo) says that line before any training, each command given a share of the breaks.
In-process calls on a 1-layer, 16-wide model; one slow subprocess shows the real command prints no
traceback."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import transformers

from faultrun import ENV, ROOT, TINY, one_line
from numloss.models.load import ModelUnavailableError, load_model_and_tokenizer, load_tokenizer
from test_compare_faults import _mapping, _write
from test_eval_faults import save_tiny


def _set(name: str, data: bytes):
    return lambda d: (d / name).write_bytes(data)


def _remove(*names: str):
    return lambda d: [(d / n).unlink() for n in names if (d / n).exists()]


def _wider(d: Path) -> None:
    config = json.loads((d / "config.json").read_text(encoding="utf-8"))
    config["hidden_size"] *= 2
    (d / "config.json").write_text(json.dumps(config), encoding="utf-8")


#: broken folder -> (how it is broken, what the one line must say: the file and the fault)
BROKEN = {
    "truncated weights": (lambda d: _set("model.safetensors", (d / "model.safetensors").read_bytes()[:2000])(d), r"model\.safetensors is not a readable safetensors file"),
    "empty weights": (_set("model.safetensors", b""), r"model\.safetensors is not a readable safetensors file \(0 bytes"),
    "garbled weights": (_set("model.safetensors", b"\x07garbage" * 300), r"model\.safetensors is not a readable"),
    "no weights": (_remove("model.safetensors"), r"has no weights .*save_pretrained"),
    "wrong shapes": (_wider, r"model\.safetensors does not fit .*config\.json: tensor .* in the file but"),
    "config.json not JSON": (_set("config.json", b"{not json"), r"config\.json is not valid JSON: "),
    "tokenizer.json not JSON": (_set("tokenizer.json", b"{not json"), r"tokenizer\.json is not valid JSON"),
    "tokenizer_config.json not JSON": (_set("tokenizer_config.json", b"[1, 2"), r"tokenizer_config\.json is not valid JSON"),
    "no tokenizer": (_remove("tokenizer.json", "tokenizer_config.json"), r"has no tokenizer .*tokenizer\.save_pretrained"),
    "weights only": (lambda d: _remove(*(p.name for p in d.iterdir() if p.name != "model.safetensors"))(d), r"has no config\.json \(it holds model\.safetensors\)"),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """A good tiny model folder and each broken copy of it."""
    base = tmp_path_factory.mktemp("model folders")
    good = base / "good"
    save_tiny(good, num_layers=1, hidden_size=16, num_heads=2)
    made = {"good": good}
    for name, (breaker, _) in BROKEN.items():
        made[name] = base / name.replace(" ", "_")
        shutil.copytree(good, made[name])
        breaker(made[name])
    return made


def _argv(command: str, model: Path, tmp_path: Path) -> list[str]:
    if command == "train":
        return ["train", str(TINY), "--model.name", str(model), "--train.output_dir", str(tmp_path / "run")]
    if command == "eval":
        return ["eval", str(model), "--benchmarks", "gsm8k", "--data-dir", str(ROOT / "tests" / "fixtures" / "benchmarks"),
                "--limit", "1", "--out", str(tmp_path / "eval"), "--quiet"]
    mapping = _mapping(tmp_path / "grid")
    mapping["base"]["model"] = {"name": str(model)}
    return [command, _write(tmp_path / "compare.yaml", mapping), "--no-progress"]


@pytest.mark.parametrize(("command", "broken"), [(("train", "compare", "eval", "demo")[i % 4], broken)
                                                  for i, broken in enumerate(BROKEN)])
def test_a_broken_model_folder_is_one_line_in_every_command_and_the_api(broken, command, folders, tmp_path, capsys,
                                                                         monkeypatch):
    monkeypatch.setattr(transformers.Trainer, "train", lambda *a, **k: pytest.fail("a broken model folder reached training"))
    line = one_line(_argv(command, folders[broken], tmp_path), capsys)
    assert re.search(BROKEN[broken][1], line), line
    assert not (tmp_path / "run" / "checkpoint-1").exists()
    weights = ("truncated weights", "empty weights", "garbled weights", "no weights", "wrong shapes")
    for load in (load_model_and_tokenizer,) if broken in weights else (load_model_and_tokenizer, load_tokenizer):
        with pytest.raises(ModelUnavailableError, match=BROKEN[broken][1]) as caught:
            load(str(folders[broken]))
        assert "\n" not in str(caught.value)


@pytest.mark.slow  # a fresh interpreter importing torch and transformers: the table above covers the in-process path
def test_numloss_train_on_a_truncated_folder_prints_no_traceback(folders, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "numloss", *_argv("train", folders["truncated weights"], tmp_path)],
        capture_output=True, text=True, env=ENV, timeout=120,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert lines[-1].startswith("numloss train: model.name: ") and "model.safetensors" in lines[-1], done.stderr
