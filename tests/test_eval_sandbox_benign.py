"""Benign programs in the real sandbox give the answer `python prog.py` gives, within what one
program may take from the evaluator and the other programs.

Each program of the corpus is a shape people write: it runs once on the host as ``python prog.py``
and once in the sandbox through the `numloss` protocol's script, and the two outputs must be equal.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import pytest

from numloss.evaluate.protocol import NUMLOSS, RELEASED
from numloss.evaluate.sandbox import SandboxLimits, cgroup, isolation, run_program, run_programs

pytestmark = pytest.mark.skipif(isolation().mode != "bwrap+seccomp",
                                reason="kernel sandbox unavailable here: " + isolation().detail)

# generous: these programs start child interpreters on a shared, loaded machine
LIMITS = SandboxLimits(wall_seconds=60.0, cpu_seconds=30, memory_bytes=1 << 30, output_bytes=64 * 1024)

PICKLING = {
    "pickle_function_and_dataclass": """
import pickle
from dataclasses import dataclass
def double(x):
    return 2 * x
@dataclass
class Point:
    x: int
    y: int
p = pickle.loads(pickle.dumps(Point(3, 4)))
print(pickle.loads(pickle.dumps(double))(21), p.x * p.y, p)
""",
    "pool_without_main_guard": """
from multiprocessing import Pool
def square(x):
    return x * x
with Pool(3) as pool:
    print(sum(pool.map(square, range(10))))
""",
}

SOCKETS = {
    "asyncio_gather": """
import asyncio
async def add(a, b):
    await asyncio.sleep(0.01)
    return a + b
async def main():
    print(sum(await asyncio.gather(add(1, 2), add(3, 4), add(5, 6))))
asyncio.run(main())
""",
    "socketpair": """
import socket
a, b = socket.socketpair()
a.sendall(b"6*7")
print(eval(b.recv(16).decode()))
""",
    "manager_dict": """
from multiprocessing import Manager
with Manager() as manager:
    d = manager.dict()
    d["a"] = 40
    items = manager.list([1, 1])
    print(d["a"] + sum(items))
""",
    "duplex_pipe": """
from multiprocessing import Pipe, Process
def child(conn):
    conn.send(conn.recv() * 2)
here, there = Pipe()
p = Process(target=child, args=(there,))
p.start()
here.send(21)
print(here.recv())
p.join()
""",
    "unix_socket_in_tmp": """
import os, socket, tempfile, threading
path = os.path.join(tempfile.mkdtemp(), "s")
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen()
def serve():
    conn, _ = server.accept()
    conn.sendall(str(int(conn.recv(8)) + 1).encode())
threading.Thread(target=serve).start()
client = socket.socket(socket.AF_UNIX)
client.connect(path)
client.sendall(b"41")
print(client.recv(8).decode())
""",
}

# Pool and ProcessPoolExecutor behind a main guard: forkserver_and_spawn_pools below; a thread pool:
# the process-limit table's "threads within it"
CORPUS = {**PICKLING, **SOCKETS, "locale_from_environment": """
import locale
print(locale.setlocale(locale.LC_ALL, ""), locale.getpreferredencoding(False))
print(locale.format_string("%.2f", 1234.5, grouping=True))
"""}

# Programs run as they are (no protocol's wrapper), compared with `python prog.py` on both stdout
# and exit status; among them what the site module gives a plain `python` (the sandbox's
# interpreter runs -S) and what needs the program's own file (inspect, spawn, a module beside it).
PLAIN = {
    "main_module_argv_and_file": "import os, sys\nprint(__name__, sys.modules['__main__'].__dict__ is globals(), sys.argv)\n"
    "print(os.path.basename(__file__), os.path.isabs(__file__))\n",
    "stdlib_modules": """
import collections, hashlib, itertools, json, math, random, re, statistics
from decimal import Decimal, getcontext
from fractions import Fraction
print(math.comb(10, 3), sum(itertools.islice(itertools.count(1), 4)), statistics.mean([1, 2, 3, 6]), json.dumps(collections.Counter("aab")))
getcontext().prec = 120
print(Decimal(2).sqrt(), sum(Fraction(1, k) for k in range(1, 40)))
random.seed(12345)
print([random.randint(1, 100) for _ in range(5)], hashlib.sha256(b"abc").hexdigest()[:16])
print(json.dumps({"b": [1, 2.5, None], "a": "é"}, sort_keys=True), re.findall(r"\\d+", "a1b22c333"))
""",
    "sympy_and_numpy": "import numpy as np, sympy\nx = sympy.Symbol('x')\nprint(sympy.solve(2*x - 12, x)[0], "
    "np.arange(5).sum(), float(np.linalg.det(np.array([[2.0, 0], [0, 3.0]]))))\n",
    "child_interpreter_imports_sympy": "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', "
    "'import sympy; print(sympy.Integer(6) * 7)'], capture_output=True, text=True, check=True).stdout)\n",
    "exit_builtin": "print(42)\nexit(0)\n",
    "quit_with_code": "print('q')\nquit(4)\n",
    "help_builtin": "help(abs)\nprint('after help')\n",
    "sys_exit_message": "import sys\nprint('partial')\nsys.exit('bad thing')\n",
    "inspect_getsource": """
