"""Evaluation speed, measured side by side in one run.

1. sandbox: N trivial programs through the worker pool (target: 200 in under 20 s on 2 cores);
2. generation: the same prompts one by one (batch 1) and batched, generated tokens/s of each and
   the ratio (target: batched >= 4x);
3. protocol: the full evaluation (program of thought, sandbox, chain-of-thought fallback) of
   GSM8K-style items under both protocols from one generation, wall time, extrapolated linearly
   to 100 items (target: within 15 minutes).

    python bench/eval.py --model smollm2 --items 16 --gen-prompts 16
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from numloss.evaluate.api import evaluate  # noqa: E402
from numloss.evaluate.benchmarks import load_benchmark  # noqa: E402
from numloss.evaluate.generate import HFGenerator  # noqa: E402
from numloss.evaluate.protocol import NUMLOSS, first_style  # noqa: E402
from numloss.evaluate.sandbox import run_programs  # noqa: E402
from numloss.models.load import load_model_and_tokenizer  # noqa: E402


def bench_sandbox(n: int, workers: int) -> None:
    sources = [f"a = {i}\nb = {i + 1}\nprint(a + b)" for i in range(n)]
    start = time.perf_counter()
    try:
        results = run_programs(sources, workers=workers, allow_unisolated=True)
    except TypeError:  # the sandbox before kernel isolation takes no allow_unisolated
        results = run_programs(sources, workers=workers)
    seconds = time.perf_counter() - start
    ok = sum(r.ok and r.stdout.strip() == str(2 * i + 1) for i, r in enumerate(results))
    print(
        f"sandbox: {n} trivial programs, {workers} workers: {seconds:.1f} s ({n / seconds:.1f}"
        f" programs/s), {ok}/{n} correct"
    )


def bench_generation(
    model, tokenizer, prompts: list[str], batch_size: int, max_new_tokens: int
) -> None:
    rows = []
    for size in (1, batch_size):
        generator = HFGenerator(
            model, tokenizer, batch_size=size, max_new_tokens=max_new_tokens, progress=False
        )
        texts = [g.text for g in generator.generate(prompts)]
        rows.append((size, generator.tokens, generator.seconds, texts))
    (_, t1, s1, texts1), (_, tb, sb, textsb) = rows
    same = sum(a == b for a, b in zip(texts1, textsb, strict=True))
    print(f"generation: {len(prompts)} prompts, max {max_new_tokens} new tokens")
    print(f"  one by one : {t1} tokens in {s1:.1f} s = {t1 / s1:.1f} tokens/s")
    print(f"  batch {batch_size:<4} : {tb} tokens in {sb:.1f} s = {tb / sb:.1f} tokens/s")
    print(
        f"  ratio      : {(tb / sb) / (t1 / s1):.2f}x; identical greedy outputs:"
        f" {same}/{len(prompts)}"
    )


def bench_protocol(
    model, tokenizer, name: str, items: int, batch_size: int, max_new_tokens: int
) -> None:
    start = time.perf_counter()
    report = evaluate(
        (model, tokenizer),
        [name],
        protocol="both",
        limit=items,
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
        digit_stats=False,
        allow_unisolated=True,
    )
    seconds = time.perf_counter() - start
    gen = report.meta["generation_stats"]
    for protocol in report.protocols:
        s = report.scores[protocol][name]
        print(
            f"protocol {protocol}: {items} items of {name} (batch {batch_size}, max"
            f" {max_new_tokens} new tokens): PoT {s.styles.get('pot', 0)}, PoT->CoT"
            f" {s.styles.get('pot+cot', 0)}; accuracy {s.correct}/{s.count}"
        )
    print(
        f"  both protocols from one generation: {seconds:.1f} s, {gen['tokens']} tokens; "
        f"extrapolated to 100 items: {seconds / items * 100 / 60:.1f} min"
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="smollm2")
    p.add_argument("--programs", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--gen-prompts", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--gen-tokens", type=int, default=64)
    p.add_argument("--items", type=int, default=16)
    p.add_argument(
        "--benchmark", default="synthetic:word_problems", help="GSM8K-style items available offline"
    )
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1 avoids oversubscription on a shared machine)",
    )
    p.add_argument(
        "--skip", default="", help="comma-separated sections to skip: sandbox,generation,protocol"
    )
    args = p.parse_args()
    skip = set(args.skip.split(","))
    torch.set_num_threads(args.threads)
    print(f"torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}")
    if "sandbox" not in skip:
        bench_sandbox(args.programs, args.workers)
    if skip >= {"generation", "protocol"}:
        return
    model, tokenizer = load_model_and_tokenizer(args.model, dtype="float32")
    if "generation" not in skip:
        bench_items = load_benchmark(args.benchmark, limit=args.gen_prompts).items
        prompts = [NUMLOSS.prompt(item, first_style(item)) for item in bench_items]
        bench_generation(model, tokenizer, prompts, args.batch_size, args.gen_tokens)
    if "protocol" not in skip:
        bench_protocol(
            model, tokenizer, args.benchmark, args.items, args.batch_size, args.max_new_tokens
        )


if __name__ == "__main__":
    main()
