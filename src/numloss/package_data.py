"""Files shipped inside the package (configs, the demo's recorded grid), found from a checkout and
an installed wheel alike (in the repository `src/numloss/configs` links to `configs/`).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

#: the recorded grid the default demo prints beside its fresh runs: its lines, rendered from
#: results/compare-smollm2-words-centered/'s records by scripts/results_doc.py
RECORDED_GRID_TEXT = "recorded/grid-centered.json"


def packaged(relative: str) -> Path:
    """The path of the package file `relative` (e.g. "configs/tiny.yaml") inside the installed
    package."""
    return Path(str(resources.files("numloss").joinpath(*relative.split("/"))))


def config_path(name: str) -> Path:
    """`configs/NAME` of the working directory when there (a checkout, or the user's own), else
    the copy shipped in the package."""
    local = Path("configs") / name
    return local if local.is_file() else packaged(f"configs/{name}")
