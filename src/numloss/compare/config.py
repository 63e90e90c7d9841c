"""The comparison's configuration: one YAML file describing the grid.

    base:          a `numloss train` config (model, data, train, lora sections), shared by all runs
    task:          numloss.compare.task.ArithmeticTask fields (training distribution, set sizes), or
                   `kind: word_problems` and numloss.compare.word_task.WordProblemTask fields
                   (chat-template word problems scored on GSM8K / SVAMP items)
    objectives:    a list of {label, name, alpha, options}: one column of the grid each
    seeds:         [0, 1, 2]: each objective is trained once per seed (data order and init);
                   distinct integers >= 0 (a repeated seed would count one run twice)
    evaluation:    {batch_size, teacher_forced_batch_size, embeddings}: batch sizes >= 1
    learning:      {every, slice_size, threshold, stop_early, batch_size}: the checks during
                   training of whether a run has learnt the task (numloss.compare.learning);
                   null: none (only the final evaluation)
    torch_threads: CPU threads for torch (null: torch's default). 1 is the right number for the
                   tiny model on a shared machine: with more threads than free cores, every op
                   waits at a barrier for a descheduled thread (measured 13x slower on 2 busy cores)
    jobs:          how many runs train at once, each in its own process (default 1); results do
                   not depend on it. With torch_threads null each run gets cpu_count // jobs threads
    output_dir:    the report folder
    records_dir:   a folder kept in version control (null: none) where every finished run's result
                   is also written, as `<label>-s<seed>-<hash>.json`; a run found there with the
                   same hash is not trained again. It carries a grid run in slices across sessions
                   and machines, since output_dir (ignored by git) does not survive a new checkout

Every run's training config is `base` with the objective, the seed and the run folder filled in
and validated by `numloss.config` (the same checks as `numloss train`). Every key above is checked
for its type and range when the file is loaded, before any training, with one line naming it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

from annotated_types import Ge, Le

from numloss.compare.learning import LearningCheck
from numloss.compare.task import LARGEST, Count
from numloss.compare.tasks import checked, refuse_unknown, task_from_dict
from numloss.config import (
    LEGACY_KEYS,
    Config,
    ConfigError,
    canonical_key,
    check_value,
    config_from_dict,
)
from numloss.yamlio import load_yaml

#: bump when what a result file holds changes, so old results are recomputed, not misread
RESULT_SCHEMA = 2  # 2: the learning checks during training


@dataclass(frozen=True)
class ObjectiveSpec:
    """One objective of the grid: a unique label, a `build_loss` name, alpha and other options."""

    label: str
    name: str
    alpha: float | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.alpha is not None:  # `alpha: 1` is the float 1.0
            object.__setattr__(self, "alpha", float(self.alpha))

    def describe(self) -> str:
        parts = [self.name] + ([f"alpha={self.alpha:g}"] if self.alpha is not None else [])
        parts += [f"{k}={v}" for k, v in sorted(self.options.items())]
        return " ".join(parts)


@dataclass
class EvaluationSettings:
    """How each trained model is scored (see numloss.compare.runner.evaluate_model)."""

    batch_size: Count = 500
    teacher_forced_batch_size: Count = 500
    embeddings: bool = True


@dataclass
class CompareConfig:
    base: dict[str, Any]
    task: Any  # ArithmeticTask or WordProblemTask
    objectives: list[ObjectiveSpec]
    seeds: list[int]
    evaluation: EvaluationSettings
    output_dir: Path
    source: str = "<defaults>"
    torch_threads: int | None = None
    jobs: int = 1
    learning: LearningCheck | None = None
    records_dir: Path | None = None

    def run_config(self, spec: ObjectiveSpec, seed: int, run_dir: Path, train_file: Path) -> Config:
        """The validated training config of one run (objective `spec`, `seed`, folder `run_dir`)."""
        mapping = copy.deepcopy(self.base)
        mapping.setdefault("data", {})
        mapping.setdefault("train", {})
        mapping["objective"] = {
            "name": spec.name,
            "alpha": spec.alpha,
            "options": dict(spec.options),
        }
        # validated with a stand-in source: the training file is written only when the run starts
        mapping["data"].update(
            {"source": "synthetic:arithmetic", "num_examples": None, "seed": seed}
        )
        mapping["train"].update({"seed": seed, "output_dir": str(run_dir), "resume": False})
        try:
            config = config_from_dict(mapping)
        except ConfigError as error:
            raise ConfigError(
                f"{self.source}: objective {spec.label!r}, seed {seed}: {error}"
            ) from None
        config.data.source = str(train_file)
        return config

    def run_hash(self, config: Config) -> str:
        """What decides whether a finished run can be reused: everything but where it was written
        and how it was displayed. Settings at their default value are left out, so a field added
        to the configs later (at a default that keeps today's behaviour) does not orphan the
        finished runs of a grid that runs in slices across sessions; a change of behaviour under
        an unchanged setting must bump RESULT_SCHEMA instead."""
        payload = _non_default(config.to_dict(), Config().to_dict())
        # a key's rename keeps the hashes of the runs recorded before it
        for old, new in LEGACY_KEYS.items():
            section, old_name, new_name = old.split(".")[0], old.split(".")[1], new.split(".")[1]
            if new_name in payload.get(section, {}):
                payload[section][old_name] = payload[section].pop(new_name)
        for key in ("output_dir", "resume", "progress_bar"):
            payload.get("train", {}).pop(key, None)
        payload.get("data", {}).pop("source", None)
        payload["task"] = _non_default(self.task.to_dict(), type(self.task)().to_dict())
        payload["evaluation"] = _non_default(asdict(self.evaluation), asdict(EvaluationSettings()))
        if self.learning is not None:
            payload["learning"] = _non_default(asdict(self.learning), asdict(LearningCheck()))
        payload["schema"] = RESULT_SCHEMA
        text = json.dumps(payload, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _non_default(values: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The entries of `values` that differ from `defaults` (nested mappings compared per key)."""
    kept: dict[str, Any] = {}
    for key, value in values.items():
        default = defaults.get(key, _MISSING)
        if isinstance(value, dict) and isinstance(default, dict):
            inner = _non_default(value, default)
            if inner:
                kept[key] = inner
        elif value != default:
            kept[key] = value
    return kept


_MISSING = object()


def check_seeds(seeds: Any, where: str) -> None:
    """ConfigError unless `seeds` is a non-empty list of distinct integers in [0, 10**9]: a seed
    given twice would train one run twice and count it as two seeds."""
    check_value(where, seeds, list[Annotated[int, Ge(0), Le(LARGEST)]])
    if not seeds:
        raise ConfigError(f"{where} is empty: give at least one seed")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ConfigError(f"{where} must be distinct; repeated: {', '.join(map(str, repeated))}")


#: a label names the run folder (runs/<label>-s<seed>) and its record file: a plain name only
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]{0,99}")


