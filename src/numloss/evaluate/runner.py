"""Scoring outputs under a protocol, and running a protocol on a benchmark, batch by batch.

Per item: the first prompt (program of thought for open answers, chain of thought for multiple
choice); a program found in the output runs in the sandbox and the answer is read from what it
printed, else from the text; an open item whose first attempt gives no answer gets a
chain-of-thought fallback; `protocol.finalize` and `protocol.compare` give the verdict.
`score_items` does that on given outputs (re-scoring needs no model); `run_benchmark` generates
what is missing and appends each batch's results before starting the next.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from numloss.checks import check_float, check_int
from numloss.evaluate.answers import READ_SECONDS, GoldError, Reading, plain_number, read_limit
from numloss.evaluate.benchmarks import Benchmark, Item
from numloss.evaluate.generate import Generator, cut_at_stop
from numloss.evaluate.programs import REFUSED, ProgramRunner
from numloss.evaluate.protocol import Protocol, first_style
from numloss.evaluate.sandbox import ProgramResult, SandboxLimits

STDOUT_KEPT = 2000  # characters of a program's stdout kept in the results


def program_runner(
    program_timeout: float = 5.0, workers: int | None = None, allow_unisolated: bool | None = None
) -> ProgramRunner:
    """The `ProgramRunner` of one evaluation; ValueError naming the option for a timeout that is not
    a positive finite number of seconds, or a worker count that is not a positive integer (0 and -1
    used to mean "CPU count" and "1" without a word; None is the CPU count)."""
    check_program_options(program_timeout, workers)
    limits = SandboxLimits(
        wall_seconds=float(program_timeout), cpu_seconds=max(1, math.ceil(program_timeout))
    )
    return ProgramRunner(limits, workers, allow_unisolated)


def check_program_options(program_timeout: float, workers: int | None) -> None:
    """ValueError naming the option unless `program_timeout` is a positive finite number of seconds
    and `workers` None or a positive integer of at most 4 per CPU core (each is a sandboxed process:
    100000 of them would run as many as the machine allows at once). Shared by the API and the CLI.
    """
    import os

    check_float("--program-timeout (program_timeout)", program_timeout, 0, low_open=True)
    if workers is not None:
        check_int("--workers (workers)", workers, 1, 4 * (os.cpu_count() or 1))


@dataclass
class ItemResult:
    """One item scored under one protocol: one line of the results file."""

    benchmark: str
    id: str
    protocol: str
    kind: str
    gold: str
    style: str  # "pot", "cot", or "pot+cot" (first attempt gave nothing, chain of thought used)
    output: str
    prediction: str = ""  # "" and False until scored
    correct: bool = False
    value: float | None = None  # the prediction as a number (open items), None when it is not one
    # of the first attempt's program; "" when none ran, "refused" when not allowed
    program_status: str = ""
    program_stdout: str = ""  # as scored: terminal controls removed (sandbox.safe_text)
    # what the program wrote, when it differs (invalid UTF-8 backslash-escaped)
    program_stdout_raw: str = ""
    fallback_output: str | None = None  # the chain-of-thought output, None when not generated
    fallback_program_status: str = ""
    needs_fallback: bool = False  # the first attempt gave nothing and no fallback output was given
    question: str = ""
    # why the item is unreadable ("" when it was read): reading failed or overran READ_SECONDS
    note: str = ""
    # the rule that gave the prediction: "released" or a correction's name (answers.CORRECTIONS)
    decided_by: str = "released"
    extra: dict = field(default_factory=dict)  # model, settings key, isolation (set by the runner)

    def to_json(self) -> dict:
        out = asdict(self)
        extra = out.pop("extra")
        return {**extra, **out}


def _attempt(
    protocol: Protocol,
    item: Item,
    output: str,
    style: str,
    benchmark: str,
    run: Callable[[str], ProgramResult | None],
) -> tuple[Reading, ProgramResult | None]:
    """(the reading, the program's result or None) of one output."""
    program = protocol.program(output) if style in protocol.program_styles else None
    if program is None:
        return protocol.extract(item, output, benchmark), None
    result = run(protocol.script(program))
    stdout = result.stdout if result is not None and result.ok else None
    reading = protocol.extract(item, protocol.read_program(stdout), benchmark)
    # the program gave nothing: read the text
    if not reading.prediction and style in protocol.text_after_program:
        # not the code's own literals
        reading = protocol.extract(item, protocol.prose(output), benchmark)
    return reading, result


def score_items(
    protocol: Protocol,
    benchmark: str,
    items: Sequence[Item],
    outputs: Sequence[str],
    fallbacks: Sequence[str | None],
    runner: ProgramRunner,
    program_of_thought: bool = True,
) -> list[ItemResult]:
    """Score each item's first output (and fallback output, where the protocol needs it)."""
    styles = [first_style(item, program_of_thought) for item in items]
    limits = (protocol.program_output_bytes, protocol.program_memory_bytes, protocol.program_clock)
    attempts = [*zip(outputs, styles, strict=True), *((f or "", "cot") for f in fallbacks)]
    programs = [protocol.program(o) for o, style in attempts if style in protocol.program_styles]
    # all programs of the batch at once, in parallel; cached for _attempt
    runner.run([protocol.script(p) for p in programs if p is not None], *limits)

    def run(script: str) -> ProgramResult:
        return runner.run([script], *limits)[0]

    results = []
    for item, output, fallback, style in zip(items, outputs, fallbacks, styles, strict=True):
        gold = protocol.gold(item)
        result = ItemResult(benchmark, item.id, protocol.name, item.kind, gold, style, output)
        result.question = item.question
        try:
            _score_one(protocol, benchmark, item, output, fallback, style, run, result)
        except GoldError:
            raise  # the benchmark's data is wrong, not this output: every item would fail alike
        except Exception as error:  # one output may never stop the eval: it is this item's verdict
            result.prediction, result.correct, result.value = "", False, None
            result.note = f"unreadable: {type(error).__name__}: {str(error)[:200]}"
            result.decided_by = "unreadable"
        results.append(result)
    return results


def _score_one(
    protocol: Protocol,
    benchmark: str,
    item: Item,
    output: str,
    fallback: str | None,
    style: str,
    run: Callable[[str], ProgramResult],
    result: ItemResult,
) -> None:
    """Fill `result` with the verdict on one item; reading each attempt is bounded by
    READ_SECONDS."""
    with read_limit(READ_SECONDS):
        reading, program = _attempt(protocol, item, output, style, benchmark, run)
    if program is not None:
        result.program_status = program.status
        result.program_stdout = program.stdout[-STDOUT_KEPT:]
        raw = getattr(program, "raw_stdout", b"").decode("utf-8", "backslashreplace")[-STDOUT_KEPT:]
        # kept for the record; reports and terminals see the clean text
        if raw != result.program_stdout:
            result.program_stdout_raw = raw
    if not reading.prediction and style == "pot":
        result.style = "pot+cot"
        if fallback is None:
            result.needs_fallback = True
        else:
            result.fallback_output = fallback
            with read_limit(READ_SECONDS):
                reading, second = _attempt(protocol, item, fallback, "cot", benchmark, run)
            result.fallback_program_status = second.status if second is not None else ""
    elif fallback is not None:
        result.fallback_output = fallback  # generated for another protocol; kept with the item
    with read_limit(READ_SECONDS):
        result.prediction = protocol.finalize(item, reading.prediction)
        result.decided_by = reading.decided_by
        result.correct = bool(result.prediction) and protocol.compare(item, result.prediction)
        if result.prediction and item.kind != "choice":
            result.value = plain_number(result.prediction)


@dataclass
class Pending:
    """What is known of one item before scoring: its outputs, generated now or loaded."""

    item: Item
    output: str | None = None
    fallback: str | None = None


def run_benchmark(
    benchmark: Benchmark,
    protocols: Sequence[Protocol],
    generator: Generator | None,
    runner: ProgramRunner,
    *,
    done: dict[str, dict[str, ItemResult]] | None = None,
    known_outputs: dict[str, tuple[str, str | None]] | None = None,
    write: Callable[[list[ItemResult]], None] | None = None,
    batch_size: int = 8,
    program_of_thought: bool = True,
    stop: Sequence[str] = (),
) -> dict[str, list[ItemResult]]:
    """Every item of `benchmark` under every protocol, batch by batch; {protocol name: results}.

    `done[protocol][id]`: results already in the results file (kept, not redone).
    `known_outputs[id]`: (first output, fallback or None) saved earlier under the same generation
    settings, reused instead of generating. `write` receives each finished batch's new results.
    Generated outputs are cut at `stop` (the protocol's stop strings), whatever made them.
    """
    check_int("--batch-size (batch_size)", batch_size, 1)
    done = done or {}
    known_outputs = known_outputs or {}
    final: dict[str, dict[str, ItemResult]] = {
        p.name: dict(done.get(p.name, {})) for p in protocols
    }
    todo = [it for it in benchmark.items if any(it.id not in final[p.name] for p in protocols)]
    for start in range(0, len(todo), batch_size):
        pending = [
            Pending(it, *known_outputs.get(it.id, (None, None)))
            for it in todo[start : start + batch_size]
        ]
        missing = [p for p in pending if p.output is None]
        if missing and generator is None:
            raise ValueError(
                f"{benchmark.name}: item {missing[0].item.id} has no saved output and no model was"
                " given"
            )
        styles = [first_style(p.item, program_of_thought) for p in missing]
        _generate_for(generator, protocols[0], missing, styles, stop)
        scored = _score_all(protocols, benchmark.name, pending, runner, program_of_thought)
        need = [
            p for i, p in enumerate(pending) if any(s[i].needs_fallback for s in scored.values())
        ]
        if need and generator is not None:
            _generate_for(generator, protocols[0], need, ["cot"] * len(need), stop, fallback=True)
            scored = _score_all(protocols, benchmark.name, pending, runner, program_of_thought)
        new = []
        for pr in protocols:
            for p, result in zip(pending, scored[pr.name], strict=True):
                if p.item.id not in final[pr.name]:
                    final[pr.name][p.item.id] = result
                    new.append(result)
        if write is not None and new:
            write(new)
        runner.forget()
    return {pr.name: [final[pr.name][it.id] for it in benchmark.items] for pr in protocols}


def _score_all(
    protocols: Sequence[Protocol],
    benchmark: str,
    pending: list[Pending],
    runner: ProgramRunner,
    pot: bool,
) -> dict[str, list[ItemResult]]:
    """{protocol name: the verdicts on the `pending` items' outputs}."""
    items, fallbacks = [p.item for p in pending], [p.fallback for p in pending]
    outputs = [p.output or "" for p in pending]
    return {
        pr.name: score_items(pr, benchmark, items, outputs, fallbacks, runner, pot)
        for pr in protocols
    }


def _generate_for(
    generator: Generator | None,
    protocol: Protocol,
    pending: list[Pending],
    styles: list[str],
    stop: Sequence[str],
    fallback: bool = False,
) -> None:
    """Set the output (with `fallback`, the fallback output) of each `pending` item prompted in
    `styles` under `protocol`, cut at `stop`. Prompts are grouped by token limit (open and
    multiple-choice items differ); `fallback` is passed to a generator that takes it (its progress
    bar counts items, not prompts)."""
    if not pending or generator is None:
        return
    prompts = [protocol.prompt(p.item, s) for p, s in zip(pending, styles, strict=True)]  # type: ignore[arg-type]
    limits = [protocol.max_new_tokens(p.item) for p in pending]
    takes = inspect.signature(generator.generate).parameters
    options = {"fallback": True} if fallback and "fallback" in takes else {}
    for limit in sorted(set(limits)):
        index = [i for i, lim in enumerate(limits) if lim == limit]
        batch = [prompts[i] for i in index]
        if "max_new_tokens" in takes:
            gens = generator.generate(batch, max_new_tokens=limit, **options)
        else:  # a generator with one fixed limit
            gens = generator.generate(batch, **options)
        for i, text in zip(index, generated_texts(generator, batch, gens), strict=True):
            setattr(pending[i], "fallback" if fallback else "output", cut_at_stop(text, stop))


def generated_texts(generator: Any, prompts: Sequence[str], gens: Any) -> list[str]:
    """The texts of a generator's answer to `prompts`: one `Generation` (anything with a `.text`
    string) per prompt. A generator returning fewer or more results, None, or plain strings is
    refused in one line naming it: a short list would shift every verdict onto the wrong item."""
    name = type(generator).__name__
    if gens is None or isinstance(gens, (str, bytes)) or not hasattr(gens, "__len__"):
        raise ValueError(
            f"generator {name}.generate returned {type(gens).__name__}, not a list of Generation "
            "(numloss.evaluate.generate.Generation(text, new_tokens)) per prompt"
        )
    if len(gens) != len(prompts):
        raise ValueError(
            f"generator {name}.generate returned {len(gens)} results for {len(prompts)} prompts; "
            "it must return one Generation per prompt, in order"
        )
    texts = []
    for g in gens:
        text = getattr(g, "text", None)
        if not isinstance(text, str):
            got = (
                "a plain str"
                if isinstance(g, str)
                else f"{type(g).__name__} with text {text!r}"[:80]
            )
            raise ValueError(
                f"generator {name}.generate returned {got}; each result must be a Generation "
                "(numloss.evaluate.generate.Generation(text, new_tokens)) whose text is a string"
            )
        texts.append(text)
    return texts


def refused(results: Sequence[ItemResult]) -> int:
    """Items whose program was refused (isolation unavailable, not opted in)."""
    return sum(r.program_status == REFUSED or r.fallback_program_status == REFUSED for r in results)