import inspect
def g(x):
    return x + 1
print(inspect.getsource(g).splitlines()[0])
""",
    "import_module_written_beside_it": """
with open("helper.py", "w") as f:
    f.write("def triple(x):\\n    return 3 * x\\n")
import helper
print(helper.triple(14))
""",
    "zoneinfo": """
import datetime
from zoneinfo import ZoneInfo
d = datetime.datetime(2024, 3, 10, 12, 0, tzinfo=ZoneInfo("America/New_York"))
print(d.isoformat(), d.astimezone(ZoneInfo("Asia/Kolkata")).isoformat())
""",
    "input_at_eof": """
try:
    n = input("n? ")
except EOFError:
    n = "10"
import sys
print(int(n) * 2, repr(sys.stdin.read()))
""",
    "deep_recursion": """
import sys
sys.setrecursionlimit(100000)
def depth(n):
    return 0 if n == 0 else 1 + depth(n - 1)
print(depth(50000))
""",
    "int_over_4300_digits": """
import sys
sys.set_int_max_str_digits(0)
s = str(3 ** 20000)
print(len(s), s[:20], s[-20:])
""",
    "unicode_output": "import unicodedata\nprint('π ≈ 3.14159 😀 数学 ½ naïve', unicodedata.name('π'))\n",
    "print_end_flush_no_newline": "import sys\nfor i in range(5):\n    print(i, end='', flush=True)\nprint()\nsys.stdout.write('tail')\n",
    "line_near_the_output_cap": "print('7' * 60000)\n",
    "files_in_cwd_and_tempfile": """
import os, tempfile, shelve
with open("data.txt", "w") as f:
    f.write("\\n".join(map(str, range(100))))
print(sum(int(line) for line in open("data.txt")), "data.txt" in os.listdir("."))
with tempfile.TemporaryDirectory() as d:
    with shelve.open(os.path.join(d, "sh")) as s:
        s["k"] = [1, 2]
    with shelve.open(os.path.join(d, "sh")) as s:
        print(s["k"], open(os.devnull, "w").write("x"))
""",
    "reopen_dev_stdout_and_stderr": """
import sys
sys.stdout.flush()
with open("/dev/stdout", "w") as out, open("/dev/stderr", "w") as err:
    out.write("via /dev/stdout\\n")
    err.write("via /dev/stderr\\n")
print("after")
""",
    "forkserver_and_spawn_pools": """
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
def f(x):
    return x * 3
if __name__ == "__main__":
    with mp.get_context("forkserver").Pool(2) as pool:
        print(pool.map(f, range(4)))
    with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as ex:
        print(list(ex.map(f, range(3))))
