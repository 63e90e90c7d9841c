"""Data: the shared prompt, synthetic and reasoning-gym sets, files and HF datasets, labels."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from numloss.data import (
    IGNORE_INDEX,
    CompletionCollator,
    Conversation,
    DataError,
    Example,
    PromptCompletion,
    format_prompt,
    load_examples,
    synthetic,
    tokenize_examples,
)
from numloss.data.instructions import records_to_examples
from numloss.models.tiny import build_char_tokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "train"
NUM = r"-?\d+(?:\.\d+)?"


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def test_prompt_is_the_alpaca_template():
    assert format_prompt("Add 2 and 3.") == (
        "Below is an instruction that describes a task. Write a response that appropriately "
        "completes the request.\n\n### Instruction:\nAdd 2 and 3.\n\n### Response:"
    )
    with_input = format_prompt("Add them.", "2 and 3")
    assert with_input.startswith("Below is an instruction that describes a task, paired with an input")
    assert with_input.endswith("### Instruction:\nAdd them.\n\n### Input:\n2 and 3\n\n### Response:")
    # an empty input is the no-input template
    assert format_prompt("x", "") == format_prompt("x")


@pytest.mark.parametrize("name", [*synthetic.GENERATORS, "mix"])
def test_synthetic_sets_are_seeded_and_correct(name):
    first = load_examples(f"synthetic:{name}", num_examples=40, seed=3)
    assert first == load_examples(f"synthetic:{name}", num_examples=40, seed=3)
    assert first != load_examples(f"synthetic:{name}", num_examples=40, seed=4)
    for example in first:
        assert example.output.endswith(f"The answer is {example.answer}.")
        assert "e" not in example.answer.lower() and not example.answer.endswith(".")
        # every "a op b = c" in the working is exact arithmetic
        for a, op, b, c in re.findall(rf"({NUM}) ([-+*]) ({NUM}) = ({NUM})", example.output):
            x, y = Decimal(a), Decimal(b)
            expected = x + y if op == "+" else x - y if op == "-" else x * y
            assert Decimal(c) == expected, (example.output, a, op, b, c)
        equation = re.fullmatch(r"Solve for x: (\d+)x ([-+]) (\d+) = (-?\d+)\.", example.instruction)
        if equation or name == "linear_equations":  # the answer solves it
            a, sign, b, c = equation.groups()
            assert int(a) * int(example.answer) + (int(b) if sign == "+" else -int(b)) == int(c)


def test_fmt_never_writes_float_noise():
    assert synthetic.fmt(Decimal("0.1") + Decimal("0.2")) == "0.3"
    assert synthetic.fmt(Decimal("14.00")) == "14"
    assert synthetic.fmt(Decimal("-0.0")) == "0"


@pytest.mark.parametrize("name", ["basic_arithmetic", "decimal_arithmetic", "simple_equations", "gsm_symbolic"])
def test_reasoning_gym_adapters(name):
    examples = load_examples(f"gym:{name}", num_examples=3, seed=1)
    assert len(examples) == 3 and examples == load_examples(f"gym:{name}", num_examples=3, seed=1)
    for example in examples:
        assert example.instruction and example.output == f"The answer is {example.answer}."
        assert any(ch.isdigit() for ch in example.answer)


def test_json_and_jsonl_in_the_mathinstruct_layout():
    examples = load_examples(str(FIXTURES / "mathinstruct_sample.json"))
    assert len(examples) == 3
    assert examples[0] == Example("Tom has 3 boxes with 12 pens each. How many pens does he have?",
                                  "Tom has 3 * 12 = 36 pens. The answer is 36.")
    assert examples[2].input == "x + 7 = 19. What is x?"
    assert "### Input:\nx + 7 = 19. What is x?" in examples[2].prompt
    lines = load_examples(str(FIXTURES / "mathinstruct_sample.jsonl"))
    assert [e.instruction for e in lines] == ["What is 17 + 25?", "Compute the product.", "What is 100 - 1.25?"]
    assert len(load_examples(str(FIXTURES / "mathinstruct_sample.jsonl"), num_examples=2)) == 2
    # the first record of a file whose second lacks its output; an integer field is taken as written
    assert load_examples(str(FIXTURES / "missing_output.jsonl"), num_examples=1)[0].output == "2"
    (example,) = records_to_examples([{"instruction": "What is 40+2?", "output": 42}], "data.jsonl")
    assert example.output == "42"


def test_hf_datasets_from_local_folder_and_parquet(tmp_path):
    import datasets

    records = {"question": ["What is 1 + 2?", "What is 2.5 * 2?"], "answer": ["3", "5"], "other": [1, 2]}
    dataset = datasets.Dataset.from_dict(records)
    dataset.save_to_disk(str(tmp_path / "saved"))
    fields = dict(instruction_field="question", output_field="answer")
    examples = load_examples(str(tmp_path / "saved"), **fields)
    assert [(e.instruction, e.output) for e in examples] == [("What is 1 + 2?", "3"), ("What is 2.5 * 2?", "5")]
    datasets.DatasetDict({"train": dataset, "test": dataset.select([0])}).save_to_disk(str(tmp_path / "dict"))
    assert len(load_examples(str(tmp_path / "dict"), split="test", **fields)) == 1
    dataset.to_parquet(str(tmp_path / "data.parquet"))
    assert load_examples(str(tmp_path / "data.parquet"), **fields) == examples


def test_completion_only_labels(tok):
    example = Example("What is 12 + 30?", "12 + 30 = 42. The answer is 42.")
    dataset = tokenize_examples([example], tok, max_length=1024)
    feature = dataset[0]
    ids, labels = feature["input_ids"], feature["labels"]
    prompt_len = len(tok(example.prompt)["input_ids"])
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
    assert labels[:prompt_len] == [IGNORE_INDEX] * prompt_len
    assert labels[prompt_len:] == ids[prompt_len:]
    assert tok.decode(labels[prompt_len:]) == example.output + tok.eos_token
    assert dataset.num_truncated == 0 and dataset.stats["target_tokens"] == len(example.output) + 1


def test_truncation_is_counted_never_dropped(tok):
    short = Example("1+1?", "2")
    long = Example("What is 1 + 1?", "The answer is 2. " * 30)
    no_room = Example("x" * 400, "5")
    dataset = tokenize_examples([short, long, no_room], tok, max_length=200)
    assert len(dataset) == 3
    assert all(len(f["input_ids"]) <= 200 for f in dataset.features)
    assert dataset.num_truncated == 2 and dataset.num_without_target == 1
    assert "2 truncated" in dataset.summary() and "raise data.max_length" in dataset.summary()
    # the truncated long example keeps its prompt and the start of its response
    kept = dataset[1]["labels"]
    assert any(label != IGNORE_INDEX for label in kept)


def test_collator_pads_right_with_ignored_labels(tok):
    dataset = tokenize_examples(load_examples("synthetic:arithmetic", num_examples=3), tok, 512)
    batch = CompletionCollator(tok.pad_token_id)([dataset[0], dataset[1], dataset[2]])
    lengths = [len(f["input_ids"]) for f in dataset.features]
    assert batch["input_ids"].shape == (3, max(lengths))
    for row, n in enumerate(lengths):
        assert batch["attention_mask"][row].sum() == n
        assert (batch["input_ids"][row, n:] == tok.pad_token_id).all()
        assert (batch["labels"][row, n:] == IGNORE_INDEX).all()
        assert batch["labels"][row, :n].tolist() == dataset[row]["labels"]
    padded = CompletionCollator(tok.pad_token_id, pad_to_multiple_of=64)([dataset[0]])
    assert padded["input_ids"].shape[1] % 64 == 0


# -- prompt/completion and chat records -----------------------------------------------------------

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def learnt_text(tok, feature) -> str:
    return tok.decode([t for t in feature["labels"] if t != IGNORE_INDEX])


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_prompt_completion_records_learn_the_completion_only(tok, tmp_path):
    source = write_jsonl(tmp_path / "pc.jsonl", [{"prompt": "Q: 12 + 30 =", "completion": " 42"}])
    (record,) = load_examples(source)
    assert record == PromptCompletion("Q: 12 + 30 =", " 42")
    feature = tokenize_examples([record], tok, 64)[0]
    assert tok.decode(feature["input_ids"]) == "<s>Q: 12 + 30 = 42</s>"  # the prompt as it is, no template
    assert learnt_text(tok, feature) == " 42</s>"


def test_messages_are_rendered_with_the_chat_template_and_learn_assistant_turns_and_need_one(tok, tmp_path):
    messages = [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "12 + 30?"},
        {"role": "assistant", "content": "42"},
        {"role": "user", "content": "Times 2?"},
        {"role": "assistant", "content": "84"},
    ]
    source = write_jsonl(tmp_path / "chat.jsonl", [{"messages": messages}])
    (record,) = load_examples(source)
    assert isinstance(record, Conversation) and record.train_on == (False, False, True, False, True)
    dataset = tokenize_examples([record], tok, 512, chat_template=CHAT_TEMPLATE)
    feature = dataset[0]
    assert tok.decode(feature["input_ids"]) == tok.apply_chat_template(messages, tokenize=False, chat_template=CHAT_TEMPLATE)
    # exactly the two assistant turns with their end-of-turn marker
    assert learnt_text(tok, feature) == "42</s>\n84</s>\n"
    assert "conversations rendered with the chat template" in dataset.summary()
    # TRL's conversational prompt/completion: the completion turns are learnt
    source = write_jsonl(tmp_path / "cpc.jsonl", [{"prompt": messages[:2], "completion": messages[2:3]}])
    (record,) = load_examples(source)
    assert learnt_text(tok, tokenize_examples([record], tok, 512, chat_template=CHAT_TEMPLATE)[0]) == "42</s>\n"
    # the template can also come from a file
    (tmp_path / "template.jinja").write_text(CHAT_TEMPLATE)
    from_file = tokenize_examples([record], tok, 512, chat_template=str(tmp_path / "template.jinja"))
    assert from_file[0] == tokenize_examples([record], tok, 512, chat_template=CHAT_TEMPLATE)[0]
    with pytest.raises(DataError, match="no chat template; set data.chat_template"):  # the char tokenizer has none
        tokenize_examples([record], tok, 64)


#: data that is refused, in one line: (a source, or a file name under tmp_path; the file's content,
#: None for none, a list for JSONL records; load_examples's options; what the line says)
BAD_DATA = {
    "unknown synthetic set": ("synthetic:nope", None, {"num_examples": 2}, r"unknown synthetic set 'nope'.*synthetic:arithmetic"),
    "unknown gym set": ("gym:chess", None, {"num_examples": 2}, "unknown reasoning-gym set"),
    "generated, no size": ("synthetic:mix", None, {}, "set data.num_examples"),
    "no such file": ("absent.json", None, {}, "no such file"),
    "a hub name not cached, offline": ("hub:numloss-test/no-such-dataset-anywhere", None, {}, "offline.*save_to_disk"),
    "a record without output": ("m.jsonl", (FIXTURES / "missing_output.jsonl").read_bytes(), {}, r"record 1 has no 'output'.*'response'.*data.output_field"),
    "a line not JSON": ("broken.jsonl", b'{"instruction": "a", "output": "1"}\n{"instruction": \n', {}, r"broken.jsonl:2: not valid JSON"),
    "a record not an object": ("d.jsonl", b"5\n", {}, r"record 0 is a int, expected an object"),
    "no known layout": ("bad.jsonl", [{"question": "x"}], {}, "none of the known layouts"),
    "no assistant turn": ("bad.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}], {}, "no assistant message"),
    "a message without content": ("bad.jsonl", [{"messages": [{"role": "user"}]}], {}, r"messages\[0\] is not a \{role, content\}"),
    "a str prompt, a chat completion": ("bad.jsonl", [{"prompt": "x", "completion": [{"role": "assistant", "content": "1"}]}], {}, "both be strings or both lists"),
    "latin-1 JSONL": ("latin1.jsonl", b'{"instruction": "a", "output": "1"}\n{"instruction": "caf\xe9", "output": "2"}\n', {}, r"latin1.jsonl:2: not UTF-8 text \(byte 0xe9 at column 21\)"),
    "an unknown file type": ("data.txt", b"x\n", {}, r"data.txt: unknown data file type '.txt'"),
    "latin-1 CSV": ("data.csv", b"instruction,output\nx,1\ny,\xff\n", {}, r"data.csv:3: not UTF-8"),
    "a key twice": ("train.jsonl", b'{"instruction": "1+1=", "output": "2", "output": "3"}\n', {}, r"train\.jsonl:1: field 'output' is given twice; keep one$"),
    "a whitespace output": ("train.jsonl", [{"instruction": "1+1=", "output": " \n "}], {}, r"train\.jsonl: record 0: 'output' is only whitespace, so there is nothing to learn"),
    # fields of the wrong type are refused, not stringified
    "a list instruction": ("d.jsonl", [{"instruction": ["What", "is"], "output": "2"}], {}, r"record 0: 'instruction' is \[.What., .is.\] \(list\); it must be a string"),
    "a float output": ("d.jsonl", [{"instruction": "What is 1+1?", "output": 2.50}], {}, r"'output' is 2.5 \(float\); write the number as a string"),
    "a bool input": ("d.jsonl", [{"instruction": "What is 1+1?", "input": True, "output": "2"}], {}, r"'input' is True \(bool\)"),
}


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_bad_data_is_one_error_naming_it(case, tmp_path, monkeypatch):
    name, content, options, message = BAD_DATA[case]
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    source = name.removeprefix("hub:") if ":" in name else str(tmp_path / name)
    if isinstance(content, list):
        content = "".join(json.dumps(record) + "\n" for record in content).encode()
    if content is not None:
        Path(source).write_bytes(content)
    with pytest.raises(DataError, match=message) as caught:
        load_examples(source, **options)
    assert "\n" not in str(caught.value)
