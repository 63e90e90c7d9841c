"""An evaluation protocol is one object; `RELEASED` and `NUMLOSS` are its two instances.

A protocol holds everything between an item and a verdict: prompt, stop strings and token limits,
program handling, answer extraction and comparison. A deviation of numloss from the released
evaluation is a field where the two differ (`deviations()`; docs/evaluation.md explains each).
The generation fields are shared, so one generation is scored under both (`--protocol both`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Literal

from numloss.evaluate import answers, released
from numloss.evaluate.benchmarks import Item

Style = Literal["pot", "cot"]
POT_TRIGGER = "Let's write a program."

# the released dataset names, which pick the released answer triggers (GSM8K adds "####"; another
# benchmark reads as "", with the triggers of all the others)
RELEASED_DATASET = {
    "gsm8k": "gsm8k",
    "svamp": "svamp",
    "simuleq": "simuleq",
    "math": "math",
    "aqua": "aqua",
    "sat": "sat",
    "mmlu_math": "mmlu_mathematics",
}


def first_style(item: Item, program_of_thought: bool = True) -> Style:
    """The first attempt: program of thought for open answers, chain of thought for multiple
    choice."""
    return "pot" if program_of_thought and item.kind != "choice" else "cot"


def released_prompt(item: Item, style: Style) -> str:
    """The released 0-shot Alpaca prompt: `alpaca` for open answers, `alpaca_mc` for multiple
    choice."""
    if style not in ("pot", "cot"):
        raise ValueError(f"prompt style must be 'pot' or 'cot', got {style!r}")
    if item.kind == "choice":
        return released.PROMPT_CHOICE.format(query=item.question)
    query = f"{item.question} {POT_TRIGGER}" if style == "pot" else item.question
    return released.PROMPT_OPEN.format(query=query)


# ---------------------------------------------------------------- released


def released_extract(item: Item, text: str, benchmark: str) -> answers.Reading:
    return answers.Reading(
        released.answer_clean(RELEASED_DATASET.get(benchmark, ""), item.kind, text)
    )


def numloss_extract(item: Item, text: str, benchmark: str) -> answers.Reading:
    """The released reading, then numloss's corrections (`answers.read`)."""
    return answers.read(item, text, RELEASED_DATASET.get(benchmark, ""))


def released_gold(item: Item) -> str:
    """The gold string the released code compares with."""
    if item.released_answer:
        return item.released_answer
    return released.delete_extra_zero(item.answer) if item.kind == "number" else item.answer


def released_compare(item: Item, prediction: str) -> bool:
    gold = released_gold(item)
    return prediction == gold if item.kind == "choice" else released.equal(prediction, gold)


# ---------------------------------------------------------------- numloss

# A fence: ``` or ~~~, a tag ("python", "python3", "py", " python" after a space, none), the code,
# the same fence closing it (or the end of the output). The code part is lazy up to the next
# closing fence, so one opening scans at most to its close: linear over the output.
_FENCE = re.compile(
    r"(?m)^[ \t]{0,8}(?P<fence>```|~~~)[ \t]{0,4}(?P<tag>[\w+.#-]{0,20})["
    r" \t]{0,4}\n(?P<code>.*?)(?:^[ \t]{0,8}(?P=fence)|\Z)",
    re.S,
)
_PYTHON_TAGS = {"python", "python3", "py", "py3", "python2", "ipython", "pycon"}
_PRINTS = ("print(", "stdout.write(")
# a fenced block right after such a line is what a program printed, not code
_RESULT_LABEL = re.compile(
    r"(?i)(?:^|\n)[ \t*#]{0,8}(?:output|result|results|prints|printed|console|stdout)[ \t*]{0,4}:?["
    r" \t*]{0,4}\n?[ \t]{0,8}$"
)


def _program_blocks(output: str) -> tuple[str, list[re.Match[str]]]:
    """The output cut at "### Instruction", and its fenced blocks that are its program: the
    Python-tagged ones if any, else the untagged ones that are not a printed result ("Output:"
    before them)."""
    code = output.split("### Instruction")[0]
    tagged, untagged = [], []
    for match in _FENCE.finditer(code):
        tag = match.group("tag").lower()
        if tag in _PYTHON_TAGS:
            tagged.append(match)
        elif not tag and not _RESULT_LABEL.search(code[max(0, match.start() - 40) : match.start()]):
            untagged.append(match)
    return code, tagged or untagged


def numloss_program(output: str) -> str | None:
    """The program in an output: its Python-tagged fenced blocks if any, else its untagged ones
    that are not a printed result ("Output:" before them), else the output cut at "### Instruction";
    None unless it prints (print() or sys.stdout.write())."""
    code, fenced = _program_blocks(output)
    if fenced:
        code = "\n".join(match.group("code") for match in fenced)
    return code if any(p in code for p in _PRINTS) else None


