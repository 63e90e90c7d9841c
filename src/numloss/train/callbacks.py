"""numloss's `transformers.TrainerCallback`s of a run: tokens/s, log.csv, the progress bar, the
checkpoint markers and rotation, and the run's record."""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path
from typing import Any

from numloss.atomic import write_text_atomic
from numloss.checkpoints import write_marker
from numloss.config import Config
from numloss.extras import needs
from numloss.train.errors import disk_full_error
from numloss.train.folder import CSV_COLUMNS, record_run

with needs("hf", "numloss.train.callbacks"):
    from transformers import TrainerCallback
    from transformers.trainer_utils import rotate_checkpoints

#: what the progress bar shows, by the names they are logged under
PROGRESS_KEYS = ("loss", "ce", "aux", "digit_entropy", "learning_rate", "tokens_per_second")


class ThroughputCallback(TrainerCallback):
    """Adds `tokens_per_second` (input tokens, padding excluded, all ranks, since the last log)
    to every training log, before the progress bar, CSV and TensorBoard see it."""

    def __init__(self) -> None:
        self._last_time: float | None = None
        self._last_tokens = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_time = time.perf_counter()
        self._last_tokens = state.num_input_tokens_seen

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or "loss" not in logs or self._last_time is None:
            return
        now = time.perf_counter()
        tokens = state.num_input_tokens_seen - self._last_tokens
        if now > self._last_time and tokens > 0:
            logs["tokens_per_second"] = tokens / (now - self._last_time)
            # Trainer.log appended a copy to the history before calling back; keep them equal
            if state.log_history and state.log_history[-1].get("step") == state.global_step:
                state.log_history[-1]["tokens_per_second"] = logs["tokens_per_second"]
        self._last_time, self._last_tokens = now, state.num_input_tokens_seen


def _csv_rows(rows: list[dict[str, Any]], header: bool = False) -> str:
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


class CSVLogCallback(TrainerCallback):
    """Appends one row per training log to `path` (rank 0 only). At the start it writes the
    training logs of the Trainer's state, which a resume loaded from its checkpoint: rows the
    interrupted run logged after that step, a torn last one included, are gone."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            # a new file renamed over the old one: a failed write (file-size limit, full disk)
            # keeps the earlier steps, which a rewrite in place would have truncated
            logged = [entry for entry in state.log_history if "loss" in entry]
            write_text_atomic(self.path, _csv_rows(logged, header=True))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs is not None and "loss" in logs:
            # one write per row, flushed: a kill tears at most this row, which a resume drops
            with self.path.open("a", encoding="utf-8", newline="") as handle:
                handle.write(_csv_rows([{**logs, "step": state.global_step}]))
                handle.flush()


class ProgressBarCallback(TrainerCallback):
    """A tqdm bar over optimizer steps whose postfix shows the last logged loss terms and
    tokens/s; with `bar=False`, one plain line per log instead (for CI logs)."""

    def __init__(self, bar: bool = True) -> None:
        self.bar_enabled = bar
        self.bar = None
        self._step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.bar_enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=state.max_steps, initial=state.global_step, desc="train", dynamic_ncols=True
            )
        self._step = state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self._step)
        self._step = state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or logs is None or "loss" not in logs:
            return
        # the names of the logged keys (log.csv, TensorBoard), so a bar reading is found in the logs
        shown = {key: logs.get(key) for key in PROGRESS_KEYS}
        text = {
            k: f"{v:.0f}" if k == "tokens_per_second" else f"{v:.4g}"
            for k, v in shown.items()
            if isinstance(v, (int, float))
        }
        if self.bar is not None:
            self.bar.set_postfix(text, refresh=True)
        else:
            line = " ".join(f"{k}={v}" for k, v in text.items())
            print(f"step {state.global_step}/{state.max_steps} {line}", flush=True)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class CheckpointMarkerCallback(TrainerCallback):
    """Marks each checkpoint complete once the Trainer has written all of it (all ranks), then
    removes the oldest checkpoints beyond `keep` (train.save_total_limit) with the Trainer's own
    rotation, which the Trainer itself would run before the marker: with a limit of 1 a kill
    between the two would leave no whole checkpoint. (Partial ones were set aside at the start,
    so every checkpoint-N left is whole.)"""

    def __init__(self, keep: int | None) -> None:
        self.keep = keep

    def on_save(self, args, state, control, **kwargs):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()  # every rank's shards are on disk before the marker says so
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                try:
                    write_marker(folder, state.global_step)
                except OSError as error:  # a full disk is one line naming the checkpoint
                    raise (disk_full_error(error, folder) or error) from None
                rotate_checkpoints(args.output_dir, self.keep)


class ConfigRecordCallback(TrainerCallback):
    """Writes config.yaml and inputs.json once the Trainer has loaded everything and training
    begins (rank 0), so a resume that fails while loading its checkpoint leaves the run's
    record as it was."""

    def __init__(self, config: Config, replaced_at: Path | None, inputs: dict[str, str]) -> None:
        self.config, self.replaced_at, self.inputs = config, replaced_at, inputs

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            record_run(self.config, Path(args.output_dir), self.replaced_at, self.inputs)


def own_callbacks(
    config: Config, args: Any, output_dir: Path, replaced_at: Path | None, inputs: dict[str, str]
) -> list[Any]:
    """numloss's callbacks of a run, in the order they run (TensorBoard's on the main process
    only)."""
    callbacks: list[Any] = [
        ThroughputCallback(),
        CheckpointMarkerCallback(config.train.save_total_limit),
        ConfigRecordCallback(config, replaced_at, inputs),
    ]
    if "tensorboard" in config.train.report_to and args.process_index == 0:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback

        writer = SummaryWriter(log_dir=str(output_dir / "tensorboard"))
        callbacks.append(TensorBoardCallback(tb_writer=writer))
    callbacks.append(CSVLogCallback(output_dir / "log.csv"))
    return [*callbacks, ProgressBarCallback(config.train.progress_bar)]
