"""The run records kept in git (`records_dir` of configs/compare*.yaml) are the runs their config
describes today: every file's name, hash and content agree, and its hash is the one the config
gives that (objective, seed) now. A change to a config or to RESULT_SCHEMA that orphans records
fails here, instead of leaving docs/results.md built on runs of another setting."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from grid_driver import BASELINE, baseline_hash

from numloss.compare.config import load_compare_config
from numloss.compare.runner import read_record

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [p for p in sorted((ROOT / "configs").glob("compare*.yaml")) if load_compare_config(p).records_dir]
NAME = re.compile(r"^(?P<label>.+)-s(?P<seed>\d+)-(?P<hash>[0-9a-f]{16})\.json$")


def test_the_grids_keep_records() -> None:
    names = {p.name for p in CONFIGS}
    assert {"compare.yaml", "compare-chunked.yaml"} <= names
    # the demo always trains: its runs are the grid's, so records would turn it into a replay
    assert "compare-demo.yaml" not in names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_record_is_a_run_of_its_config_as_it_is_now(path: Path, tmp_path: Path) -> None:
    compare = load_compare_config(path)
    records = ROOT / compare.records_dir
    by_label = {spec.label: spec for spec in compare.objectives}
    machines = set()
    for record in sorted(records.glob("*.json")) if records.is_dir() else []:
        match = NAME.match(record.name)
        assert match, f"{record}: not <label>-s<seed>-<hash>.json"
        label, seed = match["label"], int(match["seed"])
        if label == BASELINE:  # the untrained model a pretrained grid scores first (scripts/grid_driver.py)
            expected = baseline_hash(compare)
        else:
            assert label in by_label, f"{record}: objective {label!r} is not in {path.name}; delete the record"
            config = compare.run_config(by_label[label], seed, tmp_path / "run", tmp_path / "train.jsonl")
            expected = compare.run_hash(config)
        assert match["hash"] == expected, (
            f"{record}: made under another setting than {path.name} gives now (hash {expected}); "
            "delete it and rerun, or restore the setting")
        content = json.loads(record.read_text())
        assert (content["hash"], content["label"], content["seed"]) == (expected, label, seed), record
        # and the runner reads it back (a record it would refuse is no record)
        assert read_record(records, f"{label}-s{seed}", expected) == content, record
        assert content["machine"]["cpu"] and content["machine"]["torch"], f"{record}: no machine"
        machines.add(tuple(content["machine"].get(k) for k in ("cpu", "vector_extension", "torch_cpu_capability", "torch")))
        # a pretrained run decodes its first items greedily: each verdict is the teacher-forced one
        for name, evaluation in content["evaluation"].items():
            check = evaluation.get("generation_check") if isinstance(evaluation, dict) else None
            if check:
                assert check["agree"] == check["n"] and check["generated"] == evaluation["items"][:check["n"]], (
                    f"{record}: {name}: greedy generation and the teacher-forced verdicts differ")
    # the same seed gives other numbers on another CPU: a grid is compared on one machine only
    assert len(machines) <= 1, f"{path.name}: records from {len(machines)} machines {sorted(machines)}; one grid, one machine"
