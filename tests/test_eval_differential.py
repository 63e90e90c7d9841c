"""Dominance: the `numloss` protocol is right wherever the released protocol is right.

Two generators fill real items of all seven benchmarks with the right and a wrong answer:
tests/eval_cases.py's output kinds and tests/eval_dress.py's dressings. Each case carries its
truth, the verdict a reader of the output gives, and is scored three ways: the transcription of
the released code (tests/reference/released_eval.py, its executor run inside numloss's sandbox),
numloss's `released` protocol and the `numloss` protocol. Asserted:

- the transcription and `released` agree on every answer and verdict;
- wherever the released code is right, numloss is right, unless the released code also passes a
  fill of the same kind on the same item that is not the gold (its verdict there does not
  depend on the answer); there is no list of deliberate strictness;
- numloss passes no dressing whose truth is not the gold, nor an output kind's case the released
  code rejects, and reads every case (no "unreadable").

The default run takes one item per benchmark (a gold of 1000 or more, or the gold 'A'), every
kind without a program on all seven benchmarks and the program kinds (each a sandbox run per
protocol) on one benchmark of each answer kind, `PROGRAM_BENCHMARKS`: how a printed value is read
depends on the answer kind, not on the benchmark; and NUMLOSS_DRESS_DRAW (6) dressing templates
per family, seeded (NUMLOSS_DRESS_SEED). NUMLOSS_DIFFERENTIAL_ITEMS=N takes N items and every kind
on every benchmark; the `slow` variant takes 25 items and every dressing on two of them.
"""

from __future__ import annotations

import os
import random
from collections import defaultdict
from pathlib import Path

import pytest

import eval_dress  # tests/ is on sys.path (conftest.py)
from eval_cases import Case, cases, usable
from numloss.evaluate.answers import plain_exact
from numloss.evaluate.benchmarks import load_benchmark
from numloss.evaluate.programs import ProgramRunner
from numloss.evaluate.protocol import NUMLOSS, RELEASED
from numloss.evaluate.runner import score_items
from numloss.evaluate.sandbox import SandboxLimits, run_programs
from reference import released_eval as ref

DATA = Path(__file__).resolve().parents[2] / "shared" / "benchmarks"  # ../shared beside the repository
pytestmark = pytest.mark.usefixtures("shared_benchmarks")  # fails, naming the folder, when it is missing

NAMES = {"gsm8k": "gsm8k", "svamp": "svamp", "simuleq": "simuleq", "math": "math", "aqua": "aqua", "sat": "sat", "mmlu_math": "mmlu_mathematics"}
LIMITS = SandboxLimits(wall_seconds=10.0, cpu_seconds=5)
# the released child process: no output cap, no memory limit (the sandbox needs some; these are far above)
RELEASED_CHILD = SandboxLimits(wall_seconds=10.0, cpu_seconds=5, memory_bytes=0, output_bytes=256 << 20)
#: the fast run's benchmarks for the program kinds: a number, a math expression, a choice
PROGRAM_BENCHMARKS = ("gsm8k", "math", "mmlu_math")  # mmlu_math: a choice item whose options have values


def program_runner() -> ProgramRunner:
    """The runner the reader's tests score with (each protocol sets its own output and memory caps)."""
    return ProgramRunner(LIMITS, workers=2, allow_unisolated=True)


def pick(bench, n: int) -> list:
    """n usable items: one with a large gold (thousands separators) or the gold 'A' first, then in order."""
    items = [it for it in bench.items if usable(it)]
    special = [it for it in items if (it.kind == "choice" and it.answer.upper() == "A")
               or (it.kind != "choice" and abs(plain_exact(it.answer) or 0) >= 1000)]
    return list(dict.fromkeys(special[:1] + items))[:n]


def transcription(benchmark: str, batch: list[Case]) -> list[tuple[str, bool]]:
    """(answer, verdict) of the released code for each case; its programs run in the sandbox."""
    dataset = NAMES[benchmark]
    programs = list(dict.fromkeys(t.split("### Instruction")[0] for c in batch for t in (c.output, c.fallback) if t and "print(" in t))
    results = run_programs([ref.executor_script(p) for p in programs], RELEASED_CHILD, 2, allow_unisolated=True)
    execute = {p: (r.stdout if r.ok else "") for p, r in zip(programs, results, strict=True)}.__getitem__
    return [ref.score_choice(dataset, RELEASED.gold(c.item), c.output, execute) if c.item.kind == "choice"
            else ref.score_open(dataset, RELEASED.gold(c.item), c.output, c.fallback, execute)[:2] for c in batch]


