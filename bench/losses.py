"""Forward+backward time and peak memory of every objective against bare cross-entropy.

    python bench/losses.py                      # the full grid of the issue (several minutes)
    python bench/losses.py --vocab 49152 --tokens 2048 --repeats 5
    python bench/losses.py --number-tokens 1110 --vocab 128256 --tokens 2048 --objectives del
                                                # Llama-3 (the line above)

Each (objective, V, N) runs in a fresh process, so its peak resident memory (ru_maxrss) is its
own: we report the peak *above* the inputs (logits + labels), i.e. what the loss and its backward
add. Times are the median of `--repeats` forward+backward calls after one warm-up (wall clock, and
the process's CPU time, which other load on the machine disturbs less), all processes of one grid
run back to back, so ratios are measured side by side. Logits are float32
[N, V] with requires_grad; about 25% of labels are digits, in numbers of 1-6 characters.
`--interleave` times CE and the objectives alternately in one process (CPU time, min and
median per objective), the fairer ratio when other jobs load the machine; no memory figures.
`--objectives del,del-nodiag --interleave` is the cost of the digit diagnostics (digit_logit_mean,
pushdown_share, digit_target_prob, digit_entropy) inside DEL's pass.
`--number-tokens 1110` is the Llama-3 / tiktoken case: the 25% number positions hold number
tokens drawn uniformly from all 1,110 chunks of 1-3 digits (ids 0..9 digits, 10 '.', 11..1110
the multi-digit chunks), and the digit objectives score every digit slot.
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
OBJECTIVES = [
    "ce",
    "mle",
    "del",
    "ntl-was",
    "ntl-mse",
    "dist2",
    "mixce",
    "emo",
    "ntloss-was",
    "ntloss-mse",
]


def number_vocab(number_tokens: int):
    """The DigitVocab of the bench: digits 0..9, '.' 10, and (for 1,110) chunks at ids 11..1110."""
    from numloss import DigitVocab

    if number_tokens == 10:
        return DigitVocab(range(10), 10)
    chunks = [f"{v:0{length}d}" for length in (2, 3) for v in range(10**length)]
    return DigitVocab(range(10), 10, [(11 + i, chunk, False) for i, chunk in enumerate(chunks)])


def make_inputs(vocab_size: int, tokens: int, seed: int = 0, number_tokens: int = 10):
    """Logits [1, N, V] and labels [1, N] with ~25% number positions (ids 0..9, '.' = 10; with
    `number_tokens` 1110, the number positions draw from ids 0..9 and 11..1110 uniformly)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(max(20, number_tokens + 1), vocab_size, (tokens,), generator=generator)
    is_digit = torch.rand(tokens, generator=generator) < DIGIT_FRACTION
    drawn = torch.randint(0, number_tokens, (int(is_digit.sum()),), generator=generator)
    labels[is_digit] = torch.where(drawn >= 10, drawn + 1, drawn)  # skip the point's id 10
    labels[:16] = -100  # a prompt
    logits = torch.randn(1, tokens, vocab_size, generator=generator).requires_grad_(True)
    return logits, labels[None]


def make_step(name: str, vocab_size: int, number_tokens: int = 10):
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
        tok = PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="w11"))
        )
        klass = ntloss.NTLoss if name == "ntloss-was" else ntloss.NTLossDotProduct
        peer = klass(tokenizer=tok, vocab_size=vocab_size, reweigh=False)

        def step(logits, labels):
            ce = F.cross_entropy(logits.view(-1, vocab_size), labels.view(-1), ignore_index=-100)
            return ce + 0.3 * peer(logits, labels)

        return step
    from numloss import build_loss

    if name == "del-nodiag":  # DEL without the digit diagnostics: what they cost, side by side
        import numloss.losses.base as base

        loss_fn = build_loss("del", number_vocab(number_tokens))

        def without_diagnostics(loss_fn, digit_logits, targets, support):
            zero = torch.zeros((), device=digit_logits.device)
            return zero, zero, zero, zero

        def step(logits, labels):
            kept, base.digit_diagnostics = base.digit_diagnostics, without_diagnostics
            try:
                return loss_fn(logits, labels).loss
            finally:
                base.digit_diagnostics = kept

        return step
    options = {}
    if name == "emo":
        options["embedding"] = torch.randn(
            vocab_size, 576, generator=torch.Generator().manual_seed(1)
        )
    if name.endswith("-token"):  # ntl-was-token: NTL's number-token level
        name, options["level"] = name[: -len("-token")], "token"
    loss_fn = build_loss(name, number_vocab(number_tokens), **options)
    return lambda logits, labels: loss_fn(logits, labels).loss


