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
    describe_keys,
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
                                "q_proj,v_proj", "--train.bf16", "null"])
    assert config.objective.name == "del" and config.objective.alpha == 0.5
    assert config.objective.options == {"place_weighting": "continuous"}
    assert config.train.max_steps == 20
    assert config.train.learning_rate == 1e-3  # YAML reads 1e-3 as a string: converted
    assert config.lora.target_modules == ["q_proj", "v_proj"]
    assert config.train.bf16 is None and config.fused is True


def test_string_fields_keep_what_was_typed():
    config = load_config(None, ["--model.name", "1e-3", "--train.output_dir", "true"])
    assert config.model.name == "1e-3" and config.train.output_dir == "true"


def test_resume_is_bool_or_path(tmp_path):
    assert load_config(None, ["--train.resume", "true"]).train.resume is True
    assert load_config(None, ["--train.resume", str(tmp_path)]).train.resume == str(tmp_path)
    with pytest.raises(ConfigError, match="checkpoint folder .* does not exist"):
        load_config(None, ["--train.resume", str(tmp_path / "nope")])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--train.max_step", "3"], r"unknown config key 'train.max_step'; did you mean 'train.max_steps'"),
        (["--nosuch.key", "3"], "unknown config key 'nosuch.key'"),
        (["--train.batch_size", "eight"], "train.batch_size: expected an integer, got 'eight'"),
        (["--train.learning_rate", "fast"], "train.learning_rate: expected a number"),
        (["--train.bf16", "maybe"], "train.bf16: expected bool | null"),
        (["--model.dtype", "int8"], "model.dtype: expected one of 'auto'"),
        (["--objective.name", "nope"], "unknown objective 'nope'; choose one of mle, del"),
        (["--objective.options.tau", "2"], r"'del' has no option\(s\) 'tau'; its options are"),
        (["--objective.name", "mixce", "--objective.alpha", "1"], "'mixce' has no alpha"),
        (["--data.source", "synthetic:nope"], "unknown synthetic set 'nope'"),
        (["--data.source", "/no/such/file.jsonl"], "no such file"),
        (["--train.batch_size", "0"], "train.batch_size must be >= 1"),
        (["--train.max_steps", "0"], "train.max_steps must be > 0 or -1"),
        (["--train.extra", "{not_a_field: 1}"], "not a transformers.TrainingArguments field"),
        (["--train.lr_scheduler", "cosine_annealing"], "train.lr_scheduler: unknown scheduler 'cosine_annealing'; choose one of linear, cosine"),
        (["--train.max_steps"], "--train.max_steps needs a value"),
        (["stray"], "unexpected argument 'stray'"),
    ],
)
def test_bad_overrides_are_clear_errors(argv, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, argv)


def test_bad_yaml_files_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="unknown config key 'train.epochs'"):
        load_config(write(tmp_path, "train:\n  epochs: 2\n"))
    with pytest.raises(ConfigError, match="unknown config key 'trainer'"):
        load_config(write(tmp_path, "trainer:\n  max_steps: 2\n"))
    with pytest.raises(ConfigError, match="section 'train' must be a mapping"):
        load_config(write(tmp_path, "train: 3\n"))
    with pytest.raises(ConfigError, match="train.max_steps: expected an integer, got '10 steps'"):
        load_config(write(tmp_path, "train:\n  max_steps: 10 steps\n"))
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "train: [unclosed\n"))


def test_config_from_dict_is_the_python_twin():
    config = config_from_dict({"objective": {"name": "ntl-was", "alpha": 0.3}, "train": {"max_steps": 4}})
    assert config.objective.name == "ntl-was" and config.train.max_steps == 4
    with pytest.raises(ConfigError, match="unknown config key"):
        config_from_dict({"train": {"steps": 4}})


