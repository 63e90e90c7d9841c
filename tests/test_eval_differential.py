"""Dominance: the `numloss` protocol is right wherever the released protocol is right.

Every case of tests/eval_cases.py (output kinds x real items of all seven benchmarks, each kind
filled with the right and a wrong answer) is scored three ways: the transcription of the released
code (tests/reference/released_eval.py, its executor run inside numloss's sandbox), numloss's
`released` protocol, and the `numloss` protocol. The transcription and `released` must agree on
every answer and verdict; the test fails on any case where `numloss` is wrong and the released code
is right, unless its kind is on the documented list of deliberate strictness (eval_cases.STRICT).

The default run takes one item per benchmark (a gold of 1000 or more, or the gold 'A'), every
kind without a program on all seven benchmarks and the program kinds (each a sandbox run per
protocol) on one benchmark of each answer kind, `PROGRAM_BENCHMARKS`: how a printed value is read
depends on the answer kind, not on the benchmark. NUMLOSS_DIFFERENTIAL_ITEMS=N takes N items and
every kind on every benchmark; the `slow` variant does that with 25.
`python tests/test_eval_differential.py [N]` prints the per-kind table of docs/evaluation.md.
"""

from __future__ import annotations

import os
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from eval_cases import KINDS, STRICT, Case, cases, usable  # tests/ is on sys.path (conftest.py)
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


def pick(bench, n: int) -> list:
    """n usable items: one with a large gold (thousands separators) or the gold 'A' first, then in order."""
    items = [it for it in bench.items if usable(it)]
    special = [it for it in items if (it.kind == "choice" and it.answer.upper() == "A")
               or (it.kind != "choice" and abs(plain_exact(it.answer) or 0) >= 1000)]
    chosen = list(dict.fromkeys(special[:1] + items))
    return chosen[:n]


def transcription(benchmark: str, batch: list[Case]) -> list[tuple[str, bool]]:
    """(answer, verdict) of the released code for each case; its programs run in the sandbox."""
    dataset = NAMES[benchmark]
    programs = []
    for c in batch:
        for text in (c.output, c.fallback):
            if text is not None and "print(" in text:
                programs.append(text.split("### Instruction")[0])
    programs = list(dict.fromkeys(programs))
    results = run_programs([ref.executor_script(p) for p in programs], RELEASED_CHILD, 2, allow_unisolated=True)
    stdout = {p: (r.stdout if r.ok else "") for p, r in zip(programs, results, strict=True)}

    def execute(code: str) -> str:
        return stdout[code]

    out = []
    for c in batch:
        gold = RELEASED.gold(c.item)
        if c.item.kind == "choice":
            answer, correct = ref.score_choice(dataset, gold, c.output, execute)
        else:
            answer, correct, _ = ref.score_open(dataset, gold, c.output, c.fallback, execute)
        out.append((answer, correct))
    return out


def run_differential(n_items: int, program_benchmarks: tuple[str, ...] = tuple(NAMES)) -> dict:
    """Every case of n_items items per benchmark scored three ways; the program kinds only on
    `program_benchmarks`."""
    runner = ProgramRunner(LIMITS, workers=2, allow_unisolated=True)
    rows, generated = [], {}
    for name in NAMES:
        bench = load_benchmark(name, data_dir=DATA)
        every = cases(name, pick(bench, n_items))
        generated[name] = {c.kind for c in every}
        batch = [c for c in every if name in program_benchmarks or not c.kind.startswith("program-")]
        items, outputs, fallbacks = [c.item for c in batch], [c.output for c in batch], [c.fallback for c in batch]
        ref_out = transcription(name, batch)
        rel = score_items(RELEASED, name, items, outputs, fallbacks, runner)
        num = score_items(NUMLOSS, name, items, outputs, fallbacks, runner)
        runner.forget()
        rows += [(c, t, r, m) for c, t, r, m in zip(batch, ref_out, rel, num, strict=True)]
    return {"rows": rows, "generated": generated}


def summary(rows) -> dict:
    per_kind: dict[str, Counter] = defaultdict(Counter)
    totals: Counter = Counter()
    for c, ref_verdict, rel, num in rows:
        k = per_kind[c.kind]
        totals["cases"] += 1
        totals["transcription_is_released"] += (rel.prediction, rel.correct) == ref_verdict
        k["cases"] += 1
        if c.truth is None:
            continue
        totals["judged"] += 1
        r_ok, n_ok = rel.correct == c.truth, num.correct == c.truth
        k["released_right"] += r_ok
        k["numloss_right"] += n_ok
        totals["agree"] += rel.correct == num.correct
        totals["both_right"] += r_ok and n_ok
        totals["numloss_only_right"] += n_ok and not r_ok
        if r_ok and not n_ok:
            totals["released_only_right_listed" if c.kind in STRICT else "released_only_right"] += 1
            k["released_only_right"] += 1
    return {"totals": totals, "per_kind": per_kind}


