"""The released evaluation of the DEL paper (PolyU-VCLab/DEL `eval/`, = MAmmoTH2 `math_eval/`),
quirks included: the pieces `numloss.evaluate.protocol.RELEASED` is made of (answer triggers,
number and letter extraction, MATH normalisation, string comparison, the program wrapper).
Each rule, with its effect: docs/evaluation.md, "The released protocol, as numloss reproduces it".
tests/reference/released_eval.py is a transcription checked against this module item by item.
"""

from __future__ import annotations

import re

STOP = (
    "USER:",
    "ASSISTANT:",
    "### Instruction:",
    "Response:",
    "\n\nProblem",
    "\nProblem",
    "Problem:",
    "<|eot_id|>",
    "####",
)
MAX_NEW_TOKENS_OPEN = 1500  # eval/all.sh: run_open.py --model_max_length 1500
MAX_NEW_TOKENS_CHOICE = 2048  # run_choice.py's default --model_max_length
CHOICE_LETTERS = "ABCDEFGHIJ"
# The released executor (code_utils.CodeExecutor) has no output cap and no memory limit; a sandbox
# must have both. These are far above what a released-style program reaches in its 5 s (see
# docs/evaluation.md, "Sandbox limits"), so the released verdict is kept; the memory limit also
# bounds what an adversarial program can take from the machine, one worker at a time.
PROGRAM_OUTPUT_BYTES = 64 << 20
PROGRAM_MEMORY_BYTES = 4 << 30
GUESS = "A"

PROMPT_OPEN = (
    "Below is an instruction that describes a task. Write a response that appropriately completes"
    " the request.\n\n### Instruction:\n{query}\n\n### Response:"
)
PROMPT_CHOICE = (
    "Below is an instruction that describes a task. Write a response that appropriately completes"
    " the request.\n\n### Instruction:\n{query}\n\n### Response: Let's solve the multi-choice"
    " question step by step.\n"
)


def triggers(dataset: str, kind: str) -> tuple[str, ...]:
    """The answer triggers of run_open.py (by dataset) or run_choice.py."""
    if kind == "choice":
        return ("####", "The answer is")
    return ("The answer is:", "The answer is", "the answer is") + (
        ("####",) if dataset == "gsm8k" else ()
    )


def delete_extra_zero(text: str) -> str:
    """A number string as the released code normalises it: via float, trailing zeros dropped."""
    try:
        value: object = float(text)
    except ValueError:
        try:
            value = eval(text, {"__builtins__": {}})  # only strings of digits, '.' and '/' get here
        except Exception:
            return text
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return text
    if isinstance(value, int):
        return str(value)
    s = str(value).rstrip("0")
    return str(int(s.rstrip("."))) if s.endswith(".") else str(float(s))


# ---------------------------------------------------------------- MATH normalisation


def _fix_fracs(string: str) -> str:
    parts = string.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if not part or part[0] == "{":
            out += part
            continue
        if len(part) < 2:
            return string
        a, b, rest = part[0], part[1], part[2:]
        out += "{" + a + "}{" + b + "}" + rest if b != "{" else "{" + a + "}" + b + rest
    return out


def _fix_a_slash_b(string: str) -> str:
    pieces = string.split("/")
    if len(pieces) != 2:
        return string
    try:
        a, b = int(pieces[0]), int(pieces[1])
    except ValueError:
        return string
    return "\\frac{" + str(a) + "}{" + str(b) + "}" if string == f"{a}/{b}" else string


def _fix_sqrt(string: str) -> str:
    if "\\sqrt" not in string:
        return string
    parts = string.split("\\sqrt")
    out = parts[0]
    for part in parts[1:]:
        out += "\\sqrt{" + part[0] + "}" + part[1:] if part and part[0] != "{" else "\\sqrt" + part
    return out


def strip_string(string: str) -> str:
    """The released MATH normalisation (`_strip_string`)."""
    for old, new in (
        ("\n", ""),
        ("\\!", ""),
        ("\\\\", "\\"),
        ("tfrac", "frac"),
        ("dfrac", "frac"),
        ("\\left", ""),
        ("\\right", ""),
        ("^{\\circ}", ""),
        ("^\\circ", ""),
    ):
        string = string.replace(old, new)
    string = string.strip("$").replace("\\$", "")
    if "\\text{ " in string:
        string = string.split("\\text{ ")[0]
    string = string.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not string:
        return string
    if string[0] == ".":
        string = "0" + string
    sides = string.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        string = sides[1]
    string = _fix_sqrt(string).replace(" ", "")
    return _fix_a_slash_b(_fix_fracs(string))


def find_box(text: str) -> str:
    """The content after the last "boxed": balanced braces, or up to the next "$"."""
    after = text.split("boxed")[-1]
    if not after:
        return ""
    if after[0] != "{":
        return after.split("$")[0].strip()
    depth, out = 1, []
    for ch in after[1:]:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                break
        out.append(ch)
    return "".join(out)


