"""Every config key, given a wrong type, an out-of-range value, or a value that the context would
ignore, and a key of each kind given an empty value, is one `numloss train` error line (exit 2)
before any model loads.

The table covers every key of `numloss.config.all_keys()` (a test asserts it does), so a key added
later without a row fails here until its bad values are listed.
"""

from __future__ import annotations

import re

import pytest
import yaml

import test_train_faults
from faultrun import TINY, one_line
from numloss.config import all_keys, load_config

no_model_loads = test_train_faults.no_model_loads  # a fixture

#: per key: (wrong type, out of range or unknown); None where a key has no such value (a bool has
#: no range; any string is a valid name for a folder that does not exist yet)
BAD: dict[str, tuple[object, object]] = {
    "model.name": ([1], "no-such-org/no-such-model"),
    "model.revision": ([1], "main"),  # a revision of the built-in tiny model: ignored, so refused
    "model.dtype": (1, "float8"),
    "model.trust_remote_code": ("maybe", None),
    "model.attn_implementation": ([1], "bogus"),
    "model.gradient_checkpointing": ("maybe", None),
    "model.tiny_layers": ("two", 0),
    "model.tiny_hidden": ("wide", 10**6),
    "model.tiny_heads": (1.5, 0),
    "model.tiny_digits_per_token": ("one", 2),
    "model.cache_dir": ([1], "/tmp/cache"),  # a cache for the tiny model: ignored, so refused
    "data.source": ([1], "no-such-file.jsonl"),
    "data.num_examples": ("many", 0),
    "data.seed": ("x", -1),
    "data.split": ([1], "test"),  # a split of the generated set: ignored, so refused
    "data.subset": ([1], "main"),
    "data.max_length": ("long", 1),
    "data.instruction_field": ([1], None),
    "data.input_field": ([1], None),
    "data.output_field": ([1], None),
    "data.chat_template": ([1], "{% for m in messages %}{{ m.content }"),
    "objective.name": ([1], "bogus"),
    "objective.alpha": ("abc", -1),
    "objective.options": ([1], {"no_such_option": 1}),
    "train.output_dir": ([1], None),
    "train.num_train_epochs": ("x", 0),  # refused although max_steps > 0 would ignore it
    "train.max_steps": ("x", -5),
    "train.per_device_train_batch_size": ("x", 0),
    "train.gradient_accumulation_steps": ("x", 0),
    "train.learning_rate": ("x", -1),
    "train.lr_scheduler_type": ([1], "bogus"),
    "train.warmup_ratio": ("x", 1.5),
    "train.weight_decay": ("x", -1),
    "train.max_grad_norm": ("x", -1),
    "train.optim": ([1], "adamw_bogus"),
    "train.seed": ("x", 2**40),
    "train.bf16": ("maybe", None),
    "train.tf32": ("maybe", True),  # TF32 on a CPU run: transformers refuses it, numloss says so first
    "train.logging_steps": ("x", 0),
    "train.save_steps": ("x", -1),
    "train.save_total_limit": ("x", 0),
    "train.resume": (5, "/no/such/checkpoint"),
    "train.resume_changed": ("maybe", True),  # without --resume: ignored, so refused
    "train.overwrite": ("maybe", None),
    "train.report_to": ({"a": 1}, ["bogus"]),
    "train.progress_bar": ("maybe", None),
    "train.dataloader_num_workers": ("x", -1),
    "train.fsdp": ([1], None),
    "train.fsdp_config": ([1], {"transformer_layer_cls_to_wrap": ["X"]}),  # without fsdp: ignored, so refused
    "train.deepspeed": ([1], "no-such-ds.json"),
    "lora.enabled": ("maybe", None),
    "lora.r": ("x", 0),
    "lora.alpha": ("x", 0),
    "lora.dropout": ("x", 1.5),
    "lora.target_modules": (5, []),
    "lora.merge": ("maybe", True),  # with LoRA off: ignored, so refused
    "fused": ("maybe", None),
}

