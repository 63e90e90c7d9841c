"""The run folder (`train.output_dir`): what a run may do with what is there, where a resume
starts, and the records a run keeps beside its checkpoints (config.yaml, inputs.json, log.csv)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from numloss.atomic import write_text_atomic
from numloss.checkpoints import (
    FINAL,
    FINAL_PARTIAL,
    checkpoint_step,
    final_record,
    folder_problem,
    move_aside,
    newest_intact_checkpoint,
    run_entries,
    set_aside,
)
from numloss.config import Config, ConfigError, changed_settings, dump_config, read_stored_config
from numloss.textio import read_json_object

logger = logging.getLogger("numloss.train")

CSV_COLUMNS = tuple(
    """
    step epoch loss ce aux digit_entropy digit_logit_mean pushdown_share digit_target_prob
    digit_share learning_rate grad_norm num_input_tokens_seen tokens_per_second
    """.split()
)


#: beside config.yaml: the content hashes of what the run trains on (its data, its start weights)
INPUTS_FILE = "inputs.json"


def run_inputs(config: Config, examples: list[Any]) -> dict[str, str]:
    """The content hashes a resume is checked against: `data_sha256` of the examples as loaded
    and `model_sha256` of the start weights (absent for 'tiny')."""
    from dataclasses import asdict, is_dataclass

    from numloss.identity import json_sha256, model_sha256

    rows = [asdict(e) if is_dataclass(e) else e for e in examples]
    inputs = {"data_sha256": json_sha256(rows)}
    weights = model_sha256(config.model.name, config.model.cache_dir)
    if weights is not None:
        inputs["model_sha256"] = weights
    return inputs


def check_inputs_unchanged(config: Config, output_dir: Path, inputs: dict[str, str]) -> list[str]:
    """For a resume: the parts of the run's inputs.json that `inputs` changed, returned with
    --resume-changed and a ConfigError without it (a run without inputs.json is not checked)."""
    from numloss.identity import describe_change

    if not (output_dir / INPUTS_FILE).exists():
        return []
    stored = read_json_object(output_dir / INPUTS_FILE) or {}
    names = {
        "data_sha256": f"the training data ({config.data.source})",
        "model_sha256": f"the start weights ({config.model.name})",
    }
    changed = [
        describe_change(name, stored.get(key), inputs.get(key))
        for key, name in names.items()
        if stored.get(key) != inputs.get(key)
    ]
    if changed and not config.train.resume_changed:
        raise ConfigError(
            f"--resume: {'; '.join(changed)} since the run in {output_dir} started; put them back,"
            " or pass --resume-changed to continue on the new ones"
        )
    return changed


def record_config(config: Config, output_dir: Path, replaced_at: Path | None) -> None:
    """Write output_dir/config.yaml (atomically); with `replaced_at` (a --resume-changed resume
    from that checkpoint) the old one is kept as config-before-step-N.yaml first."""
    path = output_dir / "config.yaml"
    if replaced_at is not None and path.is_file():
        path.rename(output_dir / f"config-before-step-{checkpoint_step(replaced_at)}.yaml")
    write_text_atomic(path, dump_config(config))


def record_run(
    config: Config, output_dir: Path, replaced_at: Path | None, inputs: dict[str, str]
) -> None:
    """Write the run's config.yaml (`record_config`) and inputs.json, each atomically."""
    record_config(config, output_dir, replaced_at)
    write_text_atomic(output_dir / INPUTS_FILE, json.dumps(inputs, indent=1, sort_keys=True) + "\n")


@dataclass
class RunPlan:
    """What a run does with its output_dir: action "new", "overwrite" (`entries` move aside),
    "resume" (`changed`: settings let through) or "finished" (`record`: final/'s)."""

    action: str
    entries: list[Path] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    record: dict[str, Any] | None = None
    note: str | None = None


