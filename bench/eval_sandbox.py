"""A 100-item GSM8K eval with the kernel sandbox next to the same eval with the old audit-hook
child.

`numloss.evaluate.evaluate` on the first 100 real GSM8K test items (`--data-dir`, the released
layout of ../shared/benchmarks), program of thought, the released protocol (it wraps every output
in a function and runs it; the numloss protocol runs only outputs that hold code), twice per mode,
the modes interleaved (A B A B) so that drift in the machine's load falls on both. The unisolated
runs make bwrap unavailable in-process and opt in, so they use the audit-hook child even where bwrap
works. Generation is the same in both modes (greedy, same model); only where the programs run
differs.

The default model is `tiny` (random weights: fast generation), and each of its outputs is then
replaced by a typical GSM8K program (bench/sandbox.py's `def solution():` programs), so every
item runs one program while its generation is still paid for: the sandbox's share of the wall
time is as large as it gets. A real model generates about 100x slower and writes programs for
some items only. `--no-programs` keeps the model's own outputs (then, with `tiny`, nothing runs).
Prints the wall times, the ratio bwrap / unisolated, and the program runs per eval.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from numloss.evaluate import api, evaluate, sandbox
from numloss.evaluate.generate import Generation
from numloss.evaluate.sandbox import bwrap
from sandbox import (
    programs as typical_programs,  # bench/sandbox.py: the script's folder is on sys.path
)


class ProgramsAfterGeneration:
    """The model's generation, paid for in full, with each text replaced by a typical program."""

    def __init__(self, generator) -> None:
        self.generator, self.made = generator, 0

    def generate(self, prompts, max_new_tokens=None):
        out = self.generator.generate(prompts, max_new_tokens=max_new_tokens)
        sources = typical_programs(self.made + len(out), sympy_share=0.0)[self.made :]
        self.made += len(out)
        return [Generation(source, g.new_tokens) for g, source in zip(out, sources, strict=True)]


def one_eval(mode: str, args: argparse.Namespace) -> tuple[float, int, float, float]:
    """(wall seconds, program runs, accuracy, seconds spent running programs) of one eval in
    `mode`."""
    real_candidates = bwrap.bwrap_candidates
    runs, in_programs = 0, 0.0
    real_run_programs = sandbox.run_programs

    def counting(sources, *a, **k):
        nonlocal runs, in_programs
        runs += len(sources)
        start = time.perf_counter()
        try:
            return real_run_programs(sources, *a, **k)
        finally:
            in_programs += time.perf_counter() - start

    real_generator = api._generator

    def replaced(*a, **k):
        model, tokenizer, generator = real_generator(*a, **k)
        return model, tokenizer, ProgramsAfterGeneration(generator)

    sandbox._kernel_probe.cache_clear()
    if mode == "unisolated":
        bwrap.bwrap_candidates = lambda: []
    sandbox.run_programs = counting
    if args.programs:
        api._generator = replaced
    try:
        start = time.perf_counter()
        report = evaluate(
            args.model,
            "gsm8k",
            args.data_dir,
            args.protocol,
            limit=args.limit,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            allow_unisolated=(mode == "unisolated"),
            workers=args.workers,
        )
        seconds = time.perf_counter() - start
    finally:
        bwrap.bwrap_candidates = real_candidates
        sandbox.run_programs = real_run_programs
        api._generator = real_generator
        sandbox._kernel_probe.cache_clear()
    assert report.isolation.get("mode") == mode, report.isolation
    return seconds, runs, report.accuracy("gsm8k"), in_programs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--data-dir", default="../shared/benchmarks")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument(
        "--protocol", default="released", help="released: every output runs as a program"
    )
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--no-programs",
        dest="programs",
        action="store_false",
        help="keep the model's outputs instead of a typical program per item",
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    # warm-up: load, page cache
    one_eval("bwrap+seccomp", argparse.Namespace(**{**vars(args), "limit": 2}))
    times: dict[str, list[float]] = {"unisolated": [], "bwrap+seccomp": []}
    program_times: dict[str, list[float]] = {mode: [] for mode in times}
    runs: dict[str, int] = {}
    for _ in range(args.repeats):
        for mode in times:
            seconds, count, accuracy, in_programs = one_eval(mode, args)
            times[mode].append(seconds)
            program_times[mode].append(in_programs)
            runs[mode] = count
            print(
                f"{mode:14s} {seconds:7.1f} s  {count} program runs ({in_programs:.1f} s in them)  "
                f"accuracy {100 * accuracy:.1f} %",
                flush=True,
            )
    base, boxed = (statistics.median(times[m]) for m in ("unisolated", "bwrap+seccomp"))
    print(
        f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch"
        f" {torch.__version__}, {time.strftime('%Y-%m-%d')}; model {args.model}, {args.limit} GSM8K"
        f" items, max {args.max_new_tokens} new tokens,"
        f" {'a typical program per item' if args.programs else 'its own outputs'}, {args.workers}"
        " workers"
    )
    print(
        "| mode | wall s (each run) | median | program runs | s running programs (each run)"
        " |\n|---|---|---|---|---|"
    )
    for mode in times:
        print(
            f"| {mode} | {', '.join(f'{t:.1f}' for t in times[mode])} |"
            f" {statistics.median(times[mode]):.1f} | {runs[mode]} |"
            f" {', '.join(f'{t:.1f}' for t in program_times[mode])} |"
        )
    print(f"\nbwrap / unisolated: {boxed / base:.3f} ({boxed - base:+.1f} s)")


if __name__ == "__main__":
    main()
