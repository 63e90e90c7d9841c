"""Fused vs unfused DEL under real sharding (FSDP1 full_shard, DeepSpeed ZeRO-3): loss curves and
peak GPU memory. The device half of bench/device_sharded.sh, which runs every step below.

    python bench/sharded.py init-model --config-dir DIR --out MODEL   # SmolLM2-135M shape, seeded
    accelerate launch --config_file configs/accelerate/fsdp.yaml --num_processes 1 \\
        bench/sharded.py run --mode fsdp1 --fused true --model MODEL --out RESULTS
    python bench/sharded.py report RESULTS                            # table; exit 1 if curves
    differ

`run` trains `numloss train`'s pipeline (`run_training`, bench/sharded-smollm2.yaml: DEL,
synthetic arithmetic, bf16, 20 steps) in the accelerate launch it is started from and writes
RESULTS/<mode>-<fused|unfused>.json: the distributed type accelerate really used, the loss of
every step, peak GPU memory (torch.cuda.max_memory_allocated / _reserved) and wall time.
`report` checks that each mode's fused curve equals its unfused one to 1e-3 (relative, every
step) and that the distributed type is the one asked for (accelerate falls back silently, e.g.
FSDP with use_cpu), and prints the markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECIPE = HERE / "sharded-smollm2.yaml"
EXPECTED_TYPE = {"fsdp1": "FSDP", "zero3": "DEEPSPEED"}
TOLERANCE = 1e-3


def init_model(config_dir: Path, out: Path, seed: int = 0) -> None:
    """A SmolLM2-135M-shaped model (its config and tokenizer from `config_dir`) with seeded
    random weights, saved to `out`; used when the pretrained weights cannot travel."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(config_dir)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(config_dir).save_pretrained(out)
    print(
        f"init-model: {type(model).__name__}, {sum(p.numel() for p in model.parameters()):,}"
        f" parameters -> {out}"
    )


def run(mode: str, fused: bool, model: str, out: Path, steps: int) -> None:
    import torch
    from accelerate.state import AcceleratorState

    from numloss.config import load_config
    from numloss.train import run_training

    tag = f"{mode}-{'fused' if fused else 'unfused'}"
    overrides = [
        "--model.name",
        model,
        "--fused",
        str(fused).lower(),
        "--train.max_steps",
        str(steps),
        # checkpoints and the final model (540 MB each) stay off $OUT, which travels back
        "--train.output_dir",
        str(Path(os.environ.get("TMPDIR", "/tmp")) / "numloss-sharded" / tag),
        "--train.fsdp",
        "",
    ]
    config = load_config(RECIPE, overrides)
    # this script's own scratch run: a re-run starts it afresh
    if int(os.environ.get("RANK", "0")) == 0:
        shutil.rmtree(config.train.output_dir, ignore_errors=True)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    result = run_training(config)
    seconds = time.perf_counter() - start
    if int(os.environ.get("RANK", "0")) != 0:
        return
    with result.csv_path.open() as handle:
        losses = [float(row["loss"]) for row in csv.DictReader(handle) if row.get("loss")]
    cuda = torch.cuda.is_available()
    record = {
        "mode": mode,
        "fused": fused,
        "distributed_type": str(AcceleratorState().distributed_type).split(".")[-1],
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "model": model,
        "steps": len(losses),
        "losses": losses,
        "peak_allocated_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
        "peak_reserved_mib": torch.cuda.max_memory_reserved() / 2**20 if cuda else None,
        "seconds": seconds,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
    }
    (out / f"{tag}.json").write_text(json.dumps(record, indent=1))
    print(
        f"run {tag}: {record['distributed_type']}, {len(losses)} steps, loss {losses[0]:.4f} ->"
        f" {losses[-1]:.4f}, peak {record['peak_allocated_mib']} MiB, {seconds:.1f} s"
    )


def report(results: Path, steps: int) -> int:
    """Print the table; return 1 when a curve pair differs, a run is missing or fell back."""
    problems = []
    lines = [
        (
            "| mode | path | distributed type | steps | loss step 1 | loss last | max rel. diff vs"
            " unfused | peak allocated MiB | peak reserved MiB | seconds |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in EXPECTED_TYPE:
        runs = {}
        for path in ("unfused", "fused"):
            file = results / f"{mode}-{path}.json"
            if not file.is_file():
                problems.append(
                    f"{mode} {path}: no result ({file} missing: the run failed, see its log)"
                )
                continue
            runs[path] = json.loads(file.read_text())
        for path, record in runs.items():
            if record["distributed_type"] != EXPECTED_TYPE[mode]:
                problems.append(
                    f"{mode} {path}: accelerate ran {record['distributed_type']}, not"
                    f" {EXPECTED_TYPE[mode]}"
                )
            if record["steps"] != steps:
                problems.append(f"{mode} {path}: {record['steps']} logged steps, expected {steps}")
        diff = None
        if len(runs) == 2:
            a, b = runs["unfused"]["losses"], runs["fused"]["losses"]
            diff = (
                max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b, strict=True))
                if len(a) == len(b) and a
                else float("inf")
            )
            if not diff <= TOLERANCE:
                problems.append(
                    f"{mode}: fused and unfused loss curves differ by {diff:.2e} (relative) >"
                    f" {TOLERANCE:g}"
                )
        for path, r in runs.items():
            peak = "n/a" if r["peak_allocated_mib"] is None else f"{r['peak_allocated_mib']:.0f}"
            reserved = "n/a" if r["peak_reserved_mib"] is None else f"{r['peak_reserved_mib']:.0f}"
            shown = "" if diff is None or path == "unfused" else f"{diff:.1e}"
            lines.append(
                f"| {mode} | {path} | {r['distributed_type']} | {r['steps']} | {r['losses'][0]:.4f}"
                f" | {r['losses'][-1]:.4f} | {shown} | {peak} | {reserved} | {r['seconds']:.1f} |"
            )
    device = next(
        (json.loads(f.read_text())["device"] for f in sorted(results.glob("*.json"))), "?"
    )
    print(f"device: {device}\n")
    print("\n".join(lines))
    for problem in problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("init-model")
    p.add_argument("--config-dir", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("run")
    p.add_argument("--mode", choices=sorted(EXPECTED_TYPE) + ["none"], required=True)
    p.add_argument("--fused", choices=["true", "false"], required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=20)
    p = sub.add_parser("report")
    p.add_argument("results", type=Path)
    p.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    if args.command == "init-model":
        init_model(args.config_dir, args.out)
        return 0
    if args.command == "run":
        args.out.mkdir(parents=True, exist_ok=True)
        run(args.mode, args.fused == "true", args.model, args.out, args.steps)
        return 0
    return report(args.results, args.steps)


if __name__ == "__main__":
    sys.exit(main())