def current_rss() -> int:
    with open("/proc/self/statm", encoding="utf-8") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_one(name: str, vocab_size: int, tokens: int, repeats: int, number_tokens: int = 10) -> dict:
    """Measure one configuration in this (fresh) process."""
    step = make_step(name, vocab_size, number_tokens)
    logits, labels = make_inputs(vocab_size, tokens, number_tokens=number_tokens)
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
    return {
        "name": name,
        "vocab": vocab_size,
        "tokens": tokens,
        "seconds": statistics.median(times),
        "cpu_seconds": statistics.median(cpu_times),
        "peak_bytes": peak,
    }


def run_interleaved(
    names, vocab_size: int, tokens: int, repeats: int, number_tokens: int = 10
) -> None:
    """Time CE and each objective alternately in one process: under load from other jobs, the
    calls of a round see about the same machine, so the ratio of the minima (and of the medians)
    is the fairer comparison. Memory is not measured here (see the grid)."""
    logits, labels = make_inputs(vocab_size, tokens, number_tokens=number_tokens)
    steps = {name: make_step(name, vocab_size, number_tokens) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(repeats + 1):
        for name, step in steps.items():
            logits.grad = None
            start = time.process_time()
            step(logits, labels).backward()
            if round_number:  # the first round warms up
                times[name].append(time.process_time() - start)
    base = times[names[0]]
    for name in names:
        print(
            f"| {name:<13} | {vocab_size:>6} | {tokens:>5} | {min(times[name]) * 1000:>8.1f} |"
            f" {min(times[name]) / min(base):>5.2f}x |"
            f" {statistics.median(times[name]) / statistics.median(base):>5.2f}x |",
            flush=True,
        )


def run_grid(objectives, vocabs, token_counts, repeats, number_tokens: int = 10) -> list[dict]:
    results = []
    for vocab_size in vocabs:
        for tokens in token_counts:
            for name in objectives:
                command = [
                    sys.executable,
                    __file__,
                    "--one",
                    name,
                    "--vocab",
                    str(vocab_size),
                    "--tokens",
                    str(tokens),
                    "--repeats",
                    str(repeats),
                    "--number-tokens",
                    str(number_tokens),
                    "--threads",
                    str(torch.get_num_threads()),
                ]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode != 0:
                    print(
                        f"{name} V={vocab_size} N={tokens} failed:\n{done.stderr[-2000:]}",
                        file=sys.stderr,
                    )
                    continue
                results.append(json.loads(done.stdout.strip().splitlines()[-1]))
                print_row(results[-1], results)
    return results


def print_row(row: dict, results: list[dict]) -> None:
    base = next(
        r
        for r in results
        if r["vocab"] == row["vocab"] and r["tokens"] == row["tokens"] and r["name"] == "ce"
    )
    print(
        f"| {row['name']:<10} | {row['vocab']:>6} | {row['tokens']:>5} |"
        f" {row['seconds'] * 1000:>8.1f} | {row['seconds'] / base['seconds']:>5.2f}x |"
        f" {row['cpu_seconds'] / base['cpu_seconds']:>5.2f}x | {row['peak_bytes'] / 2**20:>8.0f} |"
        f" {row['peak_bytes'] / max(base['peak_bytes'], 1):>5.2f}x |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--vocab", type=int, nargs="*", default=[32000, 49152, 151936])
    parser.add_argument("--tokens", type=int, nargs="*", default=[2048, 8192])
    parser.add_argument("--objectives", default=",".join(OBJECTIVES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: all cores); 1 keeps CPU time honest on a loaded machine",
    )
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="time CE and the objectives alternately in one process (CPU time; no memory)",
    )
    parser.add_argument(
        "--number-tokens",
        type=int,
        choices=(10, 1110),
        default=10,
        help="10: single digits; 1110: Llama-3-style chunks of 1-3 digits",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    if args.one:
        print(
            json.dumps(
                run_one(args.one, args.vocab[0], args.tokens[0], args.repeats, args.number_tokens)
            )
        )
        return
    objectives = args.objectives.split(",")
    if objectives[0] != "ce":
        objectives = ["ce"] + [o for o in objectives if o != "ce"]
    print(
        f"# {date.today()} {platform.machine()} {os.cpu_count()} cores, {torch.get_num_threads()}"
        f" threads, torch {torch.__version__}, float32 logits, {DIGIT_FRACTION:.0%} number"
        f" positions, {args.number_tokens} number tokens, median of {args.repeats}"
    )
    if args.interleave:
        print(
            "| objective | V | N | min CPU ms | min vs CE | median vs CE"
            " |\n|---|---|---|---|---|---|"
        )
        for vocab_size in args.vocab:
            for tokens in args.tokens:
                run_interleaved(objectives, vocab_size, tokens, args.repeats, args.number_tokens)
        return
    print(
        "| objective  |      V |     N | fwd+bwd ms | time vs CE | CPU time vs CE | peak MiB | peak"
        " vs CE |"
    )
    print("|---|---|---|---|---|---|---|---|")
    run_grid(objectives, args.vocab, args.tokens, args.repeats, args.number_tokens)


if __name__ == "__main__":
    main()
