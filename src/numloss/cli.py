"""`numloss <command> ...`: one entry point; each command is imported lazily, so `--help` is instant
and a missing extra of one command prints one line without breaking the others.
"""

from __future__ import annotations

import importlib
import io
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from numloss.extras import explain

# command -> (module with `main(argv: list[str]) -> int`, one-line help, the extra it needs)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": ("numloss.demo", "the default offline comparison (what `make demo` runs)", "compare"),
    "train": ("numloss.train", "fine-tune a causal LM with any objective from a YAML config", "hf"),
    "eval": ("numloss.evaluate.cli", "evaluate a model on math benchmarks", "eval"),
    "compare": ("numloss.compare", "train and evaluate a model per objective and seed", "compare"),
    "models": ("numloss.models.cli", "prepare the offline default models", "gguf"),
    "bench": ("numloss.bench_cli", "run the benchmarks in bench/", "hf"),
}


#: the address space below which torch cannot be imported at all (a 1 GiB `ulimit -v` fails inside
#: its import, or aborts in a Rust library, with no line of ours); a dry run of the tiny model fits
#: 2 GiB
MIN_ADDRESS_SPACE = 2 * 2**30


def _address_space_limit() -> int | None:
    """The soft RLIMIT_AS in bytes, or None when there is none (or no such limit on this system)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, AttributeError, OSError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def _usage() -> str:
    lines = ["usage: numloss <command> [options]", "", "commands:"]
    lines += [f"  {name:<9} {text}" for name, (_, text, _) in COMMANDS.items()]
    lines += [
        "",
        "`numloss <command> --help` describes each command, `numloss --version` the version.",
    ]
    return "\n".join(lines)


def _say(line: str, status: int) -> int:
    """Print `line` on stderr and return the exit `status`."""
    print(line, file=sys.stderr)
    return status


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
        return _say(f"numloss: unknown command {command!r}\n\n{_usage()}", 2)
    module_name, _, extra = COMMANDS[command]
    limit = _address_space_limit()
    if limit is not None and limit < MIN_ADDRESS_SPACE and not {"-h", "--help"} & set(rest):
        return _say(
            f"numloss {command}: the address-space limit (ulimit -v) is {limit / 2**30:.1f} GiB;"
            f" torch and its libraries need at least {MIN_ADDRESS_SPACE / 2**30:.0f} GiB to load:"
            " raise it (ulimit -v unlimited)",
            2,
        )
    try:
        module = importlib.import_module(module_name)
        return int(module.main(rest) or 0)
    except MemoryError:
        why = "out of memory (MemoryError); free memory or raise the limit (ulimit -v)"
        return _say(f"numloss {command}: {why}", 1)
    except ModuleNotFoundError as error:
        line = explain(error, extra, f"numloss {command}")
        if line is None:
            raise
        return _say(line, 2)  # one line naming the extra, no traceback


def _to_devnull(fd: int) -> None:
    """Point the descriptor `fd` at /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


class _Console:
    """sys.stdout that cannot fail a command whose work is done: the first write or flush that
    fails (a full disk behind `>/dev/full`, a descriptor gone) prints one line on stderr, and
    everything after it goes nowhere, so the interpreter's own flush at exit has nothing to fail
    on. A closed pipe still raises BrokenPipeError (`numloss ... | head` ends quietly, status 141).
    """

    def __init__(self, stream: io.TextIOBase) -> None:
        self._stream = stream
        self.lost = False

    def _lose(self, error: OSError | ValueError) -> None:
        self.lost = True
        try:
            _to_devnull(self._stream.fileno())  # what the buffer holds goes nowhere at exit
        except (OSError, ValueError):
            pass
        why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        print(
            f"numloss: stdout cannot be written ({why}); the results written to disk are complete",
            file=sys.stderr,
        )

    def _guarded(self, action: Callable[[], Any], default: Any) -> Any:
        if not self.lost:
            try:
                return action()
            except BrokenPipeError:
                raise
            except (OSError, ValueError) as error:
                self._lose(error)
        return default

    def write(self, text: str) -> int:
        return self._guarded(lambda: self._stream.write(text), len(text))

    def flush(self) -> None:
        self._guarded(self._stream.flush, None)

    def __getattr__(self, name: str):  # fileno, isatty, encoding, ...: the real stream's
        return getattr(self._stream, name)


def _in_utf8_mode() -> None:
    """Run the command again in Python's UTF-8 mode when this locale's filesystem encoding is not
    UTF-8 (LC_ALL=C with PYTHONUTF8=0): there a path from a YAML or JSON file ("runs/é") cannot be
    encoded at all, and one typed on the command line reaches Python as surrogate escapes that
    Rust libraries (tokenizers) refuse. In UTF-8 mode every name is UTF-8 and any other byte still
    round-trips (surrogateescape), so paths with any Unicode work; the files are the same."""
    if sys.flags.utf8_mode or sys.getfilesystemencoding().lower().replace("-", "") == "utf8":
        return
    os.execve(
        sys.executable,
        [sys.executable, "-X", "utf8", *sys.orig_argv[1:]],
        {**os.environ, "PYTHONUTF8": "1"},
    )


def main(argv: list[str] | None = None) -> int:
    """Dispatch to the command's module and return the exit status; a closed pipe
    (`numloss train --help | head`) ends quietly, a closed or full stdout in one line (_Console)."""
    whole_process = argv is None  # the console script: this process is the command's own
    if whole_process:
        _in_utf8_mode()
    argv = list(sys.argv[1:] if argv is None else argv)
    # text the console's encoding cannot hold (a non-ASCII file name under PYTHONIOENCODING=ascii)
    # is printed with backslash escapes instead of failing the command; a stream that already has
    # a lenient handler (surrogateescape under LC_ALL=C) keeps it
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")
    console = None
    # None when started with stdout closed (`>&-`): print() is a no-op
    if isinstance(sys.stdout, io.TextIOWrapper):
        console = sys.stdout = _Console(sys.stdout)  # type: ignore[assignment]
    try:
        status = _dispatch(argv)
        if status == 130 and whole_process:
            # interrupted, and said so: a further Ctrl-C (or one still pending for the exit
            # handlers that join the workers' threads) ends the process as a signal does, with no
            # traceback; an in-process caller keeps its own handler
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        if console is not None:
            console.flush()
        return 1 if console is not None and console.lost else status
    except BrokenPipeError:
        # the reader is gone: send what is left in the buffer nowhere (Python's documented recipe)
        _to_devnull(sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command stopped by its pipe
    finally:
        # an in-process caller gets its stream back
        if console is not None and sys.stdout is console:
            sys.stdout = console._stream  # type: ignore[assignment]
