"""The training config: YAML + overrides, type checks, clear errors, --help, every recipe."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from numloss.config import (
    Config,
    ConfigError,
    all_keys,
    config_from_dict,
    load_config,
)

ROOT = Path(__file__).resolve().parents[1]
# configs/compare*.yaml are `numloss compare` configs (tested with compare); the rest are train recipes
RECIPES = sorted(p for p in (ROOT / "configs").glob("*.yaml") if not p.name.startswith("compare"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_defaults_are_valid_and_yaml_then_overrides_apply(tmp_path):
    assert load_config() == Config()
    path = write(tmp_path, "objective:\n  name: mle\ntrain:\n  max_steps: 5\n  learning_rate: 1e-3\nfused: true\n")
    config = load_config(path, ["--objective.name", "del", "--train.max_steps=20", "--objective.alpha", "0.5",
                                "--objective.options.place_weighting", "continuous", "--lora.target_modules",
                                "q_proj,v_proj", "--train.bf16", "null", "--model.name", "1e-3", "--train.output_dir", "true"])
    assert config.objective.name == "del" and config.objective.alpha == 0.5
    assert config.objective.options == {"place_weighting": "continuous"}
    assert config.train.max_steps == 20
    assert config.train.learning_rate == 1e-3  # YAML reads 1e-3 as a string: converted
    assert config.lora.target_modules == ["q_proj", "v_proj"]
    assert config.train.bf16 is None and config.fused is True
    assert config.model.name == "1e-3" and config.train.output_dir == "true"  # a string field keeps what was typed
    assert load_config(None, ["--train.resume", "true"]).train.resume is True  # a bool, or a checkpoint
    assert load_config(None, ["--train.resume", str(tmp_path)]).train.resume == str(tmp_path)
    # config_from_dict is the Python twin
    config = config_from_dict({"objective": {"name": "ntl-was", "alpha": 0.3}, "train": {"max_steps": 4}})
    assert config.objective.name == "ntl-was" and config.train.max_steps == 4
    with pytest.raises(ConfigError, match="unknown config key"):
        config_from_dict({"train": {"steps": 4}})


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--train.max_step", "3"], r"unknown config key 'train.max_step'.*; did you mean 'train.max_steps'"),
        (["--nosuch.key", "3"], "unknown config key 'nosuch.key'"),
        (["--train.per_device_train_batch_size", "eight"], "train.per_device_train_batch_size: expected an integer >= 1, got 'eight'"),
        (["--train.bf16", "maybe"], "train.bf16: expected true or false or null"),
        (["--model.dtype", "int8"], "model.dtype: expected one of 'auto'"),
        (["--objective.name", "nope"], "unknown objective 'nope'; choose one of mle, del"),
        (["--objective.options.tau", "2"], r"'del' has no option\(s\) 'tau'; its options are"),
        (["--data.source", "synthetic:nope"], "unknown synthetic set 'nope'"),
        (["--train.resume", "/no/such/run/checkpoint-2"], "checkpoint folder .* does not exist"),
        (["--train.batch_size", "0"], "train.per_device_train_batch_size: expected an integer >= 1, got 0"),
        (["--train.not_a_field", "1"], "unknown config key 'train.not_a_field': neither a numloss key nor a transformers.TrainingArguments field"),
        (["--train.extra", "{learnin_rate: 1}"], "did you mean 'train.learning_rate'"),
        (["--seed", "1"], "--seed is a key of several sections: write --data.seed or --train.seed"),
        (["--train.lr_scheduler_type", "cosine_annealing"], "train.lr_scheduler_type: unknown scheduler 'cosine_annealing'; choose one of linear, cosine"),
        (["--train.max_steps"], "--train.max_steps needs a value"),
        (["stray"], "unexpected argument 'stray'"),
    ],
)
def test_bad_overrides_are_clear_errors(argv, message):  # every key's bad values, file and flag: test_config_values
    with pytest.raises(ConfigError, match=message):
        load_config(None, argv)


@pytest.mark.parametrize("text, message", [
    (None, "does not exist"),
    ("train:\n  epochs: 2\n", "unknown config key 'train.epochs'"),
    ("trainer:\n  max_steps: 2\n", "unknown config key 'trainer'"),
    ("train: 3\n", "section 'train' must be a mapping"),
    ("train:\n  max_steps: 10 steps\n", "train.max_steps: expected one of -1 or an integer >= 1, got '10 steps'"),
    ("train: [unclosed\n", "not valid YAML"),  # load_yaml's other refusals: test_io_helpers' table
    ("# only a comment\n", "holds no settings"),  # load_config asks load_yaml to refuse an empty file
    ("train:\n  learning_rate: .nan\n", "expected a finite number"),
])
def test_bad_yaml_files_are_clear_errors(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path / "c.yaml" if text is None else write(tmp_path, text))


def test_help_lists_every_key_with_default_and_meaning_and_dry_run_prints_the_config(capsys):
    from numloss.train import main

    assert main(["--help"]) == 0
    text = capsys.readouterr().out  # the usage, then describe_keys()
    assert "usage: numloss train" in text and "--resume" in text
    for key in all_keys():
        assert f"--{key} (" in text, key
    assert "--train.learning_rate (a finite number > 0, default 0.001)" in text
    assert "--objective.name (a string, default del)" in text
    assert "--train.per_device_train_batch_size (an integer >= 1, default 8)" in text
    assert "train.batch_size -> train.per_device_train_batch_size" in text  # the old names, said once
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("--"):
            assert lines[i + 1].strip(), f"{line} has no explanation"
    assert main([str(ROOT / "configs" / "tiny.yaml"), "--dry-run", "--objective.name", "mle", "--objective.alpha", "null"]) == 0
    printed = capsys.readouterr()
    assert "dry run passed" in printed.err
    dumped = yaml.safe_load(printed.out)
    assert dumped["objective"]["name"] == "mle" and dumped["model"]["name"] == "tiny"


PAPER_RUNS = {
    # recipe: (model, lr, alpha, per-device batch x grad_accum, GPUs of the published run)
    "qwen2.5-1.5b-mathinstruct.yaml": ("Qwen/Qwen2.5-1.5B", 5e-6, 1.28, 32, 4),
    "qwen2.5-7b-mathinstruct.yaml": ("Qwen/Qwen2.5-7B", 5e-6, 2.56, 32, 8),
    "deepseek-math-7b-mathinstruct.yaml": ("deepseek-ai/deepseek-math-7b-instruct", 5e-6, 2.56, 32, 8),
    "codellama-7b-mathinstruct.yaml": ("codellama/CodeLlama-7b-hf", 2e-5, 0.1, 32, 4),
    "mistral-7b-mathinstruct.yaml": ("mistralai/Mistral-7B-v0.1", 5e-6, 0.1, 32, 8),
}


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_every_recipe_parses_and_validates_and_the_papers_match_the_published_runs(recipe):
    assert set(PAPER_RUNS) <= {p.name for p in RECIPES}, "a paper recipe is missing"
    config = load_config(recipe)
    raw = yaml.safe_load(recipe.read_text())
    # the file's values are the config's (nothing silently dropped or renamed)
    for section, values in raw.items():
        if isinstance(values, dict):
            for key, value in values.items():
                got = getattr(getattr(config, section), key)
                assert got == value or (isinstance(value, str) and got == float(value)), (section, key)
    if recipe.name not in PAPER_RUNS:
        return
    model, lr, alpha, per_gpu, gpus = PAPER_RUNS[recipe.name]
    assert config.model.name == model and config.train.learning_rate == lr
    assert config.objective.name == "del" and config.objective.alpha == pytest.approx(alpha)
    assert config.train.per_device_train_batch_size * config.train.gradient_accumulation_steps == per_gpu
    assert per_gpu * gpus in (128, 256) and f"global batch {per_gpu * gpus}" in recipe.read_text()
    assert config.train.num_train_epochs == 2 and config.train.lr_scheduler_type == "cosine"
    assert config.train.warmup_ratio == 0.03 and config.data.max_length == 1500
    assert "full_shard" in config.train.fsdp and config.train.fsdp_config["transformer_layer_cls_to_wrap"]
    # the alpha is explained in the file
    assert f"= {alpha:g}" in recipe.read_text() or f"= {alpha}" in recipe.read_text()


# -- transformers' names, the old ones, one step flag, and the recorded runs' hashes ---------------
HF_YAML = """model: {name: tiny, tiny_layers: 1, tiny_hidden: 32, tiny_heads: 2, gradient_checkpointing: true}
data: {source: "synthetic:arithmetic", num_examples: 16, max_length: 256}
train:
  max_steps: 2
  per_device_train_batch_size: 2
  gradient_accumulation_steps: 2
  learning_rate: 1.0e-3
  lr_scheduler_type: constant
  warmup_ratio: 0.0
  adam_beta2: 0.95
  logging_first_step: true
  report_to: [none]
  save_steps: 0
  progress_bar: false
