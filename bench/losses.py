"""Forward+backward time and peak memory of every objective against bare cross-entropy.

    python bench/losses.py                      # the full grid of the issue (several minutes)
    python bench/losses.py --vocab 49152 --tokens 2048 --repeats 5

Each (objective, V, N) runs in a fresh process, so its peak resident memory (ru_maxrss) is its
own: we report the peak *above* the inputs (logits + labels), i.e. what the loss and its backward
add. Times are the median of `--repeats` forward+backward calls after one warm-up (wall clock, and
the process's CPU time, which other load on the machine disturbs less), all processes of one grid
run back to back, so ratios are measured side by side. Logits are float32
[N, V] with requires_grad; about 25% of labels are digits, in numbers of 1-6 characters.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import date

import torch
import torch.nn.functional as F

DIGIT_FRACTION = 0.25
OBJECTIVES = ["ce", "mle", "del", "ntl-was", "ntl-mse", "dist2", "mixce", "emo", "ntloss-was", "ntloss-mse"]


def make_inputs(vocab_size: int, tokens: int, seed: int = 0):
    """Logits [1, N, V] and labels [1, N] with ~25% digit positions (ids 0..9, '.' = 10)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(20, vocab_size, (tokens,), generator=generator)
    is_digit = torch.rand(tokens, generator=generator) < DIGIT_FRACTION
    labels[is_digit] = torch.randint(0, 10, (int(is_digit.sum()),), generator=generator)
    labels[:16] = -100  # a prompt
    logits = torch.randn(1, tokens, vocab_size, generator=generator).requires_grad_(True)
    return logits, labels[None]


def make_step(name: str, vocab_size: int):
    """A function logits, labels -> scalar loss for objective `name`."""
    if name == "ce":
        return lambda logits, labels: F.cross_entropy(
            logits.view(-1, vocab_size), labels.view(-1), ignore_index=-100
        )
    if name.startswith("ntloss"):
        import ntloss
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast

        vocab = {str(k): k for k in range(10)} | {".": 10}
        vocab |= {f"w{i}": i for i in range(11, vocab_size)}
        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="w11")))
        klass = ntloss.NTLoss if name == "ntloss-was" else ntloss.NTLossDotProduct
        peer = klass(tokenizer=tok, vocab_size=vocab_size, reweigh=False)

        def step(logits, labels):
            ce = F.cross_entropy(logits.view(-1, vocab_size), labels.view(-1), ignore_index=-100)
            return ce + 0.3 * peer(logits, labels)

        return step
    from numloss import DigitVocab, build_loss

    options = {}
    if name == "emo":
        options["embedding"] = torch.randn(vocab_size, 576, generator=torch.Generator().manual_seed(1))
    loss_fn = build_loss(name, DigitVocab(range(10), 10), **options)
    return lambda logits, labels: loss_fn(logits, labels).loss


def current_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_one(name: str, vocab_size: int, tokens: int, repeats: int) -> dict:
    """Measure one configuration in this (fresh) process."""
    step = make_step(name, vocab_size)
    logits, labels = make_inputs(vocab_size, tokens)
    base = current_rss()
    step(logits, labels).backward()  # first call: peak memory
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    times, cpu_times = [], []
    for _ in range(repeats):
        logits.grad = None
        start, cpu_start = time.perf_counter(), time.process_time()
        step(logits, labels).backward()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    return {"name": name, "vocab": vocab_size, "tokens": tokens, "seconds": statistics.median(times),
            "cpu_seconds": statistics.median(cpu_times), "peak_bytes": peak}


def run_grid(objectives, vocabs, token_counts, repeats) -> list[dict]:
    results = []
    for vocab_size in vocabs:
        for tokens in token_counts:
            for name in objectives:
                command = [sys.executable, __file__, "--one", name, "--vocab", str(vocab_size),
                           "--tokens", str(tokens), "--repeats", str(repeats)]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode != 0:
                    print(f"{name} V={vocab_size} N={tokens} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
                    continue
                results.append(json.loads(done.stdout.strip().splitlines()[-1]))
                print_row(results[-1], results)
    return results


def print_row(row: dict, results: list[dict]) -> None:
    base = next(r for r in results if r["vocab"] == row["vocab"] and r["tokens"] == row["tokens"]
                and r["name"] == "ce")
    print(f"| {row['name']:<10} | {row['vocab']:>6} | {row['tokens']:>5} | {row['seconds'] * 1000:>8.1f} | "
          f"{row['seconds'] / base['seconds']:>5.2f}x | {row['cpu_seconds'] / base['cpu_seconds']:>5.2f}x | "
          f"{row['peak_bytes'] / 2**20:>8.0f} | {row['peak_bytes'] / max(base['peak_bytes'], 1):>5.2f}x |",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--vocab", type=int, nargs="*", default=[32000, 49152, 151936])
    parser.add_argument("--tokens", type=int, nargs="*", default=[2048, 8192])
    parser.add_argument("--objectives", default=",".join(OBJECTIVES))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    if args.one:
        print(json.dumps(run_one(args.one, args.vocab[0], args.tokens[0], args.repeats)))
        return
    objectives = args.objectives.split(",")
    if objectives[0] != "ce":
        objectives = ["ce"] + [o for o in objectives if o != "ce"]
    print(f"# {date.today()} {platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}, "
          f"float32 logits, {DIGIT_FRACTION:.0%} digit positions, median of {args.repeats}")
    print("| objective  |      V |     N | fwd+bwd ms | time vs CE | CPU time vs CE | peak MiB | peak vs CE |")
    print("|---|---|---|---|---|---|---|---|")
    run_grid(objectives, args.vocab, args.tokens, args.repeats)


if __name__ == "__main__":
    main()
