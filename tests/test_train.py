"""`numloss train` end to end on the tiny model: logs, final model, resume, LoRA, clear errors (2 gloo
processes: test_sharded.py)."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

import test_train_faults
from faultrun import TINY, one_line
from numloss import LOSSES, DigitVocab, build_loss
from numloss.config import ConfigError, load_config
from numloss.data import Example
from numloss.models import build_char_tokenizer, build_tiny_model
from numloss.train import CHECKPOINT_MARKER, CSV_COLUMNS, machine_cores, main, run_training
from test_data import write_jsonl
from test_digits import wordlevel

no_model_loads = test_train_faults.no_model_loads  # a fixture


def tiny_config(tmp_path: Path, *overrides: str):
    return load_config(TINY, ["--train.output_dir", str(tmp_path / "run"), *overrides])


def test_cli_run_writes_logs_and_a_loadable_model(tmp_path, capsys):
    """On --threads 1 (the one threads flag), progress lines use the logged names."""
    out = tmp_path / "run"
    argv = [str(TINY), "--train.output_dir", str(out), "--train.max_steps", "4", "--train.logging_steps", "2",
            "--train.report_to", "[tensorboard]", "--train.bf16", "null", "--train.save_steps", "1"]
    assert main([*argv, "--threads", "1"]) == 0 and torch.get_num_threads() == 1
    printed = capsys.readouterr().out
    assert f"model in {out / 'final'}" in printed
    assert "digit_entropy=" in printed and "learning_rate=" in printed and "H_digit" not in printed
    assert "--threads needs a positive integer" in one_line(["train", str(TINY), "--threads", "zero"], capsys)
    assert f"--threads 100000: this machine has {machine_cores()} cores" in one_line(["train", str(TINY), "--threads", "100000"], capsys)
    # save_total_limit (2 by default) rotates after each marker: the newest two are kept, whole
    assert [(p.name, (p / CHECKPOINT_MARKER).is_file()) for p in sorted(out.glob("checkpoint-*"))] == [
        ("checkpoint-3", True), ("checkpoint-4", True)]
    # the final folder is an ordinary transformers model + tokenizer
    model = AutoModelForCausalLM.from_pretrained(out / "final")
    tok = AutoTokenizer.from_pretrained(out / "final")
    logits = model(**tok(["12+3="], return_tensors="pt")).logits
    assert torch.isfinite(logits).all()
    # the CSV: one row per logging step with every loss term, the learning rate and tokens/s
    rows = list(csv.DictReader((out / "log.csv").open()))
    assert [int(r["step"]) for r in rows] == [1, 2, 4]
    assert list(rows[0]) == list(CSV_COLUMNS)
    for row in rows:
        loss, ce, aux = float(row["loss"]), float(row["ce"]), float(row["aux"])
        if row["step"] in ("1", "2"):  # one step per log: loss = ce + alpha * aux exactly (DEL, its default alpha)
            assert loss == pytest.approx(ce + LOSSES["del"].default_alpha * aux, rel=1e-4)
        assert 0 < float(row["digit_entropy"]) <= 2.31  # at most log(10)
        # the digit diagnostics: finite, a share and a probability
        assert math.isfinite(float(row["digit_logit_mean"]))
        assert 0 <= float(row["pushdown_share"]) <= 1 and 0 < float(row["digit_target_prob"]) < 1
        assert float(row["learning_rate"]) > 0 and float(row["tokens_per_second"]) > 0
    history = json.loads((out / "log_history.json").read_text())
    assert any("train_runtime" in entry for entry in history)
    # TensorBoard got the same scalars
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/ce", "train/aux", "train/digit_entropy", "train/learning_rate", "train/tokens_per_second"} <= tags
    assert [e.step for e in events.Scalars("train/ce")] == [1, 2, 4]
    # the resolved config is saved and reloads to the same thing (the weights moved from the seeded
    # start: test_sharded.py's test_ddp_through_numloss_train_equals_one_process)
    assert load_config(out / "config.yaml") == load_config(TINY, argv[1:])


CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.mark.parametrize("data, overrides, steps, said", [
    ("source", ["--data.max_length", "175", "--data.num_examples", "8"], 1, ["8 examples", "8 truncated"]),
    # given to run_training: these 8, not the source's 64
    ("given", ["--data.source", "synthetic:decimals"], 2, []),
    ("chat", ["--data.chat_template", CHAT_TEMPLATE, "--data.num_examples", "null"], 2,
     ["8 conversations rendered with the chat template"]),
])
def test_a_run_trains_on_its_data_source_given_examples_or_chat_data(data, overrides, steps, said, tmp_path, caplog):
    examples = [Example("What is 2 + 2?", "2 + 2 = 4. The answer is 4.")] * 8 if data == "given" else None
    if data == "chat":
        messages = [[{"role": "user", "content": f"{a}+{a}?"}, {"role": "assistant", "content": f"{2 * a}"}] for a in range(8)]
        overrides = ["--data.source", write_jsonl(tmp_path / "chat.jsonl", [{"messages": m} for m in messages]), *overrides]
    with caplog.at_level("WARNING", logger="numloss.train"):
        result = run_training(tiny_config(tmp_path, "--train.max_steps", str(steps), *overrides), examples=examples)
    assert result.global_step == steps and all(line in caplog.text for line in said), caplog.text
    assert json.loads(result.log_history_path.read_text())[0]["epoch"] == 0.5  # each: 8 examples, batches of 4


def test_lora_saves_adapters_and_a_merged_model(tmp_path):
    config = tiny_config(tmp_path, "--lora.enabled", "true", "--lora.target_modules", "[q_proj, v_proj]",
                         "--lora.merge", "true", "--lora.dropout", "0.0", "--train.learning_rate", "5e-2")
    result = run_training(config)
    assert (result.model_dir / "adapter_config.json").is_file()
    assert result.merged_dir is not None and (result.merged_dir / "config.json").is_file()
    tok = AutoTokenizer.from_pretrained(result.merged_dir)
    merged = AutoModelForCausalLM.from_pretrained(result.merged_dir)
    base = build_tiny_model(build_char_tokenizer(), num_layers=2, hidden_size=64, num_heads=2, seed=0)
    # only the adapted projections changed
    torch.testing.assert_close(merged.model.layers[0].mlp.up_proj.weight, base.model.layers[0].mlp.up_proj.weight)
    assert not torch.allclose(merged.model.layers[0].self_attn.q_proj.weight, base.model.layers[0].self_attn.q_proj.weight)
    adapted = PeftModel.from_pretrained(base, result.model_dir)
    batch = tok(["12+30=42"], return_tensors="pt")
    torch.testing.assert_close(adapted(**batch).logits, merged(**batch).logits, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("outcome, status", [("finished", 0), ("already finished", 0), ("config error", 2), ("interrupted", 130)])
def test_main_destroys_the_process_group_the_run_started(tmp_path, monkeypatch, capsys, outcome, status):
    """Whatever way a run ends, `numloss train` leaves no process group for interpreter shutdown,
    where gloo's threads can abort a rank that finished (SIGABRT). The Trainer starts the group
    under torchrun; here a one-rank gloo group stands for it."""
    def fake_run_training(config):
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
        if status:  # Ctrl-C: one line and exit 130
            raise ConfigError("data.path: no such file") if status == 2 else KeyboardInterrupt
        (tmp_path / "run" / "final").mkdir(parents=True)
        return SimpleNamespace(already_finished=outcome == "already finished", output_dir=tmp_path / "run",
                                     model_dir=tmp_path / "run" / "final", global_step=1, metrics={"loss": 1.0})

    monkeypatch.setattr("numloss.train.run.run_training", fake_run_training)
    try:
        assert main([str(TINY), "--train.output_dir", str(tmp_path / "run")]) == status
        assert not dist.is_initialized(), f"{outcome}: the process group outlived numloss train"
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# -- clear errors before the model loads ----------------------------------------------------------


@pytest.mark.parametrize("dry", [[], ["--dry-run"]], ids=["run", "dry-run"])
def test_bad_data_folders_and_tokenizers_fail_before_the_model_loads(tmp_path, no_model_loads, monkeypatch, capsys, dry):
    """Each passes load_config but not a run's preparation, which --dry-run makes too."""
    (tmp_path / "a-file").write_text("")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"instruction": "caf\xe9 1+1", "output": "2"}\n')
    chat = write_jsonl(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]}])
    out = ["--train.output_dir", str(tmp_path / "run")]
    for argv, refusal in [
        (["--train.output_dir", str(tmp_path / "a-file" / "run")], r"train.output_dir .* cannot be written .*--train.output_dir DIR"),
        ([*out, "--data.source", str(tmp_path / "latin1.jsonl")], r"latin1.jsonl:1: not UTF-8"),
        ([*out, "--train.resume", "true"], r"no complete checkpoint-\* folder"),
        ([*out, "--data.max_length", "100"], "no response token is left"),
        ([*out, "--data.source", chat], "no chat template; set data.chat_template"),
    ]:
        assert main([str(TINY), *argv, *dry]) == 2
        assert re.search(refusal, capsys.readouterr().err), argv
    tokenizer = wordlevel(["</s>", "a"])  # no digit
    tokenizer.add_special_tokens({"eos_token": "</s>", "pad_token": "</s>"})
    monkeypatch.setattr("numloss.models.load_tokenizer", lambda *a, **k: tokenizer)
    assert main([str(TINY), *out, *dry]) == 2
    assert "model.name 'tiny'" in capsys.readouterr().err
    assert not dry or not (tmp_path / "run").exists()  # a dry run creates nothing
    with pytest.raises(ConfigError, match="no training examples"):
        run_training(tiny_config(tmp_path), examples=[])