def math_answer(segment: str, marked: bool) -> str:
    if "boxed" in segment:
        pred = find_box(segment)
    elif marked:
        pred = segment.split("=")[-1].strip()
        if re.match(r"[\d\.]+\s\D+$", pred):
            pred = pred.split(" ")[0]
    else:
        found = re.findall(r"-?\d*\.?\d+", segment)
        pred = found[-1] if found else ""
    return strip_string(pred)


def gold_of_solution(solution: str) -> str:
    """The released MATH gold of a solution (data_loader.find_math_answer): last boxed,
    normalised."""
    return strip_string(find_box(solution))


# ---------------------------------------------------------------- answers and comparison


def answer_segment(dataset: str, kind: str, text: str) -> tuple[str, bool]:
    """(the text after the last trigger, or the whole text; whether a trigger was found), as
    answer_clean cuts it ("in-context" outputs, a trigger twice, keep their first chunk)."""
    marks = triggers(dataset, kind)
    text = text.strip("\n")
    if any(text.count(t) > 1 for t in marks):  # "in-context" output: keep the first chunk
        text = text.split("\n\n")[0]
    pieces = re.split("|".join(marks), text)
    return pieces[-1].strip("\n").rstrip(".").rstrip("/").strip(" "), len(pieces) > 1


def answer_clean(dataset: str, kind: str, text: str) -> str:
    """The released answer of `text` for a `dataset` of answer `kind` ("" when none)."""
    segment, marked = answer_segment(dataset, kind, text)
    if kind == "choice":
        candidates = re.findall(r"\b([A-J])\b", segment.upper()) or [segment.strip().strip(".")]
    elif kind == "math":
        candidates = [math_answer(segment, marked)]
    else:
        candidates = [
            delete_extra_zero(s) for s in re.findall(r"-?\d+/?\.?\d*", segment.replace(",", ""))
        ]
    if not candidates:
        return ""
    pred = candidates[0] if marked else candidates[-1]
    return pred.rstrip(".").rstrip("/")


def equal(prediction: str, gold: str) -> bool:
    """compare_answer_with_groundtruth for a string gold."""
    if "\\text{" in prediction:
        prediction = prediction.replace("\\text{", "").rstrip("}")
    if "\\text{" in gold:
        gold = gold.replace("\\text{", "").rstrip("}")
    if gold.lower() in ("(a)", "(b)", "(c)", "(d)", "(e)", "(f)"):
        return gold.lower() in prediction.lower()
    return prediction.lower() == gold.lower()


def final_choice(prediction: str) -> str:
    """run_choice.py: a prediction that is not a letter A-J becomes the guess 'A'."""
    return prediction if prediction in CHOICE_LETTERS and len(prediction) == 1 else GUESS


# ---------------------------------------------------------------- programs


def program_of(output: str) -> str | None:
    """The program the released code runs: the output cut at "### Instruction", when it prints."""
    return output.split("### Instruction")[0] if "print(" in output else None


def wrapped_source(program: str) -> str:
    """A script that runs `program` the released way and prints its stdout only if it raised
    nothing.

    code_utils.CodeExecutor: ``exec(format_code(program), globals(), locals())`` inside the module
    code_utils (so ``__name__`` is 'code_utils', a module in ``sys.modules``, the module's imports
    are visible, ``import *`` is a SyntaxError in the function body), stdout captured; an Exception
    loses it, and so does a SystemExit (it ends the released child process)."""
    body = (
        "def run_it():\n" + "".join("  " + line + "\n" for line in program.split("\n")) + "run_it()"
    )
    # code_utils' own imports; the slow ones only for a program that names them (no other can see
    # them)
    heavy = any(name in program for name in ("multiprocessing", "Pool", "threading", "globals"))
    return (
        "import contextlib as _c, io as _io, sys as _s\n"
        # code_utils is an imported module of the released evaluator: a class the program defines
        # has __module__ 'code_utils', which dataclasses and pickle look up in sys.modules
        "_m = _s.modules['code_utils'] = type(_s)('code_utils')\n"
        "_g = _m.__dict__\n"
        "_g.update(StringIO=_io.StringIO, redirect_stdout=_c.redirect_stdout)\n"
        + (
            "import multiprocessing as _mp, threading as _th\n"
            "_g.update(multiprocessing=_mp, Pool=_mp.Pool, threading=_th)\n"
            if heavy
            else ""
        )
        + "_f = _io.StringIO()\n"
        "try:\n"
        "    with _c.redirect_stdout(_f):\n"
        f"        exec({body!r}, _g, {{}})\n"
        "except BaseException:\n"
        "    pass\n"
        "else:\n"
        "    _s.stdout.write(_f.getvalue().strip('\\n'))\n"
    )


def program_text(stdout: str | None) -> str:
    """The text scored for a program: "The answer is " + its stdout ("" when it failed)."""
    return "The answer is " + (stdout or "")
