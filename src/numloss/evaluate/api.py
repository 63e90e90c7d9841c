"""The Python API: `evaluate` a model on benchmarks, or `score_outputs` saved generations.

    from numloss.evaluate import evaluate, score_outputs
    data = "../shared/benchmarks"
    report = evaluate("smollm2", ["gsm8k", "svamp"], data_dir=data, protocol="both", limit=20)
    report.accuracy("gsm8k", "numloss"), report.macc("released"), report.disagreements["gsm8k"]
    print(report.to_markdown())
    again = score_outputs("outputs/eval/items.jsonl", protocol="numloss", data_dir=data)
    # lm-eval --log_samples output:
    theirs = score_outputs("samples_gsm8k_2024-06-01T12-00-00.jsonl", data_dir=data)
    # schema numloss.evaluate.report.SCHEMA_VERSION, docs/evaluation.md "The report's JSON":
    report.to_json()

`numloss eval` is a thin command line over these two functions.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from numloss.checks import check_bool, check_choice, check_int, check_path, check_type
from numloss.evaluate.benchmarks import (
    BENCHMARKS,
    SYNTHETIC_SEED,
    Benchmark,
    BenchmarkError,
    Item,
    canonical_name,
    check_limit,
    load_benchmark,
    load_for_records,
    parse_benchmark_list,
)
from numloss.evaluate.metrics import DigitStats, accuracy, numeric_distance, place_accuracy
from numloss.evaluate.programs import ProgramRunner
from numloss.evaluate.protocol import Protocol, generation_settings, resolve
from numloss.evaluate.report import BenchmarkScore, EvalReport, answer_style
from numloss.evaluate.runner import ItemResult, program_runner, refused, run_benchmark
from numloss.evaluate.store import (
    ResultsFile,
    check_output_record,
    model_identity,
    read_lines,
    recorded_set,
    settings_key,
)

DECIMAL_TEXT = "0123456789.-"
BENCHMARK_KIND = {name: spec.kind for name, spec in BENCHMARKS.items()}


def benchmark_score(
    results: Sequence[ItemResult], digits: DigitStats | None = None
) -> BenchmarkScore:
    """Accuracy with its 95 % Wilson interval, counts, numeric distance and place accuracy."""
    from numloss.evaluate.answers import gold_decimal
    from numloss.evaluate.metrics import wilson_interval

    first = results[0]
    correct = sum(r.correct for r in results)
    preds, golds, place_preds, place_golds = [], [], [], []
    for r in results:
        gold = gold_decimal(r.gold) if r.kind != "choice" else None
        if gold is None:
            continue
        golds.append(float(gold))
        preds.append(r.value)
        if all(c in DECIMAL_TEXT for c in r.gold.strip()):
            place_golds.append(r.gold.strip())
            place_preds.append(r.value)
    score = BenchmarkScore(
        benchmark=first.benchmark,
        protocol=first.protocol,
        count=len(results),
        correct=correct,
        accuracy=accuracy([r.correct for r in results]),
        ci95=wilson_interval(correct, len(results)),
        answered=sum(bool(r.prediction) for r in results),
        styles=dict(Counter(answer_style(r) for r in results)),
        program_status=dict(Counter(r.program_status for r in results if r.program_status)),
        pot_refused=refused(results),
    )
    if golds:
        distance = numeric_distance(preds, golds)
        score.mae, score.signed_log_mae = _finite(distance.mae), _finite(distance.signed_log_mae)
        score.numeric_count, score.mae_top_share = distance.count, _finite(distance.top_share)
    if place_golds:
        score.place_accuracy = place_accuracy(place_preds, place_golds)
    if digits is not None and digits.count:
        from numloss.evaluate.metrics import entropy_histogram

        score.digit_entropy, score.digit_accuracy = digits.mean_entropy, digits.accuracy
        score.digit_entropy_histogram = entropy_histogram(digits.entropies)[0]
    return score


def _finite(x: float) -> float | None:
    return None if x is None or math.isnan(x) else x


def _load(
    benchmarks: str | Sequence[str | Benchmark],
    data_dir: str | Path | None,
    limit: int | None,
    seed: int | None,
) -> list[Benchmark]:
    check_limit(limit)
    if isinstance(benchmarks, str):
        wanted: list[Any] = parse_benchmark_list(benchmarks)
    else:
        wanted = [b if isinstance(b, Benchmark) else parse_benchmark_list(b)[0] for b in benchmarks]
    if not wanted:
        raise BenchmarkError(
            "benchmarks is empty; name at least one, e.g. ['gsm8k', 'svamp'] (--benchmarks"
            " gsm8k,svamp)"
        )
    seed = SYNTHETIC_SEED if seed is None else seed
    return [
        w.head(limit)
        if isinstance(w, Benchmark)
        else load_benchmark(w[0], path=w[1], data_dir=data_dir, limit=limit, seed=seed)
        for w in wanted
    ]


def load_adapter_run(model_or_path: Any, device: str | None = None) -> tuple[Any, Any] | None:
    """(model, tokenizer) for a LoRA run's adapter folder (`RUN/final`: adapter_config.json, no
    config.json): the base model rebuilt from the run's config.yaml as training built it, the
    adapter merged in. None for anything else. A folder without its run's config.yaml beside it
    is refused in one line naming the run's merged/ folder."""
    from numloss.models.load import ModelUnavailableError

    if not isinstance(model_or_path, (str, Path)):
        return None
    folder = Path(model_or_path).expanduser()
    if not (folder / "adapter_config.json").is_file() or (folder / "config.json").is_file():
        return None
    run_config = folder.parent / "config.yaml"
    if not run_config.is_file():
        raise ModelUnavailableError(
            f"{folder} is a LoRA adapter without its run's config.yaml ({run_config}) to rebuild"
            f" the base model from: evaluate the run's merged model ({folder.parent / 'merged'},"
            " written with lora.merge: true)"
        )
    from peft import PeftModel

    from numloss.config import ConfigError, load_config
    from numloss.evaluate.generate import resolve_device
    from numloss.extras import peft_quietly
    from numloss.train import load_model_for

    target = resolve_device(device)
    try:
        config = load_config(run_config, [])
    except ConfigError as error:
        raise ModelUnavailableError(
            f"{folder} is a LoRA adapter whose run config {run_config} does not load ({error}): "
            f"evaluate the run's merged model ({folder.parent / 'merged'})"
        ) from None
    base, tokenizer = load_model_for(config)
    with peft_quietly():
        model = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
    return model.to(target), tokenizer