# A line of unfenced code (indented, a comment, a statement keyword, an assignment, or a print
# call opening it; prose that mentions print(5) mid-sentence stays):
# the evaluator never compiles model text, so this is a cheap syntactic guess, used only to keep
# a failed program's own text (`print('B')`) from being read as its answer.
_CODE_LINE = re.compile(
    r"^(?:["
    r" \t]|#|(?:for|if|elif|else|while|def|class|try|except|finally|with|async|import|from|return|raise|"  # noqa: E501
    r"assert|pass|break|continue|global|lambda)\b|[A-Za-z_][\w.]{0,60}(?:\[[^\]\n]{0,80}\])?["
    r" \t]{0,4}"
    r"(?:[-+*/%&|^]|//|\*\*)?=(?!=)|(?:print|sys\.stdout\.write)\()"
)


def numloss_prose(output: str) -> str:
    """What of an output is not its program: the output without the program's fenced blocks, or,
    for an unfenced program, without its code lines. Read when the program gave no answer."""
    code, fenced = _program_blocks(output)
    if fenced:
        kept, last = [], 0
        for match in fenced:
            kept.append(code[last : match.start()])
            last = match.end()
        return "".join(kept) + code[last:]
    return "\n".join(line for line in code.split("\n") if not _CODE_LINE.match(line))


# The script numloss runs for a program. All parsing happens inside the sandbox (the evaluator never
# compiles model text): the program is dedented (a model often indents its whole answer, which the
# released wrapper's function body accepts), compiled as a module (so `from m import *`, a main
# guard and fenced code work); only if that is a SyntaxError is it compiled the way the released
# executor runs it, as the body of a function (a top-level `return` ends it there), and the first
# SyntaxError is raised when neither compiles. `exit()` and `quit()` work as in a plain `python`.
# The program runs in a fresh module registered as `__main__`, as under `python prog.py`: pickle
# (multiprocessing.Pool, ProcessPoolExecutor, a pickled dataclass) finds what it defines there, and
# the spawn and forkserver start methods (the default from Python 3.14) re-run this file as
# `__mp_main__` in their children, where the program's names are copied to what they read.
_SCRIPT = """import builtins as _b, sys as _s, textwrap as _tw
_b.__dict__.setdefault("exit", _s.exit)  # what the site module gives a plain `python`; the sandbox runs -S
_b.__dict__.setdefault("quit", _s.exit)
_src = _tw.dedent({source!r})
_KEYWORDS = ("for ", "if ", "elif ", "else", "while ", "def ", "class ", "try", "except", "finally", "with ", "async ", "@")


def _code_lines(src):
    # prose around unfenced code: keep the lines that are code (each compiles alone, is indented,
    # or opens a block with a keyword), drop the sentences
    kept = []
    for line in src.split("\\n"):
        text = line.strip()
        if not text or line[:1] in " \\t" or text.startswith("#") or text.startswith(_KEYWORDS):
            kept.append(line)
            continue
        try:
            compile(text, "<line>", "exec")
        except SyntaxError:
            continue
        kept.append(line)
    return "\\n".join(kept)


try:
    _code = compile(_src, "<program>", "exec")
except SyntaxError as _first:
    try:
        _code = compile("def _program():\\n" + _tw.indent(_src, "    ", lambda _l: True) + "\\n_program()\\n", "<program>", "exec")
    except SyntaxError:
        try:
            _code = compile(_tw.dedent(_code_lines(_src)), "<program>", "exec")
        except SyntaxError:
            raise _first from None
_m = type(_s)(__name__)  # "__mp_main__" where a spawn or forkserver child re-runs this file
_m.__dict__["__builtins__"] = __builtins__
if "__file__" in globals():
    _m.__file__ = __file__  # how those start methods find the file to re-run
_s.modules[__name__] = _m
exec(_code, _m.__dict__)
if __name__ != "__main__":  # that child takes this file's globals as __main__: the program's names go there
    globals().update((_k, _v) for _k, _v in _m.__dict__.items() if not _k.startswith("__"))
"""  # noqa: E501


def numloss_script(program: str) -> str:
    """The sandbox script of `program` under numloss: dedented, run as a module, or as a function
    body when only that compiles (a top-level `return`), as `_SCRIPT` says."""
    return _SCRIPT.format(source=program)


