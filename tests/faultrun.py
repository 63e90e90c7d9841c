"""`python -m faultrun COMMAND ARGS...`: a numloss command with a fault injected at a save point.

The library holds no fault hooks: this runner wraps the library functions a save point sits
between, then runs `numloss COMMAND ARGS...` in this process. NUMLOSS_FAULT_POINT names the
point; POINT kills the process there with SIGKILL, `pause:POINT` touches $NUMLOSS_FAULT_FILE.paused
and waits (at most 120 s) until $NUMLOSS_FAULT_FILE exists (a test then signals or releases it).

Points: `locked` (the run folder is held, nothing read yet), `checkpoint-N-files-written` and
`checkpoint-N-marked` (around the marker of checkpoint-N), `final-files-written` and
`final-marked` (around final.partial/'s marker), `final-renamed` (final/ committed).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path


def fault(point: str) -> None:
    """Kill or pause here when NUMLOSS_FAULT_POINT names `point` (module doc)."""
    wanted = os.environ.get("NUMLOSS_FAULT_POINT")
    if wanted == point:
        os.kill(os.getpid(), signal.SIGKILL)
    elif wanted == f"pause:{point}":
        release = Path(os.environ["NUMLOSS_FAULT_FILE"])
        Path(f"{release}.paused").touch()
        deadline = time.monotonic() + 120
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


@contextlib.contextmanager
def file_size_limit(limit: int):
    """RLIMIT_FSIZE at `limit` bytes while the block runs, SIGXFSZ ignored: a write past it fails
    with EFBIG, as on a full quota."""
    import resource

    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (read from /proc)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def install() -> None:
    """Wrap the library functions around each save point (module doc)."""
    import numloss.checkpoints as checkpoints
    import numloss.rundir as rundir
    import numloss.train.callbacks
    import numloss.train.run

    hold = rundir.hold_run_dir

    @contextlib.contextmanager
    def held(*args, **kwargs):
        with hold(*args, **kwargs) as value:
            fault("locked")
            yield value

    rundir.hold_run_dir = held
    mark = checkpoints.write_marker

    def marked_checkpoint(folder: Path, step: int) -> None:  # the callbacks' binding: checkpoint-N/
        fault(f"checkpoint-{step}-files-written")
        mark(folder, step)
        fault(f"checkpoint-{step}-marked")

    def marked_final(folder: Path, step: int) -> None:  # checkpoints' binding: final.partial/ in commit_final
        if folder.name == checkpoints.FINAL_PARTIAL:
            fault("final-files-written")
        mark(folder, step)
        if folder.name == checkpoints.FINAL_PARTIAL:
            fault("final-marked")

    numloss.train.callbacks.write_marker = marked_checkpoint
    checkpoints.write_marker = marked_final
    commit = numloss.train.run.commit_final

    def committed(*args, **kwargs):
        final = commit(*args, **kwargs)
        fault("final-renamed")
        return final

    numloss.train.run.commit_final = committed


if __name__ == "__main__":
    install()
    from numloss.cli import main

    sys.argv = ["numloss", *sys.argv[1:]]
    raise SystemExit(main())