@pytest.fixture(scope="module")
def differential():
    items = os.environ.get("NUMLOSS_DIFFERENTIAL_ITEMS")
    result = run_differential(int(items)) if items else run_differential(1, PROGRAM_BENCHMARKS)
    if os.environ.get("NUMLOSS_DIFFERENTIAL_TABLE"):  # where to write the per-kind table (docs/evaluation.md)
        Path(os.environ["NUMLOSS_DIFFERENTIAL_TABLE"]).write_text(_table(result["rows"]) + "\n", encoding="utf-8")
    return result


def test_the_generator_covers_sixty_kinds_on_every_benchmark(differential):
    kinds = differential["generated"]  # what the generator makes, scored or not
    assert set(kinds) == set(NAMES)
    assert all(len(k) >= 60 for k in kinds.values()), {b: len(k) for b, k in kinds.items()}
    assert len(KINDS) >= 60
    scored = defaultdict(set)  # what the fast run scores: every kind, programs on PROGRAM_BENCHMARKS
    for c, *_ in differential["rows"]:
        scored[c.benchmark].add(c.kind)
    assert set(scored) == set(NAMES)
    assert all(kinds[b] == scored[b] for b in PROGRAM_BENCHMARKS), {b: kinds[b] - scored[b] for b in PROGRAM_BENCHMARKS}
    assert set().union(*kinds.values()) == set().union(*scored.values())


def test_released_protocol_is_the_transcription_on_every_case(differential):
    bad = [(c.benchmark, c.kind, c.output, c.fallback, t, (r.prediction, r.correct))
           for c, t, r, _ in differential["rows"] if (r.prediction, r.correct) != t]
    assert not bad, bad[:5]


def test_numloss_is_right_wherever_released_is_right(differential):
    lost = [(c.benchmark, c.item.id, c.kind, c.output, c.fallback, c.truth, r.prediction, n.prediction)
            for c, _, r, n in differential["rows"]
            if c.truth is not None and r.correct == c.truth and n.correct != c.truth and c.kind not in STRICT]
    assert not lost, f"{len(lost)} cases: " + repr(lost[:8])
    totals = summary(differential["rows"])["totals"]
    assert totals["numloss_only_right"] > 0  # numloss fixes something, and the test can tell


def test_each_strictness_entry_is_needed_and_explained(differential):
    needed = {c.kind for c, _, r, n in differential["rows"] if c.truth is not None and r.correct == c.truth and n.correct != c.truth}
    assert needed <= set(STRICT)
    assert all(len(reason) > 40 for reason in STRICT.values())


def test_the_article_is_never_option_a(differential):
    for c, _, _, n in differential["rows"]:
        if c.kind in ("article", "article-long-way"):
            assert n.prediction == "", (c.output, n.prediction)


@pytest.mark.slow  # fast: the tests above, on 1 item per benchmark and programs on PROGRAM_BENCHMARKS
def test_dominance_on_25_items_per_benchmark():
    rows = run_differential(25)["rows"]
    lost = [(c.benchmark, c.item.id, c.kind, c.output) for c, _, r, n in rows
            if c.truth is not None and r.correct == c.truth and n.correct != c.truth and c.kind not in STRICT]
    assert not lost, lost[:8]
    assert all((r.prediction, r.correct) == t for c, t, r, _ in rows)


def _table(rows) -> str:
    s = summary(rows)
    lines = ["| kind | cases | released right | numloss right | released-only right |", "|---|---|---|---|---|"]
    for kind in KINDS:
        k = s["per_kind"].get(kind.name)
        if k:
            lines.append(f"| {kind.name}{' (strict)' if kind.name in STRICT else ''} | {k['cases']} | {k['released_right']} | {k['numloss_right']} | {k['released_only_right']} |")
    t = s["totals"]
    lines.append("")
    lines.append(f"cases {t['cases']}, transcription = released on {t['transcription_is_released']}, "
                 f"judged {t['judged']}, verdicts agree {t['agree']}, both right {t['both_right']}, "
                 f"numloss-only right {t['numloss_only_right']}, released-only right {t['released_only_right']} "
                 f"(+ {t['released_only_right_listed']} on the strictness list)")
    return "\n".join(lines)


if __name__ == "__main__":  # the table of docs/evaluation.md (run from the repository root, tests/ on sys.path)
    print(_table(run_differential(int(sys.argv[1]) if len(sys.argv) > 1 else 1)["rows"]))
