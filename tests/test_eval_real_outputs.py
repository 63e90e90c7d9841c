"""The reader on real model outputs (tests/fixtures/real_outputs/).

- chat_formats.jsonl: finished answers, right and wrong, in the chat formats of Qwen2.5, Qwen3,
  Llama-3, DeepSeek-R1, gpt-oss (harmony), Mistral, Gemma and Phi-3, each with and without an
  invented next turn (build_chat_formats.py says how they are made); each row says whether the
  output's answer is the gold (`right`) and why, where that is not plain;
- smollm2_generations.jsonl: SmolLM2-135M-Instruct as shipped, greedy, with the released prompts,
  on the first items of all seven benchmarks (generate_smollm2.py); smollm2_finetuned_generations.jsonl
  the same after the recorded 100-step LoRA fine-tune (configs/smollm2-lora.yaml, merged);
  smollm2_judged.jsonl holds the verdict decided by hand, with the reason, for every output where
  the protocols disagree (keyed by model, benchmark, item and prompt style).

`released` must read every one of them as the transcription of the released code does; `numloss`
must be right on every chat-format row and on every hand-judged generation.
"""

import json
from pathlib import Path

import pytest

from numloss.evaluate.benchmarks import load_for_records
from numloss.evaluate.protocol import NUMLOSS, RELEASED, RELEASED_DATASET
from numloss.evaluate.runner import score_items
from reference import released_eval
from test_eval_differential import DATA

HERE = Path(__file__).parent / "fixtures" / "real_outputs"
pytestmark = pytest.mark.usefixtures("shared_benchmarks")


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (HERE / name).read_text(encoding="utf-8").splitlines() if line.strip()]


CHAT = _rows("chat_formats.jsonl")
SMOLLM2 = _rows("smollm2_generations.jsonl") + _rows("smollm2_finetuned_generations.jsonl")
JUDGED = {(r.get("model", "SmolLM2-135M-Instruct"), r["benchmark"], r["id"], r["style"]): r for r in _rows("smollm2_judged.jsonl")}


@pytest.fixture(scope="module")
def items() -> dict[tuple[str, str], object]:
    wanted: dict[str, set[str]] = {}
    for row in CHAT + SMOLLM2:
        wanted.setdefault(row["benchmark"], set()).add(row["id"])
    return {(name, it.id): it for name, ids in wanted.items() for it in load_for_records(name, sorted(ids), data_dir=DATA).items}


class NoPrograms:
    """The runner for outputs without a program (none is run)."""

    def run(self, scripts, *limits):
        assert not scripts, "these outputs hold no program"
        return []


def _verdicts(protocol, rows, items):
    """(row, ItemResult) for each row, read as a chain-of-thought output (no program runs)."""
    return [(row, *score_items(protocol, row["benchmark"], [items[(row["benchmark"], row["id"])]], [row["output"]], [None],
                               NoPrograms(), program_of_thought=False)) for row in rows]


def test_released_reads_every_real_output_as_the_transcription(items):
    texts = [r for r in CHAT + SMOLLM2 if "print(" not in r["output"]]
    for row, result in _verdicts(RELEASED, texts, items):
        item = items[(row["benchmark"], row["id"])]
        dataset = RELEASED_DATASET[row["benchmark"]]
        answer, _ = released_eval.answer_of_output(dataset, row["output"])
        if item.kind == "choice":
            answer = answer if answer in list("ABCDEFGHIJ") else "A"
        assert result.prediction == answer, (row["benchmark"], row["id"], row["output"][:200])


def test_numloss_is_right_on_every_chat_format(items):
    wrong = [(r["family"], r["benchmark"], r["said"], r["next_turn"], res.prediction)
             for r, res in _verdicts(NUMLOSS, CHAT, items) if res.correct != r["right"]]
    assert not wrong, f"{len(wrong)} of {len(CHAT)}: {wrong[:8]}"


def test_numloss_agrees_with_the_hand_verdict_on_every_disagreement(items):
    texts = [r for r in SMOLLM2 if "print(" not in r["output"]]
    pairs = zip(_verdicts(RELEASED, texts, items), _verdicts(NUMLOSS, texts, items), strict=True)
    differ = [((r["model"], r["benchmark"], r["id"], r["style"]), res) for (r, old), (_, res) in pairs if res.correct != old.correct]
    unjudged = [key for key, _ in differ if key not in JUDGED]
    wrong = [(*key, res.prediction, JUDGED[key]["why"]) for key, res in differ if key in JUDGED and res.correct != JUDGED[key]["correct"]]
    assert not unjudged, f"protocols disagree on outputs nobody judged: {unjudged}"
    assert not wrong, wrong
