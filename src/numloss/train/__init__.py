"""`numloss train CONFIG.yaml [--section.key value ...]`: config -> model, data, objective -> Trainer.

    from numloss.config import load_config
    from numloss.train import run_training
    result = run_training(load_config("configs/tiny.yaml", ["--train.max_steps", "20"]))
    result.model_dir        # the final model folder (transformers loads it as is)

What lands in `train.output_dir`:

    .numloss.lock        the run's lock (numloss.rundir): who holds the folder, or held it last
    config.yaml          the full resolved configuration
    checkpoint-N/        Trainer checkpoints (train.save_steps), what `--resume` continues from; one
                         counts only once numloss_checkpoint.json (written last) lists its files
                         with their SHA-256 and they all match (numloss.checkpoints)
    partial-checkpoint-N/  an incomplete or damaged checkpoint that `--resume` set aside
    overwritten-TIME/    a run that --overwrite moved aside
    log.csv              one row per logging step: loss, ce, aux, digit_entropy, the digit
                         diagnostics (digit_logit_mean, pushdown_share, digit_target_prob), learning_rate, ...
    log_history.json     the Trainer's whole log history (the CSV's source, plus final metrics)
    tensorboard/         the same scalars for TensorBoard
    final/               the trained model + tokenizer (LoRA: the adapters + tokenizer), written as
                         final.partial/ and renamed once its marker is written: always complete
    merged/              LoRA with lora.merge: base model with the adapters merged in

Distribution is the Trainer's (accelerate): launch the same command under `torchrun` or
`accelerate launch` (configs/accelerate/ for FSDP and DeepSpeed) and nothing else changes.

The parts: `folder` (the run folder: plan, resume point, records), `args` (TrainingArguments),
`build` (data, tokenizer, model, objective), `callbacks`, `run` (the loop's glue), `cli`, `errors`.
"""

from numloss.checkpoints import MARKER as CHECKPOINT_MARKER
from numloss.train.build import load_model_for, log_digit_density
from numloss.train.cli import machine_cores, main, pop_threads
from numloss.train.errors import DiskFullError, disk_full_error
from numloss.train.folder import CSV_COLUMNS, INPUTS_FILE, read_log_rows, record_config
from numloss.train.run import TrainResult, check_run, run_training

__all__ = ["CHECKPOINT_MARKER", "CSV_COLUMNS", "INPUTS_FILE", "DiskFullError", "TrainResult", "check_run",
           "disk_full_error", "load_model_for", "log_digit_density", "machine_cores", "main", "pop_threads",
           "read_log_rows", "record_config", "run_training"]
