"""The paper's seven math benchmarks and the built-in synthetic sets, behind one `Benchmark` type.

An `Item` is a question, its gold answer as a string and its kind (`number`, `choice`: a letter
A-E with the option texts, `math`: a LaTeX expression for math-verify). Sources, in order: an
explicit file (`path=`, `NAME=PATH`), a file under `data_dir` (`NAME.jsonl|json|parquet` or the
MAmmoTH layout, `expected_files`), the Hugging Face Hub (or `hf:ID[:CONFIG[:SPLIT]]`). Each
benchmark's public record formats have a parser naming the file and field that is wrong. Also
`synthetic:<name>` / `gym:<name>` (seeded, default SYNTHETIC_SEED) and `file:PATH.jsonl` (your
own set). docs/evaluation.md, "Benchmarks and data".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from numloss.evaluate.released import delete_extra_zero, gold_of_solution
from numloss.textio import read_utf8

AnswerKind = Literal["number", "choice", "math"]
LETTERS = "ABCDE"


class BenchmarkError(ValueError):
    """A benchmark cannot be loaded: missing file, malformed record, unknown name, no network."""


@dataclass(frozen=True)
class Item:
    """One question. For `choice` items `answer` is a letter and `options` the option texts.

    `question` is the text exactly as the released evaluation builds it (the model sees it in both
    protocols); `answer` is numloss's canonical gold; `released_answer` the gold string exactly as
    the released data loader makes it ("" for sets the released code does not read: then the
    released protocol derives it from `answer`).
    """

    id: str
    question: str
    answer: str
    kind: AnswerKind
    options: tuple[str, ...] = ()
    released_answer: str = ""


@dataclass
class Benchmark:
    """A named list of items of one answer kind, and where they came from."""

    name: str
    kind: AnswerKind
    items: list[Item]
    source: str = ""

    def __len__(self) -> int:
        return len(self.items)

    def head(self, limit: int | None) -> Benchmark:
        """The first `limit` items (all when None)."""
        if limit is None:
            return self
        check_limit(limit)
        return Benchmark(self.name, self.kind, self.items[:limit], self.source)

    @classmethod
    def from_records(
        cls,
        name: str,
        records: Iterable[Mapping[str, Any]],
        kind: AnswerKind = "number",
        source: str = "records",
    ) -> Benchmark:
        """Items of answer kind `kind` from plain `{"question", "answer"[, "options", "id"]}` dicts
        (synthetic sets, tests), each read as a line of a `file:` set is (`_file_item`); an item's
        id is its `id`, else its position."""
        items = [
            _file_item({**r, "kind": kind}, f"{source} record {i}", i)
            for i, r in enumerate(records)
        ]
        return cls(name, kind, items, source)


def check_limit(limit: int | None) -> None:
    """The one rule for `--limit` / `limit=` everywhere: None for all items, else a positive
    count."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
        raise BenchmarkError(
            f"--limit must be a positive number of items, got {limit!r} (omit it for all items)"
        )


# ---------------------------------------------------------------- record parsers

# question (released text), gold, options, released gold
Parsed = tuple[str, str, tuple[str, ...], str]


