"""Odd environments x the commands: a locale that cannot encode a path, a console that cannot
encode a name, a stdout that is full or closed, a 1 GiB address-space limit, a JSONL file with a
byte-order mark (a YAML nested 5,000 deep: test_io_helpers' load_yaml table). Each is a correct run or one line, never a traceback,
and results on disk stay intact. In-process (the environment's effect reproduced on the object it
reaches) but for one small process without torch; a slow one trains under LC_ALL=C itself."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from faultrun import ROOT, TINY
from numloss import cli
from numloss.data import load_examples
from numloss.evaluate import score_outputs
from numloss.evaluate.store import read_lines
from numloss.models import build_char_tokenizer, build_tiny_model
from numloss.models.load import load_tokenizer
from numloss.textio import read_utf8, utf8_path

#: "é" as LC_ALL=C with UTF-8 mode off hands it to Python: the bytes c3 a9 as surrogate escapes
UNDECODED = "\udcc3\udca9"


def test_a_path_this_locale_cannot_encode_saves_and_loads_the_tokenizer(tmp_path):
    folder = tmp_path / f"run {UNDECODED}"
    tokenizer = build_char_tokenizer()
    with pytest.raises(UnicodeEncodeError):  # what tokenizers (Rust) does with the name itself
        tokenizer.save_pretrained(str(folder / "raw"))
    folder.mkdir(exist_ok=True)  # made by the failed save
    with utf8_path(folder / "final.partial") as writable:
        tokenizer.save_pretrained(writable)
    saved = folder / "final.partial"
    assert sorted(p.name for p in saved.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    assert os.fsencode(saved).endswith("run \xc3\xa9/final.partial".encode("latin-1"))
    build_tiny_model(tokenizer, num_layers=1, hidden_size=16, num_heads=2).save_pretrained(saved)
    assert load_tokenizer(str(saved)).get_vocab() == tokenizer.get_vocab()
    with utf8_path(tmp_path / "é") as same:  # a path that encodes is given unchanged
        assert same == str(tmp_path / "é")


def test_a_jsonl_file_with_a_byte_order_mark_is_read_as_outputs_and_as_training_data(tmp_path):
    path, data = tmp_path / "outputs.jsonl", tmp_path / "train.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"benchmark": "synthetic:arithmetic", "id": "1", "output": "1"}\n')
    assert read_utf8(path).startswith("{") and read_lines(path)[0]["id"] == "1"
    assert score_outputs(path).scores["numloss"]["synthetic:arithmetic"].count == 1
    data.write_bytes(b"\xef\xbb\xbf" + b'{"instruction": "1 + 1 =", "output": "2"}\n')
    assert [e.output for e in load_examples(str(data))] == ["2"]


def test_a_full_stdout_after_the_work_is_one_line_and_status_1_and_a_closed_one_no_error(monkeypatch, capsys):
    full = open("/dev/full", "w", encoding="utf-8")  # every write: ENOSPC
    monkeypatch.setattr(sys, "stdout", full)
    status = cli.main(["--help"])  # prints its usage to a stdout that takes nothing
    err = capsys.readouterr().err.splitlines()
    assert status == 1 and err == ["numloss: stdout cannot be written (No space left on device); the results "
                                   "written to disk are complete"]
    assert sys.stdout is full  # an in-process caller gets its stream back
    full.close()  # its buffer went to /dev/null with the first failed write
    monkeypatch.setattr(sys, "stdout", None)  # how Python starts under `>&-`
    assert cli.main(["--version"]) == 0 and capsys.readouterr().err == ""


def test_a_name_the_console_cannot_encode_is_escaped_not_a_traceback(monkeypatch):
    raw = io.BytesIO()
    console = io.TextIOWrapper(raw, encoding="ascii")  # PYTHONIOENCODING=ascii
    monkeypatch.setattr(sys, "stderr", console)
    assert cli.main(["évaluer"]) == 2
    console.flush()
    assert b"unknown command '\\xe9valuer'" in raw.getvalue()


def test_an_address_space_too_small_for_torch_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_address_space_limit", lambda: 2**30)
    assert cli.main(["train", "--dry-run"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["numloss train: the address-space limit (ulimit -v) is 1.0 GiB; torch and its libraries need at "
                   "least 2 GiB to load: raise it (ulimit -v unlimited)"]


def test_under_lc_all_c_without_utf8_mode_the_command_runs_in_utf8_mode(tmp_path):
    """A path from a YAML file ("runs/é") cannot be encoded at all under LC_ALL=C with PYTHONUTF8=0:
    the command runs itself again in UTF-8 mode, where every name is UTF-8 (the slow test below
    trains so; a grid scored into such a folder alike)."""
    program = ("import os, sys\nfrom numloss import cli\n"
               "cli._dispatch = lambda argv: print(sys.flags.utf8_mode, sys.getfilesystemencoding(), argv) or 0\n"
               "sys.argv = ['numloss', 'eval', 'runs/\\u00e9']\nraise SystemExit(cli.main())\n")
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and done.stdout.split(" ", 2)[:2] == ["1", "utf-8"], done.stdout + done.stderr


@pytest.mark.slow  # a real training process: the tests above reach the same objects in-process
@pytest.mark.parametrize("utf8_mode", ["0", "1"])
def test_training_into_a_non_ascii_folder_under_lc_all_c_finishes(utf8_mode, tmp_path):
    out = os.fsencode(tmp_path) + "/runs é".encode()
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": utf8_mode, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "numloss", "train", str(TINY),
         "--train.output_dir", out, "--train.max_steps", "1", "--data.num_examples", "8", "--model.tiny_layers", "1"],
        capture_output=True, env=env, timeout=600,
    )
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr[-2000:]
    assert os.path.isfile(out + b"/final/tokenizer.json") and not os.path.exists(out + b"/final.partial")