def test_help_lists_every_key_with_default_and_meaning():
    text = describe_keys()
    for key in all_keys():
        assert f"--{key} (" in text, key
    assert "--train.learning_rate (float, default 0.001)" in text
    assert "--objective.name (str, default del)" in text
    assert "--data.split (str, default train)" in text
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("--"):
            assert lines[i + 1].strip(), f"{line} has no explanation"


def test_cli_help_and_dry_run(capsys):
    from numloss.train import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: numloss train" in out and "--train.max_steps" in out and "--resume" in out
    assert main([str(ROOT / "configs" / "tiny.yaml"), "--dry-run", "--objective.name", "mle", "--objective.alpha", "null"]) == 0
    printed = capsys.readouterr()
    assert "dry run passed" in printed.err
    dumped = yaml.safe_load(printed.out)
    assert dumped["objective"]["name"] == "mle" and dumped["model"]["name"] == "tiny"


def test_cli_errors_exit_2_before_any_model_loads(monkeypatch, capsys, tmp_path):
    import numloss.models as models
    import numloss.models.load as load

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded despite a bad config")

    monkeypatch.setattr(models, "load_model_and_tokenizer", refuse)
    monkeypatch.setattr(load, "load_model_and_tokenizer", refuse)
    from numloss.train import main

    assert main([str(ROOT / "configs" / "tiny.yaml"), "--train.bogus", "1"]) == 2
    assert "unknown config key 'train.bogus'" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["--data.source", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_every_recipe_parses_and_validates(recipe):
    config = load_config(recipe)
    raw = yaml.safe_load(recipe.read_text())
    # the file's values are the config's (nothing silently dropped or renamed)
    for section, values in raw.items():
        if isinstance(values, dict):
            for key, value in values.items():
                got = getattr(getattr(config, section), key)
                assert got == value or (isinstance(value, str) and got == float(value)), (section, key)


PAPER_RUNS = {
    # recipe: (model, lr, alpha, per-device batch x grad_accum, GPUs of the published run)
    "qwen2.5-1.5b-mathinstruct.yaml": ("Qwen/Qwen2.5-1.5B", 5e-6, 1.28, 32, 4),
    "qwen2.5-7b-mathinstruct.yaml": ("Qwen/Qwen2.5-7B", 5e-6, 2.56, 32, 8),
    "deepseek-math-7b-mathinstruct.yaml": ("deepseek-ai/deepseek-math-7b-instruct", 5e-6, 2.56, 32, 8),
    "codellama-7b-mathinstruct.yaml": ("codellama/CodeLlama-7b-hf", 2e-5, 0.1, 32, 4),
    "mistral-7b-mathinstruct.yaml": ("mistralai/Mistral-7B-v0.1", 5e-6, 0.1, 32, 8),
}


@pytest.mark.parametrize("name", PAPER_RUNS)
def test_paper_recipes_match_the_published_runs(name):
    model, lr, alpha, per_gpu, gpus = PAPER_RUNS[name]
    path = ROOT / "configs" / name
    config = load_config(path)
    assert config.model.name == model and config.train.learning_rate == lr
    assert config.objective.name == "del" and config.objective.alpha == pytest.approx(alpha)
    assert config.train.batch_size * config.train.grad_accum == per_gpu
    assert per_gpu * gpus in (128, 256) and f"global batch {per_gpu * gpus}" in path.read_text()
    assert config.train.num_epochs == 2 and config.train.lr_scheduler == "cosine"
    assert config.train.warmup_ratio == 0.03 and config.data.max_length == 1500
    assert "full_shard" in config.train.fsdp and config.train.fsdp_config["transformer_layer_cls_to_wrap"]
    # the alpha is explained in the file
    assert f"= {alpha:g}" in path.read_text() or f"= {alpha}" in path.read_text()


def test_hub_recipe_offline_says_how_to_fix(monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from numloss.train import main

    assert main([str(ROOT / "configs" / "codellama-7b-mathinstruct.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "codellama/CodeLlama-7b-hf" in err and "HF_HUB_OFFLINE" in err and "local folder" in err