def run_differential(n_items: int, program_benchmarks: tuple[str, ...] = tuple(NAMES), dress_items: int = 1,
                     per_family: int | None = 6, seed: int = 0) -> dict:
    """Every kind of n_items items per benchmark (the program kinds only on `program_benchmarks`)
    and the dressings of `dress_items` items, scored three ways."""
    runner = program_runner()
    rng = random.Random(seed)
    rows, generated = [], {}
    for name in NAMES:
        bench = load_benchmark(name, data_dir=DATA)
        every = cases(name, pick(bench, n_items))
        generated[name] = {c.kind for c in every}
        batch = [c for c in every if name in program_benchmarks or not c.kind.startswith("program-")]
        batch += eval_dress.cases(name, pick(bench, dress_items), per_family, rng, programs=None if per_family is None else 2)
        rows += scored(name, batch, runner)
    return {"rows": rows, "generated": generated}


def scored(name: str, batch: list[Case], runner: ProgramRunner) -> list[tuple]:
    """(case, the released code's (answer, verdict), `released` result, `numloss` result) for
    each case of `batch`, cases of benchmark `name` (test_eval_space scores its draw here too)."""
    items, outputs, fallbacks = [c.item for c in batch], [c.output for c in batch], [c.fallback for c in batch]
    released = score_items(RELEASED, name, items, outputs, fallbacks, runner)
    numloss = score_items(NUMLOSS, name, items, outputs, fallbacks, runner)
    runner.forget()
    return list(zip(batch, transcription(name, batch), released, numloss, strict=True))


def violations(rows) -> dict[str, list[tuple]]:
    """The cases that break each asserted property, with what each protocol read."""
    excused = {(c.kind, c.item.id) for c, (_, ok), _, _ in rows if ok and not c.truth}
    found: dict[str, list[tuple]] = {"released_is_not_transcription": [], "dominance": [], "wrong_pass": [], "unreadable": []}
    for c, t, r, n in rows:
        where = (c.benchmark, c.item.id, c.kind, c.output, c.fallback, c.truth, r.prediction, n.prediction, n.note)
        found["released_is_not_transcription"] += [where] if (r.prediction, r.correct) != t else []
        found["dominance"] += [where] if c.truth and r.correct and not n.correct and (c.kind, c.item.id) not in excused else []
        found["wrong_pass"] += [where] if n.correct and not c.truth else []
        found["unreadable"] += [where] if n.note else []
    return found


@pytest.fixture(scope="module")
def differential():
    items = os.environ.get("NUMLOSS_DIFFERENTIAL_ITEMS")
    draw, seed = int(os.environ.get("NUMLOSS_DRESS_DRAW", "6")), int(os.environ.get("NUMLOSS_DRESS_SEED", "0"))
    programs = tuple(NAMES) if items else PROGRAM_BENCHMARKS
    return run_differential(int(items or 1), programs, per_family=draw, seed=seed)


def test_the_generators_cover_sixty_kinds_and_every_family_on_every_benchmark(differential):
    kinds = differential["generated"]  # what the generator makes, scored or not, on each of NAMES
    assert all(len(k) >= 60 for k in kinds.values()), {b: len(k) for b, k in kinds.items()}
    scored = defaultdict(set)  # what the fast run scores: every kind, programs on PROGRAM_BENCHMARKS
    for c, *_ in differential["rows"]:
        if "/" not in c.kind:  # not a dressing
            scored[c.benchmark].add(c.kind)
    assert set(scored) == set(NAMES)
    assert all(kinds[b] == scored[b] for b in PROGRAM_BENCHMARKS), {b: kinds[b] - scored[b] for b in PROGRAM_BENCHMARKS}
    assert set().union(*kinds.values()) == set().union(*scored.values())
    dressed = [c for c, *_ in differential["rows"] if "/" in c.kind]
    assert {c.kind.split("/")[0] for c in dressed} == set(eval_dress.FAMILIES)
    assert {c.item.kind for c in dressed} == {"number", "math", "choice"}
    # some dressings give no answer either way (alternatives, a cut-off sentence): their truth is never the gold
    assert {(c.kind, c.item.id) for c in dressed} - {(c.kind, c.item.id) for c in dressed if c.truth}


@pytest.mark.parametrize("kind", ["released_is_not_transcription", "dominance", "wrong_pass", "unreadable"])
def test_numloss_over_the_generated_cases(differential, kind):
    found = violations(differential["rows"])[kind]
    assert not found, f"{len(found)} cases:\n" + "\n".join(map(repr, found[:8]))


def test_numloss_fixes_something_and_the_article_is_never_option_a(differential):
    rows = differential["rows"]
    assert any(n.correct and not r.correct for c, _, r, n in rows if c.truth)  # the test can tell numloss from released
    assert all(n.prediction == "" for c, _, _, n in rows if c.kind in ("article", "article-long-way"))


@pytest.mark.slow  # fast: the tests above, on 1 item per benchmark and programs on PROGRAM_BENCHMARKS
def test_dominance_on_25_items_per_benchmark():  # and every dressing on two of them
    found = violations(run_differential(25, dress_items=2, per_family=None)["rows"])
    assert not any(found.values()), {k: v[:8] for k, v in found.items()}
