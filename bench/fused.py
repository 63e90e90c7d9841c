"""Time and peak memory of the unfused path (logits = hidden @ W.T, loss, backward) vs the fused
one.

    python bench/fused.py                                   # V=151936, H=896, N in {2048, 8192}
    python bench/fused.py --tokens 2048 --objectives del --repeats 3
    python bench/fused.py --strategies forward recompute    # also time the recompute variant

Each (objective, N, path) runs in a fresh process, so its peak memory is its own: on CPU the
peak resident set (ru_maxrss), reported both whole and *above* the inputs (hidden [N, H] and the
LM-head weight [V, H], both with requires_grad), i.e. what loss + backward add; on CUDA
torch.cuda.max_memory_allocated, likewise whole and above the inputs. Times are the median of
`--repeats` forward+backward calls after `--warmup` untimed ones. All processes of one run go back
to back, so the ratios are side by side. About 25% of the labels are digits, in numbers of 1-6
characters."""

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

OBJECTIVES = ["mle", "del", "ntl-was", "ntl-mse", "dist2", "mixce", "emo"]
DIGIT_FRACTION = 0.25
DIGIT_IDS = list(range(15, 25))  # where Qwen2.5 keeps '0'..'9'
POINT_ID = 13


def make_inputs(vocab_size: int, hidden_size: int, tokens: int, device: str, seed: int = 0):
    """hidden [N, H], weight [V, H] (float32, requires_grad) and labels [N] with ~25% digits."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(30, vocab_size, (tokens,), generator=generator)
    is_digit = torch.rand(tokens, generator=generator) < DIGIT_FRACTION
    digits = torch.tensor(DIGIT_IDS)[
        torch.randint(0, 10, (int(is_digit.sum()),), generator=generator)
    ]
    labels[is_digit] = digits
    labels[:16] = -100  # a prompt
    hidden = torch.randn(tokens, hidden_size, generator=generator)
    weight = torch.randn(vocab_size, hidden_size, generator=generator).div_(hidden_size**0.5)
    return (
        hidden.to(device).requires_grad_(True),
        weight.to(device).requires_grad_(True),
        labels.to(device),
    )


def make_step(name: str, path: str, weight: torch.Tensor, chunk_size: int | None):
    """A function hidden, weight, labels -> scalar loss for objective `name` on `path`."""
    from numloss import DigitVocab, build_loss
    from numloss.fused import fused_loss

    options = {"embedding": weight.detach()} if name == "emo" else {}
    loss_fn = build_loss(name, DigitVocab(DIGIT_IDS, POINT_ID), **options).to(weight.device)
    if path == "unfused":
        return lambda h, w, y: loss_fn(F.linear(h, w), y).loss
    strategy = path.removeprefix("fused-") if path.startswith("fused-") else "forward"
    return lambda h, w, y: (
        fused_loss(loss_fn, h, w, y, chunk_size=chunk_size, strategy=strategy).loss
    )


def current_rss() -> int:
    with open("/proc/self/statm", encoding="utf-8") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_one(
    name: str,
    path: str,
    vocab_size: int,
    hidden_size: int,
    tokens: int,
    repeats: int,
    warmup: int,
    device: str,
    chunk_size: int | None,
) -> dict:
    """One configuration, in this (fresh) process."""
    cuda = device.startswith("cuda")
    hidden, weight, labels = make_inputs(vocab_size, hidden_size, tokens, device)
    step = make_step(name, path, weight, chunk_size)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = current_rss()
    times, cpu_times = [], []
    for i in range(warmup + repeats):
        hidden.grad = weight.grad = None
        if cuda:
            torch.cuda.synchronize()
        start, cpu_start = time.perf_counter(), time.process_time()
        step(hidden, weight, labels).backward()
        if cuda:
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
    if cuda:
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "objective": name,
        "path": path,
        "vocab": vocab_size,
        "hidden": hidden_size,
        "tokens": tokens,
        "seconds": statistics.median(times),
        # CPU time of all threads: less disturbed than wall time on a shared machine
        "cpu_seconds": statistics.median(cpu_times),
        "peak_bytes": peak,
        "peak_above_inputs_bytes": max(0, peak - base),
    }


def available_bytes() -> int | None:
    """MemAvailable of this machine (Linux), or None when unknown."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def unfused_estimate(name: str, vocab_size: int, tokens: int) -> int:
    """Rough peak of the unfused path: float32 logits and their gradient (EMO: about three more
    [N, V] copies: the selected rows, their softmax and its gradient)."""
    copies = 6 if name == "emo" else 2
    return copies * tokens * vocab_size * 4


