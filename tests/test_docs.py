"""README.md and docs/*.md held to the code: every list a page gives of the code's names (the loss
output's fields, log.csv's columns, the progress bar's keys, the files `numloss eval` writes, the
fields of the results and settings it shows) is derived here from the code, and a page that
leaves one out or names one that does not exist fails."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import re
import shlex
import warnings
from pathlib import Path

import pytest
import yaml

from faultrun import config as tiny_config
from numloss.bench_cli import available
from numloss.compare import build_parser as compare_parser
from numloss.compare import resolve
from numloss.compare.report import REPORT_FILES as COMPARE_FILES
from numloss.config import load_config
from numloss.data.instructions import records_to_examples
from numloss.evaluate.cli import build_parser as eval_parser
from numloss.evaluate.report import REPORT_FILES
from numloss.evaluate.sandbox import isolation
from numloss.losses.base import NumericLossOutput
from numloss.train import run_training
from numloss.train.callbacks import PROGRESS_KEYS
from numloss.train.cli import FLAGS, pop_threads
from numloss.train.folder import CSV_COLUMNS

ROOT = Path(__file__).resolve().parents[1]
#: each page's path (posix, from the repository root) -> its text: the one reading every test here shares
PAGES = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", flags=re.S | re.M)


def fenced(page: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block of `page`, in order."""
    return FENCE.findall(PAGES[page])


def python(page: str) -> list[str]:
    return [code for language, code in fenced(page) if language == "python"]


def listed(text: str, lead: str) -> list[list[str]]:
    """For each `lead` in `text`, the `backticked` names after it up to the end of its list: the
    first ".", ";" or ")" outside backticks."""
    return [re.findall(r"`([^`]*)`", m.group(1)) for m in re.finditer(re.escape(lead) + r"((?:`[^`]*`|[^`.;)])*)", text)]


def test_every_list_of_the_loss_outputs_fields_is_complete():
    fields = [f.name for f in dataclasses.fields(NumericLossOutput)]
    found = []
    for page, text in PAGES.items():
        for match in re.finditer(r"NumericLossOutput(?:\(|: )([\w, ]+)", text):
            found.append(page)
            assert [n.strip() for n in match.group(1).split(",")] == fields, f"{page}: {match.group(0)!r} is not {fields}"
    assert {"README.md", "docs/losses.md"} <= set(found)


def test_log_csv_columns_and_the_progress_bars_keys_are_the_codes():
    text = PAGES["docs/training.md"]
    assert listed(text, "log.csv columns: ") == [list(CSV_COLUMNS)]
    assert listed(text, "The progress bar shows ") == [list(PROGRESS_KEYS)]


def test_eval_and_compare_help_and_the_eval_page_list_every_file_they_write_and_no_other():
    files = {*REPORT_FILES, "items.jsonl"}
    assert [set(names) for names in listed(PAGES["docs/evaluation.md"], "`numloss eval` writes to `--out`: ")] == [files]
    for parser, written in [(eval_parser(), files), (compare_parser(), set(COMPARE_FILES))]:
        assert set(re.findall(r"(?<![/\w])[a-z_]+\.(?:json|jsonl|md|png)\b", parser.format_help())) == written


#: the result and settings classes the pages show -> their modules
CLASSES = {"ProgramResult": "evaluate.sandbox", "Isolation": "evaluate.sandbox", "SandboxLimits": "evaluate.sandbox",
           "NumericLossOutput": "losses.base", "BenchmarkScore": "evaluate.report", "EvalReport": "evaluate.report",
           "ItemResult": "evaluate.runner", "PlaceAccuracy": "evaluate.metrics"}


@pytest.mark.parametrize("name", CLASSES)
def test_the_pages_name_only_fields_that_exist(name):
    """`Class.attr` in any page names a field, property or method of Class; `Class(field=...)` (a
    constructor call or a repr) a field."""
    cls = getattr(importlib.import_module(f"numloss.{CLASSES[name]}"), name)
    fields = {f.name for f in dataclasses.fields(cls)}
    known = fields | set(dir(cls))
    for page, text in PAGES.items():
        for match in re.finditer(rf"\b{name}\.(\w+)", text):
            assert match.group(1) in known, f"{page}: {match.group(0)} is no attribute of {name}"
        for match in re.finditer(rf"\b{name}\(([^()]*)\)", text):
            for field in re.findall(r"(\w+)=", match.group(1)):
                assert field in fields, f"{page}: {name}({field}=...) is no field of {name} ({sorted(fields)})"


