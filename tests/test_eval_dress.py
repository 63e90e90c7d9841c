"""The `numloss` reader over output dressings beyond the space's axes (tests/eval_dress.py).

Each family of tests/eval_dress.py (other languages, Unicode digits and minus signs, thousands
separators, units and currency, arrows, markdown and emoji, LaTeX emphasis and boxes,
self-correction and verification paragraphs, hedges, multiple-choice dress, printed program
results, truncated and empty outputs, spelled-out numbers) is filled with the right and a wrong
answer on real items of all seven benchmarks and scored by the transcription of the released
scripts and by the `numloss` protocol. Each case carries its truth: the answer it says, or none
("18 or 25", a cut-off sentence, an empty output, "C) 45" where 45 is option D). Asserted:

- (a) numloss passes no case whose truth is not the gold;
- (b) wherever the released scripts read right a case whose truth is the gold, numloss reads
  right, unless the released scripts pass the wrong fill of the same dressing too;
- (c) no case is unreadable.

The default run draws NUMLOSS_DRESS_DRAW (6) templates per family and benchmark, seeded
(NUMLOSS_DRESS_SEED), on one item per benchmark (a gold of 1000 or more, or the gold 'A', where
there is one: thousands separators need one); the `slow` run takes every template on two items.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import dataclass

import pytest

from eval_cases import Case, answers_of  # tests/ is on sys.path (conftest.py)
from eval_dress import FAMILIES
from numloss.evaluate.benchmarks import Item, load_benchmark
from numloss.evaluate.programs import ProgramRunner
from numloss.evaluate.protocol import NUMLOSS
from numloss.evaluate.runner import score_items
from test_eval_differential import DATA, NAMES, pick, transcription
from test_eval_space import LIMITS

pytestmark = pytest.mark.usefixtures("shared_benchmarks")


@dataclass(frozen=True)
class Dressed:
    family: str
    template: str
    item: Item
    output: str
    said_right: bool
    truth: bool  # whether a reader of the output would say it answers the gold


def draw(per_family: int | None, seed: int = 0, items_per_benchmark: int = 1, programs: int = 2) -> dict[str, list[Dressed]]:
    """Per benchmark, `per_family` templates of each family (None: all; at most `programs` of the
    program family, which run in the sandbox), each filled with the right and the wrong answer."""
    rng = random.Random(seed)
    out: dict[str, list[Dressed]] = {}
    for name in NAMES:
        out[name] = []
        for item in pick(load_benchmark(name, data_dir=DATA), items_per_benchmark):  # a gold of 1000 or more first
            (right, rv), (wrong, wv) = answers_of(item)
            for family, generate in FAMILIES.items():
                fills = {said_right: list(generate(item, said, sv, other, ov))
                         for said, sv, other, ov, said_right in ((right, rv, wrong, wv, True), (wrong, wv, right, rv, False))}
                ids = sorted({t for t, _, _ in fills[True]} & {t for t, _, _ in fills[False]})
                limit = programs if family == "programs" else per_family
                chosen = set(ids if limit is None else rng.sample(ids, min(limit, len(ids))))
                for said_right, made in fills.items():
                    for template, output, mode in made:
                        if template in chosen:
                            truth = said_right if mode == "said" else False
                            out[name].append(Dressed(family, template, item, output, said_right, truth))
    return out


def score(drawn: dict[str, list[Dressed]]) -> list[tuple[Dressed, bool, object]]:
    """(case, the released scripts' verdict, numloss's result) per case."""
    runner = ProgramRunner(LIMITS, workers=2, allow_unisolated=True)
    rows = []
    for name, batch in drawn.items():
        if not batch:
            continue
        oracle = transcription(name, [Case(d.template, name, d.item, d.output, None, d.truth) for d in batch])
        numloss = score_items(NUMLOSS, name, [d.item for d in batch], [d.output for d in batch], [None] * len(batch), runner)
        runner.forget()
        rows += [(d, ok, n) for d, (_, ok), n in zip(batch, oracle, numloss, strict=True)]
    return rows


def violations(rows) -> dict[str, list[str]]:
    """(a) wrong passes, (b) dominance losses, (c) unreadable cases, each named by its dressing."""
    excused = {(d.family, d.template, d.item.id) for d, ok, _ in rows if ok and not d.truth}
    found: dict[str, list[str]] = {"wrong_pass": [], "dominance": [], "unreadable": []}
    for d, ok, n in rows:
        where = f"{d.family}/{d.template} item {d.item.id} gold {d.item.answer!r}: {d.output!r} -> numloss {n.prediction!r}"
        if n.correct and not d.truth:
            found["wrong_pass"].append(where)
        if d.truth and ok and not n.correct and (d.family, d.template, d.item.id) not in excused:
            found["dominance"].append(where)
        if n.note:
            found["unreadable"].append(f"{where} ({n.note})")
    return found


@pytest.fixture(scope="module")
def rows():
    return score(draw(int(os.environ.get("NUMLOSS_DRESS_DRAW", "6")), seed=int(os.environ.get("NUMLOSS_DRESS_SEED", "0"))))


def test_the_draw_spans_every_family_and_benchmark(rows):
    seen = Counter((d.family, d.item.kind) for d, _, _ in rows)
    assert {d.item.kind for d, _, _ in rows} == {"number", "math", "choice"}
    assert {f for f, _ in seen} == set(FAMILIES), set(FAMILIES) - {f for f, _ in seen}
    assert any(d.said_right and not d.truth for d, _, _ in rows)  # some say the gold among other answers, or no answer


@pytest.mark.parametrize("kind", ["wrong_pass", "dominance", "unreadable"])
def test_numloss_over_the_dressings(rows, kind):
    found = violations(rows)[kind]
    assert not found, f"{len(found)} cases:\n" + "\n".join(found[:12])


@pytest.mark.slow
def test_every_dressing_on_two_items():
    found = violations(score(draw(None, items_per_benchmark=2, programs=None)))
    assert not any(found.values()), {k: v[:8] for k, v in found.items()}