@dataclass(frozen=True)
class Protocol:
    """Prompt, generation limits, program handling, answer extraction and comparison, as fields."""

    name: str
    prompt: Callable[[Item, Style], str]  # the text the model is given
    stop: tuple[str, ...]  # generation stops at (and drops) the first of these
    max_new_tokens_open: int
    max_new_tokens_choice: int
    program_styles: frozenset[str]  # attempts ("pot", "cot") whose programs are run
    # attempts whose output is read as text when its program gives no answer
    text_after_program: frozenset[str]
    program_output_bytes: int  # the sandbox's cap on a program's stdout
    program_memory_bytes: int  # the sandbox's address-space limit (0: none)
    # what the sandbox's time limit is measured on: "wall" or "cpu" (SandboxLimits.clock)
    program_clock: str
    program: Callable[[str], str | None]  # output -> the program in it (None: read as text)
    script: Callable[[str], str]  # program -> the script the sandbox runs
    read_program: Callable[[str | None], str]  # stdout (None: failed or refused) -> text to read
    # output -> its text without the program (read under text_after_program)
    prose: Callable[[str], str]
    # (item, text, benchmark) -> prediction ("" for none), decided_by
    extract: Callable[[Item, str, str], answers.Reading]
    finalize: Callable[[Item, str], str]  # the prediction scored (released: no letter -> 'A')
    gold: Callable[[Item], str]  # the gold answer compared with
    compare: Callable[[Item, str], bool]  # (item, prediction) -> correct

    def max_new_tokens(self, item: Item) -> int:
        return self.max_new_tokens_choice if item.kind == "choice" else self.max_new_tokens_open


RELEASED = Protocol(
    name="released",
    prompt=released_prompt,
    stop=released.STOP,
    max_new_tokens_open=released.MAX_NEW_TOKENS_OPEN,
    max_new_tokens_choice=released.MAX_NEW_TOKENS_CHOICE,
    program_styles=frozenset({"pot", "cot"}),
    text_after_program=frozenset(),
    program_output_bytes=released.PROGRAM_OUTPUT_BYTES,
    program_memory_bytes=released.PROGRAM_MEMORY_BYTES,
    program_clock="wall",  # the released executor's 5 s join
    program=released.program_of,
    script=released.wrapped_source,
    read_program=released.program_text,
    prose=lambda output: output,  # unused: the released protocol reads no text after a program
    extract=released_extract,
    finalize=lambda item, prediction: (
        released.final_choice(prediction) if item.kind == "choice" else prediction
    ),
    gold=released_gold,
    compare=released_compare,
)

# The released protocol with the documented deviations: every field named here differs from it,
# and the prompt, stop strings and token limits are shared, so one generation serves both.
NUMLOSS = replace(
    RELEASED,
    name="numloss",
    text_after_program=frozenset({"cot"}),
    program_clock="cpu",  # the program's own CPU time: a busy machine does not cost a right answer
    program=numloss_program,
    script=numloss_script,
    # a program's answer: the first number it printed (a printed "The answer is" marker wins)
    read_program=lambda stdout: (
        "The answer is " + stdout.strip() if stdout and stdout.strip() else ""
    ),
    prose=numloss_prose,
    extract=numloss_extract,
    finalize=lambda item, prediction: prediction,
    gold=lambda item: item.answer,
    compare=answers.compare,
)

PROTOCOLS: dict[str, Protocol] = {"released": RELEASED, "numloss": NUMLOSS}


def resolve(name: str | Protocol | list | tuple) -> list[Protocol]:
    """`"released"`, `"numloss"`, `"both"` (released first) or Protocol objects -> a list of
    protocols."""
    if isinstance(name, Protocol):
        return [name]
    if isinstance(name, (list, tuple)):
        found = [p for n in name for p in resolve(n)]
        names = [p.name for p in found]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:  # scored twice, an item would count twice in every total
            raise ValueError(
                f"protocol {', '.join(map(repr, repeated))} is given twice; name each protocol once"
            )
        if not found:
            raise ValueError("no protocol given; use 'released', 'numloss' or 'both'")
        return found
    if name == "both":
        return [RELEASED, NUMLOSS]
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; use 'released', 'numloss' or 'both'")
    return [PROTOCOLS[name]]


def deviations(a: Protocol = RELEASED, b: Protocol = NUMLOSS) -> list[str]:
    """The fields in which two protocols differ (the deviations of `b` from `a`)."""
    return [
        f.name
        for f in fields(Protocol)
        if f.name != "name" and getattr(a, f.name) != getattr(b, f.name)
    ]


def generation_settings(protocols: list[Protocol]) -> tuple[tuple[str, ...], int, int]:
    """The shared (stop, open limit, choice limit) of `protocols`; raises if they differ."""
    keys = {(p.stop, p.max_new_tokens_open, p.max_new_tokens_choice, p.prompt) for p in protocols}
    if len(keys) != 1:
        raise ValueError(
            "these protocols generate differently (prompt, stops or token limits); score them in"
            " separate runs"
        )
    stop, open_limit, choice_limit, _ = keys.pop()
    return stop, open_limit, choice_limit