def test_each_name_is_imported_from_one_module_across_the_pages():
    """A reader who copies two snippets gets one helper, not the same name from two modules."""
    sources: dict[str, set[str]] = {}
    for page in PAGES:
        for block in python(page):
            for node in ast.walk(ast.parse(block)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("numloss"):
                    for alias in node.names:
                        sources.setdefault(alias.name, set()).add(f"{node.module} ({page})")
    twice = {name: sorted(where) for name, where in sources.items() if len({w.split()[0] for w in where}) > 1}
    assert not twice, twice


# -- every snippet runs or is checked -------------------------------------------------------------

#: where each page's python snippets run (all of them, in the page's order)
PYTHON_RUNS = {
    "README.md": "tests/test_integration_docs.py::test_readme_python_snippets_run",
    "docs/integration.md": "tests/test_integration_docs.py::test_snippet_runs_and_gives_numeric_trainers_first_update",
    "docs/losses.md": "test_losses_snippet_runs",
    "docs/sandbox.md": "test_sandbox_snippet_runs",
    "docs/evaluation.md": "test_evaluation_snippet_runs (slow)",
}

#: the warnings a snippet may raise, each with why it is not numloss's to fix; any other is an error
ALLOWED_WARNINGS = [
    # transformers 5.25's TrainingArguments.__post_init__ reads its own deprecated field for trl
    # 1.16's SFTConfig: raised inside the two libraries for every SFTConfig, whoever builds it
    ("ignore", r"`gradient_checkpointing` is deprecated", FutureWarning),
]


def run_strict(code: str, namespace: dict, page: str) -> dict:
    """Run `code` in `namespace` with every warning an error but `ALLOWED_WARNINGS`."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for action, message, category in ALLOWED_WARNINGS:
            warnings.filterwarnings(action, message, category)
        exec(compile(code, str(ROOT / page), "exec"), namespace)
    return namespace


PLACEHOLDERS = {"CONFIG": "configs/tiny.yaml", "MODEL": "tiny"}


def check_command(words: list[str]) -> None:
    """`words` is a command its program accepts: a make target that exists, a pip line of this
    project, a numloss command whose own parser (or config loader) takes its options."""
    import tomllib  # Python 3.11's: only where a page gives a pip line

    if words[0] == "docker":  # the command the container runs
        words = words[words.index("numloss"):]
    words = [PLACEHOLDERS.get(w, w) for w in words]
    program, command, rest = words[0], words[1], words[2:]
    if program == "make":
        assert re.search(rf"^{command}:", (ROOT / "Makefile").read_text(), flags=re.M), f"no make target {command!r}"
    elif program == "pip":  # `pip install -e '.[x]'`, `pip wheel --no-deps -w dist .` or `pip install 'dist/numloss-V-*.whl[x]'`:
        # the source is the clone or the wheel this version builds, and every extra is declared
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        args = [w for w in rest if not w.startswith("-")]
        assert command in ("install", "wheel") and len(args) == 1 + (words.count("-w")), words
        source, _, extras = args[-1].partition("[")
        wheel = f"dist/numloss-{project['version']}-py3-none-any.whl"
        assert source == ("." if command == "wheel" or "-e" in words else wheel), words
        for extra in filter(None, extras.rstrip("]").split(",")):
            assert extra in project["optional-dependencies"], f"no extra {extra!r}: {' '.join(words)}"
    elif command == "train":  # as numloss.train.cli.main reads its arguments
        _, rest = pop_threads([w for w in rest if w != "--dry-run"])
        rest = [word for arg in rest for word in ([FLAGS[arg], "true"] if arg in FLAGS else [arg])]
        assert load_config(ROOT / rest[0], rest[1:]).objective.name
    elif command == "eval":
        eval_parser().parse_args(rest)
    elif command == "compare":
        resolve(compare_parser().parse_args([str(ROOT / rest[0]), *rest[1:]]))
    elif command == "bench":
        assert rest[0] in available()
    else:
        raise AssertionError(f"no check for the command {' '.join(words)!r}")


def test_every_snippet_is_run_or_checked():
    """A python block runs in the test `PYTHON_RUNS` names; each command of a bash or sh block
    (comments dropped, continuations joined) is one its program's own parser accepts (nothing
    trains or evaluates); a yaml block parses, a json block is training records numloss reads."""
    seen = set()
    for page in PAGES:
        for language, code in fenced(page):
            if language == "python":
                assert page in PYTHON_RUNS, f"{page}: a python snippet no test runs; add its page to PYTHON_RUNS"
            elif language == "yaml":
                yaml.safe_load(code)
            elif language == "json":  # training records: each block is ones numloss's data layer reads
                try:
                    records = [json.loads(code)]
                except json.JSONDecodeError:  # JSON lines
                    records = [json.loads(line) for line in code.splitlines() if line.strip()]
                assert len(records_to_examples(records, page)) == len(records)
            else:
                assert language in ("bash", "sh"), f"{page}: a {language} block no test checks"
                for line in code.replace("\\\n", " ").splitlines():
                    if words := shlex.split(line, comments=True):
                        try:
                            check_command(words)
                        except (AssertionError, SystemExit, Exception) as error:
                            raise AssertionError(f"{page}: {' '.join(words)!r}: {error}") from error
                        seen.add((words[0], words[1]))
    assert {("make", "demo"), ("make", "test"), ("numloss", "train"), ("numloss", "eval"), ("pip", "install")} <= seen


def tiny_names() -> dict:
    """The names the loss snippets assume (a tokenizer, a model, Trainer arguments, a dataset, a
    collator, a batch, a causal LM's logits and aligned labels): docs/integration.md's setup on the
    tiny model."""
    namespace = run_strict(python("docs/integration.md")[0], {}, "docs/integration.md")
    batch = namespace["collator"](list(namespace["train_dataset"])[:2])
    logits = namespace["model"](input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return namespace | {"batch": batch, "logits": logits, "labels": namespace["shift_labels"](batch)}


def test_losses_snippet_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (code,) = python("docs/losses.md")
    namespace = run_strict(code, tiny_names(), "docs/losses.md")
    assert namespace["out"].loss.requires_grad and float(namespace["out"].aux.detach()) >= 0


def test_sandbox_snippet_runs():
    """The sandbox page's lines run, and what its comments show is what they return."""
    if not isolation().available:
        pytest.skip(f"no sandbox here: {isolation().detail}")
    (code,) = python("docs/sandbox.md")
    lines = code.splitlines()
    namespace = run_strict("\n".join(lines[:1]), {}, "docs/sandbox.md")
    for line in lines[1:]:
        call, _, shown = line.partition("#")
        result = eval(compile(call.strip(), "docs/sandbox.md", "eval"), namespace)  # noqa: S307 - the page's own line
        name, _, fields = shown.strip().partition("(")
        assert type(result).__name__ == name
        for field, value in re.findall(r"(\w+)=('[^']*')", fields):
            if "..." not in value:
                assert getattr(result, field) == ast.literal_eval(value), (line, field)


@pytest.mark.slow
def test_evaluation_snippet_runs(tmp_path, monkeypatch):
    """docs/evaluation.md's Python example, on the page's names and calls; for time, the tiny
    model for smollm2, the test fixtures for ../shared/benchmarks, 2 items and 8 new tokens."""
    monkeypatch.chdir(tmp_path)
    (code,) = python("docs/evaluation.md")
    shortened = (code.replace('"smollm2"', '"tiny"').replace('"../shared/benchmarks"', repr(str(ROOT / "tests" / "fixtures" / "benchmarks")))
                 .replace("limit=20,", "limit=2, max_new_tokens=8, allow_unisolated=True,"))
    assert shortened.count("tiny") == 1 and "limit=2" in shortened
    namespace = run_strict(shortened, {}, "docs/evaluation.md")
    assert namespace["again"].accuracy("gsm8k") == namespace["report"].accuracy("gsm8k", "numloss")


@pytest.mark.slow
def test_the_files_a_training_run_writes_are_the_ones_its_page_lists(tmp_path):
    """docs/training.md, "What a run writes": a LoRA run with checkpoints and TensorBoard writes
    every file the page names for a run (resumes and overwrites set the others aside), and none
    the page leaves out."""
    section = PAGES["docs/training.md"].split("## What a run writes", 1)[1]
    paragraph = next(p for p in section.split("\n\n") if p.startswith("`train.output_dir` holds"))
    named = [n for n in re.findall(r"`([^`]+)`", paragraph) if n.endswith("/") or re.fullmatch(r"[\w.-]+\.(?:yaml|json|csv|lock)", n)]
    aside = paragraph.split("sets aside stays there", 1)[1]
    patterns = {n: re.compile(re.escape(n.rstrip("/")).replace("N", r"\d+").replace("TIME", r"\S+")) for n in named}
    run_training(tiny_config(tmp_path / "run", "--train.max_steps", "2", "--train.report_to", "[tensorboard]", "--lora.enabled",
                             "true", "--lora.target_modules", "[q_proj, v_proj]", "--lora.merge", "true"))
    written = sorted(p.name for p in (tmp_path / "run").iterdir())
    unnamed = [w for w in written if not any(p.fullmatch(w) for p in patterns.values())]
    assert not unnamed, f"the run wrote {unnamed}, which docs/training.md does not name"
    missing = [n for n, p in patterns.items() if f"`{n}`" not in aside and not any(p.fullmatch(w) for w in written)]
    assert not missing, f"docs/training.md names {missing}, which the run did not write"
