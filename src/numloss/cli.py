"""`numloss <command> ...`: one entry point; each command lives in its own module.

Commands are imported lazily so `numloss --help` is instant and a missing optional dependency
of one command does not break the others.
"""

from __future__ import annotations

import importlib
import sys

# command -> (module with `main(argv: list[str]) -> int`, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("numloss.demo", "the default offline comparison (what `make demo` runs)"),
    "train": ("numloss.train", "fine-tune a causal LM with any objective from a YAML config"),
    "eval": ("numloss.evaluate.cli", "evaluate a model on math benchmarks"),
    "compare": ("numloss.compare", "train and evaluate one model per objective and seed"),
    "models": ("numloss.models.cli", "prepare the offline default models"),
    "bench": ("numloss.bench_cli", "run the benchmarks in bench/"),
}


def _usage() -> str:
    lines = ["usage: numloss <command> [options]", "", "commands:"]
    lines += [f"  {name:<9} {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "`numloss <command> --help` describes each command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch to the command's module; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"numloss: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    return int(module.main(rest) or 0)
