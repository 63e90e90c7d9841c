"""Has a run learnt the task yet? Checks during training, on a small fixed held-out slice.

On the addition task a run's outcome is close to bimodal (it either learns the answer's hard last
digit in its budget or it does not), so a final-step pass count is a lottery over which runs
happened to cross in time. Instead every `every` optimizer steps the run is scored on `slice_size`
held-out items (greedy decoding, exact match), and the run **has learnt the task** at the first
check whose exact match is at least `threshold`. With `stop_early` a run stops there (the step is
recorded; its final evaluation is of the model at that step), which buys seeds. What a run records:

    checks:   [[step, exact match], ...] of every check done
    learnt:   true / false
    step:     the first check that met the criterion, or the last check done (censored)

These are the (step, learnt) outcomes of `numloss.compare.survival`. On a graded task
(configs/compare-mul.yaml) the checks run with `stop_early: false`: every run is scored at its last
step, and the checks give the area under the check curve
(`numloss.compare.paired.check_curve_area`). The slice is drawn apart from the test sets and from
training (`ArithmeticTask.check_set`), the same for every run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from annotated_types import Gt, Le

from numloss.compare.task import Count


@dataclass
class LearningCheck:
    """How a run is checked during training (the `learning:` section of a comparison YAML; the
    types and ranges are checked by numloss.compare.tasks.checked)."""

    every: Count = 200  # optimizer steps between checks (and a check at the last step)
    slice_size: Count = 200  # held-out items per check
    threshold: Annotated[float, Gt(0), Le(1)] = 0.8  # exact match at which the run has learnt
    stop_early: bool = True  # stop a run at its first check that meets the threshold
    batch_size: Count = 200  # generation batch of a check


def exact_answer(output: str, gold: str) -> bool:
    """The arithmetic task's criterion: the stripped output is the gold string."""
    return output.strip() == gold


def greedy(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    batch_size: int,
    max_new_tokens: int | None = None,
    golds: Sequence[str] = (),
    stop: tuple[str, ...] = ("\n",),
) -> list[Any]:
    """numloss.evaluate's greedy generations of `prompts` (no progress bar); `max_new_tokens`
    None: room for the longest of `golds` and two tokens more (a wrong answer shows past it)."""
    from numloss.evaluate.generate import HFGenerator

    if max_new_tokens is None:
        lengths = (len(tokenizer(g, add_special_tokens=False)["input_ids"]) for g in golds)
        max_new_tokens = max(lengths) + 2
    generator = HFGenerator(model, tokenizer, batch_size, max_new_tokens, stop, progress=False)
    return generator.generate(list(prompts))


def score_slice(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    golds: Sequence[str],
    match: Callable[[str, str], bool] = exact_answer,
    batch_size: int = 200,
    max_new_tokens: int | None = None,
) -> float:
    """Share of `prompts` whose greedy output matches its gold (`match`). Leaves the model in the
    mode it found it in (a check runs mid-training)."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            generated = greedy(model, tokenizer, prompts, batch_size, max_new_tokens, golds)
            outputs = [g.text for g in generated]
    finally:
        model.train(was_training)
    return sum(match(o, g) for o, g in zip(outputs, golds, strict=True)) / len(golds)


def learning_callback(
    settings: LearningCheck,
    prompts: Sequence[str],
    golds: Sequence[str],
    match: Callable[[str, str], bool] = exact_answer,
    max_new_tokens: int | None = None,
) -> Any:
    """A `transformers.TrainerCallback` that runs the checks; its `record()` is what a run keeps."""
    from transformers import TrainerCallback

    class LearningCheckCallback(TrainerCallback):
        def __init__(self) -> None:
            self.checks: list[list[float]] = []
            self.learnt_at: int | None = None

        def on_step_end(self, args, state, control, **kwargs):
            step = state.global_step
            if step % settings.every and step < state.max_steps:
                return control
            if self.learnt_at is not None and settings.stop_early:
                return control
            model, tokenizer = kwargs["model"], kwargs["processing_class"]
            em = score_slice(
                model, tokenizer, prompts, golds, match, settings.batch_size, max_new_tokens
            )
            self.checks.append([step, em])
            if self.learnt_at is None and em >= settings.threshold:
                self.learnt_at = step
                if settings.stop_early:
                    control.should_training_stop = True
            return control

        def record(self) -> dict[str, Any]:
            last = int(self.checks[-1][0]) if self.checks else 0
            return {
                "checks": self.checks,
                "learnt": self.learnt_at is not None,
                "step": self.learnt_at if self.learnt_at is not None else last,
                "threshold": settings.threshold,
                "every": settings.every,
                "slice_size": len(golds),
                "stop_early": settings.stop_early,
            }

    return LearningCheckCallback()