def label_problem(label: str) -> str | None:
    """Why `label` cannot name a run folder, or None. A label becomes part of a path: a separator
    or `..` would put the run (and the clearing of an interrupted one) outside the output folder."""
    if _LABEL.fullmatch(label) and ".." not in label:
        return None
    return (
        "is not a plain name: use letters, digits and . _ + = - (at most 100, starting with a"
        " letter or digit; no '/', '\\' or '..'), since it names the run's folder"
    )


def _objectives(items: Any, origin: str) -> list[ObjectiveSpec]:
    if not isinstance(items, list) or not items:
        raise ConfigError(
            f"{origin}: objectives must be a non-empty list of {{label, name, alpha, options}}"
        )
    specs: list[ObjectiveSpec] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = {"label": item, "name": item}
        if not isinstance(item, dict) or "name" not in item:
            raise ConfigError(f"{origin}: objectives[{i}] needs at least a name, got {item!r}")
        item = {"label": item["name"], **item, "options": item.get("options") or {}}
        if type(item["label"]) is int:  # `label: 7` names the folder 7-s0
            item["label"] = str(item["label"])
        spec = checked(ObjectiveSpec, item, f"{origin}: objectives[{i}]")
        problem = label_problem(spec.label)
        if problem or not spec.name.strip():
            what = f"label {spec.label!r} {problem}" if problem else "name is empty: give one"
            raise ConfigError(f"{origin}: objectives[{i}].{what}")
        specs.append(spec)
    labels = [s.label for s in specs]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ConfigError(
            f"{origin}: objective labels must be unique; repeated: {', '.join(duplicates)}"
        )
    return specs


#: torch threads of a run, runs trained at once
Threads = Annotated[int, Ge(1), Le(4096)]

DEFAULTS: dict[str, Any] = {
    "base": {
        "model": {"name": "tiny"},
        "train": {"max_steps": 50, "report_to": ["none"], "save_steps": 0},
    },
    "task": {},
    "objectives": ["mle", "del"],
    "seeds": [0],
    "evaluation": {},
    "learning": None,
    "torch_threads": None,
    "jobs": 1,
    "output_dir": "runs/compare",
    "records_dir": None,
}


def load_compare_config(path: str | Path | None) -> CompareConfig:
    """The comparison config in `path` (YAML; None: small defaults); ConfigError on any problem."""
    mapping = copy.deepcopy(DEFAULTS)
    origin = "<defaults>"
    if path is not None:
        origin = str(path)
        if not Path(path).is_file():
            raise ConfigError(
                f"comparison config {origin!r} does not exist (see configs/compare*.yaml)"
            )
        loaded = load_yaml(
            Path(path),
            ConfigError,
            empty=(
                "write the grid's keys (see configs/compare.yaml), "
                "or give no config for the small default grid"
            ),
        )
        if not isinstance(loaded, dict):
            raise ConfigError(f"{origin}: the top level must be a mapping")
        refuse_unknown(origin, loaded, list(DEFAULTS))
        mapping.update(loaded)
    return compare_config_from_dict(mapping, origin)


