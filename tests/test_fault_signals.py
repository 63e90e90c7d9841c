"""Signals and dying processes: a subprocess a test starts dies with the test process (an
interrupted `make test` leaves nothing running), a killed multiprocessing resource tracker costs no
traceback, and after an interrupted command's one line a further Ctrl-C ends it as a signal does.
Each runs a small Python process without torch (well under a second)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from faultrun import ENV, alive


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_a_subprocess_of_a_test_dies_with_the_test_process() -> None:
    # the stand-in for a test process: conftest's Popen, a child in its own session (as the two-job
    # compare tests start theirs, out of reach of the terminal's Ctrl-C), then a death by SIGKILL
    test_process = subprocess.run(
        [sys.executable, "-c", "import os, subprocess, sys, conftest\n"
         "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
         "print(child.pid, flush=True)\nos.kill(os.getpid(), 9)"],
        capture_output=True, text=True, env=ENV, timeout=60,
    )
    child = int(test_process.stdout.split()[0])
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail("a test's subprocess outlived the killed test process")


@pytest.mark.parametrize(("program", "printed"), [
    pytest.param(
        "import gc, os, time, multiprocessing\n"
        "from multiprocessing import resource_tracker\n"
        "from numloss.interrupt import quiet_resource_tracker\n"
        "quiet_resource_tracker()\n"
        "locks = [multiprocessing.get_context('spawn').Lock() for _ in range(3)]\n"
        "os.kill(resource_tracker._resource_tracker._pid, 9)\n"
        "time.sleep(0.2)\n"
        "del locks\ngc.collect()\n"
        "time.sleep(0.5)  # the restarted tracker reads the three unregisters\n"
        "print('done')\n", "done\n", id="killed-resource-tracker",
        marks=pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the spawn context's named semaphores")),
    pytest.param(
        "import signal, sys\n"
        "from numloss import cli\n"
        "cli._dispatch = lambda argv: 130  # a command that was interrupted and said so\n"
        "sys.argv = ['numloss', 'compare']\n"
        "status = cli.main()\n"
        "print(status, signal.getsignal(signal.SIGINT) is signal.SIG_DFL)\n", "130 True\n", id="further-ctrl-c"),
])
def test_a_killed_resource_tracker_or_a_ctrl_c_after_the_interrupted_line_ends_quietly(program, printed) -> None:
    """A killed tracker is restarted with no traceback; after the interrupted command's line,
    Ctrl-C is back to ending the process as a signal does."""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=ENV, timeout=60)
    assert done.returncode == 0 and done.stdout == printed, done.stderr
    assert "Traceback" not in done.stderr and "KeyError" not in done.stderr, done.stderr
