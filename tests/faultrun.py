"""`python -m faultrun COMMAND ARGS...`: a numloss command with a fault injected at a save point.

The library holds no fault hooks: this runner wraps the library functions a save point sits
between, then runs `numloss COMMAND ARGS...` in this process. NUMLOSS_FAULT_POINT names the
point; POINT kills the process there with SIGKILL, `pause:POINT` touches $NUMLOSS_FAULT_FILE.paused
and waits (at most 120 s) until $NUMLOSS_FAULT_FILE exists (a test then signals or releases it).

Points: `checkpoint-N-files-written` and `checkpoint-N-marked` (around the marker of
checkpoint-N), `final-files-written` and `final-marked` (around final.partial/'s marker),
`final-renamed` (final/ committed).

Imported, it is the fault tests' one builder of runs: the tiny 4-step training (`config`, `RUN`),
`cli` (this runner in a subprocess), `train_killed_after`, what they are compared with, and
`one_line` (a command's one error line).
"""

from __future__ import annotations

import contextlib
import csv
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "fixtures" / "train" / "tiny-test.yaml"
# 4 steps, a checkpoint after each, none rotated away; 16 examples (a 1-layer model: fast); a cosine
# schedule, so a resume that lost the scheduler's state ends elsewhere
RUN = ["--train.max_steps", "4", "--train.save_steps", "1", "--train.save_total_limit", "null",
       "--data.num_examples", "16", "--model.tiny_layers", "1", "--train.lr_scheduler_type", "cosine"]
#: a subprocess's environment: this checkout's src and tests first, one thread, offline
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}


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


def at_call(monkeypatch, owners: list, name: str, nth: int | None, act) -> dict[str, int]:
    """Wrap `name` on each of `owners` (one count for them all) so that `act()` runs as the `nth`
    call starts (None: count only) and what it returns, if anything, is raised; the call count."""
    calls = {"n": 0}
    for owner in owners:
        real = getattr(owner, name)

        def wrapped(*args, _real=real, **kwargs):
            calls["n"] += 1
            if calls["n"] == nth and (error := act()) is not None:
                raise error
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapped)
    return calls


def install() -> None:
    """Wrap the library functions around each save point (module doc)."""
    import numloss.checkpoints as checkpoints
    import numloss.train.callbacks
    import numloss.train.run

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


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on (for torchrun's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the tiny training run the train fault tests interrupt -----------------------------------------
def config(out: Path, *overrides: str):
    from numloss.config import load_config

    return load_config(TINY, ["--train.output_dir", str(out), *RUN, *overrides])


class Killed(Exception):
    """Raised by `train_killed_after` where a kill would have ended the run."""


def train_killed_after(config, step: int) -> None:
    """Train `config` and end it right after the checkpoint of `step` is whole, as a kill there would."""
    import pytest
    from transformers import TrainerCallback

    from numloss.train import run_training

    class Kill(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):  # after numloss's marker (its callbacks run first)
            if state.global_step >= step:
                raise Killed(step)

    with pytest.raises(Killed):
        run_training(config, callbacks=[Kill()])


def cli(out: Path, *extra: str, env: dict[str, str] | None = None, wait: bool = True):
    """`numloss train` of `config(out)` through this runner in a subprocess, killed or paused at
    env's NUMLOSS_FAULT_POINT; the finished process, or the running one without `wait`."""
    command = [sys.executable, "-m", "faultrun", "train", str(TINY), "--train.output_dir", str(out), *RUN, *extra]
    # a shell without job control starts background jobs with SIGINT ignored; a terminal's Ctrl-C is not
    process = subprocess.Popen(command, env={**ENV, **(env or {})}, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    if not wait:
        return process
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def wait_until_paused(process: subprocess.Popen, release: Path) -> None:
    """Wait until this runner has paused `process` at its NUMLOSS_FAULT_POINT (it touches RELEASE.paused)."""
    deadline = time.monotonic() + 240
    while not Path(f"{release}.paused").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-2000:]
        time.sleep(0.05)


def weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def assert_same_weights(a: Path, b: Path) -> None:
    """Bit for bit: a resume at the thread count its run started with is."""
    import torch

    left, right = weights(a), weights(b)
    assert left.keys() == right.keys()
    for key in left:
        torch.testing.assert_close(left[key], right[key], rtol=0, atol=0, msg=key)


def logged_steps(out: Path) -> list[int]:
    return [int(row["step"]) for row in csv.DictReader((out / "log.csv").open())]


def logged_losses(out: Path) -> dict[int, float]:
    return {int(row["step"]): float(row["loss"]) for row in csv.DictReader((out / "log.csv").open())}


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file's bytes but the lock file's (a refused run may take and release the lock)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".numloss.lock"}


def one_line(argv: list[str], capsys, *, status: int = 2, may_run: bool = False) -> str | None:
    """Run `numloss ARGV` in-process (ARGV[0] the command) and return the one line it printed:
    exit `status`, that line alone on stderr (blank lines aside), starting `numloss COMMAND: `, no
    traceback and no 'unexpected error' (a case no check foresaw). With `may_run`, a run (exit 0,
    nothing on stderr) returns None."""
    from numloss.cli import main

    try:
        rc = main(argv)
    except SystemExit as exit_:  # argparse
        rc = exit_.code
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    if may_run and rc == 0 and not lines:
        return None
    assert rc == status and len(lines) == 1, (argv, rc, captured.err[-2000:])
    assert "Traceback" not in captured.err + captured.out, captured.err[-2000:]
    assert lines[0].startswith(f"numloss {argv[0]}: ") and "unexpected error" not in lines[0], lines[0]
    return lines[0]


if __name__ == "__main__":
    install()
    from numloss.cli import main

    sys.argv = ["numloss", *sys.argv[1:]]
    raise SystemExit(main())
