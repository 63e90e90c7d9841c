"""The `numloss` entry point: dispatch, help, unknown commands."""

from __future__ import annotations

import subprocess
import sys

from numloss.cli import COMMANDS, main


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    printed = capsys.readouterr().out
    for name in COMMANDS:
        assert name in printed


def test_unknown_command_is_an_error(capsys):
    assert main(["trian"]) == 2
    assert "unknown command 'trian'" in capsys.readouterr().err


def test_every_command_module_imports_and_has_main():
    import importlib

    for module_name, _ in COMMANDS.values():
        assert callable(importlib.import_module(module_name).main)


def test_bench_lists_the_scripts(capsys):
    assert main(["bench", "--help"]) == 0
    assert "losses" in capsys.readouterr().out
    assert main(["bench", "nosuch"]) == 2


def test_python_dash_m_runs():
    done = subprocess.run([sys.executable, "-m", "numloss", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "usage: numloss" in done.stdout
