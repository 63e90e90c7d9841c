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

#: the real benchmark files: ../shared/benchmarks beside the repository (CI lays shared/ there too)
SHARED_BENCHMARKS = Path(__file__).resolve().parents[2] / "shared" / "benchmarks"


@pytest.fixture(scope="session")
def shared_benchmarks() -> Path:
    """The real benchmark folder; a test that needs it fails, naming the folder, when it is missing."""
    if not SHARED_BENCHMARKS.is_dir():
        pytest.fail(f"the real benchmark files are not at {SHARED_BENCHMARKS}: put the project's shared/ "
                    "folder beside the repository (../shared/benchmarks, see its README.md)", pytrace=False)
    return SHARED_BENCHMARKS
