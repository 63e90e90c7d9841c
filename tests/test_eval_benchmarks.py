"""Benchmark loaders on fixture files in each public format; clear errors for bad input."""

import json
from pathlib import Path

import pytest

from numloss.evaluate.benchmarks import (
    MMLU_MATH_SUBJECTS,
    Benchmark,
    BenchmarkError,
    load_benchmark,
    parse_benchmark_list,
)

FIXTURES = Path(__file__).parent / "fixtures" / "benchmarks"


@pytest.mark.parametrize(
    "name, kind, answers",
    [
        ("gsm8k", "number", ["7", "46.5", "540", "-7", "70500"]),  # "70,500" -> "70500": golds are canonical
        ("math", "math", ["\\frac{5}{6}", "6", "5\\sqrt{2}", "5"]),
        ("svamp", "number", ["5", "84", "1", "6.75"]),
        ("simuleq", "number", ["16", "10", "9"]),
        ("aqua", "choice", ["C", "C", "C", "D"]),
        ("sat", "choice", ["B", "C", "A"]),
        ("mmlu_math", "choice", ["B", "B", "C"]),
    ],
)
def test_every_benchmark_loads_from_its_public_format(name, kind, answers):
    bench = load_benchmark(name, data_dir=FIXTURES)
    assert (bench.name, bench.kind, [item.answer for item in bench.items]) == (name, kind, answers)
    assert all(item.question and item.kind == kind for item in bench.items)
    assert bench.source.endswith(tuple(f"{name}{ext}" for ext in (".json", ".jsonl")))


def test_choice_items_carry_option_texts():  # their question texts: test_eval_released, every real item
    assert load_benchmark("aqua", data_dir=FIXTURES).items[0].options == ("60 km/h", "70 km/h", "80 km/h", "90 km/h", "120 km/h")
    sat = load_benchmark("sat", data_dir=FIXTURES).items[2]
    assert sat.options == ("-2", "2", "7", "-7") and sat.answer == "A"  # split from MAmmoTH's own line


def test_mammoth_directory_layout_aliases_and_limit(tmp_path):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "gsm8k.jsonl").write_text((FIXTURES / "gsm8k.jsonl").read_text())
    (tmp_path / "mmlu").mkdir()
    (tmp_path / "mmlu" / "mathematics.json").write_text((FIXTURES / "mmlu_math.json").read_text())
    assert len(load_benchmark("gsm8k", data_dir=tmp_path)) == 5
    assert len(load_benchmark("gsm8k", data_dir=tmp_path, limit=2)) == 2
    assert len(load_benchmark("mmlu_mathematics", data_dir=tmp_path)) == 3


def test_explicit_paths_parquet_hub_style_records_and_math_formats(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"query": "Q: If 2x = 10, what is x? Answer Choices: (A)2 (B)5 (C)10 (D)20\nA: Among A through D, the answer is",
             "choices": ["(A)2", "(B)5", "(C)10", "(D)20"], "gold": [1]}]
    path = tmp_path / "sat.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    bench = load_benchmark("sat", path=path)
    assert bench.items[0].answer == "B" and bench.items[0].options == ("2", "5", "10", "20")
    assert bench.items[0].question.startswith("If 2x = 10, what is x?\nAnswer Choices: (A) 2")
    mammoth = tmp_path / "MATH.json"
    mammoth.write_text(json.dumps([{"question": "What is 1+1?", "answer": ["2", 2.0]}]))
    assert load_benchmark("math", path=mammoth).items[0].answer == "2"
    math500 = tmp_path / "math500.jsonl"
    math500.write_text(json.dumps({"problem": "Compute $3^2$.", "solution": "9", "answer": "9"}) + "\n")
    assert load_benchmark("math", path=math500).items[0].answer == "9"


