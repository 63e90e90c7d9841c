"""Reading time of adversarial outputs, per protocol and answer kind, at 100 KB and 1 MB.

Models that loop emit megabytes of newlines, spaces, digits, "=", "answer", brackets or
backslashes (tests/adversarial_outputs.py, the outputs tests/test_eval_linear.py reads). This
reads each such output (the protocol's extract, finalize, compare and program
detection) and prints CPU seconds per output (one core: the reader is single-threaded), the
1 MB / 100 KB ratio, then the wall time of `score_outputs` on 10 GSM8K records, one of them 1 MB of
newlines, under both protocols. Goals: 1 MB read in under 1 s; the ratio about 10 (linear);
score_outputs under 30 s.

    python bench/reader.py [--data-dir ../shared/benchmarks] [--sizes 100000 1000000]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from datetime import date
from pathlib import Path

from numloss.evaluate.benchmarks import load_benchmark
from numloss.evaluate.protocol import NUMLOSS, RELEASED

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from adversarial_outputs import (
    ITEMS,
    NAMES,
    adversarial,
)  # noqa: E402 - the outputs test_eval_linear reads


def read_seconds(protocol, kind: str, text: str) -> float:
    item, benchmark = ITEMS[kind]
    start = time.process_time()
    prediction = protocol.finalize(item, protocol.extract(item, text, benchmark))
    if prediction:
        protocol.compare(item, prediction)
    protocol.program(text)
    return time.process_time() - start


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "benchmarks")
    )
    parser.add_argument("--sizes", type=int, nargs=2, default=[100_000, 1_000_000])
    parser.add_argument("--score-only", action="store_true", help="only the score_outputs run")
    args = parser.parse_args()
    small, large = args.sizes
    names = [] if args.score_only else NAMES
    for protocol in (NUMLOSS, RELEASED):  # imports (math-verify, sympy) are not reading time
        for kind in ITEMS:
            read_seconds(protocol, kind, "The answer is \\frac{3}{x}.")
    print(f"{date.today()}, {cpu_name()}; CPU seconds per output")
    print(
        f"| output | protocol | {small // 1000} KB (max over kinds) | {large // 1000} KB (max over"
        " kinds) | ratio |"
    )
    print("|---|---|---|---|---|")
    worst = 0.0
    for name in names:
        for protocol in (NUMLOSS, RELEASED):
            a = max(read_seconds(protocol, kind, adversarial(name, small)) for kind in ITEMS)
            b = max(read_seconds(protocol, kind, adversarial(name, large)) for kind in ITEMS)
            worst = max(worst, b)
            print(
                f"| {name} | {protocol.name} | {a:.3f} | {b:.3f} | {b / max(a, 1e-3):.1f} |",
                flush=True,
            )
    print(f"slowest 1 MB read: {worst:.3f} s")
    if Path(args.data_dir).is_dir():
        from numloss.evaluate import score_outputs

        items = load_benchmark("gsm8k", data_dir=args.data_dir, limit=10).items
        records = [
            {
                "benchmark": "gsm8k",
                "id": it.id,
                "output": f"The answer is {it.answer}.",
                "fallback_output": "",
            }
            for it in items
        ]
        records[3]["output"] = records[3]["fallback_output"] = "\n" * large
        start, cpu = time.monotonic(), time.process_time()
        report = score_outputs(
            records, protocol="both", data_dir=args.data_dir, allow_unisolated=True
        )
        took, cpu = time.monotonic() - start, time.process_time() - cpu
        counts = {p: report.scores[p]["gsm8k"].count for p in report.protocols}
        print(
            f"score_outputs, 10 records, one of {large // 1000} KB of newlines, both protocols:"
            f" {took:.2f} s wall, {cpu:.2f} s CPU, items scored {counts}"
        )


if __name__ == "__main__":
    main()
