"""The run-folder lock: one holder at a time, the holder named, a dead holder's lock taken over."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from numloss.rundir import (
    LOCK_NAME,
    RunDirBusy,
    RunDirLockError,
    check_not_busy,
    hold_run_dir,
    read_holder,
)


def test_a_second_holder_and_a_probe_are_refused_naming_the_first(tmp_path):
    """A probe (dry runs) creates nothing and leaves no lock behind."""
    check_not_busy(tmp_path / "absent")  # no folder, no lock file: free, and nothing is created
    assert not (tmp_path / "absent").exists()
    with hold_run_dir(tmp_path / "run", "numloss train"):
        with pytest.raises(RunDirBusy) as caught, hold_run_dir(tmp_path / "run", "numloss compare"):
            pass
        with pytest.raises(RunDirBusy, match=f"pid {os.getpid()}"):
            check_not_busy(tmp_path / "run")
    message = str(caught.value)
    assert "\n" not in message and f"pid {os.getpid()}" in message and "numloss train" in message
    check_not_busy(tmp_path / "run")  # released: free again
    with hold_run_dir(tmp_path / "run", "next"):
        pass
    (tmp_path / "file").write_text("x")  # a folder that cannot be created is one line
    with pytest.raises(RunDirLockError, match="cannot lock"), hold_run_dir(tmp_path / "file" / "run", "train"):
        pass


def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    """The holder's record would be written through it (every command holds its folder through
    hold_run_dir: test_api_inputs' held rows)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / LOCK_NAME).symlink_to(victim)
    with pytest.raises(RunDirLockError, match=r"^cannot lock .* is a symbolic link [^\n]*$"), hold_run_dir(tmp_path, "x"):
        pass
    assert victim.read_text() == "keep me"


def test_the_lock_file_records_the_last_holder_and_garbage_in_it_breaks_nothing(tmp_path, caplog):
    (tmp_path / LOCK_NAME).write_bytes(b"\xff\x00 not json")
    assert read_holder(tmp_path) == {}
    with hold_run_dir(tmp_path, "first"):
        assert json.loads((tmp_path / LOCK_NAME).read_text())["command"] == "first"
    assert read_holder(tmp_path)["released"] > 0
    with caplog.at_level(logging.WARNING), hold_run_dir(tmp_path, "second"):
        assert read_holder(tmp_path)["command"] == "second"
    assert "taking over" not in caplog.text  # a clean release is not a stale lock


def test_lock_of_a_killed_process_is_taken_over(tmp_path, caplog):
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", "import time, pathlib\nfrom numloss.rundir import hold_run_dir\n"
                               f"with hold_run_dir({str(tmp_path / 'run')!r}, 'victim'):\n"
                               f"    pathlib.Path({str(ready)!r}).touch()\n    time.sleep(60)\n"])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(RunDirBusy, match=f"pid {holder.pid}"), hold_run_dir(tmp_path / "run", "intruder"):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with caplog.at_level(logging.WARNING), hold_run_dir(tmp_path / "run", "next"):
        pass
    assert "taking over" in caplog.text and "victim" in caplog.text