def spawn(args: argparse.Namespace, name: str, path: str, tokens: int) -> dict | None:
    if path == "unfused" and not args.device.startswith("cuda"):
        need, have = unfused_estimate(name, args.vocab, tokens), available_bytes()
        if have is not None and need > 0.8 * have:
            print(
                f"{name:8s} N={tokens:5d} {path:16s} skipped: needs about {gib(need)} GiB, "
                f"{gib(have)} GiB available",
                flush=True,
            )
            return None
    command = [
        sys.executable,
        __file__,
        "--worker",
        "--objectives",
        name,
        "--paths",
        path,
        "--tokens",
        str(tokens),
        "--vocab",
        str(args.vocab),
        "--hidden",
        str(args.hidden),
        "--repeats",
        str(args.repeats),
        "--warmup",
        str(args.warmup),
        "--device",
        args.device,
    ]
    if args.chunk_size:
        command += ["--chunk-size", str(args.chunk_size)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{name} {path} N={tokens} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def table(results: list[dict], paths: list[str]) -> str:
    fused_paths = [p for p in paths if p != "unfused"]
    head = "| objective | N | unfused s | " + " | ".join(f"{p} s" for p in fused_paths)
    head += (
        " | time ratio (CPU-time ratio) | unfused peak GiB (above inputs) | fused peak GiB (above"
        " inputs) | peak ratio (above inputs) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    index = {(r["objective"], r["tokens"], r["path"]): r for r in results}
    for name, tokens in dict.fromkeys((r["objective"], r["tokens"]) for r in results):
        base = index.get((name, tokens, "unfused"))
        fused = [index[(name, tokens, p)] for p in fused_paths if (name, tokens, p) in index]
        if not fused:
            continue
        main = fused[0]
        cells = [name, str(tokens), f"{base['seconds']:.2f}" if base else "not run"]
        cells += [f"{r['seconds']:.2f}" for r in fused]
        if base:
            cells += [
                (
                    f"{main['seconds'] / base['seconds']:.2f}x"
                    f" ({main['cpu_seconds'] / base['cpu_seconds']:.2f}x)"
                ),
                f"{gib(base['peak_bytes'])} ({gib(base['peak_above_inputs_bytes'])})",
                f"{gib(main['peak_bytes'])} ({gib(main['peak_above_inputs_bytes'])})",
                (
                    f"{main['peak_bytes'] / base['peak_bytes']:.1%} "
                    f"({main['peak_above_inputs_bytes'] / max(base['peak_above_inputs_bytes'], 1):.1%})"  # noqa: E501
                ),
            ]
        else:
            cells += [
                "-",
                "-",
                f"{gib(main['peak_bytes'])} ({gib(main['peak_above_inputs_bytes'])})",
                "-",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objectives", nargs="+", default=OBJECTIVES)
    parser.add_argument("--tokens", nargs="+", type=int, default=[2048, 8192])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--strategies", nargs="+", default=["forward"], choices=["forward", "recompute"]
    )
    parser.add_argument("--paths", nargs="+", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--chunk-size", type=int, default=None)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", default=None, help="also write the raw results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = run_one(
            args.objectives[0],
            args.paths[0],
            args.vocab,
            args.hidden,
            args.tokens[0],
            args.repeats,
            args.warmup,
            args.device,
            args.chunk_size,
        )
        print(json.dumps(result))
        return
    paths = ["unfused"] + [f"fused-{s}" if s != "forward" else "fused" for s in args.strategies]
    print(
        f"# fused vs unfused, {date.today()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, torch {torch.__version__}, device {args.device}, "
        f"V={args.vocab}, H={args.hidden}, warm-up {args.warmup}, repeats={args.repeats}",
        flush=True,
    )
    results = []
    for tokens in args.tokens:
        for name in args.objectives:
            for path in paths:
                result = spawn(args, name, path, tokens)
                if result is None:
                    continue
                results.append(result)
                print(
                    f"{name:8s} N={tokens:5d} {path:16s} {result['seconds']:8.2f} s  peak"
                    f" {gib(result['peak_bytes'])} GiB ({gib(result['peak_above_inputs_bytes'])}"
                    " above inputs)",
                    flush=True,
                )
    print()
    print(table(results, paths))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