""",
    "warnings_on_stderr": "import warnings\nwarnings.warn('careful')\nprint('done')\n",
    "sleep": "import time\nt = time.monotonic()\ntime.sleep(0.2)\nprint(time.monotonic() - t >= 0.19)\n",
}

ALL = {**CORPUS, **PLAIN}
#: every program by (how, name): the corpus through the numloss protocol's script and the released
#: one, PLAIN as it is; the start methods that re-run the main file in each child (forkserver is
#: Python 3.14's default) also through the numloss one: its fresh __main__ must name that file and
#: hand the child its functions
RUNS = {("numloss", n): NUMLOSS.script(ALL[n]) for n in [*CORPUS, "forkserver_and_spawn_pools"]}
RUNS |= {("released", n): RELEASED.script(CORPUS[n]) for n in [*PICKLING, *SOCKETS]}
RUNS |= {("plain", n): PLAIN[n] for n in PLAIN}


@pytest.fixture(scope="module")
def sandboxed() -> dict[tuple[str, str], object]:
    """Every program of RUNS, in one pool."""
    return dict(zip(RUNS, run_programs(list(RUNS.values()), LIMITS, workers=4), strict=True))


@pytest.mark.parametrize("how, name", RUNS)
def test_each_program_gives_what_python_prog_py_gives(sandboxed, how, name, tmp_path):
    # on the host, stdin at EOF, with the sandbox's locale (C.UTF-8) and a short TMPDIR: Manager and
    # forkserver bind a unix socket below it, and pytest's tmp_path can pass the 108 bytes a socket
    # path may have (as uid 65534 it lies below the non-root run's HOME)
    (tmp_path / "prog.py").write_text(ALL[name])
    with tempfile.TemporaryDirectory(prefix="np-") as short:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8", "TMPDIR": short}
        host = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120)
    stdout, status = host.stdout, host.returncode
    assert status == 0 or how == "plain", stdout  # a corpus program answers
    if how == "released":
        # the socket answers, with the trailing newline the released wrapper strips; and the pickling
        # failures: under the released executor the program is the body of a function, what it defines
        # is not a module attribute, pickling it raises, and the released wrapper drops its output
        stdout = stdout.strip("\n") if name in SOCKETS else ""
    result = sandboxed[how, name]
    assert (result.stdout, result.returncode) == (stdout, status), result
    assert result.status == ("ok" if status == 0 else "error"), result
    if status:
        assert result.detail.startswith(f"exit status {status}"), result


_THREADS = ("from concurrent.futures import ThreadPoolExecutor\nimport threading\ngo = threading.Event()\n"
            "with ThreadPoolExecutor(16) as pool:\n    print(sum(pool.map(go.wait, [0.5] * 16)) == 0)\n")
_HELD = """
import os, time
try:
    while True:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
except OSError:
    pass
os.wait()
"""
_FORKS = ("import os, time\nn = 0\nfor _ in range(40):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
          "    if pid == 0:\n        time.sleep(2)\n        os._exit(0)\n    n += 1\nprint(n < 8)")
# Pool(60) used to wait for the wall clock: 60 workers, its threads, the program and the init pass
# the 64 processes and threads, one thread cannot start and the pool waits for ever
_POOL = "from multiprocessing import Pool\ndef f(x):\n    return x\nwith Pool({}) as pool:\n    print(sum(pool.map(f, range(100))))\n"
_AT_64 = {"ok": "4950\n", "error": "limit of 64 tasks, threads and processes counted alike"}


@pytest.mark.parametrize("program, max_processes, shown", [
    (_THREADS, 12, {"error": "threads and processes counted alike"}),
    (_THREADS, 24, {"ok": "True\n"}),
    (_HELD, 16, {"error": "limit of 16 tasks"}),
    (_FORKS, 8, {"ok": "True\n"}),
    *((wrap(_POOL.format(workers)), 64, _AT_64) for workers in (58, 60, 62, 63) for wrap in (str, NUMLOSS.script)),
], ids=["threads past the limit", "threads within it", "held at the limit", "forks, also when the evaluator is root",
        *(f"Pool({workers}){how}" for workers in (58, 60, 62, 63) for how in ("", " in the numloss script"))])
def test_the_process_limit_counts_threads_and_processes_and_ends_a_program_held_at_it(program, max_processes, shown):
    started = time.monotonic()
    result = run_program(program, SandboxLimits(wall_seconds=60.0, cpu_seconds=30, max_processes=max_processes))
    assert result.status in shown and shown[result.status] in (result.stdout if result.ok else result.detail), result
    assert time.monotonic() - started < 20, result


def test_under_the_cpu_clock_a_slow_machine_does_not_cost_the_answer_and_the_wall_clock_would():
    # 1.5 CPU seconds of work: more than the 1 s wall clock whatever the load (a process cannot
    # use more CPU time than wall time), well inside the CPU clock's budget
    program = "x = 0\nimport time\nt = time.process_time()\nwhile time.process_time() - t < 1.5:\n    x += 1\nprint('done')\n"
    wall = run_program(program, SandboxLimits(wall_seconds=1.0, cpu_seconds=8))
    cpu = run_program(program, SandboxLimits(wall_seconds=1.0, cpu_seconds=8, clock="cpu"))
    assert wall.status == "timeout" and "wall-clock" in wall.detail, wall
    assert cpu.ok and cpu.stdout == "done\n", cpu


_MEMORY = r"""
from numloss.evaluate.sandbox import run_program, run_programs, SandboxLimits
def peak():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024
limits = SandboxLimits(wall_seconds=60, cpu_seconds=30, output_bytes=64 << 20, clock="cpu")
run_program("print(1)", limits)
base = peak()
results = run_programs(["import sys\nsys.stdout.write('1\\n' * (32 << 20))\n"] * 8, limits, workers=8)
ran = peak() - base
sizes = [(r.status, len(r.stdout)) for r in results]  # the runner reads each item's output in turn
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
