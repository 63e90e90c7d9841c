"""What one program may take from the evaluator and from the other programs: the evaluator's
memory under programs printing their whole output cap, the CPU under a program that starts
sessions of its own, and the per-program cgroup where the machine gives one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from numloss.evaluate.sandbox import SandboxLimits, cgroup, isolation, run_program, run_programs

pytestmark = pytest.mark.skipif(isolation().mode != "bwrap+seccomp",
                                reason="kernel sandbox unavailable here: " + isolation().detail)

_MEMORY = r"""
import sys
from numloss.evaluate.sandbox import run_program, run_programs, SandboxLimits
def peak():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024
limits = SandboxLimits(wall_seconds=60, cpu_seconds=30, output_bytes=64 << 20, clock="cpu")
run_program("print(1)", limits)
base = peak()
results = run_programs(["import sys\nsys.stdout.write('1\\n' * (32 << 20))\n"] * 8, limits, workers=8)
ran = peak() - base
sizes = []
for r in results:  # the runner reads each item's output in turn
    sizes.append((r.status, len(r.stdout)))
print(sizes, ran, peak() - base)
"""


@pytest.mark.slow
def test_the_evaluators_memory_stays_bounded_with_eight_items_at_the_output_cap():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _MEMORY], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    sizes, ran, read = done.stdout.rsplit("]", 1)[0] + "]", *map(float, done.stdout.rsplit("]", 1)[1].split())
    assert sizes == str([("ok", 64 << 20)] * 8)
    # 64 MiB per concurrent item above the baseline at most; each output stays on disk until read
    assert ran <= 8 * 64 and read <= 8 * 64, (ran, read)


def test_a_program_starting_sessions_of_its_own_does_not_starve_the_others():
    # the hog: six processes, each in a session of its own (an autogroup each), spinning; three
    # items of 1 CPU second beside it. Under the CPU clock the hog's processes together are
    # stopped at its budget, the items finish; with a cgroup each program also gets one share.
    hog = ("import os\nfor _ in range(6):\n    if os.fork() == 0:\n        os.setsid()\n        while True:\n"
           "            pass\nos.wait()\n")
    item = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0:\n    pass\nprint('done')\n"
    limits = SandboxLimits(wall_seconds=30.0, cpu_seconds=3, clock="cpu")
    results = run_programs([hog, item, item, item], limits, workers=4)
    assert results[0].status == "timeout" and "all its processes together" in results[0].detail, results[0]
    assert [r.stdout for r in results[1:]] == ["done\n"] * 3, results[1:]


@pytest.mark.skipif(cgroup.support().parent is None, reason="no cgroup here: " + cgroup.support().detail)
def test_each_program_gets_its_own_cgroup_and_its_memory_limit_counts_all_its_processes():
    program = "print(open('/proc/self/cgroup').read())"
    result = run_program(program, SandboxLimits(wall_seconds=30, cpu_seconds=10, clock="cpu"))
    assert result.ok and result.stdout.count("numloss-sandbox-") >= (3 if cgroup.support().v1 else 1), result
    # four processes of 64 MiB each, every one within its own 96 MiB address-space limit: only a
    # limit on the sandbox as a whole stops them
    hold = ("import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n        b = b'x' * (64 << 20)\n"
            "        time.sleep(5)\n        os._exit(0)\nfor _ in range(4):\n    os.wait()\nprint('held')\n")
    result = run_program(hold, SandboxLimits(wall_seconds=30, cpu_seconds=10, memory_bytes=96 << 20, clock="cpu"))
    assert result.status == "memory", result
