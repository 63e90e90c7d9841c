"""`numloss train CONFIG.yaml [--section.key value ...]`: config -> model, data, objective ->
Trainer.

    result = run_training(load_config("configs/tiny.yaml", ["--train.max_steps", "20"]))

`train.output_dir` holds config.yaml, inputs.json, log.csv, log_history.json, tensorboard/,
checkpoint-N/ (whole once numloss_checkpoint.json lists its files), final/ (always complete),
merged/ (LoRA with lora.merge), and what was set aside (partial-checkpoint-N/, overwritten-TIME/).
Parts: `folder`, `args`, `build`, `callbacks`, `run`, `cli`, `errors`.
"""

from numloss.checkpoints import MARKER as CHECKPOINT_MARKER
from numloss.train.build import load_model_for, log_digit_density
from numloss.train.cli import machine_cores, main, pop_threads
from numloss.train.errors import DiskFullError, disk_full_error
from numloss.train.folder import CSV_COLUMNS, INPUTS_FILE, record_config
from numloss.train.run import TrainResult, check_run, run_training

__all__ = [
    "CHECKPOINT_MARKER",
    "CSV_COLUMNS",
    "INPUTS_FILE",
    "DiskFullError",
    "TrainResult",
    "check_run",
    "disk_full_error",
    "load_model_for",
    "log_digit_density",
    "machine_cores",
    "main",
    "pop_threads",
    "record_config",
    "run_training",
]
