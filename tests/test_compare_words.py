"""The pretrained arm: the arithmetic word-problem task, teacher-forced exact
match against real greedy generation, and the paired statistics of its report."""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from numloss.compare.arith_words import ArithmeticWordTask, word_problem
from numloss.compare.config import load_compare_config
from numloss.compare.item_paired import paired_comparison
from numloss.compare.teacher_forced import generated_exact, teacher_forced_exact
from numloss.compare.word_task import ChatExample, WordProblemTask
from numloss.data import tokenize_examples
from numloss.evaluate.generate import HFGenerator
from numloss.models.smollm2 import model_dir, prepare

ROOT = Path(__file__).resolve().parents[1]


def _op(question: str) -> str:
    if any(w in question for w in ("more. How", "Monday", "together")):
        return "+"
    if any(w in question for w in ("gave away", "sold", "already has")):
        return "-"
    return "*"


@pytest.mark.parametrize("digits", [2, 3, 4, 6])
def test_every_problem_has_an_answer_of_exactly_the_asked_digits_and_is_right(digits) -> None:
    rng = random.Random(digits)
    ops = set()
    for _ in range(400):
        item = word_problem(rng, digits)
        assert item.output == f"#### {item.answer}" and len(item.answer) == digits and item.answer[0] != "0"
        a, b = (int(n) for n in re.findall(r"\d+", item.instruction))  # recomputed, independently of the generator
        assert {"+": a + b, "-": a - b, "*": a * b}[_op(item.instruction)] == int(item.answer), item.instruction
        assert item.system == "" and all(int(n) > 0 for n in re.findall(r"\d+", item.instruction))
        ops.add(_op(item.instruction))
    assert ops == {"+", "-", "*"}


def _fact(question: str) -> tuple:
    """The arithmetic fact of a question, read back from its text (independent of the generator)."""
    numbers = [int(n) for n in re.findall(r"\d+", question)]
    op = _op(question)
    return (op, *sorted(numbers)) if op in "+*" else (op, *numbers)


@pytest.mark.parametrize("digits, operations", [(2, "+-*"), (3, "+-*"), (2, "*"), (3, "+")])
def test_unseen_facts_keep_every_held_out_fact_out_of_training(digits, operations) -> None:
    seen_task = ArithmeticWordTask(answer_digits=digits, operations=operations, test_size=400, train_size=800)
    unseen_task = replace(seen_task, heldout_facts="unseen")
    held = seen_task.held_out()
    assert unseen_task.held_out() == held  # the scored items do not change, only training does
    held_facts = {_fact(e.instruction) for e in held}
    assert unseen_task.held_out_facts() == frozenset(held_facts)
    exclude = {e.instruction for e in held}
    for seed in (0, 3):
        unseen = unseen_task.train_set(seed, exclude)
        assert len(unseen) == 800 and not held_facts & {_fact(e.instruction) for e in unseen}
    # the control: with "any", 2-digit answers do share facts with training (as the recorded grids did)
    if digits == 2:
        shared = held_facts & {_fact(e.instruction) for e in seen_task.train_set(0, exclude)}
        assert shared


def test_any_facts_draws_exactly_the_problems_of_before() -> None:
    """The default keeps the recorded grids' training sets: the same draws as word_problem in turn."""
    task = ArithmeticWordTask(answer_digits=2, test_size=50, train_size=200)
    rng = random.Random("numloss-arith-words-train-0")
    expected, seen = [], set()
    while len(expected) < 200:
        item = word_problem(rng, 2, "+-*")
        if item.instruction not in seen:
            seen.add(item.instruction)
            expected.append(item)
    assert task.train_set(0) == expected
    # absent at its default, so the recorded runs' and the untrained baseline's hashes stay
    assert "heldout_facts" not in task.to_dict()
    assert ArithmeticWordTask(heldout_facts="unseen").to_dict()["heldout_facts"] == "unseen"


def test_the_cpu_arm_fits_64_tokens() -> None:
    # (its recipe is its records': test_compare_records.py fails when a setting changes under them)
    compare = load_compare_config(ROOT / "configs" / "compare-smollm2-words.yaml")
    task = compare.task
    assert isinstance(task, ArithmeticWordTask) and compare.base["data"]["max_length"] == 64
    if not (model_dir() / "tokenizer.json").is_file():
        pytest.skip("SmolLM2 not prepared here (numloss models prepare smollm2): the token count is checked where it is")
    tokenizer = AutoTokenizer.from_pretrained(model_dir())
    items = WordProblemTask.render(task.held_out()[:300] + task.train_set(0)[:300], tokenizer)
    features = tokenize_examples(items, tokenizer, max_length=64)
    assert features.num_truncated == 0, "every sequence fits in 64 tokens, end token included"


