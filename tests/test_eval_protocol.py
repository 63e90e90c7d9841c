"""The `numloss` protocol: its deviations from `released`, each checked, and on the real files.

The real files (../shared/benchmarks) give the counts docs/evaluation.md quotes; the tests that
need them skip with the reason when the folder is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from numloss.evaluate.answers import extract_exact, number_matches
from numloss.evaluate.benchmarks import MMLU_MATH_SUBJECTS, load_benchmark
from numloss.evaluate.protocol import NUMLOSS, RELEASED, deviations, numloss_prose, resolve
from numloss.evaluate.runner import score_items
from test_eval_differential import DATA, program_runner  # tests/ is on sys.path (conftest.py)

real = pytest.mark.usefixtures("shared_benchmarks")  # fails, naming the folder, when it is missing


def test_deviations_are_fields_and_generation_is_shared():
    assert deviations() == ["text_after_program", "program_clock", "program", "script", "read_program", "prose", "extract", "finalize",
                            "gold", "compare"]
    # the sandbox limits are shared: both far above what the released executor (no limits) lets through
    assert (NUMLOSS.program_output_bytes, NUMLOSS.program_memory_bytes) == (RELEASED.program_output_bytes, RELEASED.program_memory_bytes)
    assert (RELEASED.prompt, RELEASED.stop, RELEASED.max_new_tokens_open, RELEASED.max_new_tokens_choice) == (
        NUMLOSS.prompt, NUMLOSS.stop, NUMLOSS.max_new_tokens_open, NUMLOSS.max_new_tokens_choice)
    assert [p.name for p in resolve("both")] == ["released", "numloss"]
    with pytest.raises(ValueError, match="unknown protocol"):
        resolve("paper")


@real
def test_no_wrong_integer_digit_passes_on_any_real_gold():
    large = 0
    for name in ("gsm8k", "svamp", "simuleq"):
        for item in load_benchmark(name, data_dir=DATA).items:
            gold = extract_exact(item.answer)
            assert number_matches(gold, item.answer)
            step = 1 if "." not in item.answer else 10 ** -len(item.answer.split(".")[1])
            assert not number_matches(gold + 10 * step, item.answer), item
            assert not number_matches(gold + step, item.answer), item
            large += abs(gold) >= 10**6
    assert large == 9  # the golds where the old relative tolerance of 1e-6 passed a wrong units digit


@real
def test_program_prints_of_real_golds_match_under_numloss():
    items = load_benchmark("simuleq", data_dir=DATA).items
    decimals = [it for it in items if "." in it.answer and len(it.answer.split(".")[1]) >= 3][:4]
    assert any(it.answer == "583.3333" for it in decimals)
    programs = [f"print({it.answer} + 1e-13)" for it in decimals] + [f"print({it.answer}4)" for it in decimals]
    got = score_items(NUMLOSS, "simuleq", decimals * 2, programs, [None] * len(programs), program_runner())
    assert [r.correct for r in got] == [True] * len(decimals) + [True] * len(decimals)  # extra digits: gold's precision
    released = score_items(RELEASED, "simuleq", decimals, programs[: len(decimals)], [None] * len(decimals), program_runner())
    assert not any(r.correct for r in released)  # the released string comparison fails float noise


def test_numloss_runs_what_the_released_wrapper_breaks():
    item = load_benchmark("gsm8k", path=Path(__file__).parent / "fixtures" / "benchmarks" / "gsm8k.jsonl").items[0]
    gold = item.answer
    programs = [f"from sympy import *\nprint({gold})", f"def main():\n    print({gold})\nif __name__ == '__main__':\n    main()",
                f"```python\nprint({gold})\n```", f"x = {gold}\ny = 2\nprint(x)\nprint(y)"]
    got = score_items(NUMLOSS, "gsm8k", [item] * 4, programs, ["no idea"] * 4, program_runner())
    assert [r.correct for r in got] == [True, True, True, True]
    assert [r.style for r in got] == ["pot"] * 4
    old = score_items(RELEASED, "gsm8k", [item] * 4, programs, ["no idea"] * 4, program_runner())
    assert [r.style for r in old] == ["pot+cot", "pot+cot", "pot+cot", "pot"]


@real
def test_the_real_mmlu_math_file_has_the_papers_974_items():
    records = json.loads((DATA / "mmlu" / "mathematics.json").read_text())
    counts = {s: sum(r["subject"] == s for r in records) for s in MMLU_MATH_SUBJECTS}
    assert counts == {"elementary_mathematics": 378, "high_school_mathematics": 270, "formal_logic": 126,
                      "college_mathematics": 100, "abstract_algebra": 100}
    # a Hub load reads the subjects in the file's order, so item i is the same item either way
    assert list(dict.fromkeys(r["subject"] for r in records)) == list(MMLU_MATH_SUBJECTS)
    assert len(load_benchmark("svamp", data_dir=DATA)) == 1000  # = ChilleD/SVAMP train 700 + test 300


@pytest.mark.parametrize("output, prose", [
    ("print('B')\nraise ValueError('late')", ""),  # unfenced: every line is code
    ("x = 'C'\nprint(x)\nraise SystemExit(1)", ""),
    ("    print('D')", ""),
    ("I would compute print(5) by hand; the answer is (C)", "I would compute print(5) by hand; the answer is (C)"),
    ("Let me compute.\nx = 3\nprint(x)\nThe answer is 3.", "Let me compute.\nThe answer is 3."),
    ("Here:\n```python\nprint('B')\n1 / 0\n```\nSo the answer is (C).", "Here:\n\nSo the answer is (C)."),
    ("```\nprint('B')\n```\nOutput:\n```\nB\n```\nSo (C).", "\nOutput:\n```\nB\n```\nSo (C)."),  # a printed result stays
    ("```py\nprint(1)\n```\n```python\nprint(2)\n```\nThe answer is 4.", "\n\nThe answer is 4."),
])
def test_the_text_read_after_a_failed_program_is_the_output_without_it(output, prose):
    """numloss reads a chain-of-thought output as text when its program gives nothing: the text
    without the program, so the program's own literals (print('B')) are never its answer."""
    assert numloss_prose(output) == prose
    assert NUMLOSS.prose(output) == prose and RELEASED.prose(output) == output
