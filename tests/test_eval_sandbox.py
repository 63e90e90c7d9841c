"""The program sandbox: hostile programs are contained, reported, and the evaluation goes on."""

import glob
import os
import tempfile

import pytest

from numloss.evaluate.sandbox import SandboxLimits, run_program, run_programs

LIMITS = SandboxLimits(wall_seconds=3.0, cpu_seconds=2, memory_bytes=512 << 20, output_bytes=16 * 1024)


def test_a_plain_program_prints_its_answer():
    result = run_program("x = 6\nprint(x * 7)", LIMITS)
    assert result.status == "ok" and result.stdout.strip() == "42" and result.returncode == 0


def test_sympy_and_numpy_can_be_imported():
    result = run_program("import sympy, numpy\nx = sympy.Symbol('x')\nprint(sympy.solve(2*x - 12, x)[0], numpy.arange(4).sum())", LIMITS)
    assert result.status == "ok", result.detail
    assert result.stdout.split() == ["6", "6"]


@pytest.mark.parametrize(
    "name, source, status, detail",
    [
        ("infinite loop", "while True:\n    pass", "timeout", "limit"),
        ("sleep past the wall limit", "import time\ntime.sleep(60)", "timeout", "wall-clock"),
        ("memory bomb", "x = bytearray(8 * 10**9)", "memory", "address-space"),
        ("list memory bomb", "x = [0] * (10**9)", "memory", "address-space"),
        ("fork bomb", "import os\nwhile True:\n    os.fork()", "blocked", "os.fork"),
        ("multiprocessing", "import multiprocessing as m\np = m.Process(target=print)\np.start()", "blocked", "os.fork"),
        ("subprocess", "import subprocess\nsubprocess.run(['ls', '/'])", "blocked", "subprocess.Popen"),
        ("os.system", "import os\nos.system('echo hi')", "blocked", "os.system"),
        ("read /etc/passwd", "print(open('/etc/passwd').read())", "blocked", "/etc/passwd"),
        ("write outside", "open('/tmp/numloss-sandbox-escape.txt', 'w').write('x')", "blocked", "writing"),
        ("list a directory outside", "import os\nprint(os.listdir('/'))", "blocked", "listing"),
        ("open a socket", "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 9))", "blocked", "socket"),
        ("resolve a name", "import urllib.request\nurllib.request.urlopen('http://example.com')", "blocked", "socket"),
        ("ctypes call", "import ctypes\nctypes.CDLL(None).fork()", "blocked", "ctypes"),
        ("huge output", "while True:\n    print('x' * 1000)", "output_limit", "bytes"),
        ("sys.exit with a status", "import sys\nsys.exit(3)", "error", "exit status 3"),
        ("crash", "print(1 / 0)", "error", "ZeroDivisionError"),
        ("syntax error", "print(1", "error", "SyntaxError"),
        ("lift its own limits", "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (100, 100))", "blocked", "setrlimit"),
    ],
)
def test_hostile_programs_are_contained_and_reported(name, source, status, detail):
    result = run_program(source, LIMITS)
    assert result.status == status, (name, result)
    assert detail in result.detail, (name, result.detail)
    assert result.wall_seconds < LIMITS.wall_seconds + 2


def test_no_file_escapes_and_files_outside_cannot_be_read_or_removed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    read = run_program(f"print(open({str(secret)!r}).read())", LIMITS)
    assert read.status == "blocked" and "do not read" not in read.stdout
    removed = run_program(f"import os\nos.remove({str(secret)!r})", LIMITS)
    assert removed.status == "blocked" and secret.exists()
    escaped = run_program("open('/tmp/numloss-sandbox-escape.txt', 'w').write('x')", LIMITS)
    assert escaped.status == "blocked" and not os.path.exists("/tmp/numloss-sandbox-escape.txt")


def test_files_inside_the_working_directory_work_and_the_directory_is_removed():
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "numloss-sandbox-*")))
    result = run_program(
        "import os\nopen('notes.txt', 'w').write('hello')\nprint(open('notes.txt').read(), os.listdir('.'), os.getcwd())",
        LIMITS,
    )
    assert result.status == "ok", result.detail
    assert result.stdout.startswith("hello ['notes.txt']")
    workdir = result.stdout.split()[-1]
    assert "numloss-sandbox-" in workdir and not os.path.exists(workdir)
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "numloss-sandbox-*"))) <= before


def test_sys_exit_zero_after_printing_is_a_normal_end():
    result = run_program("import sys\nprint(5)\nsys.exit(0)", LIMITS)
    assert result.status == "ok" and result.stdout.strip() == "5"


def test_the_output_is_capped():
    result = run_program("print('y' * 100000)", LIMITS)
    assert result.status == "output_limit"
    assert len(result.stdout) <= LIMITS.output_bytes


def test_the_environment_of_the_evaluator_is_not_visible(monkeypatch):
    monkeypatch.setenv("NUMLOSS_SECRET_TOKEN", "abc123")
    result = run_program("import os\nprint(os.environ.get('NUMLOSS_SECRET_TOKEN'))", LIMITS)
    assert result.status == "ok" and result.stdout.strip() == "None"


def test_a_pool_runs_hostile_and_plain_programs_together_in_order():
    sources = [
        "print(1)",
        "while True:\n    pass",
        "import os\nos.fork()",
        "print(4)",
        "x = bytearray(8 * 10**9)",
        "print(6)",
    ]
    results = run_programs(sources, LIMITS, workers=3)
    assert [r.status for r in results] == ["ok", "timeout", "blocked", "ok", "memory", "ok"]
    assert [r.stdout.strip() for r in results if r.ok] == ["1", "4", "6"]


def test_limits_are_validated():
    with pytest.raises(ValueError, match="positive"):
        SandboxLimits(wall_seconds=0)
    with pytest.raises(ValueError, match="output_bytes"):
        SandboxLimits(output_bytes=10)
