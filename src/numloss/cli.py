"""`numloss <command> ...`: one entry point; each command is imported lazily, so `--help` is instant
and a missing extra of one command prints one line without breaking the others.
"""

from __future__ import annotations

import importlib
import os
import sys

from numloss.extras import explain

# command -> (module with `main(argv: list[str]) -> int`, one-line help, the extra it needs)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": ("numloss.demo", "the default offline comparison (what `make demo` runs)", "compare"),
    "train": ("numloss.train", "fine-tune a causal LM with any objective from a YAML config", "hf"),
    "eval": ("numloss.evaluate.cli", "evaluate a model on math benchmarks", "eval"),
    "compare": ("numloss.compare", "train and evaluate one model per objective and seed", "compare"),
    "models": ("numloss.models.cli", "prepare the offline default models", "gguf"),
    "bench": ("numloss.bench_cli", "run the benchmarks in bench/", "hf"),
}


def _usage() -> str:
    lines = ["usage: numloss <command> [options]", "", "commands:"]
    lines += [f"  {name:<9} {text}" for name, (_, text, _) in COMMANDS.items()]
    lines += ["", "`numloss <command> --help` describes each command; `numloss --version` prints the version."]
    return "\n".join(lines)


def _dispatch(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from numloss import __version__

        print(f"numloss {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"numloss: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, _, extra = COMMANDS[command]
    try:
        module = importlib.import_module(module_name)
        return int(module.main(rest) or 0)
    except ModuleNotFoundError as error:
        line = explain(error, extra, f"numloss {command}")
        if line is None:
            raise
        print(line, file=sys.stderr)  # one line naming the extra, no traceback
        return 2


def main(argv: list[str] | None = None) -> int:
    """Dispatch to the command's module and return the exit status; a closed pipe
    (`numloss train --help | head`) ends quietly."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        status = _dispatch(argv)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # the reader is gone: send what is left in the buffer nowhere (Python's documented recipe)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command stopped by its pipe