def compare_config_from_dict(mapping: dict[str, Any], origin: str = "config") -> CompareConfig:
    """A validated CompareConfig from a mapping with the keys of `DEFAULTS`."""
    base = _base(mapping.get("base") or {}, origin)
    seeds = mapping.get("seeds", [0])
    check_seeds(seeds, f"{origin}: seeds")
    try:
        task = task_from_dict(mapping.get("task"))
        evaluation = checked(EvaluationSettings, mapping.get("evaluation") or {}, "evaluation")
        learning = mapping.get("learning")
        if learning is not None:
            learning = checked(LearningCheck, learning, "learning")
        threads = check_value("torch_threads", mapping.get("torch_threads"), Threads | None)
        jobs = check_value("jobs", mapping.get("jobs", 1), Threads)
    except (TypeError, ValueError) as error:  # ConfigError is a ValueError
        raise ConfigError(f"{origin}: {error}") from None
    cores = os.cpu_count() or 1
    if threads is not None and threads > cores:  # as --threads: more threads than cores stall torch
        raise ConfigError(
            f"{origin}: torch_threads {threads} is more than this machine's {cores} cores"
        )
    output_dir, records_dir = mapping.get("output_dir", "runs/compare"), mapping.get("records_dir")
    if not isinstance(output_dir, (str, Path)) or not str(output_dir).strip():
        raise ConfigError(f"{origin}: output_dir must be a folder path, got {output_dir!r}")
    if records_dir is not None and (
        not isinstance(records_dir, (str, Path)) or not str(records_dir).strip()
    ):
        raise ConfigError(
            f"{origin}: records_dir must be a folder path or null, got {records_dir!r}"
        )
    config = CompareConfig(
        torch_threads=threads,
        jobs=jobs,
        base=base,
        task=task,
        objectives=_objectives(mapping.get("objectives"), origin),
        seeds=list(seeds),
        evaluation=evaluation,
        learning=learning,
        output_dir=Path(output_dir),
        records_dir=None if records_dir is None else Path(records_dir),
        source=origin,
    )
    # a bad base section or objective fails now, before any training
    for spec in config.objectives:
        config.run_config(spec, config.seeds[0], config.output_dir / "check", Path("train.jsonl"))
    return config


def _base(base: Any, origin: str) -> dict[str, Any]:
    """The `base` section: numloss train sections, without `objective` (set per run)."""
    if not isinstance(base, dict):
        raise ConfigError(f"{origin}: base must be a mapping of numloss train sections")
    if "objective" in base:
        raise ConfigError(
            f"{origin}: base.objective is set per run from `objectives`; remove it from base"
        )
    # `data:` with nothing under it: no settings
    base = {k: v for k, v in base.items() if v is not None}
    for section, value in base.items():
        if section != "fused" and not isinstance(value, dict):
            raise ConfigError(
                f"{origin}: base.{section} must be a mapping of numloss train settings, got"
                f" {value!r}"
            )
    # today's names (train.per_device_train_batch_size, ...), whichever the file wrote
    train = dict(base.get("train", {}))
    extra = train.pop("extra", None)
    # the pass-through mapping of earlier releases: its entries are train keys
    if isinstance(extra, dict):
        train.update(
            {
                canonical_key(f"train.extra.{key}").partition(".")[2]: item
                for key, item in extra.items()
            }
        )
    elif extra is not None:
        train["extra"] = extra  # not a mapping: the train config's own check names it
    if "train" in base:
        base["train"] = train
    return {
        section: (
            value
            if section == "fused"
            else {
                canonical_key(f"{section}.{key}").partition(".")[2]: item
                for key, item in value.items()
            }
        )
        for section, value in base.items()
    }


def select_objectives(config: CompareConfig, names: list[str]) -> list[ObjectiveSpec]:
    """The objectives named on the command line: a label of the config, or an objective name
    (all the config's entries with that name, or a default entry when it has none)."""
    from numloss.losses import LOSSES

    chosen: list[ObjectiveSpec] = []
    for name in names:
        by_label = [s for s in config.objectives if s.label == name]
        by_name = [s for s in config.objectives if s.name == name]
        if by_label or by_name:
            chosen += [s for s in by_label or by_name if s not in chosen]
        elif name.lower().replace("_", "-") in LOSSES:
            chosen.append(ObjectiveSpec(label=name, name=name))
        else:
            known = ", ".join(s.label for s in config.objectives)
            raise ConfigError(
                f"--objectives: {name!r} is neither a label of {config.source} ({known}) nor an"
                f" objective ({', '.join(LOSSES)})"
            )
    same: dict[tuple[str, Any, str], str] = {}
    # `mle,MLE` or `ntl_was,ntl-was`: one objective under two labels, trained twice
    for spec in chosen:
        key = (
            spec.name.lower().replace("_", "-"),
            spec.alpha,
            json.dumps(spec.options, sort_keys=True, default=str),
        )
        if key in same:
            raise ConfigError(
                f"--objectives: {same[key]!r} and {spec.label!r} are the same objective; name it"
                " once"
            )
        same[key] = spec.label
    return chosen