@pytest.mark.parametrize("name, options, counts, says", [
    ("del", {}, (7, 4), ["7 learnt tokens, 4 digit positions in the first 2 examples: 1.75 tokens per digit"]),
    ("mle", {}, (7, 0), []),
    # DIST2 normalised by place weights: its denominator is the weight sum (12 -> 2 + 1, 5 -> 1, 7 -> 1)
    ("dist2", {"place_weight": True, "point_ends_run": True, "normalize": "weights"}, (7, 5),
     ["7 learnt tokens, 5 place weights in the first 2 examples", 'matches "weights" on average at alpha x 1.40']),
])
def test_the_digit_density_of_the_data_is_logged(name, options, counts, says, caplog):
    """N_tok and N_dig of the data (the objective's own count) and their ratio, hand-counted."""
    from numloss.train import log_digit_density

    vocab = DigitVocab(list(range(10)), decimal_point_id=10)
    # labels before the shift: position 0 is never predicted; learnt: 12 . 5 <eos=20> and 7 <eos>
    features = [{"labels": [-100, -100, 1, 2, 10, 5, 20]}, {"labels": [-100, 7, 20]}]
    # numloss.train's own level: an in-process compare earlier in the session may have quietened it
    with caplog.at_level("WARNING", logger="numloss.train"):
        assert log_digit_density(SimpleNamespace(features=features), build_loss(name, vocab, **options)) == counts
    assert all(said in caplog.text for said in says), caplog.text


def test_resume_checks_the_output_dir_before_setting_a_checkpoint_aside(tmp_path, monkeypatch):
    """An output dir that cannot be written is one clear line, before --resume renames anything
    in it (it was a raw OSError from the rename)."""
    out = tmp_path / "run"
    (out / "checkpoint-2").mkdir(parents=True)  # no marker: incomplete, would be set aside

    def unwritable(path):
        raise ConfigError(f"train.output_dir {str(path)!r} cannot be written")

    monkeypatch.setattr("numloss.train.folder.check_output_dir", unwritable)
    with pytest.raises(ConfigError, match="cannot be written"):
        run_training(load_config(TINY, ["--train.output_dir", str(out), "--train.resume", "true"]))
    assert (out / "checkpoint-2").is_dir() and not list(out.glob("partial-*"))