@pytest.fixture(scope="module")
def smollm2():
    if not (model_dir() / "config.json").is_file():
        prepare()  # once per machine (~25 s): the converted folder is cached
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a second thread on a busy 2-core machine spins at every barrier
    tokenizer = AutoTokenizer.from_pretrained(model_dir())
    model = AutoModelForCausalLM.from_pretrained(model_dir()).eval()
    yield model, tokenizer
    torch.set_num_threads(threads)


def test_teacher_forced_exact_match_equals_real_generation_item_by_item(smollm2) -> None:
    """The property the scoring rests on, on a sample mixing right and wrong items: the model's own
    greedy answers as references (right by construction), each with a digit changed, one digit
    more (the end token is not argmax there) and one less (the end token comes too early), and the
    true answers (right or wrong as the model is). Padding changes no verdict (one item a batch
    against five), and each reference digit is counted at its place (from the end of its run)."""
    model, tokenizer = smollm2
    questions = [(f"What is {a} + {b}? Reply with the number only.", str(a + b)) for a, b in
                 ((3, 4), (12, 7), (48, 36), (130, 270))]
    prompts = WordProblemTask.render([ChatExample(q, "x", system="") for q, _ in questions], tokenizer)
    with torch.inference_mode():
        own = HFGenerator(model, tokenizer, batch_size=8, max_new_tokens=24, stop=(), progress=False).generate(
            [p.prompt for p in prompts])
    items = []
    for (question, truth), generation in zip(questions, own, strict=True):
        said = generation.text
        variants = [truth]
        if said and generation.new_tokens < 24:  # ended with EOS: a reference it writes exactly
            changed = said[:-1] + str((int(said[-1]) + 1) % 10) if said[-1].isdigit() else said + "1"
            variants += [said, changed, said + "0", said[:-1]]
        items += [ChatExample(question, v, answer=v, system="") for v in variants if v]
    items = WordProblemTask.render(items, tokenizer)
    with torch.inference_mode():
        forced = teacher_forced_exact(model, tokenizer, items, batch_size=5)
        one = teacher_forced_exact(model, tokenizer, items, batch_size=1)
        generated = generated_exact(model, tokenizer, items, batch_size=5)
    assert forced.correct == generated, [(i.output, f, g) for i, f, g in zip(items, forced.correct, generated, strict=True) if f != g]
    assert sum(generated) >= 2 and len(generated) - sum(generated) >= 4, "both verdicts are on the sample"
    assert one.correct == forced.correct and one.predictions == forced.predictions and len(one.predictions) == len(items)
    assert all(a == pytest.approx(b, abs=1e-3) for a, b in zip(one.answer_nll, forced.answer_nll, strict=True))
    places = Counter(p for i in items for run in re.findall(r"\d+", i.output) for p in range(len(run)))
    assert {p: v[1] for p, v in forced.place.items()} == places and all(v[0] <= v[1] for v in forced.place.values())
    with pytest.raises(ValueError, match="max_length"):
        teacher_forced_exact(model, tokenizer, items, max_length=8)


def _arm(rng: random.Random, p: float, n: int, base: list[float]) -> str:
    return "".join("1" if rng.random() < min(1.0, max(0.0, b + p)) else "0" for b in base)


def test_paired_tests_find_a_known_effect_and_hold_their_level_on_a_null() -> None:
    rng = random.Random(0)
    n, seeds = 400, 4
    rejections = 0
    trials = 200
    for _ in range(trials):
        base = [rng.random() for _ in range(n)]  # item difficulty shared by both arms
        a = {s: _arm(rng, 0.0, n, base) for s in range(seeds)}
        b = {s: _arm(rng, 0.0, n, base) for s in range(seeds)}
        rejections += paired_comparison(a, b)["mcnemar_p"] < 0.05
    assert rejections / trials <= 0.05 + 2 * (0.05 * 0.95 / trials) ** 0.5, rejections
    base = [rng.random() for _ in range(n)]
    a = {s: _arm(rng, 0.08, n, base) for s in range(seeds)}
    b = {s: _arm(rng, 0.0, n, base) for s in range(seeds)}
    found = paired_comparison(a, b)
    assert found["mcnemar_p"] < 0.01 and found["ci95"][0] < 0.08 < found["ci95"][1] and found["mean_diff"] > 0.04
    assert 0 < found["mde_items"] < 0.08 and found["mde_seeds"] > 0
