"""What a newcomer meets in `numloss eval` / `evaluate()`: threads, a report that says what made it,
and a LoRA run's final/ evaluated as it is (the progress bar: test_eval_report_files)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from numloss.evaluate import evaluate
from test_eval_faults import Echo

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "fixtures" / "benchmarks"


def test_the_report_header_says_which_settings_version_and_date_made_it():  # conftest resets threads; CLI: test_eval_runner
    import numloss

    report = evaluate(Echo(), ["svamp"], data_dir=DATA, limit=2, program_of_thought=False, threads=1)
    assert torch.get_num_threads() == 1  # bad counts: test_cli's test_a_bad_thread_count_is_one_line_in_eval_too
    header = report.to_markdown().splitlines()[:4]
    assert header[2].startswith(f"Made by numloss.evaluate from Python with numloss {numloss.__version__} on 20")
    assert header[2].endswith(" UTC.")
    assert header[3] == ("Settings: protocol numloss; backend hf (auto); prompt released-alpaca-0shot; max new tokens "
                         "1500 open / 2048 multiple choice; program of thought off; limit 2; threads 1.")


@pytest.mark.filterwarnings("error::FutureWarning")
def test_a_lora_runs_final_folder_is_evaluated_as_its_merged_model(tmp_path):
    """`numloss eval RUN/final` of a LoRA run: the base rebuilt from RUN/config.yaml, the adapter
    merged in; it generates what RUN/merged generates, quietly (peft's FutureWarning about
    transformers' deprecated `is_gradient_checkpointing` is not the user's). Without the run's
    config.yaml: one line naming merged/."""
    import shutil

    from numloss.config import load_config
    from numloss.evaluate.cli import main
    from numloss.models import ModelUnavailableError
    from numloss.train import run_training

    config = load_config(ROOT / "tests" / "fixtures" / "train" / "tiny-test.yaml", [
        "--train.output_dir", str(tmp_path / "run"), "--lora.enabled", "true", "--lora.target_modules", "[q_proj, v_proj]",
        "--lora.merge", "true", "--lora.dropout", "0.0", "--train.learning_rate", "5e-2", "--train.max_steps", "2"])
    result = run_training(config)
    assert (result.model_dir / "adapter_config.json").is_file() and not (result.model_dir / "config.json").exists()
    options = dict(benchmarks=["synthetic:arithmetic"], limit=3, max_new_tokens=8, program_of_thought=False, digit_stats=False)
    final = evaluate(str(result.model_dir), **options)
    merged = evaluate(str(result.merged_dir), **options)
    outputs = [[r.output for r in report.items["numloss"]["synthetic:arithmetic"]] for report in (final, merged)]
    assert outputs[0] == outputs[1] and len(outputs[0]) == 3
    assert final.meta["model"] == str(result.model_dir)

    alone = tmp_path / "adapter-alone"
    shutil.copytree(result.model_dir, alone)
    with pytest.raises(ModelUnavailableError, match=r"LoRA adapter without its run's config.yaml .* merged"):
        evaluate(str(alone), **options)
    assert main([str(alone), "--benchmarks", "synthetic:arithmetic", "--limit", "1", "--out", str(tmp_path / "e")]) == 2