@pytest.mark.parametrize(
    "name, content, suffix, message",
    [
        ("gsm8k", '{"question": "q", "answer": "no final line"}\n', ".jsonl", "'answer' has no '#### <number>'"),
        ("gsm8k", '{"question": "q"}\n', ".jsonl", "missing field 'answer'"),
        ("gsm8k", '{"question": "q", "answer": "#### 4"}\n\n{"question": "q"}\n', ".jsonl", ".jsonl:3: missing field 'answer'"),
        ("aqua", '{"question": "q", "options": ["A)1", "B)2"], "correct": "A"}\n{"question": "q", "options": ["A)1"], "correct": "A"}\n', ".json", ".json:2: field 'options' must be a list of 2 to 5"),
        ("svamp", '[{"Body": "b", "Question": "q", "Answer": 1}, {"Body": "b", "Answer": 1}]', ".json", "record 1: missing field 'Question'"),
        ("gsm8k", '{"question": "q", "answer": "#### 4"}\n{not json\n', ".jsonl", ":2: invalid JSON"),
        ("svamp", '[{"Body": "b", "Question": "q", "Answer": "many"}]', ".json", "field 'Answer' must be a number"),
        ("aqua", '{"question": "q", "options": ["A)1", "B)2"], "correct": "F"}\n', ".json", "field 'correct' must name one of 2"),
        ("mmlu_math", '[{"question": "q", "choices": "1,2", "answer": 0}]', ".json", "field 'choices' must be a list"),
        ("math", '[{"problem": "p", "solution": "no box"}]', ".json", "no \\boxed"),
        ("sat", '[{"question": "no options here", "answer": "A"}]', ".json", "no 'Answer Choices"),
        ("simuleq", '[{"question": "q", "answer": [1, 2]}]', ".json", "holds 2 values"),
        ("simuleq", '[{"question": "q", "answer": 1}, 3]', ".json", "expected a JSON list of objects"),
        ("simuleq", "[]", ".json", "no records"),
    ],
)
def test_malformed_files_name_the_file_and_the_field(tmp_path, name, content, suffix, message):
    path = tmp_path / f"bad{suffix}"
    path.write_text(content)
    with pytest.raises(BenchmarkError) as info:
        load_benchmark(name, path=path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_missing_file_and_unknown_names(tmp_path):
    with pytest.raises(BenchmarkError, match="no such file"):
        load_benchmark("gsm8k", path=tmp_path / "absent.jsonl")
    with pytest.raises(BenchmarkError, match="no such directory"):
        load_benchmark("gsm8k", data_dir=tmp_path / "absent")
    with pytest.raises(BenchmarkError, match="unknown benchmark 'gsm9k'"):
        load_benchmark("gsm9k")
    with pytest.raises(BenchmarkError, match="unsupported file type"):
        (tmp_path / "x.csv").write_text("a,b")
        load_benchmark("gsm8k", path=tmp_path / "x.csv")


def test_hub_records_go_through_the_same_parser(monkeypatch):
    """mmlu_math from the Hub is the five subjects in order, svamp both splits, a `hf:` path its own
    copy; offline, the error names the Hub id and the way out."""
    import datasets

    calls = []

    def fake(hub_id, config, split):
        calls.append((hub_id, config, split))
        if hub_id == "cais/mmlu":
            return [{"question": f"q {config}", "choices": ["1", "2", "3", "4"], "answer": 2, "subject": config}]
        if hub_id == "ChilleD/SVAMP":
            return [{"ID": f"{split}-1", "Body": "A has 2.", "Question": "How many?", "Answer": 2.0}]
        if hub_id == "openai/gsm8k":
            raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (OfflineModeIsEnabled)")
        return [{"question": "q", "answer": "#### 3"}]

    monkeypatch.setattr(datasets, "load_dataset", fake)
    bench = load_benchmark("mmlu_math")
    assert calls == [("cais/mmlu", subject, "test") for subject in MMLU_MATH_SUBJECTS]
    assert len(bench) == 5 and all(item.answer == "C" for item in bench.items)
    calls.clear()
    assert [it.id for it in load_benchmark("svamp").items] == ["train-1", "test-1"]
    assert calls == [("ChilleD/SVAMP", None, "train"), ("ChilleD/SVAMP", None, "test")]
    bench = load_benchmark("gsm8k", path="hf:my/gsm8k-copy:main:train")
    assert calls[-1] == ("my/gsm8k-copy", "main", "train") and bench.items[0].answer == "3"
    with pytest.raises(BenchmarkError) as info:
        load_benchmark("gsm8k")
    assert "openai/gsm8k" in str(info.value) and "--data-dir" in str(info.value) and "gsm8k=PATH" in str(info.value)
    with pytest.raises(BenchmarkError, match="no Hugging Face copy is known"):
        load_benchmark("simuleq")


def test_synthetic_sets_are_seeded_and_numeric():
    a = load_benchmark("synthetic:mix", limit=8)
    b = load_benchmark("synthetic:mix", limit=8)
    c = load_benchmark("synthetic:mix", limit=8, seed=3)
    assert [i.question for i in a.items] == [i.question for i in b.items] != [i.question for i in c.items]
    assert a.kind == "number" and all(float(i.answer) == float(i.answer) for i in a.items)
    gym = load_benchmark("gym:basic_arithmetic", limit=3)
    assert len(gym) == 3 and gym.kind == "number"
    with pytest.raises(BenchmarkError, match="synthetic:nope"):
        load_benchmark("synthetic:nope", limit=2)


def test_from_records_and_benchmark_lists():
    bench = Benchmark.from_records("mine", [{"question": "1+1?", "answer": 2}])
    assert bench.items[0].answer == "2"
    with pytest.raises(BenchmarkError, match="record 0: missing field 'question'"):
        Benchmark.from_records("mine", [{"answer": 2}])
    assert parse_benchmark_list("gsm8k, SVAMP=data/s.json,sat-math") == [
        ("gsm8k", None), ("svamp", "data/s.json"), ("sat", None)]
    with pytest.raises(BenchmarkError, match="empty"):
        parse_benchmark_list(" , ")