"""


def test_a_yaml_with_training_arguments_names_trains(tmp_path):
    import warnings

    from numloss.train import run_training
    from numloss.train.args import build_training_arguments

    config = load_config(write(tmp_path, HF_YAML), ["--train.output_dir", str(tmp_path / "run")])
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # transformers 5.25 deprecates gradient checkpointing's old name
        args = build_training_arguments(config)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.adam_beta2) == (2, 2, 0.95)
    assert args.gradient_checkpointing is True  # model.gradient_checkpointing reaches the trainer
    assert args.lr_scheduler_type.value == "constant"
    assert run_training(config).global_step == 2
    written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["train"]
    assert written["adam_beta2"] == 0.95 and "extra" not in written  # the run's config.yaml reads back as given
    assert load_config(tmp_path / "run" / "config.yaml") == config


def test_the_old_names_are_aliases_with_one_deprecation_line(tmp_path, caplog):
    import numloss.config as config_module

    old = HF_YAML.replace("per_device_train_batch_size", "batch_size").replace("gradient_accumulation_steps", "grad_accum")
    old = old.replace("lr_scheduler_type", "lr_scheduler").replace("  adam_beta2: 0.95", "  extra: {adam_beta2: 0.95}")
    config_module._deprecated.cache_clear()
    with caplog.at_level("WARNING", logger="numloss.config"):
        assert load_config(write(tmp_path, old)) == load_config(write(tmp_path, HF_YAML))
        load_config(write(tmp_path, old))  # once per process
    lines = [r.getMessage() for r in caplog.records]
    for name, new in [("batch_size", "per_device_train_batch_size"), ("grad_accum", "gradient_accumulation_steps"),
                      ("lr_scheduler", "lr_scheduler_type"), ("extra", "each of its entries as train.NAME")]:
        assert f"config key train.{name} is deprecated: write {new if ' ' in new else 'train.' + new} (docs/training.md, Configuration)" in lines
    assert len(lines) == 4


def test_max_steps_is_one_flag_for_train_and_compare():
    from numloss.compare import build_parser

    assert load_config(None, ["--max_steps", "7", "--learning_rate", "0.5"]).train.max_steps == 7
    demo = ROOT / "configs" / "compare-demo.yaml"
    assert build_parser().parse_args([str(demo), "--max_steps", "7"]).steps == 7
    assert build_parser().parse_args([str(demo), "--steps", "7"]).steps == 7  # the old name


def test_every_recorded_run_is_found_by_its_config():
    """A key's rename keeps run hashes: each record under results/NAME/ (a grid of
    configs/NAME.yaml) carries the hash its config computes for its label and seed today."""
    import json
    import logging

    from numloss.compare.config import load_compare_config
    from numloss.compare.runner import RunKey, key_hash

    logging.getLogger("numloss.config").setLevel(logging.ERROR)
    checked = 0
    for records in sorted((ROOT / "results").glob("compare*/")):
        path = ROOT / "configs" / f"{records.name}.yaml"
        if not path.is_file():
            continue
        grid = load_compare_config(path)
        hashes = {f"{s.label}-s{seed}": key_hash(grid, RunKey(s, seed)) for s in grid.objectives for seed in grid.seeds}
        for record in records.glob("*.json"):
            data = json.loads(record.read_text(encoding="utf-8"))
            name = f"{data.get('label')}-s{data.get('seed')}"
            if name in hashes and not data.get("failed"):
                assert data["hash"] == hashes[name], record
                checked += 1
    assert checked >= 100, checked
