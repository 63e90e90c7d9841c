"""`numloss bench NAME [args]`: run one of the benchmark scripts of the source checkout's bench/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def available() -> list[str]:
    """Names of the benchmark scripts in bench/ (empty when not run from a source checkout)."""
    return sorted(p.stem for p in BENCH_DIR.glob("*.py")) if BENCH_DIR.is_dir() else []


def main(argv: list[str]) -> int:
    names = available()
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: numloss bench NAME [args...]   (NAME --help for its options)")
        print(f"benchmarks: {', '.join(names) or f'none found (expected in {BENCH_DIR})'}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in names:
        print(
            f"numloss bench: no benchmark {name!r} in {BENCH_DIR}; available:"
            f" {', '.join(names) or 'none'}. The benchmarks live in the source checkout (git"
            " clone), not in an installed wheel.",
            file=sys.stderr,
        )
        return 2
    return subprocess.call([sys.executable, str(BENCH_DIR / f"{name}.py"), *rest])