def set_threads(threads: int | None) -> None:
    """`torch.set_num_threads(threads)` after checking 1 <= threads <= the machine's cores (None:
    leave it)."""
    if threads is None:
        return
    import os

    import torch

    # as numloss train and compare say it
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"--threads must be a positive integer, got {threads!r}")
    cores = os.cpu_count() or 1
    if threads > cores:  # thousands of threads stall torch instead of helping
        raise ValueError(
            f"--threads {threads}: this machine has {cores} CPU cores; give at most {cores}"
        )
    torch.set_num_threads(threads)


def _report(
    protocols: list[Protocol],
    per: dict[str, dict[str, list[ItemResult]]],
    digits: dict[str, DigitStats],
    runner: ProgramRunner,
    meta: dict[str, Any],
) -> EvalReport:
    from datetime import datetime, timezone

    from numloss import __version__

    # the report's header says what made it, and when
    meta.setdefault("numloss_version", __version__)
    meta.setdefault("date", datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    scores = {
        p.name: {b: benchmark_score(rs, digits.get(b)) for b, rs in per[p.name].items()}
        for p in protocols
    }
    ran = bool(meta.pop("program_of_thought", True)) and runner.isolation.available
    isolation = {"mode": runner.isolation.mode, "detail": runner.isolation.detail}
    isolation["program_of_thought"] = ran
    return EvalReport([p.name for p in protocols], scores, per, isolation, meta)


def _model_name(model_or_path: Any) -> str:
    if isinstance(model_or_path, (str, Path)):
        return str(model_or_path)
    model = model_or_path[0] if isinstance(model_or_path, tuple) else model_or_path
    return str(getattr(getattr(model, "config", None), "name_or_path", "") or type(model).__name__)


def evaluate(
    model_or_path: Any,
    benchmarks: str | Sequence[str | Benchmark],
    data_dir: str | Path | None = None,
    protocol: str | Protocol | Sequence = "numloss",
    *,
    limit: int | None = None,
    results_file: str | Path | None = None,
    overwrite: bool = False,
    batch_size: int = 8,
    max_new_tokens: int | None = None,
    backend: str = "hf",
    dtype: str = "auto",
    device: str | None = None,
    tensor_parallel: int = 1,
    digit_stats: bool = True,
    program_of_thought: bool = True,
    allow_unisolated: bool | None = None,
    workers: int | None = None,
    program_timeout: float = 5.0,
    seed: int | None = None,
    progress: bool = False,
    cut_at_stop: bool = True,
    threads: int | None = None,
) -> EvalReport:
    """Evaluate a model on `benchmarks` under `protocol` ("released", "numloss", "both"): a report.

    `model_or_path`: a name or folder for `numloss.models.load`, a `(model, tokenizer)` pair, or any
    object with `generate(prompts, max_new_tokens=None) -> [Generation]`. `benchmarks`: names
    ("gsm8k,svamp", `file:PATH.jsonl`, `NAME=PATH`) or `Benchmark`s. `results_file`: the per-item
    JSONL to append to and resume from. `cut_at_stop`: every output, a custom generator's too, is
    cut at the protocol's stop strings. `threads`: torch CPU threads for the process.
    """
    started = time.perf_counter()
    _check_evaluate_arguments(locals())
    opts = SimpleNamespace(**locals())  # the checked options, for the steps below
    set_threads(threads)  # checked before anything loads
    protocols = resolve(protocol)  # type: ignore[arg-type]
    stop, open_limit, choice_limit = generation_settings(protocols)
    if max_new_tokens is not None:
        open_limit = min(open_limit, max_new_tokens)
        choice_limit = min(choice_limit, max_new_tokens)
    loaded = _load(benchmarks, data_dir, limit, seed)
    if backend == "hf" and (adapter := load_adapter_run(model_or_path, device)) is not None:
        model_or_path = adapter  # a LoRA run's final/: its base model with the adapter merged in
    if digit_stats:
        check_digit_tokens(model_or_path)  # before the model loads and generates, not after
    # its options checked before the model loads
    runner = program_runner(program_timeout, workers, allow_unisolated)
    settings = {
        "prompt": "released-alpaca-0shot",
        "stop": list(stop),
        "max_new_tokens_open": open_limit,
        "max_new_tokens_choice": choice_limit,
        "backend": backend,
        "dtype": dtype,
        "program_of_thought": program_of_thought,
    }
    name = _model_name(opts.model_or_path)  # as given, not the merged adapter
    store, saved, extra = _resume(opts, model_or_path, name, settings, runner, loaded, protocols)
    model, tokenizer, generator = _generator(opts, model_or_path, stop, open_limit)
    if runner.isolation.mode == "unavailable" and program_of_thought:
        print(
            f"numloss eval: programs will not run: {runner.isolation.detail}. Items with a program"
            " use chain of thought.",
            file=sys.stderr,
        )
    opts.stop = stop if cut_at_stop else ()
    capped = [
        replace(p, max_new_tokens_open=open_limit, max_new_tokens_choice=choice_limit)
        for p in protocols
    ]
    measured = (model, tokenizer) if digit_stats and model is not None else None
    per, digits = _run_all(opts, loaded, saved, capped, generator, runner, store, extra, measured)
    getattr(generator, "close_progress", lambda: None)()
    meta = {
        "model": name,
        "settings": settings,
        "settings_key": extra["settings"],
        "results_file": str(results_file) if results_file else None,
        "wall_seconds": time.perf_counter() - started,
        "program_of_thought": program_of_thought,
        "limit": limit,
        "threads": threads,
        "generation_stats": _generation_stats(generator),
    }
    return _report(protocols, per, digits, runner, meta)


def _check_evaluate_arguments(given: Mapping[str, Any]) -> None:
    """Every plain argument of `evaluate` checked for type and range (numloss.checks) before
    anything loads: a string "no" for a bool, "x" or NaN for a count is refused, not read as true
    or passed on."""
    for name in ("overwrite", "digit_stats", "program_of_thought", "progress", "cut_at_stop"):
        check_bool(name, given[name])
    if given["allow_unisolated"] is not None:
        check_bool("allow_unisolated", given["allow_unisolated"])
    check_int("batch_size", given["batch_size"], 1)
    check_int("tensor_parallel", given["tensor_parallel"], 1)
    if given["max_new_tokens"] is not None:  # limit: check_limit, as every command says it
        check_int("max_new_tokens", given["max_new_tokens"], 1)
    if given["seed"] is not None:
        check_int("seed", given["seed"], 0, 2**32 - 1)
    check_choice("backend", given["backend"], ("hf", "vllm"))
    check_choice("dtype", given["dtype"], ("auto", "float32", "bfloat16", "float16"))
    benchmarks = given["benchmarks"]
    if not isinstance(benchmarks, str):
        check_type(
            "benchmarks",
            benchmarks,
            (list, tuple),
            "a comma-separated str or a list of names or Benchmarks",
        )
        for index, item in enumerate(benchmarks):
            check_type(
                f"benchmarks[{index}]",
                item,
                (str, Benchmark),
                "a benchmark name (str) or a Benchmark",
            )
    if given["data_dir"] is not None:
        check_path("data_dir", given["data_dir"])
    if given["results_file"] is not None:
        check_path("results_file", given["results_file"], "new_file")


def _synthetic_fields(bench: Benchmark, seed: int | None) -> dict[str, int]:
    """The seed and size a synthetic set's records carry (score_outputs regenerates it from
    them)."""
    if not bench.name.startswith(("synthetic:", "gym:")):
        return {}
    return {"seed": SYNTHETIC_SEED if seed is None else seed, "set_size": len(bench)}


def _generation_stats(generator: Any) -> dict[str, Any]:
    tokens, seconds = getattr(generator, "tokens", 0), getattr(generator, "seconds", 0.0)
    per_second = tokens / seconds if seconds else None
    return {"tokens": tokens, "seconds": seconds, "tokens_per_second": per_second}


def _resume(
    opts: SimpleNamespace,
    model_or_path: Any,
    model_name: str,
    settings: dict[str, Any],
    runner: ProgramRunner,
    loaded: list[Benchmark],
    protocols: list[Protocol],
) -> tuple[ResultsFile | None, list, dict[str, Any]]:
    """(the results file, this run's saved records, the fields each new record carries), after
    `--overwrite` moved the records to redo aside and the saved ones were checked as this model's
    outputs for these items (`stale`).
    """
    from numloss.identity import describe_change

    results_file, cut_at_stop = opts.results_file, bool(opts.cut_at_stop)
    key = settings_key(settings)
    extra = {
        "model": model_name,
        "model_identity": None,
        "settings": key,
        "generation": settings,
        "isolation": runner.isolation.mode,
        "cut_at_stop": cut_at_stop,
    }
    if results_file is None:
        return None, [], extra
    identity = extra["model_identity"] = model_identity(model_or_path)  # before the model loads
    # the weights' bytes, not their names, sizes and times: a model saved over another with the
    # same sizes and restored times is still another model (numloss.identity)
    content = None
    if isinstance(model_or_path, (str, Path)):
        from numloss.identity import model_sha256

        content = extra["model_sha256"] = model_sha256(str(model_or_path))
    store = ResultsFile(results_file)
    names, benches = {p.name for p in protocols}, {b.name for b in loaded}
    items = {(b.name, it.id): (b, it) for b in loaded for it in b.items}
    golds = {p.name: p for p in resolve("both")}

    def ours(r: Mapping[str, Any]) -> bool:
        return (
            r.get("model") == model_name
            and r.get("settings") == key
            and r.get("benchmark") in benches
        )

    def stale(r: Mapping[str, Any]) -> str | None:
        """What makes a saved record another input's, or None: another model identity (the files
        or weights at the same path changed, or none is recorded; not checked when `identity` is
        None: a generator that names none), other weights' bytes, the other stop-cut mode (a record
        without those two fields, of an older numloss, is not stale by them), or another item under
        its id (ids are positions: another --seed of a synthetic set, an edited file or another
        source would score the old answers under the new questions) or another gold answer (the
        saved verdicts would be the old answers')."""
        old = r.get("model_identity")
        if identity is not None and old != identity:
            return "they may be another model's outputs: " + (
                "they carry no model identity (written by an older numloss)"
                if old is None
                else f"the model's files or weights changed since ({old}, now {identity})"
            )
        if content is not None and r.get("model_sha256") not in (None, content):
            return describe_change(f"the weights of {model_name!r}", r.get("model_sha256"), content)
        if r.get("cut_at_stop", cut_at_stop) != cut_at_stop:
            return (
                f"the stop-cut mode changed (cut_at_stop {r['cut_at_stop']} then, {cut_at_stop}"
                " now; --no-stop-cut sets it)"
            )
        bench, item = items.get((r.get("benchmark"), str(r.get("id"))), (None, None))
        if bench is None or item is None:
            return None
        if r.get("question") and r["question"] != item.question:
            return (
                f"item {bench.name}/{item.id} was saved with another question than {bench.name}"
                f" has now ({bench.source}): the data changed (another --seed, file or source)"
            )
        gold = golds[r["protocol"]].gold(item) if r.get("protocol") in golds else r.get("gold")
        if r.get("gold") != gold:
            return (
                f"the gold answer of {bench.name}/{item.id} changed ({r.get('gold')!r} then,"
                f" {gold!r} now in {bench.source}): the saved verdicts are the old answers'"
            )
        return None

    if opts.overwrite:
        moved, aside = store.drop(
            lambda r: (
                ours(r)
                and (r.get("protocol") in names or r.get("model_identity") != identity or stale(r))
            )
        )
        if moved:
            print(
                f"numloss eval: --overwrite: moved {moved} earlier records of {model_name} to"
                f" {aside}",
                file=sys.stderr,
            )
    saved = [r for r in store.records() if ours(r)]
    if reasons := [(r, why) for r in saved if (why := stale(r))]:
        benchmarks = ", ".join(sorted({str(r.get("benchmark")) for r, _ in reasons}))
        raise BenchmarkError(
            f"{results_file}: {len(reasons)} saved records of {model_name!r} ({benchmarks}) cannot"
            f" be resumed: {reasons[0][1]}. Use another --out, or --overwrite to move those"
            " records aside and redo them"
        )
    return store, saved, extra


Results = dict[str, dict[str, list[ItemResult]]]  # {protocol: {benchmark: item results}}


def _run_all(
    opts: SimpleNamespace,
    loaded: list[Benchmark],
    saved: list[Mapping[str, Any]],
    protocols: list[Protocol],
    generator: Any,
    runner: ProgramRunner,
    store: ResultsFile | None,
    extra: dict[str, Any],
    measured: tuple[Any, Any] | None,
) -> tuple[Results, dict[str, DigitStats]]:
    """({protocol: {benchmark: results}}, {benchmark: digit statistics of the `measured` (model,
    tokenizer)}): `run_benchmark` on each benchmark, resumed from its saved records (checked to be
    of its items now: their verdicts kept, their outputs reused), each new result with `extra`."""
    per: Results = {p.name: {} for p in protocols}
    digits: dict[str, DigitStats] = {}
    if opts.progress:  # said before the bar opens, not inside its line
        for bench in loaded:
            print(
                f"{bench.name}: {len(bench)} item{'' if len(bench) == 1 else 's'} from"
                f" {bench.source}",
                file=sys.stderr,
            )
    expect = getattr(generator, "expect", None)
    if callable(expect):  # the progress bar's total, right from the start: the items to generate
        outputs = {(r["benchmark"], str(r["id"])) for r in saved if "output" in r}
        expect(sum((b.name, it.id) not in outputs for b in loaded for it in b.items))
    for bench in loaded:
        mine = [r for r in saved if r["benchmark"] == bench.name]
        done = {
            p.name: {str(r["id"]): _item_result(r) for r in mine if r.get("protocol") == p.name}
            for p in protocols
        }
        known = {
            str(r["id"]): (r["output"], r.get("fallback_output")) for r in mine if "output" in r
        }
        out = run_benchmark(
            bench,
            protocols,
            generator,
            runner,
            done=done,
            known_outputs=known,
            write=_writer(store, {**extra, **_synthetic_fields(bench, opts.seed)}),
            batch_size=opts.batch_size,
            program_of_thought=opts.program_of_thought,
            stop=opts.stop,
        )
        for name, results in out.items():
            per[name][bench.name] = results
        if measured is not None:
            digits[bench.name] = _digit_stats(*measured, bench, protocols[0], opts.batch_size)
    return per, digits


def _writer(store: ResultsFile | None, extra: dict[str, Any]) -> Callable[[list[ItemResult]], None]:
    """What `run_benchmark` hands each finished batch: the results get `extra` and go to `store`."""

    def write(results: list[ItemResult]) -> None:
        for r in results:
            r.extra = dict(extra)
        if store is not None:
            store.append([r.to_json() for r in results])

    return write


def _generator(
    opts: SimpleNamespace, model_or_path: Any, stop: tuple[str, ...], limit: int
) -> tuple[Any, Any, Any]:
    """(model, tokenizer, generator) for the API's accepted model forms."""
    from numloss.evaluate.generate import HFGenerator, VLLMGenerator, import_vllm

    if hasattr(model_or_path, "generate") and not hasattr(model_or_path, "config"):
        return None, None, model_or_path  # a Generator
    if opts.backend == "vllm":
        import_vllm()
        if not isinstance(model_or_path, (str, Path)) or str(model_or_path) == "tiny":
            from numloss.evaluate.generate import BackendUnavailable

            raise BackendUnavailable("the vLLM backend needs a model folder")
        vllm = VLLMGenerator(str(model_or_path), limit, stop, opts.tensor_parallel, opts.dtype)
        return None, None, vllm
    if isinstance(model_or_path, tuple):
        model, tokenizer = model_or_path
    else:
        from numloss.evaluate.generate import resolve_device
        from numloss.models.load import load_model_and_tokenizer

        target = resolve_device(opts.device)  # a bad --device is refused before the model loads
        model, tokenizer = load_model_and_tokenizer(str(model_or_path), dtype=opts.dtype)
        model = model.to(target)
    hf = HFGenerator(model, tokenizer, opts.batch_size, limit, stop=stop, progress=opts.progress)
    return model, tokenizer, hf


def check_digit_tokens(model_or_path: Any) -> None:
    """Raise ValueError when the tokenizer of `model_or_path` (a path or id, or a (model, tokenizer)
    pair; a bare Generator has none to check) cannot give the digit metrics."""
    from numloss.digits import DigitVocab, DigitVocabError

    if isinstance(model_or_path, tuple):
        tokenizer = model_or_path[1]
    elif isinstance(model_or_path, (str, Path)):
        from numloss.models.load import load_tokenizer

        tokenizer = load_tokenizer(str(model_or_path))
    else:
        return
    try:
        DigitVocab.from_tokenizer(tokenizer)
    except DigitVocabError as error:
        raise ValueError(
            f"{error} (or evaluate without the digit metrics: --no-digit-stats, digit_stats=False)"
        ) from None


def _digit_stats(
    model: Any, tokenizer: Any, bench: Benchmark, protocol: Protocol, batch_size: int
) -> DigitStats | None:
    from numloss.evaluate.metrics import teacher_forced_digit_stats

    numeric = [it for it in bench.items if it.kind != "choice"]
    if not numeric:
        return None
    prompts = [protocol.prompt(it, "cot") for it in numeric]
    golds = [f" The answer is {it.answer}." for it in numeric]
    return teacher_forced_digit_stats(model, tokenizer, prompts, golds, batch_size)


_RESULT_FIELDS = set(ItemResult.__dataclass_fields__) - {"extra"}


def _item_result(record: Mapping[str, Any]) -> ItemResult:
    fields = {k: record[k] for k in _RESULT_FIELDS if k in record}
    fields["id"] = str(fields["id"])
    result = ItemResult(**fields)
    result.extra = {k: record[k] for k in ("model", "settings", "isolation") if k in record}
    return result


def _check_one_model(rows: Sequence[Mapping[str, Any]], source: str) -> None:
    """Refuse a file holding the outputs of more than one model (by name and weights): scored
    together, their verdicts would be one score that names neither."""
    models = Counter(
        (str(r.get("model")), str(r.get("model_identity")), str(r.get("model_sha256")))
        for r in rows
        if "model" in r
    )
    if len(models) > 1:
        named = "; ".join(
            f"{name} ({identity if identity != 'None' else 'no identity'}, {n} records)"
            for (name, identity, _), n in list(models.items())[:3]
        )
        raise BenchmarkError(
            f"{source}: holds the outputs of {len(models)} models ({named}); score one model's"
            " records at a time (keep the lines of one 'model' and 'model_identity')"
        )


def score_outputs(
    records: str | Path | Iterable[Mapping[str, Any]],
    protocol: str | Protocol | Sequence | None = None,
    data_dir: str | Path | None = None,
    *,
    allow_unisolated: bool | None = None,
    workers: int | None = None,
    program_timeout: float = 5.0,
    batch_size: int = 64,
    limit: int | None = None,
    seed: int | None = None,
    cut_at_stop: bool | None = None,
    benchmark: str | None = None,
) -> EvalReport:
    """Score outputs generated earlier (by numloss or anything else) under `protocol`; no model.

    `records` (a JSONL path or mappings): numloss records (`benchmark`, `id`, `output`, optionally
    `fallback_output` and `question`, which must be the item's; `evaluate`'s results file is one) or
    an lm-evaluation-harness `--log_samples` file (benchmark from the task name or `benchmark=`;
    `numloss.evaluate.lmeval`). Formats: docs/evaluation.md, "Scoring saved outputs".
    `protocol` defaults to "numloss" for numloss records, "both" for lm-eval samples; `cut_at_stop`
    (cut at the protocol's stop strings) to on for numloss records, off for lm-eval samples (cut
    at the task's `until` already). A synthetic set is generated again at the seed and size its
    records carry (`seed` for records that carry none).
    """
    from numloss.evaluate import lmeval
    from numloss.evaluate.generate import cut_at_stop as cut

    check_limit(limit)
    if cut_at_stop is not None:
        check_bool("cut_at_stop", cut_at_stop)
    if allow_unisolated is not None:
        check_bool("allow_unisolated", allow_unisolated)
    if seed is not None:
        check_int("seed", seed, 0, 2**32 - 1)
    check_int("batch_size", batch_size, 1)
    rows, source = _rows_of(records)
    _check_one_model(rows, source)
    samples = lmeval.is_samples(rows)
    protocols = resolve(protocol if protocol is not None else ("both" if samples else "numloss"))
    stop, _, _ = generation_settings(protocols)
    cutting = (not samples) if cut_at_stop is None else bool(cut_at_stop)

    def cut_text(text: str | None) -> str | None:
        return cut(text, stop) if cutting and text is not None else text

    meta: dict[str, Any] = {
        "scored_from": source,
        "format": "lm-eval samples" if samples else "numloss records",
        "cut_at_stop": cutting,
    }
    if samples:
        sets = _sample_sets(rows, source, benchmark, data_dir, cut_text, meta)
    else:
        sets = _record_sets(rows, source, data_dir, seed, cut_text)
    runner = program_runner(program_timeout, workers, allow_unisolated)
    per: Results = {p.name: {} for p in protocols}
    for bench_name, (kind, items, outputs) in sets.items():
        subset = Benchmark(bench_name, kind, items[: limit or None], source)  # type: ignore[arg-type]
        out = run_benchmark(
            subset, protocols, None, runner, known_outputs=outputs, batch_size=batch_size
        )
        for name, results in out.items():
            per[name][bench_name] = results
    return _report(protocols, per, {}, runner, meta)


Outputs = dict[str, tuple[str, str | None]]  # per item id: (output, fallback output or None)


def _rows_of(records: str | Path | Iterable[Mapping[str, Any]]) -> tuple[list[Mapping], str]:
    """(the records, where they come from) of a JSONL path or an iterable of mappings."""
    from numloss.evaluate import lmeval

    if isinstance(records, (str, Path)):
        check_path("records", records, "file")
        lmeval.refuse_results_file(records)
        rows: list[Mapping[str, Any]] = list(read_lines(Path(records)))
        source = str(records)
    else:
        if isinstance(records, Mapping) or not isinstance(records, Iterable):
            raise BenchmarkError(
                "records must be a JSONL path or an iterable of record mappings, got a"
                f" {type(records).__name__}"
            )
        rows, source = list(records), "records"
        for n, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise BenchmarkError(
                    f"record {n}: expected a mapping (benchmark, id, output), got a"
                    f" {type(row).__name__}"
                )
    if not rows:
        raise BenchmarkError(f"{source}: no records to score")
    return rows, source


Sets = dict[str, tuple[str, list[Item], Outputs]]  # {benchmark: (kind, items, outputs)}


def _sample_sets(
    rows: Sequence[Mapping[str, Any]],
    source: str,
    benchmark: str | None,
    data_dir: str | Path | None,
    cut_text: Callable,
    meta: dict[str, Any],
) -> Sets:
    """{benchmark: (kind, items, outputs)} of lm-eval samples; `meta` gets what was matched how."""
    from numloss.evaluate import lmeval
    from numloss.evaluate.benchmarks import find_local

    task = lmeval.task_of(source) if source != "records" else None
    name = benchmark or (lmeval.benchmark_of_task(task) if task else None)
    if name is None:
        why = (
            f"lm-eval samples of task {task!r} are not one of the seven benchmarks"
            if task
            else (
                "cannot tell the benchmark of these lm-eval samples from the file name"
                " (samples_<task>_<date>.jsonl)"
            )
        )
        raise BenchmarkError(f"{source}: {why}; name it with benchmark= (--outputs-benchmark NAME)")
    name = canonical_name(name)
    ours = None
    if data_dir is not None and find_local(name, Path(data_dir)) is not None:
        ours = load_benchmark(name, data_dir=data_dir)
    mapped = lmeval.read_samples(rows, name, source, ours)
    matched = dict(Counter(m.matched for m in mapped))
    meta["lm_eval"] = {"task": task, "benchmark": name, "matched": matched}
    outputs = {m.item.id: (cut_text(m.output) or "", None) for m in mapped}
    kind = BENCHMARK_KIND.get(name, mapped[0].item.kind)
    return {name: (kind, [m.item for m in mapped], outputs)}


def _record_sets(
    rows: Sequence[Mapping[str, Any]],
    source: str,
    data_dir: str | Path | None,
    seed: int | None,
    cut_text: Callable,
) -> Sets:
    """{benchmark: (kind, items, outputs)} of numloss records, each item's first output (and the
    first fallback given) kept; a record's question must be its item's."""
    outputs: dict[str, Outputs] = {}  # in the records' order
    questions: dict[tuple[str, str], tuple[str, str]] = {}
    for n, row in enumerate(rows, 1):
        where = f"{source}:{n}" if source != "records" else f"record {n - 1}"
        check_output_record(row, where)
        bench, item = str(row["benchmark"]), str(row["id"])
        seen = outputs.setdefault(bench, {})
        if isinstance(row.get("question"), str) and row["question"]:
            questions.setdefault((bench, item), (row["question"], where))
        if item not in seen:
            seen[item] = (cut_text(row["output"]) or "", cut_text(row.get("fallback_output")))
        elif seen[item][1] is None and row.get("fallback_output") is not None:
            seen[item] = (seen[item][0], cut_text(row.get("fallback_output")))
    sets = {}
    for bench_name, per_item in outputs.items():
        ids = list(per_item)
        bench = load_for_records(bench_name, ids, data_dir, *recorded_set(rows, bench_name, seed))
        by_id = {it.id: it for it in bench.items}
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            raise BenchmarkError(
                f"{source}: benchmark {bench_name} has no item with id {unknown[0]!r}"
                f" ({len(unknown)} unknown ids)"
            )
        for i in ids:
            saved = questions.get((bench_name, i))
            if saved is not None and saved[0].strip() != by_id[i].question.strip():
                raise BenchmarkError(
                    f"{saved[1]}: the record's question is not the question of {bench_name} item"
                    f" {i} ({bench.source}): {saved[0][:50]!r}... vs {by_id[i].question[:50]!r}...;"
                    " score it against the data it was generated from"
                )
        sets[bench.name] = (bench.kind, [by_id[i] for i in ids], per_item)
    return sets
