"""GPU benchmark: time and peak memory of forward+backward, CUDA bf16, at Qwen2.5's vocabulary.

    python bench/gpu.py                         # V=151936, H in {1536, 3584}, N in {8192, 32768}
    python bench/gpu.py --json runs/gpu.json    # also write the rows as JSON
    python bench/gpu.py --smoke                 # tiny sizes on CPU: checks the script runs (tests)

Per (H, N) it measures, with hidden [N, H] and the LM-head weight [V, H] in bf16:

* `ce`: bare cross-entropy, `F.cross_entropy(F.linear(h, w).float(), y)` (what a Hugging Face
  causal LM computes);
* `del`: numloss DEL on the logits, `loss_fn(F.linear(h, w), y)` (DEL + CE, unfused);
* `del-fused`: numloss DEL from the hidden states, `loss_fn.from_hidden(h, w, y)`;
* `liger-flce`: Liger-Kernel's `LigerFusedLinearCrossEntropyLoss`, when it imports.

Time: median of `--repeats` forward+backward calls after `--warmup` untimed ones (CUDA
synchronised). Memory: `torch.cuda.max_memory_allocated` during one call, above what the inputs
hold before it (their gradient buffers are freed first, so the peak includes them, as in
training). Before timing, it checks on the device that the fused DEL
gradient equals the unfused one (hidden and weight, relative to the largest entry). Goals: DEL
fused within 1.15x of Liger FLCE in time and memory; unfused DEL at or below 1.05x
bare CE in time.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from numloss import DigitVocab, build_loss  # noqa: E402

DIGIT_IDS = list(range(15, 25))  # where Qwen2.5 keeps '0'..'9'
POINT_ID = 13
DIGIT_FRACTION = 0.25


def make_inputs(
    vocab_size: int, hidden_size: int, tokens: int, device: str, dtype: torch.dtype, seed: int = 0
):
    """hidden [N, H], weight [V, H] (requires_grad, `dtype`) and labels [N], ~25% digits, a
    prompt."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(30, vocab_size, (tokens,), generator=generator)
    is_digit = torch.rand(tokens, generator=generator) < DIGIT_FRACTION
    labels[is_digit] = torch.tensor(DIGIT_IDS)[
        torch.randint(0, 10, (int(is_digit.sum()),), generator=generator)
    ]
    labels[: tokens // 8] = -100
    hidden = torch.randn(tokens, hidden_size, generator=generator)
    weight = torch.randn(vocab_size, hidden_size, generator=generator).div_(hidden_size**0.5)
    return (
        hidden.to(device=device, dtype=dtype).requires_grad_(True),
        weight.to(device=device, dtype=dtype).requires_grad_(True),
        labels.to(device),
    )


def liger_loss():
    """Liger-Kernel's fused linear cross-entropy (weight, hidden, labels) -> loss, or None."""
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except Exception:  # not installed, or no triton for this device
        return None
    module = LigerFusedLinearCrossEntropyLoss()
    return lambda h, w, y: module(w, h, y)


def methods(device: str) -> dict:
    """name -> function(hidden, weight, labels) -> scalar loss."""
    loss_fn = build_loss("del", DigitVocab(DIGIT_IDS, POINT_ID)).to(device)
    found = {
        "ce": lambda h, w, y: F.cross_entropy(F.linear(h, w).float(), y),
        "del": lambda h, w, y: loss_fn(F.linear(h, w), y).loss,
        "del-fused": lambda h, w, y: loss_fn.from_hidden(h, w, y).loss,
    }
    liger = liger_loss() if device.startswith("cuda") else None
    if liger is not None:
        found["liger-flce"] = liger
    return found


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def check_fused_gradient(step_unfused, step_fused, hidden, weight, labels) -> float:
    """Largest difference of the fused and unfused gradients (hidden and weight) / largest entry."""
    want = torch.autograd.grad(step_unfused(hidden, weight, labels), (hidden, weight))
    got = torch.autograd.grad(step_fused(hidden, weight, labels), (hidden, weight))
    return max(
        float((g.float() - w.float()).abs().max() / w.float().abs().max())
        for g, w in zip(got, want, strict=True)
    )


def measure(step, hidden, weight, labels, repeats: int, warmup: int, device: str) -> dict:
    """Median forward+backward seconds and peak memory above the inputs (CUDA only)."""
    cuda = device.startswith("cuda")

    def once():
        hidden.grad = weight.grad = None
        step(hidden, weight, labels).backward()

    for _ in range(warmup):
        once()
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        once()
        sync(device)
        times.append(time.perf_counter() - start)
    peak = None
    if cuda:
        hidden.grad = weight.grad = None
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        once()
        sync(device)
        peak = torch.cuda.max_memory_allocated() - base
    return {"seconds": statistics.median(times), "peak_bytes": peak}


def ratios(rows: list[dict]) -> list[str]:
    """The goal ratios per (H, N): DEL fused / Liger FLCE (time, memory), DEL / bare CE (time)."""
    lines = []
    for key in sorted({(r["hidden"], r["tokens"]) for r in rows}):
        by = {r["method"]: r for r in rows if (r["hidden"], r["tokens"]) == key}
        parts = [f"H={key[0]} N={key[1]}:"]
        if "del" in by and "ce" in by:
            parts.append(
                f"del/ce time {by['del']['seconds'] / by['ce']['seconds']:.3f} (goal <= 1.05)"
            )
            if by["del"]["peak_bytes"] and by["ce"]["peak_bytes"]:
                parts.append(f"memory {by['del']['peak_bytes'] / by['ce']['peak_bytes']:.3f}")
        if "del-fused" in by and "liger-flce" in by:
            fused, liger = by["del-fused"], by["liger-flce"]
            parts.append(
                f"del-fused/liger time {fused['seconds'] / liger['seconds']:.3f} (goal <= 1.15)"
            )
            if fused["peak_bytes"] and liger["peak_bytes"]:
                parts.append(
                    f"memory {fused['peak_bytes'] / liger['peak_bytes']:.3f} (goal <= 1.15)"
                )
        else:
            parts.append("no Liger-Kernel: fused ratio not measured")
        lines.append(" ".join(parts))
    return lines


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--hidden", type=int, nargs="+", default=[1536, 3584])
    parser.add_argument("--tokens", type=int, nargs="+", default=[8192, 32768])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes on CPU (V=512, H=32, N=96), one repeat"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    dtype = torch.bfloat16
    if args.smoke:
        args.vocab, args.hidden, args.tokens, args.repeats, args.warmup, args.device = (
            512,
            [32],
            [96],
            1,
            0,
            "cpu",
        )
    elif not torch.cuda.is_available() and args.device.startswith("cuda"):
        parser.error("no CUDA device: run on a GPU, or pass --smoke (or --device cpu)")
    device = args.device
    print(
        f"# bench/gpu.py {date.today()} torch {torch.__version__} on"
        f" {torch.cuda.get_device_name() if device.startswith('cuda') else platform.processor() or 'cpu'},"  # noqa: E501
        f" V={args.vocab}, bf16, median of {args.repeats}"
    )
    rows = []
    for hidden_size in args.hidden:
        for tokens in args.tokens:
            hidden, weight, labels = make_inputs(args.vocab, hidden_size, tokens, device, dtype)
            found = methods(device)
            error = check_fused_gradient(found["del"], found["del-fused"], hidden, weight, labels)
            print(
                f"H={hidden_size} N={tokens}: fused DEL gradient vs unfused, max |diff| / max"
                f" |grad| = {error:.2e}"
            )
            if not error < 2e-2:
                raise SystemExit(
                    f"fused DEL gradient differs from the unfused one by {error:.2e} (relative)"
                )
            for name, step in found.items():
                result = measure(step, hidden, weight, labels, args.repeats, args.warmup, device)
                rows.append(
                    {
                        "method": name,
                        "hidden": hidden_size,
                        "tokens": tokens,
                        "grad_check": error,
                        **result,
                    }
                )
                peak = (
                    "-"
                    if result["peak_bytes"] is None
                    else f"{result['peak_bytes'] / 2**30:.2f} GiB"
                )
                print(
                    f"| {name:<10} | H={hidden_size:<5} | N={tokens:<6} |"
                    f" {result['seconds'] * 1e3:9.1f} ms | {peak:>10} |"
                )
            del hidden, weight, labels
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    for line in ratios(rows):
        print(line)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
