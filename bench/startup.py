"""Start-up time of `numloss --help` and every command's `--help` (the goal: at most 0.5 s each).

Each help runs in a fresh process `--repeat` times; this prints the median wall seconds and the
median CPU seconds (user + system of the child: what a quiet core would take as wall time, and what
a busy machine does not inflate), and whether torch was loaded.

    python bench/startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import date

from numloss.cli import COMMANDS

PROBE = (
    "import sys, runpy; sys.argv = ['numloss', *sys.argv[1:]]\n"
    "try:\n    runpy.run_module('numloss', run_name='__main__')\nexcept SystemExit:\n    pass\n"
    "sys.stderr.write('torch' if 'torch' in sys.modules else '-')"
)


def time_help(argv: list[str]) -> tuple[float, float, bool]:
    """(wall seconds, CPU seconds, torch loaded) of one `numloss ARGV --help` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv, "--help"], capture_output=True, text=True, check=True
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, done.stderr.endswith("torch")


def cpu_name() -> str:
    """The CPU's model name (Linux), else what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            return next(
                line.split(":", 1)[1].strip() for line in info if line.startswith("model name")
            )
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        f"{date.today()}, {cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"{'help':<22} {'wall s':>7} {'CPU s':>7}  torch")
    for argv in [[], *([c] for c in COMMANDS)]:
        runs = [time_help(argv) for _ in range(args.repeat)]
        wall, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        name = " ".join(["numloss", *argv, "--help"])
        print(f"{name:<22} {wall:7.2f} {cpu:7.2f}  {'yes' if any(r[2] for r in runs) else 'no'}")


if __name__ == "__main__":
    main()
