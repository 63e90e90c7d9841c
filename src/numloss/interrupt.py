"""SIGTERM handled as Ctrl-C: `sigterm_as_interrupt()` makes a `kill PID` (a job scheduler's stop,
`timeout`, a closing terminal) raise KeyboardInterrupt where the process is, so a command leaves
through the same path as Ctrl-C: temporaries removed, one line saying what was kept and the
command that continues. Without it SIGTERM ends the process silently, mid-write.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def _raise_interrupt(signum: int, frame: Any) -> None:
    # a second SIGTERM (the sender insisting) ends the process as it would have without us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """For the body, SIGTERM raises KeyboardInterrupt (once; a second one kills); the previous
    handler is restored after. A no-op outside the main thread, where handlers cannot be set.
    Also a decorator: `@sigterm_as_interrupt()` on a command's `main`, for each call."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (now and whenever it is started again) with its
    stderr on /dev/null. Killed mid-grid, the tracker is restarted by the next semaphore freed, and
    the new one, told to forget semaphores it never saw, prints a KeyError traceback for each
    (the semaphores themselves are unlinked by their owner either way): its output is never the
    user's business. Idempotent; the spawn and forkserver contexts use the tracker."""
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    if getattr(tracker, "_numloss_quiet", False):
        return
    start = tracker.ensure_running

    def ensure_running() -> None:
        # fd 2 is what the tracker inherits; swapped only around its start
        saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
            start()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)

    tracker.ensure_running = ensure_running  # type: ignore[method-assign]
    tracker._numloss_quiet = True  # type: ignore[attr-defined]
