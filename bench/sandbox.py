"""Sandbox cost: the kernel sandbox (bwrap+seccomp) next to the old audit-hook child ("unisolated").

1. start-up: `print(1)` run one at a time, median wall seconds per program in each mode (and,
   the part spent preparing the pooled user namespace, once per worker);
2. throughput: 200 typical GSM8K-style program-of-thought programs (MAmmoTH's `def solution():`
   shape: a few variables, arithmetic, sometimes a loop, fractions or math) through
   `run_programs` with --workers workers, in each mode; every printed answer is checked against
   the program run in this process (target: 200 in under 20 s on 2 cores);
3. the same with a share of sympy programs (MATH-style), whose import dominates.

    python bench/sandbox.py [--workers 2] [--programs 200] [--sympy-share 0.1]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from numloss.evaluate.sandbox import (
    ProgramResult,
    SandboxLimits,
    audithook,
    bwrap,
    isolation,
    run_programs,
)

TEMPLATES = [
    (
        "def solution():\n    total = {a}\n    used = {b}\n    price = {c}\n    remaining = total -"
        " used\n    result = remaining * price\n    return result\n\nprint(solution())"
    ),
    (
        "def solution():\n    per_day = {b}\n    days = {c}\n    saved = 0\n    for _ in"
        " range(days):\n        saved += per_day\n    result = saved - {a} // 10\n    return"
        " result\n\nprint(solution())"
    ),
    (
        "from fractions import Fraction\n\ndef solution():\n    share = Fraction({b}, {c} + {b})\n "
        "   result = share * {a}\n    return float(result)\n\nprint(solution())"
    ),
    (
        "import math\n\ndef solution():\n    people = {a}\n    per_car = {c}\n    cars ="
        " math.ceil(people / per_car)\n    result = cars * {b}\n    return"
        " result\n\nprint(solution())"
    ),
    (
        "def solution():\n    price = {a}\n    discount_percent = {b}\n    discounted = price * (1"
        " - discount_percent / 100)\n    result = round(discounted * {c}, 2)\n    return"
        " result\n\nprint(solution())"
    ),
]
SYMPY_TEMPLATE = (
    "from sympy import symbols, solve\n\nx = symbols('x')\nsolution = solve({b} * x - {a}, x)[0]\n"
    "print(solution)"
)


def programs(n: int, sympy_share: float, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b, c = rng.randint(50, 500), rng.randint(1, 40), rng.randint(2, 12)
        template = SYMPY_TEMPLATE if i < round(n * sympy_share) else TEMPLATES[i % len(TEMPLATES)]
        out.append(template.format(a=a, b=b, c=c))
    rng.shuffle(out)
    return out


def expected(source: str) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(compile(source, "<program>", "exec"), {"__name__": "__main__"})
    return buffer.getvalue()


def _plain(source: str) -> ProgramResult:
    """`python -c SOURCE`, no sandbox at all: the floor any sandbox's start-up is measured
    against."""
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", source], capture_output=True, text=True, timeout=60
    )
    return ProgramResult(
        "ok" if done.returncode == 0 else "error", done.stdout, done.returncode, 0.0
    )


def startup(mode: str, n: int) -> float:
    # a loaded machine must not turn a slow start into a failure
    limits = SandboxLimits(clock="cpu")
    runners = {
        "bwrap+seccomp": lambda s: bwrap.run(s, limits, bwrap.bwrap_candidates()[0]),
        "unisolated": lambda s: audithook.run(s, limits),
        "unsandboxed": _plain,
    }
    runner = runners[mode]
    runner("print(1)")  # warm the page cache
    times = []
    for _ in range(n):
        start = time.perf_counter()
        result = runner("print(1)")
        times.append(time.perf_counter() - start)
        assert result.ok and result.stdout == "1\n", result
    return statistics.median(times)


def throughput(
    mode: str, sources: list[str], answers: list[str], workers: int
) -> tuple[float, int]:
    """Wall seconds for all programs and how many printed the right answer. "bwrap+seccomp" goes
    through run_programs; "unisolated" runs the old child directly, even where bwrap works."""
    limits = SandboxLimits(wall_seconds=20, cpu_seconds=10)
    start = time.perf_counter()
    if mode == "bwrap+seccomp":
        results = run_programs(sources, limits, workers=workers)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(lambda s: audithook.run(s, limits), sources))
    seconds = time.perf_counter() - start
    return seconds, sum(r.ok and r.stdout == want for r, want in zip(results, answers, strict=True))


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--programs", type=int, default=200)
    p.add_argument("--sympy-share", type=float, default=0.1)
    p.add_argument("--startup-runs", type=int, default=30)
    p.add_argument(
        "--startup-only", action="store_true", help="only the start-up figures (print(1))"
    )
    args = p.parse_args()
    iso = isolation()
    print(f"isolation here: {iso.mode} ({iso.detail})")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average"
        f" {os.getloadavg()[0]:.1f}; euid {os.geteuid()}"
    )
    times = []
    for _ in range(args.startup_runs):
        start = time.perf_counter()
        os.close(bwrap._prepared_userns(bwrap.HOST_UID_BASE))
        times.append(time.perf_counter() - start)
    print(
        f"preparing a user namespace: {1000 * statistics.median(times):.1f} ms (once per worker:"
        " pooled)"
    )
    for mode in ("unsandboxed", "unisolated", "bwrap+seccomp"):
        print(
            f"start-up, {mode:>13}: {1000 * startup(mode, args.startup_runs):6.1f} ms per program"
            f" (median of {args.startup_runs}, print(1))"
        )
    if args.startup_only:
        return
    for share in (0.0, args.sympy_share):
        sources = programs(args.programs, share)
        answers = [expected(s) for s in sources]
        for mode in ("unisolated", "bwrap+seccomp"):
            seconds, ok = throughput(mode, sources, answers, args.workers)
            print(
                f"{args.programs} programs ({100 * share:.0f}% sympy), {args.workers} workers,"
                f" {mode:>13}: {seconds:5.1f} s ({args.programs / seconds:5.1f}/s),"
                f" {ok}/{args.programs} right"
            )


if __name__ == "__main__":
    main()