def _reached_end(record: dict[str, Any], config: Config) -> bool:
    try:
        step = int(record.get("global_step", 0))
        saved_train = record["config"]["train"]
        if config.train.max_steps > 0:
            return (
                step >= config.train.max_steps
                if step
                else saved_train.get("max_steps") == config.train.max_steps
            )
        return (
            saved_train.get("max_steps") == -1
            and float(saved_train.get("num_train_epochs", saved_train.get("num_epochs", 0)))
            >= config.train.num_train_epochs
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


def _stored_config(out: Path, resume: bool | str) -> tuple[Config | None, str]:
    """(the run's config.yaml, "") or (None, why it has none that can be read)."""
    path = out / "config.yaml"
    if not path.is_file() and isinstance(resume, str):
        path = Path(resume).parent / "config.yaml"  # a checkpoint of a run elsewhere
    if not path.is_file():
        return None, "it has no config.yaml (Trainer files, or a run from elsewhere)"
    try:
        return read_stored_config(path), ""
    except ConfigError as error:
        return None, f"its config.yaml cannot be read ({error})"


def plan_run_dir(config: Config) -> RunPlan:
    """What this run may do with `train.output_dir` (reads only; raises ConfigError): a run there
    is refused unless --overwrite, --resume with agreeing settings (or --resume-changed), or an
    attempt of this config that saved nothing.
    """
    train = config.train
    out = Path(train.output_dir)
    resume = train.resume
    if train.overwrite and resume is not False:
        raise ConfigError(
            "--overwrite and --resume contradict each other (--resume continues the run in"
            " train.output_dir, --overwrite moves it aside and starts again); give one"
        )
    entries = run_entries(out)
    stored, stored_problem = _stored_config(out, resume)
    if not entries:
        if resume is True:
            raise ConfigError(
                f"train.resume: no complete checkpoint-* folder in {str(out)!r} to resume from; run"
                " without --resume (and with train.save_steps > 0 to write checkpoints), or pass a"
                " checkpoint folder"
            )
        if resume is False:
            return RunPlan("new")
        # a checkpoint named explicitly, from a run without numloss's config.yaml
        if stored is None:
            why = "has no config.yaml beside it; its settings cannot be compared with this config"
            return RunPlan("resume", note=f"train.resume {resume!r} {why}")
    changed = changed_settings(stored, config) if stored is not None else []
    record, final_problem = final_record(out)
    if resume is False:
        return _plan_without_resume(
            config, entries, stored_problem if stored is None else None, changed, record
        )
    if stored is None and not train.resume_changed:
        raise ConfigError(
            f"--resume: {str(out)!r} cannot be checked against this config: {stored_problem}; pass "
            "--resume-changed to resume anyway"
        )
    if changed and not train.resume_changed:
        raise ConfigError(
            "--resume: these settings differ from the run's config.yaml and change what it learns:"
            f" {'; '.join(changed)}. Put them back, or pass --resume-changed to continue under the"
            " new ones"
        )
    if resume is True and record is not None and _reached_end(record, config):
        return RunPlan("finished", entries, changed=changed, record=record)
    note = (
        f"final/ fails its check ({final_problem}); training from the newest intact checkpoint"
        if final_problem
        else None
    )
    return RunPlan("resume", entries, changed=changed, note=note)


def _plan_without_resume(
    config: Config,
    entries: list[Path],
    stored_problem: str | None,
    changed: list[str],
    record: dict[str, Any] | None,
) -> RunPlan:
    """`plan_run_dir` without --resume for a folder holding run files. `stored_problem`: why the
    run's config.yaml cannot be read (None when it can)."""
    out = Path(config.train.output_dir)
    if config.train.overwrite:
        return RunPlan("overwrite", entries)
    progress = [
        e for e in entries if e.name.startswith(("checkpoint-", "final", "merged", "partial-"))
    ]
    whole = [e for e in progress if _whole_progress(e)]
    if (
        stored_problem is None
        and not changed
        and not whole
        and not (out / "trainer_state.json").exists()
    ):
        # killed before its first whole save (a checkpoint without its marker, a torn
        # final.partial): nothing can be resumed, so the same command starts again
        note = "an earlier attempt of this config saved nothing; starting again"
        if progress:
            note = (
                "an earlier attempt of this config was killed before a whole save"
                f" ({', '.join(sorted(e.name for e in progress)[:3])}); starting again (partial"
                " folders kept as partial-*)"
            )
        return RunPlan("new", entries, note=note)
    if record is not None:
        state = f"a finished run (final/, step {record.get('global_step', '?')})"
    elif progress:
        state = f"an unfinished run ({', '.join(sorted(e.name for e in progress)[:3])})"
    else:
        state = "a run"
    if stored_problem is not None:
        whose = f" whose settings are unknown: {stored_problem}"
    elif changed:
        whose = (
            f" of another config ({'; '.join(changed[:4])}{'; ...' if len(changed) > 4 else ''})"
        )
    else:
        whose = " of this config"
    raise ConfigError(
        f"train.output_dir {str(out)!r} already holds {state}{whose}; nothing was changed. --resume"
        f" continues it, --overwrite moves its files to {out}/overwritten-TIME/ and starts again,"
        " or choose another train.output_dir"
    )


def _whole_progress(entry: Path) -> bool:
    """True when a run-folder entry holds progress a resume can use (a whole checkpoint or
    final.partial/, final/, merged/, final-step-N/)."""
    name = entry.name
    if name.startswith("partial-"):
        return False
    if name.startswith("checkpoint-") or name == FINAL_PARTIAL:
        return folder_problem(entry) is None
    return True


def set_partial_aside(output_dir: Path) -> None:
    """Before a run starts again: checkpoint-N folders a kill cut short (no marker) are renamed
    partial-checkpoint-N, so the new run's saves neither overwrite nor count them."""
    for folder in sorted(output_dir.glob("checkpoint-*")):
        if folder.is_dir() and checkpoint_step(folder) >= 0 and folder_problem(folder) is not None:
            moved = set_aside(folder)
            logger.warning(
                f"{output_dir}: {folder.name} was cut short by a kill; kept as {moved.name}"
            )


def check_output_dir(output_dir: Path) -> None:
    """ConfigError, before any model loads, when `output_dir` could not be created or written;
    creates nothing (a dry run makes the same check; a run's lock creates the folder)."""
    folder = output_dir
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(
            f"train.output_dir {str(output_dir)!r} cannot be written ({str(folder)!r} is not a"
            " writable folder); choose a folder you can write to (--train.output_dir DIR)"
        )


def check_resume_folder(folder: Path) -> None:
    """ConfigError when the checkpoint named by train.resume cannot be resumed from."""
    if (problem := folder_problem(folder, require_marker=False)) is not None:
        raise ConfigError(f"train.resume: {str(folder)!r} cannot be resumed from: {problem}")


def resume_checkpoint(config: Config, output_dir: Path, main_process: bool) -> Path:
    """The checkpoint a resume starts from; damaged or partial newer ones are set aside, each
    said in one warning line."""
    if isinstance(config.train.resume, str):
        folder = Path(config.train.resume)
        check_resume_folder(folder)
        return folder
    found, skipped = newest_intact_checkpoint(output_dir)
    for folder, problem in skipped:
        if main_process:
            moved = set_aside(folder)
            logger.warning(
                f"--resume: {folder.name} fails its check: {problem}; moved it to {moved.name}"
            )
    if found is None:
        raise ConfigError(
            f"train.resume: no complete checkpoint-* folder in {str(output_dir)!r} to resume from"
            + (f" (every one failed its check: {skipped[0][1]})" if skipped else "")
            + "; run the same command without --resume: it starts the run again from step 0"
            " (partial folders are kept aside), or pass a checkpoint folder"
        )
    if not any(entry.name.startswith(("optimizer", "global_step")) for entry in found.iterdir()):
        # save_only_model: the Trainer would resume with a fresh optimizer and schedule, and the
        # weights would drift from the uninterrupted run's without a word
        why = (
            f"{found.name} holds no optimizer or scheduler state (train.save_only_model), so a"
            " resume from it cannot continue the run as it was"
        )
        if not config.train.resume_changed:
            raise ConfigError(
                f"train.resume: {why}; pass --resume-changed to continue with a fresh optimizer and"
                " schedule, or --overwrite to start again"
            )
        logger.warning("--resume-changed: %s; continuing with a fresh optimizer and schedule", why)
    if skipped:
        logger.warning("--resume: falling back to %s, the newest intact checkpoint", found.name)
    else:
        logger.warning("--resume: continuing from %s", found.name)
    return found


def ready_folder(
    config: Config, output_dir: Path, plan: RunPlan, main_process: bool
) -> Path | None:
    """Carry out `plan` on the run folder (move a run aside, set partial checkpoints aside);
    returns the checkpoint a resume starts from, None for a new run."""
    if plan.note:
        logger.warning("%s: %s", output_dir, plan.note)
    if plan.action == "overwrite" and main_process:
        moved = move_aside(output_dir, plan.entries)
        logger.warning("--overwrite: moved the run that was in %s to %s", output_dir, moved)
    if plan.action == "new" and plan.entries and main_process:
        set_partial_aside(output_dir)
    if plan.action != "resume":
        return None
    checkpoint = resume_checkpoint(config, output_dir, main_process)
    if plan.changed:
        logger.warning(
            f"--resume-changed: continuing under new settings: {'; '.join(plan.changed)}"
        )
    return checkpoint


def checkpoint_at_end(checkpoint: Path, config: Config) -> bool:
    """True when `checkpoint` holds the run's last optimizer step already."""
    try:
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        step, planned = int(state["global_step"]), int(state.get("max_steps") or 0)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    end = config.train.max_steps if config.train.max_steps > 0 else planned
    return end > 0 and step >= end


def continue_with(output_dir: Path) -> str:
    """The command that continues the run in `output_dir`, from what the folder holds."""
    found, _ = newest_intact_checkpoint(output_dir)
    if found is not None:
        return f"run the same command with --resume to continue from {found.name}"
    return "run the same command: no checkpoint was whole, so it starts again"


def interrupted_line(output_dir: Path) -> str:
    """The one line a Ctrl-C prints: what the run folder kept and the command that continues."""
    if newest_intact_checkpoint(output_dir)[0] is None and (output_dir / FINAL).is_dir():
        return f"interrupted; {output_dir / FINAL} is kept as it was"
    return f"interrupted; {continue_with(output_dir)}"