def _field(record: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in record:
        present = ", ".join(sorted(map(str, record))) or "none"
        raise BenchmarkError(f"{where}: missing field {key!r} (fields present: {present})")
    if record[key] is None:
        raise BenchmarkError(f"{where}: field {key!r} is null; give it a value")
    return record[key]


def _raw_text(record: Mapping[str, Any], key: str, where: str) -> str:
    value = _field(record, key, where)
    if not isinstance(value, str) or not value.strip():
        raise BenchmarkError(f"{where}: field {key!r} must be a non-empty string, got {value!r}")
    return value


def _text(record: Mapping[str, Any], key: str, where: str) -> str:
    return _raw_text(record, key, where).strip()


def clean_number(text: str) -> str:
    """A gold number in canonical form: commas dropped, trailing zeros of decimals dropped."""
    s = str(text).strip().replace(",", "").replace("$", "")
    if re.fullmatch(r"-?\d+\.\d*", s):
        s = s.rstrip("0").rstrip(".")
    return "0" if s == "-0" else s


def _is_number(text: str) -> bool:
    """Whether `text` is a plain number once commas and a dollar sign are dropped."""
    try:
        float(clean_number(text))
    except ValueError:
        return False
    return True


def _number(value: Any, where: str, key: str) -> str:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    s = clean_number(str(value))
    try:
        number = float(s)
    except ValueError:
        raise BenchmarkError(f"{where}: field {key!r} must be a number, got {value!r}") from None
    # no answer equals NaN; inf is no gold
    if number != number or number in (float("inf"), float("-inf")):
        raise BenchmarkError(f"{where}: field {key!r} must be a finite number, got {value!r}")
    return s


def boxed_content(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None if
    absent."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    rest = text[start:].split("{", 1)
    if len(rest) < 2:
        after = text[start + len("\\boxed") :].strip()  # "\boxed 5"
        return after.split("$")[0].strip() or None
    depth, out = 1, []
    for ch in rest[1]:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return "".join(out).strip()
        out.append(ch)
    return None


def _gsm8k(record: Mapping[str, Any], where: str) -> Parsed:
    answer = _text(record, "answer", where)
    if "####" not in answer:
        raise BenchmarkError(
            f"{where}: field 'answer' has no '#### <number>' final line (GSM8K format)"
        )
    released = delete_extra_zero(answer.split("#### ")[-1].replace(",", ""))
    question = _text(record, "question", where)
    return question, _number(answer.split("####")[-1], where, "answer"), (), released


def _math(record: Mapping[str, Any], where: str) -> Parsed:
    if "problem" in record:
        question = _raw_text(record, "problem", where)
        if record.get("answer") not in (None, ""):
            answer = str(record["answer"]).strip()
            return question, answer, (), answer
        solution = _text(record, "solution", where)
        boxed = boxed_content(solution)
        if boxed is None:
            raise BenchmarkError(
                f"{where}: field 'solution' has no \\boxed{{...}} final answer (MATH format)"
            )
        return question, boxed, (), gold_of_solution(solution)
    question = _raw_text(record, "question", where)
    answer = _field(record, "answer", where)
    if isinstance(answer, list):  # MAmmoTH: [answer string, numeric value or None]
        if not answer:
            raise BenchmarkError(f"{where}: field 'answer' is an empty list")
        answer = answer[0]
    return question, str(answer).strip(), (), str(answer)


def _svamp(record: Mapping[str, Any], where: str) -> Parsed:
    body, question = _text(record, "Body", where), _text(record, "Question", where)
    answer = _field(record, "Answer", where)
    raw = str(answer)
    released = delete_extra_zero(raw[:-2] if raw.endswith(".0") else raw)
    return f"{body} {question}", _number(answer, where, "Answer"), (), released


_OPTION_PREFIX = re.compile(r"^\s*\(?([A-Ea-e])\s*[\)\.:]\s*")


def _strip_option(text: str) -> str:
    return _OPTION_PREFIX.sub("", str(text), count=1).strip()


def _options_from_list(options: Any, where: str, key: str) -> tuple[str, ...]:
    if not isinstance(options, (list, tuple)) or not 2 <= len(options) <= 5:
        raise BenchmarkError(
            f"{where}: field {key!r} must be a list of 2 to 5 options, got {options!r}"
        )
    return tuple(_strip_option(o) for o in options)


def letter_of(value: Any, n_options: int, where: str, key: str) -> str:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < n_options:
        return LETTERS[value]
    s = str(value).strip().strip("()").upper()
    if len(s) == 1 and s in LETTERS[:n_options]:
        return s
    raise BenchmarkError(
        f"{where}: field {key!r} must name one of {n_options} options (a letter"
        f" A-{LETTERS[n_options - 1]} or an index), got {value!r}"
    )


def with_choices(question: str, options: Sequence[str]) -> str:
    """The question followed by MAmmoTH's option line: "Answer Choices: (A) ... (B) ..."."""
    listed = " ".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(options))
    return f"{question.strip()}\nAnswer Choices: {listed}"


_CHOICES_LINE = re.compile(r"Answer Choices:\s*(.*)$", re.S)


def split_choices(question: str) -> tuple[str, tuple[str, ...]]:
    """Split "... Answer Choices: (A) x (B) y" into the question and the option texts."""
    match = _CHOICES_LINE.search(question)
    if not match:
        return question, ()
    parts = re.split(r"\(([A-E])\)", match.group(1))
    options = tuple(p.strip() for p in parts[2::2])
    return question[: match.start()].strip(), options


def _aqua(record: Mapping[str, Any], where: str) -> Parsed:
    raw_options = _field(record, "options", where)
    options = _options_from_list(raw_options, where, "options")
    # the released line: "(" + "(".join(options), then "(" -> " (" and ")" -> ") "
    line = ("(" + "(".join(str(o) for o in raw_options)).replace("(", " (").replace(")", ") ")
    letter = letter_of(_field(record, "correct", where), len(options), where, "correct")
    question = _text(record, "question", where) + "\nAnswer Choices:" + line
    return question, letter, options, str(record["correct"])


def _mmlu(record: Mapping[str, Any], where: str) -> Parsed:
    options = _options_from_list(_field(record, "choices", where), where, "choices")
    letter = letter_of(_field(record, "answer", where), len(options), where, "answer")
    raw = [str(c) for c in record["choices"]]
    listed = " ".join(f"({LETTERS[i]}) {c}" for i, c in enumerate(raw))
    question = _raw_text(record, "question", where) + "\nAnswer Choices: " + listed
    return question, letter, options, letter


def _sat(record: Mapping[str, Any], where: str) -> Parsed:
    if "query" in record:  # hails/agieval-sat-math
        options = _options_from_list(_field(record, "choices", where), where, "choices")
        query = _text(record, "query", where)
        query = re.sub(r"^Q:\s*", "", query)
        query = re.split(r"\n?\s*Answer Choices:|\n?\s*A: Among A through", query)[0].strip()
        letter = letter_of(_field(record, "gold", where), len(options), where, "gold")
        return with_choices(query, options), letter, options, letter
    if "options" in record:  # AGIEval jsonl
        options = _options_from_list(record["options"], where, "options")
        question = _text(record, "question", where)
        if record.get("passage"):
            question = f"{str(record['passage']).strip()}\n{question}"
        letter = letter_of(_field(record, "label", where), len(options), where, "label")
        return with_choices(question, options), letter, options, letter
    question = _raw_text(record, "question", where)  # MAmmoTH sat.json: the released text as is
    _, options = split_choices(question)
    if not options:
        raise BenchmarkError(
            f"{where}: field 'question' has no 'Answer Choices: (A) ...' list (MAmmoTH SAT format)"
        )
    letter = letter_of(_field(record, "answer", where), len(options), where, "answer")
    return question, letter, options, str(record["answer"])


def _simuleq(record: Mapping[str, Any], where: str) -> Parsed:
    answer = _field(record, "answer", where)
    if isinstance(answer, list) and len(answer) != 1:
        raise BenchmarkError(
            f"{where}: field 'answer' holds {len(answer)} values; numloss scores one number per"
            " item"
        )
    return _raw_text(record, "question", where), _number(answer, where, "answer"), (), str(answer)


@dataclass(frozen=True)
class Spec:
    """How to find and read one benchmark: answer kind, record parser, Hub copy, local file
    names."""

    kind: AnswerKind
    parse: Callable[[Mapping[str, Any], str], Parsed]
    # (id, configs, splits), concatenated
    hub: tuple[str, tuple[str | None, ...], tuple[str, ...]] | None
    local_names: tuple[str, ...] = field(default_factory=tuple)


# the paper's MMLU-math: five subjects, formal_logic included (378 + 270 + 126 + 100 + 100 = 974)
# in the order of the released mmlu/mathematics.json: item ids are positions, so a Hub load must
# give every item the id it has in the file
MMLU_MATH_SUBJECTS = (
    "elementary_mathematics",
    "high_school_mathematics",
    "college_mathematics",
    "abstract_algebra",
    "formal_logic",
)

BENCHMARKS: dict[str, Spec] = {
    "gsm8k": Spec(
        "number",
        _gsm8k,
        ("openai/gsm8k", ("main",), ("test",)),
        ("gsm8k/gsm8k.jsonl", "gsm8k/test.jsonl"),
    ),
    "math": Spec(
        "math",
        _math,
        ("DigitalLearningGmbH/MATH-lighteval", (None,), ("test",)),
        ("math/MATH.json", "math/test.jsonl"),
    ),
    # SVAMP's 1000 problems are ChilleD/SVAMP's train (700) and test (300) splits together
    "svamp": Spec(
        "number",
        _svamp,
        ("ChilleD/SVAMP", (None,), ("train", "test")),
        ("SVAMP/SVAMP.json", "svamp/SVAMP.json"),
    ),
    "simuleq": Spec("number", _simuleq, None, ("simuleq/simuleq.json",)),
    "aqua": Spec(
        "choice",
        _aqua,
        ("deepmind/aqua_rat", ("raw",), ("test",)),
        ("AQuA/AQuA.json", "aqua/AQuA.json", "aqua/test.json"),
    ),
    "sat": Spec(
        "choice",
        _sat,
        ("hails/agieval-sat-math", (None,), ("test",)),
        ("sat/sat.json", "sat/sat-math.jsonl"),
    ),
    "mmlu_math": Spec(
        "choice",
        _mmlu,
        ("cais/mmlu", MMLU_MATH_SUBJECTS, ("test",)),
        ("mmlu/mathematics.json", "mmlu_mathematics/test.json"),
    ),
}
ALIASES = {
    "sat_math": "sat",
    "sat-math": "sat",
    "mmlu_mathematics": "mmlu_math",
    "mmlu-math": "mmlu_math",
}


# ---------------------------------------------------------------- file and hub readers


def read_located(path: Path) -> list[tuple[dict[str, Any], str]]:
    """Records of a .json (list, or {"data": [...]}, or one object per line), .jsonl or .parquet
    file, each with where it is: "FILE:LINE" for line-per-record files, else "FILE record I"
    (0-based), for error messages."""
    if path.is_dir():
        raise BenchmarkError(
            f"{path}: is a folder; give the benchmark file inside it (or --data-dir {path})"
        )
    if not path.is_file():
        raise BenchmarkError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return [
                (r, f"{path} record {i}") for i, r in enumerate(pq.read_table(path).to_pylist())
            ]
        except Exception as error:  # pyarrow raises several types for a bad file
            raise BenchmarkError(f"{path}: not a readable Parquet file ({error})") from None
    text = read_utf8(path, BenchmarkError)
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None  # AQuA.json is one object per line despite its name
        if data is not None:
            if isinstance(data, dict):  # {"data": [...]}, or a one-line AQuA-style file
                data = data["data"] if isinstance(data.get("data"), list) else [data]
            if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
                raise BenchmarkError(f"{path}: expected a JSON list of objects")
            return [(r, f"{path} record {i}") for i, r in enumerate(data)]
    elif suffix != ".jsonl":
        raise BenchmarkError(
            f"{path}: unsupported file type {suffix!r}; use .json, .jsonl or .parquet"
        )
    return [
        (record, f"{path}:{number}")
        for number, record in _jsonl_records(text, path, "a JSON object per line")
    ]


def _jsonl_records(text: str, path: Path, expected: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) of each line of JSON-lines `text` (of `path`); blank lines are
    skipped, and a line that is not a JSON object is a BenchmarkError saying `expected`."""
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise BenchmarkError(f"{path}:{number}: invalid JSON ({error.msg})") from None
        if not isinstance(record, dict):
            raise BenchmarkError(f"{path}:{number}: expected {expected}")
        records.append((number, record))
    return records


def _hub_records(
    name: str, hub_id: str, configs: Sequence[str | None], splits: Sequence[str]
) -> list[dict[str, Any]]:
    import datasets  # of the [hf] extra, which [eval] holds

    records: list[dict[str, Any]] = []
    for config in configs:
        for split in splits:
            try:
                ds = datasets.load_dataset(hub_id, config, split=split)
            except Exception as error:  # offline, missing, renamed: say what to do
                raise BenchmarkError(
                    f"{name}: cannot load {hub_id}{'/' + config if config else ''} (split {split})"
                    f" from the Hugging Face Hub: {type(error).__name__}:"
                    f" {str(error).splitlines()[0] if str(error) else ''}. Offline, download the"
                    f" file elsewhere and pass it: --data-dir DIR (with {name}.jsonl|json|parquet)"
                    f" or --benchmarks {name}=PATH."
                ) from None
            records.extend(dict(r) for r in ds)
    return records


SYNTHETIC_PREFIXES = ("synthetic:", "gym:")
FILE_PREFIX = "file:"
SYNTHETIC_SEED = 10_000  # far from the small seeds training sets use, so items are held out
# --limit is a synthetic set's size: a typo of 10**9 would fill the memory
SYNTHETIC_MAX = 1_000_000


def _synthetic(name: str, limit: int | None, seed: int) -> Benchmark:
    """A built-in set: `synthetic:<numloss generator>` or `gym:<reasoning-gym set>`, seeded."""
    prefix, set_name = name.split(":", 1)
    if limit is not None and limit > SYNTHETIC_MAX:
        raise BenchmarkError(
            f"{name}: --limit {limit} asks for more than {SYNTHETIC_MAX:,} generated items; give a"
            " smaller --limit"
        )
    if prefix == "synthetic":
        from numloss.data.synthetic import generate
    else:
        from numloss.data.gym import generate
    try:
        examples = generate(set_name, limit or 100, seed=seed)
    except ValueError as error:
        raise BenchmarkError(f"{name}: {error}") from None
    records = [
        {"id": i, "question": e.instruction, "answer": e.answer} for i, e in enumerate(examples)
    ]
    # symbolic answers (e.g. "3/4") go through math-verify
    kind: AnswerKind = "number" if all(_is_number(r["answer"]) for r in records) else "math"
    if kind == "number":
        for r in records:
            r["answer"] = clean_number(r["answer"])
    return Benchmark.from_records(name, records, kind, source=f"{name} seed {seed}")


FILE_SUMMARY = (
    "one JSON object per line with 'question', 'answer' and optionally 'options', 'id', 'kind'"
)


def _file_set(path_text: str) -> Benchmark:
    """`file:PATH.jsonl`: your own set (fields: docs/evaluation.md, "Your own set")."""
    path = Path(path_text)
    if path.is_dir():
        raise BenchmarkError(f"file:{path}: is a folder (expected a .jsonl file: {FILE_SUMMARY})")
    if not path.is_file():
        raise BenchmarkError(f"file:{path}: no such file (expected a .jsonl file: {FILE_SUMMARY})")
    items: list[Item] = []
    seen: set[str] = set()
    for number, record in _jsonl_records(
        read_utf8(path, BenchmarkError), path, "a JSON object with 'question' and 'answer'"
    ):
        item = _file_item(record, f"{path}:{number}", number)
        if item.id in seen:
            raise BenchmarkError(
                f"{path}:{number}: duplicate id {item.id!r}; ids key the results and must be unique"
            )
        seen.add(item.id)
        items.append(item)
    if not items:
        raise BenchmarkError(f"file:{path}: no records (expected {FILE_SUMMARY})")
    kinds = {it.kind for it in items}
    kind_of_set: AnswerKind = items[0].kind if len(kinds) == 1 else "number"
    return Benchmark(f"{FILE_PREFIX}{path_text}", kind_of_set, items, str(path))


def _scalar(value: Any) -> bool:
    """Whether `value` is a string or a number (not a bool, null, list or object)."""
    return type(value) in (str, int, float)


def _file_item(record: Mapping[str, Any], where: str, number: int) -> Item:
    """One line of a `file:` set as an item; its kind given, or inferred from options and answer."""
    question = _raw_text(record, "question", where)
    answer = _field(record, "answer", where)
    if not _scalar(answer) or (isinstance(answer, str) and not answer.strip()):
        raise BenchmarkError(
            f"{where}: field 'answer' must be a number, a fraction or a letter, got"
            f" {json.dumps(answer)}"
        )
    options: tuple[str, ...] = ()
    if (raw := record.get("options")) is not None:
        if not isinstance(raw, list) or not 2 <= len(raw) <= 5 or not all(_scalar(o) for o in raw):
            raise BenchmarkError(
                f"{where}: field 'options' must be a list of 2 to 5 strings, got {json.dumps(raw)}"
            )
        options = tuple(str(o) for o in raw)
    kind = record.get("kind", None)
    if kind is not None and kind not in ("number", "choice", "math"):
        raise BenchmarkError(
            f"{where}: field 'kind' must be 'number', 'choice' or 'math', got {json.dumps(kind)}"
        )
    kind = kind or ("choice" if options else None)
    if kind is None:
        fraction = re.fullmatch(r"\s*-?\d+\s*/\s*\d+\s*", str(answer))
        kind = "number" if _is_number(str(answer)) or fraction else "math"
    if kind == "choice":
        if not options:
            raise BenchmarkError(
                f"{where}: a 'choice' item needs 'options' (a list of 2 to 5 strings)"
            )
        gold = letter_of(answer, len(options), where, "answer")
        question = with_choices(question, options)
    elif kind == "number" and "/" in str(answer):
        gold = str(answer).strip().replace(" ", "")
    elif kind == "number":
        gold = _number(answer, where, "answer")
    else:
        gold = str(answer).strip()
    if "id" in record and type(record["id"]) not in (str, int):  # a bool is no id
        raise BenchmarkError(
            f"{where}: field 'id' must be a string or an integer, got {record['id']!r}"
        )
    return Item(str(record.get("id", number)), question, gold, kind, options)


def expected_files(name: str) -> list[str]:
    """The file names `find_local` looks for, in order."""
    names = (name, *[a for a, t in ALIASES.items() if t == name])
    return [f"{n}.{ext}" for n in names for ext in ("jsonl", "json", "parquet")] + list(
        BENCHMARKS[name].local_names
    )


def find_local(name: str, data_dir: Path) -> Path | None:
    """The benchmark's file under `data_dir`, or None."""
    for candidate in expected_files(name):
        if (data_dir / candidate).is_file():
            return data_dir / candidate
    return None


def canonical_name(name: str) -> str:
    """The registry name of a benchmark (aliases resolved); raises for an unknown one."""
    if name.strip().startswith(FILE_PREFIX):
        return name.strip()
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in BENCHMARKS and not key.startswith(SYNTHETIC_PREFIXES):
        known = ", ".join(BENCHMARKS) + (
            ", synthetic:<numloss.data.synthetic set>, gym:<numloss.data.gym set>, file:PATH.jsonl"
        )
        raise BenchmarkError(f"unknown benchmark {name!r}; known: {known}")
    return key


def parse_records(
    name: str, records: Sequence[Mapping[str, Any]], source: str, where: Sequence[str] | None = None
) -> Benchmark:
    """Items of benchmark `name` from its raw records; errors name `source`, the record (its line
    when `where` gives it) and the field.

    An item's id is the record's `id` (or `ID`) field, else its 0-based position in the file.
    """
    spec = BENCHMARKS[name]
    if not records:
        raise BenchmarkError(f"{source}: no records")
    items = []
    for i, record in enumerate(records):
        at = where[i] if where is not None else f"{source} record {i}"
        if not isinstance(record, Mapping):
            raise BenchmarkError(f"{at}: expected a JSON object, got {type(record).__name__}")
        question, answer, options, released = spec.parse(record, at)
        item_id = str(record.get("id", record.get("ID", i)))
        items.append(Item(item_id, question, answer, spec.kind, options, released))
    return Benchmark(name, spec.kind, items, source)


def load_benchmark(
    name: str,
    path: str | Path | None = None,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    seed: int = SYNTHETIC_SEED,
) -> Benchmark:
    """Load one benchmark: from `path`, else from `data_dir`, else from the Hub (see module doc).

    `path` may also be `hf:ID[:CONFIG[:SPLIT]]`; `name` may be `file:PATH.jsonl`.
    Raises BenchmarkError with the file and field when something is wrong; with `data_dir` given,
    a benchmark without a file there is an error that lists the names looked for.
    """
    check_limit(limit)
    key = canonical_name(name)
    if key.startswith(FILE_PREFIX):
        return _file_set(key[len(FILE_PREFIX) :]).head(limit)
    if key.startswith(SYNTHETIC_PREFIXES):
        return _synthetic(key, limit, seed)
    spec = BENCHMARKS[key]
    if path is not None and str(path).startswith("hf:"):
        hub_id, _, rest = str(path)[3:].partition(":")
        config, _, split = rest.partition(":")
        records = _hub_records(key, hub_id, (config or None,), (split or "test",))
        return parse_records(key, records, f"hf:{hub_id}").head(limit)
    if path is None and data_dir is not None:
        if not Path(data_dir).is_dir():
            raise BenchmarkError(f"--data-dir {data_dir}: no such directory")
        path = find_local(key, Path(data_dir))
        if path is None:
            raise BenchmarkError(
                f"{key}: no file for it under {data_dir}; expected one of:"
                f" {', '.join(expected_files(key))} (or pass --benchmarks {key}=PATH)"
            )
    if path is not None:
        file = Path(path)
        located = read_located(file)
        return parse_records(key, [r for r, _ in located], str(file), [w for _, w in located]).head(
            limit
        )
    if spec.hub is None:
        raise BenchmarkError(
            f"{key}: no Hugging Face copy is known; pass a local file (MAmmoTH's"
            f" {spec.local_names[0]}) with --data-dir DIR or --benchmarks {key}=PATH"
        )
    hub_id, configs, splits = spec.hub
    records = _hub_records(key, hub_id, configs, splits)
    return parse_records(key, records, f"hf:{hub_id}").head(limit)


def load_for_records(
    name: str,
    ids: Sequence[str],
    data_dir: str | Path | None = None,
    seed: int | None = None,
    size: int | None = None,
) -> Benchmark:
    """The benchmark that saved outputs for the items `ids` were generated on (`score_outputs`):
    a file or released set whole; a synthetic set generated again with its recorded `seed` and
    `size`, at least as many items as its largest id (a position) needs (its generators are
    prefix-stable)."""
    key = canonical_name(name)
    if not key.startswith(SYNTHETIC_PREFIXES):
        return load_benchmark(key, data_dir=data_dir)
    positions = [int(i) for i in ids if re.fullmatch(r"\d{1,9}", i)]
    count = max([size or 0, *(p + 1 for p in positions)]) or None
    return load_benchmark(key, limit=count, seed=SYNTHETIC_SEED if seed is None else seed)


def parse_benchmark_list(text: str) -> list[tuple[str, str | None]]:
    """`"gsm8k,svamp=data/svamp.json,file:mine.jsonl"` -> [("gsm8k", None), ("svamp",
    "data/svamp.json"), ...]."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith(FILE_PREFIX):
            out.append((part, None))
            continue
        name, _, where = part.partition("=")
        out.append((canonical_name(name), where.strip() or None))
    if not out:
        raise BenchmarkError(
            "--benchmarks is empty; name at least one, e.g. --benchmarks gsm8k,svamp"
        )
    return out