#: values refused only in this context (given where they would be ignored, or taken and then
#: failing inside transformers), as command-line overrides
CONTEXT = [
    (["--train.label_smoothing_factor", "0.1"], "label_smoothing_factor"),
    (["--train.adam_beta1", "2"], "optimizer 'adamw_torch' refuses.*beta"),
    (["--train.adam_epsilon", "-1"], "optimizer 'adamw_torch' refuses.*epsilon"),
    (["--train.lr_scheduler_kwargs", "{bogus: 1}"], "lr_scheduler_kwargs: the 'constant' schedule takes"),
    (["--train.lr_scheduler_type", "cosine_with_min_lr"], "lr_scheduler_type 'cosine_with_min_lr' refuses"),
    (["--train.eval_strategy", "steps"], "eval_strategy"),
    (["--train.neftune_noise_alpha", "-1"], "neftune_noise_alpha must be > 0"),
    (["--train.extra", "{fp16: true}"], "fp16"),  # the old pass-through form, still read
    (["--train.logging_first_step", "'no'"], "logging_first_step: expected true or false"),
    (["--train.gradient_checkpointing_kwargs", "5"], "gradient_checkpointing_kwargs: expected"),
    (["--train.gradient_checkpointing_kwargs", "x"], "gradient_checkpointing_kwargs: expected a mapping .or a JSON object"),
    (["--train.gradient_checkpointing_kwargs", "{use_reentrant: false}"], "model.gradient_checkpointing is off"),
    (["--train.fsdp", "full_shard"], "FSDP|fsdp"),
    (["--model.attn_implementation", "flash_attention_2"], "flash"),
    (["--data.source", "{data}", "--data.split", "test"], "data.split applies to a Hugging Face dataset"),
    (["--data.source", "{data}", "--data.subset", "x"], "data.subset applies to a Hugging Face dataset"),
    (["--lora.enabled", "true", "--lora.r", "1000000"], r"lora.r 1000000 is larger than the model's width \(64\)"),
    (["--train.seed", "-1"], r"train.seed: expected an integer >= 0 and < 4294967296"),
    (["--train.warmup_steps", "5"], r"train.warmup_steps: numloss sets warmup_steps itself \(from train.warmup_ratio\)"),
    (["--train.extra", "{data_seed: 7}"], "train.data_seed: numloss sets data_seed itself"),
    (["--train.extra", "{run_name: a, run_name: b}"], r"key 'run_name' is given twice \(line 1\)"),
    (["--objective.name", "mle", "--objective.alpha", "0.5"], "objective.alpha: 'mle' has no term for alpha"),
    (["--lora.enabled", "true", "--lora.target_modules", "[q_proj, nosuch_proj]"],
     "lora.target_modules: the model has no module named 'nosuch_proj'; its module names are .*q_proj"),
    (["--data.chat_template", "{% for m in messages %}{{ m.content }"], "data.chat_template: Jinja syntax error at line 1"),
    # values no run can train with (numloss.checks)
    (["--train.learning_rate", "1e300"], r"train.learning_rate must be a finite number >= 0 and <= 3.40282e\+38, got 1e\+300"),
    (["--objective.name", "mixce", "--objective.options.eta", "1.5"], "objective: mixce: eta must be a finite number >= 0 and <= 1, got 1.5"),
    (["--train.per_device_train_batch_size", "1000000000"], "= 1000000000 is larger than the 64 training examples, so each step would use only 64"),
    (["--train.gradient_accumulation_steps", "1000000"], "= 4000000 is larger than the 64 training examples"),
    (["--train.max_steps", str(10**29)], "does not fit in 64 bits"),
]


def test_the_table_covers_every_key() -> None:
    assert sorted(BAD) == sorted(all_keys())


@pytest.mark.parametrize(("key", "value"), [pytest.param(key, value, id=f"{key}-{kind}") for key, values in BAD.items()
                                             for kind, value in zip(("type", "range"), values, strict=True) if value is not None])
def test_a_bad_value_in_the_file_is_one_line_before_any_model_loads(key, value, tmp_path, capsys, no_model_loads) -> None:
    mapping = yaml.safe_load(TINY.read_text())
    section, _, name = key.partition(".")
    if name:
        mapping.setdefault(section, {})[name] = value
    else:
        mapping[section] = value
    if key != "train.output_dir":
        mapping["train"]["output_dir"] = str(tmp_path / "run")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(mapping))
    line = one_line(["train", str(path)], capsys)
    assert key.rsplit(".", 1)[-1] in line or key in line or "not found" in line, line
    assert not (tmp_path / "run" / "config.yaml").exists()


# a section's key and a top-level one: config's one override path refuses it before the key's type
@pytest.mark.parametrize("key", ["objective.alpha", "fused"])
def test_an_empty_value_on_the_command_line_is_one_line(key, tmp_path, capsys, no_model_loads) -> None:
    line = one_line(["train", str(TINY), "--train.output_dir", str(tmp_path / "run"), f"--{key}", ""], capsys)
    assert f"--{key} is empty" in line


@pytest.mark.parametrize(("argv", "message"), CONTEXT, ids=[" ".join(a)[:60] for a, _ in CONTEXT])
def test_a_value_ignored_or_refused_later_in_context_is_one_line_first(argv, message, tmp_path, capsys, no_model_loads) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text('{"instruction": "1 + 1 =", "output": "2"}\n')
    argv = [a.replace("{data}", str(data)) for a in argv]
    line = one_line(["train", str(TINY), "--train.output_dir", str(tmp_path / "run"), *argv], capsys)
    assert re.search(message, line), line


def test_a_flag_given_twice_in_mixed_forms_uses_the_last_and_says_so(caplog) -> None:
    with caplog.at_level("WARNING", logger="numloss.config"):
        config = load_config(TINY, ["--train.max_steps", "3", "--train.max_steps=2"])
    assert config.train.max_steps == 2
    assert "--train.max_steps is given 2 times ('3', '2'): the last, '2', is used" in caplog.text
