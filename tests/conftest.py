import os
import sys
from pathlib import Path

import pytest

# Everything runs offline: nothing may reach a model or dataset hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).parent))

def _die_with_the_tests() -> None:
    """Every subprocess a test starts gets PR_SET_PDEATHSIG(SIGKILL) (Linux), so an interrupted
    `make test` (Ctrl-C, a CI timeout, a killed worker) leaves nothing running: a training started
    in its own session (start_new_session=True) gets no Ctrl-C from the terminal, and outlived its
    test as an orphan. Installed once, for Popen and everything built on it (run, check_output)."""
    import ctypes
    import signal
    import subprocess
    import threading

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: nothing to load after fork
    except (OSError, AttributeError):  # not Linux
        return
    start = subprocess.Popen.__init__

    def __init__(self, *args, preexec_fn=None, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            # the signal follows the thread that forked, not the process: a pool thread that ends
            # would kill a child still wanted (the sandbox's programs run from threads)
            return start(self, *args, preexec_fn=preexec_fn, **kwargs)
        parent = os.getpid()

        def preexec() -> None:
            prctl(1, signal.SIGKILL, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the test process died before the line above
                os._exit(1)
            if preexec_fn is not None:
                preexec_fn()

        start(self, *args, preexec_fn=preexec, **kwargs)

    subprocess.Popen.__init__ = __init__


_die_with_the_tests()

#: the real benchmark files: ../shared/benchmarks beside the repository (CI lays shared/ there too)
SHARED_BENCHMARKS = Path(__file__).resolve().parents[2] / "shared" / "benchmarks"


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs `-n 2`), each worker gets its share of the cores as
    torch threads: two workers of two threads each on two cores spin at every OpenMP barrier, and
    a float64 gradcheck then costs 60 CPU seconds instead of 3. The test tensors are tiny; one
    thread loses nothing."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))


#: the files that cost most (CPU seconds of the fast suite, NUMLOSS_TEST_CPU, 2026-12-05), heaviest
#: first: `make test` hands files to its two workers in collection order (--no-loadscope-reorder),
#: so these start first and the workers end together instead of one waiting on a late heavy file
HEAVY_FIRST = ("test_sharded.py", "test_hf.py", "test_compare.py", "test_train_faults.py", "test_eval_sandbox.py",
               "test_eval_differential.py", "test_compare_faults.py", "test_eval_linear.py", "test_compare_words.py",
               "test_eval_faults.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The heavy files first, in HEAVY_FIRST's order; every other test keeps its place (a stable sort)."""
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def shared_benchmarks() -> Path:
    """The real benchmark folder; a test that needs it fails, naming the folder, when it is missing."""
    if not SHARED_BENCHMARKS.is_dir():
        pytest.fail(f"the real benchmark files are not at {SHARED_BENCHMARKS}: put the project's shared/ "
                    "folder beside the repository (../shared/benchmarks, see its README.md)", pytrace=False)
    return SHARED_BENCHMARKS


@pytest.fixture(scope="session")
def train_reference(tmp_path_factory) -> Path:
    """The uninterrupted 4-step tiny run (tests/faultrun.py's config) that the interrupted runs of
    test_train_faults and test_fault_space must end equal to, built once per test process. On one
    torch thread, as those modules train: a resume is bitwise only at the thread count it started
    with."""
    import torch

    from faultrun import config
    from numloss.train import run_training

    out = tmp_path_factory.mktemp("reference") / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert run_training(config(out)).global_step == 4
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="session")
def compare_recorded(tmp_path_factory):
    """test_compare_faults' tiny grid (one 2-step `mle` run) run to its end in root/out, its record
    in root/records: (root, config path, record), built once per test process for
    test_compare_faults, test_stale_inputs and test_fault_suite (copy it before changing it)."""
    from numloss.compare import main as compare_main
    from test_compare_faults import _mapping, _write

    root = tmp_path_factory.mktemp("recorded")
    config = _write(root / "c.yaml", _mapping(root / "out", records_dir=str(root / "records")))
    assert compare_main([config, "--no-progress"]) == 0
    (record,) = sorted((root / "records").glob("*.json"))
    return root, config, record


@pytest.fixture(autouse=True)
def _torch_threads_put_back():
    """A test that sets torch's thread count (an in-process `--threads`, compare's torch_threads)
    leaves it as it found it: no test's result may hang on which tests ran before it in its process
    (a resume compared bitwise passed only after another test had left one thread behind)."""
    import torch

    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


if os.environ.get("NUMLOSS_TEST_CPU"):  # per-test CPU seconds (process + waited children), JSON lines

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        """Append {"id", "cpu", "wall"} for each test to $NUMLOSS_TEST_CPU: on a loaded machine the
        CPU time, not the wall time, says what a test costs (docs/benchmarks.md, Test suite)."""
        import json
        import resource
        import time

        def cpu() -> float:
            own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

        start_cpu, start_wall = cpu(), time.perf_counter()
        yield
        with open(os.environ["NUMLOSS_TEST_CPU"], "a", encoding="utf-8") as out:
            out.write(json.dumps({"id": item.nodeid, "cpu": round(cpu() - start_cpu, 3),
                                  "wall": round(time.perf_counter() - start_wall, 3)}) + "\n")
