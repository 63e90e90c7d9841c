# ruff: noqa: UP030, UP031, UP032  (a transcription keeps the published str.format calls)
"""Transcription of the released evaluation of the DEL paper, for the differential tests.

Sources (read through the code index; the logic of each function is kept line for line, only
file paths, prints and the parts for other datasets are dropped):

- PolyU-VCLab/DEL, commit 3063af2ba466c7c48dba0d3740f3526fd77c6043:
  - eval/utils.py: delete_extra_zero, _fix_fracs, _fix_a_slash_b, _remove_right_units, _fix_sqrt,
    _strip_string, find_box, extract_math_answer, answer_clean, compare_answer_with_groundtruth
    (string branch: run_open.py always passes a string gold), process_question_with_flan_tag,
    remove_flan_tag;
  - eval/data_loader.py: data_reader (the seven benchmarks) and find_math_answer;
  - eval/run_open.py and eval/run_choice.py: stop tokens, the per-output logic of
    run_question_answer (program if "print(" is in the output, "The answer is " + its stdout),
    the rerun rule (open: empty answer; choice: CoT only in all.sh, so no rerun), the 'A' guess;
  - eval/all.sh: run_open with --model_max_length 1500 and pot_prompt + --cot_backup; run_choice
    with its default 2048 and no stem_flan_type (chain of thought only).
- TIGER-AI-Lab/MAmmoTH2, commit 79ff1ea6e50b076c2accc378912cdbac341855d2, math_eval/prompt_utils.py:
  get_alpaca_prompt and get_alpaca_mc_prompt (DEL's eval/ imports prompt_utils but does not ship
  it; with --shots 0 the example list is empty).
- PolyU-VCLab/DEL eval/code_utils.py (imported by eval/utils.py as `from code_utils import
  CodeExecutor`; utils.execute_with_timeout(code, timeout=5, use_process=True) runs
  `CodeExecutor(code, timeout, use_process).run()`): format_code (every line of the output
  indented two spaces inside ``def run_it():``, then ``run_it()``) and CodeExecutor.execute_code
  (``exec(self.code, globals(), locals())`` under redirect_stdout, so the program sees the
  module globals of code_utils, ``__name__ == "code_utils"``; stdout stripped of newlines; any
  Exception leaves no result, i.e. ""; a SystemExit kills the child process, also no result),
  run in a multiprocessing.Process joined with the 5 s timeout, with no output cap and no memory
  limit. The code index this transcription was read from holds the MAmmoTH-lineage copy of that
  module (format_code / CodeExecutor, text identical to the excerpt above); DEL's own copy is not
  in it, so the file's commit is not pinned here. `CODE_UTILS` below is that module's logic;
  `executor_script` runs it inside numloss's sandbox (the differential test's programs run there,
  never in the test process); `execute_with_timeout` runs it in-process, for the older tests whose
  programs are ours and finish.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# ------------------------------------------------------------------ eval/utils.py


def delete_extra_zero(n):
    try:
        n = float(n)
    except Exception:
        try:
            n = eval(n)
        except Exception:
            return n
    if isinstance(n, int):
        return str(n)
    if isinstance(n, float):
        n = str(n).rstrip("0")
        n = int(n.rstrip(".")) if n.endswith(".") else float(n)
        n = str(n)
        return n


def _fix_fracs(string):
    substrs = string.split("\\frac")
    new_str = substrs[0]
    if len(substrs) > 1:
        substrs = substrs[1:]
        for substr in substrs:
            new_str += "\\frac"
            if substr:
                if substr[0] == "{":
                    new_str += substr
                else:
                    try:
                        assert len(substr) >= 2
                    except AssertionError:
                        return string
                    a = substr[0]
                    b = substr[1]
                    if b != "{":
                        if len(substr) > 2:
                            post_substr = substr[2:]
                            new_str += "{" + a + "}{" + b + "}" + post_substr
                        else:
                            new_str += "{" + a + "}{" + b + "}"
                    else:
                        if len(substr) > 2:
                            post_substr = substr[2:]
                            new_str += "{" + a + "}" + b + post_substr
                        else:
                            new_str += "{" + a + "}" + b
    string = new_str
    return string


def _fix_a_slash_b(string):
    if len(string.split("/")) != 2:
        return string
    a = string.split("/")[0]
    b = string.split("/")[1]
    try:
        a = int(a)
        b = int(b)
        assert string == "{}/{}".format(a, b)
        new_string = "\\frac{" + str(a) + "}{" + str(b) + "}"
        return new_string
    except Exception:
        return string


def _remove_right_units(string):
    if "\\text{ " in string:
        splits = string.split("\\text{ ")
        return splits[0]
    else:
        return string


def _fix_sqrt(string):
    if "\\sqrt" not in string:
        return string
    splits = string.split("\\sqrt")
    new_string = splits[0]
    for split in splits[1:]:
        if split and split[0] != "{":
            a = split[0]
            new_substr = "\\sqrt{" + a + "}" + split[1:]
        else:
            new_substr = "\\sqrt" + split
        new_string += new_substr
    return new_string


def _strip_string(string):
    string = string.replace("\n", "")
    string = string.replace("\\!", "")
    string = string.replace("\\\\", "\\")
    string = string.replace("tfrac", "frac")
    string = string.replace("dfrac", "frac")
    string = string.replace("\\left", "")
    string = string.replace("\\right", "")
    string = string.replace("^{\\circ}", "")
    string = string.replace("^\\circ", "")
    string = string.strip("$")
    string = string.replace("\\$", "")
    string = _remove_right_units(string)
    string = string.replace("\\%", "")
    string = string.replace("\\%", "")  # the released line is "\%", the same two characters
    string = string.replace(" .", " 0.")
    string = string.replace("{.", "{0.")
    if len(string) == 0:
        return string
    if string[0] == ".":
        string = "0" + string
    if len(string.split("=")) == 2:
        if len(string.split("=")[0]) <= 2:
            string = string.split("=")[1]
    string = _fix_sqrt(string)
    string = string.replace(" ", "")
    string = _fix_fracs(string)
    string = _fix_a_slash_b(string)
    return string


def find_box(pred_str: str):
    ans = pred_str.split("boxed")[-1]
    if not ans:
        return ""
    if ans[0] == "{":
        stack = 1
        a = ""
        for c in ans[1:]:
            if c == "{":
                stack += 1
                a += c
            elif c == "}":
                stack -= 1
                if stack == 0:
                    break
                a += c
            else:
                a += c
    else:
        a = ans.split("$")[0].strip()
    return a


def extract_math_answer(pred_str: str, answer_flag: bool):
    if "boxed" in pred_str:
        pred = find_box(pred_str)
    elif answer_flag:
        pred_str = pred_str.split("=")[-1].strip()
        if re.match(r"[\d\.]+\s\D+$", pred_str):
            pred_str = pred_str.split(" ")[0]
        pred = pred_str
    else:
        preds = re.findall(r"-?\d*\.?\d+", pred_str)
        if len(preds) >= 1:
            pred = preds[-1]
        else:
            pred = ""
    pred = _strip_string(pred)
    return pred


def answer_clean(dataset: str, direct_answer_trigger_for_fewshot, pred: str):
    pred = pred.strip("\n")
    ICL = False
    for trigger in direct_answer_trigger_for_fewshot:
        if pred.count(trigger) > 1:
            ICL = True
    if ICL:
        pred = pred.split("\n\n")[0]
    preds = re.split("|".join(direct_answer_trigger_for_fewshot), pred)
    if len(preds) > 1:
        answer_flag = True
        pred = preds[-1]
    else:
        answer_flag = False
    pred = pred.strip("\n").rstrip(".").rstrip("/").strip(" ")
    if dataset in ("aqua", "sat") or "mmlu" in dataset:
        tmp = re.findall(r"\b(A|B|C|D|E|F|G|H|I|J)\b", pred.upper())
        if tmp:
            pred = tmp
        else:
            pred = [pred.strip().strip(".")]
    elif dataset in ("gsm8k", "svamp", "simuleq"):
        pred = pred.replace(",", "")
        pred = [delete_extra_zero(s.replace(",", "")) for s in re.findall(r"-?\d+/?\.?\d*", pred)]
    elif dataset == "math":
        pred = [extract_math_answer(pred, answer_flag)]
    else:
        raise ValueError("dataset is not properly defined ...")
    if len(pred) == 0:
        pred = ""
    else:
        if answer_flag:
            pred = pred[0]
        else:
            pred = pred[-1]
    pred = pred.rstrip(".").rstrip("/")
    return pred


def compare_answer_with_groundtruth(answer: str, groundtruth_str: str):
    if "\\text{" in answer:
        answer = answer.replace("\\text{", "").rstrip("}")
    if "\\text{" in groundtruth_str:
        groundtruth_str = groundtruth_str.replace("\\text{", "").rstrip("}")
    if groundtruth_str.lower() in ["(a)", "(b)", "(c)", "(d)", "(e)", "(f)"]:
        return groundtruth_str.lower() in answer.lower()
    elif answer.lower() == groundtruth_str.lower():
        return True
    return False


def process_question_with_flan_tag(questions: list, stem_flan_type: str):
    if stem_flan_type == "pot_prompt":
        prefix = " Let's write a program."
    elif stem_flan_type == "":
        prefix = ""
    else:
        prefix = " " + stem_flan_type
    return [q + prefix for q in questions]


# ------------------------------------------------------------------ prompt_utils.py (0 shots)


def get_alpaca_prompt(qas: list):
    tmp = "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n"
    for q, a in qas:
        tmp += "\n" + "### Instruction:\n{query}\n\n### Response: {response}\n".format(query=q, response=a)
    prefix = "\n" + "### Instruction:\n{query}\n\n### Response:"
    return tmp, prefix


def get_alpaca_mc_prompt(qas: list):
    tmp = "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n"
    for q, a in qas:
        tmp += "\n" + "### Instruction:\n{query}\n\n### Response: Let's solve the multi-choice question step by step.\n{response}\n".format(query=q, response=a)
    prefix = "\n" + "### Instruction:\n{query}\n\n### Response: Let's solve the multi-choice question step by step.\n"
    return tmp, prefix


def input_str(question: str, form: str) -> str:
    """run_*.py: p[0] + p[1].format(query=q) with the form's 0-shot prompt."""
    p = get_alpaca_mc_prompt([]) if form == "alpaca_mc" else get_alpaca_prompt([])
    return p[0] + p[1].format(query=question)


# ------------------------------------------------------------------ code_utils.CodeExecutor

CODE_UTILS = """
from io import StringIO
from contextlib import redirect_stdout
import multiprocessing
from multiprocessing import Pool
import threading


def format_code(code_str: str):
    code = "def run_it():\\n"
    for line in code_str.split("\\n"):
        code += "  " + line + "\\n"
    code += "run_it()"
    return code


class CodeExecutor:

    def __init__(self, code, timeout, use_process: bool):
        self.code = format_code(code)
        self.timeout = timeout
        self.error = ""
        self.use_process = use_process

    def execute_code(self, return_val):
        try:
            f = StringIO()
            with redirect_stdout(f):
                exec(self.code, globals(), locals())
            s = f.getvalue()
            s = s.strip("\\n")
            return_val["result"] = s
        except Exception as e:
            self.error = e
            return_val["error"] = e
"""


def _code_utils_module():
    import types

    module = types.ModuleType("code_utils")
    # as the released utils.py imports it: a module of its own (no `from __future__` of this file's),
    # in sys.modules, where dataclasses and pickle look a class's module up
    exec(compile(CODE_UTILS, "code_utils.py", "exec", dont_inherit=True), module.__dict__)
    sys.modules["code_utils"] = module
    return module


def format_code(code_str: str):
    return _code_utils_module().format_code(code_str)


def execute_with_timeout(code: str) -> str:
    """In-process: CodeExecutor(code, 5, ...).execute_code, what run() returns ("" without a result)."""
    return_val = {}
    try:
        _code_utils_module().CodeExecutor(code, 5, False).execute_code(return_val)
    except BaseException:  # SystemExit ends the released child process: no result
        return ""
    return return_val.get("result", "")


def executor_script(code: str) -> str:
    """A script for numloss's sandbox that does what the released child process does with `code`
    and writes the result it returns (the timeout is the sandbox's wall clock)."""
    return (
        "import sys, types\n"
        "module = sys.modules['code_utils'] = types.ModuleType('code_utils')  # utils.py imports it\n"
        f"exec({CODE_UTILS!r}, module.__dict__)\n"
        "return_val = {}\n"
        f"module.CodeExecutor({code!r}, 5, True).execute_code(return_val)\n"
        "sys.stdout.write(return_val.get('result', ''))\n"
    )


# ------------------------------------------------------------------ run_open.py / run_choice.py

STOP_TOKENS = ["USER:", "ASSISTANT:", "### Instruction:", "Response:", "\n\nProblem", "\nProblem", "Problem:", "<|eot_id|>", "####"]
MAX_TOKENS_OPEN = 1500  # all.sh --model_max_length 1500
MAX_TOKENS_CHOICE = 2048  # run_choice.py default
OPEN = ("gsm8k", "svamp", "simuleq", "math")


def get_seperation_trigger(dataset: str):
    triggers = ["The answer is:", "The answer is", "the answer is"]
    if dataset == "gsm8k":
        triggers.append("####")
    return triggers


def answer_of_output(dataset: str, output: str, execute=execute_with_timeout):
    """(answer, program stdout or None) of one output: the body of run_question_answer's loop."""
    triggers = get_seperation_trigger(dataset) if dataset in OPEN else ("####", "The answer is")
    if "print(" in output:
        output = output.split("### Instruction")[0]
        tmp_exec = execute(output)
        tmp = "The answer is" + " " + tmp_exec
        return answer_clean(dataset, triggers, tmp), tmp_exec
    return answer_clean(dataset, triggers, output), None


def score_open(dataset: str, groundtruth: str, first: str, fallback: str | None, execute=execute_with_timeout):
    """run_open.py with pot_prompt and --cot_backup: (answer, correct, used_fallback)."""
    answer, _ = answer_of_output(dataset, first, execute)
    used = False
    if answer == "":
        used = True
        answer = answer_of_output(dataset, fallback, execute)[0] if fallback is not None else ""
    return answer, compare_answer_with_groundtruth(answer, groundtruth), used


def score_choice(dataset: str, groundtruth: str, output: str, execute=execute_with_timeout):
    """run_choice.py without stem_flan_type: (answer, correct)."""
    answer, _ = answer_of_output(dataset, output, execute)
    if answer not in ["A", "B", "C", "D", "E", "F", "G", "H", "I", "J"]:
        answer = "A"
    return answer, answer == groundtruth


# ------------------------------------------------------------------ data_loader.py


def find_math_answer(s):
    assert "boxed" in s
    ans = s.split("boxed")[-1]
    if ans[0] == "{":
        stack = 1
        a = ""
        for c in ans[1:]:
            if c == "{":
                stack += 1
                a += c
            elif c == "}":
                stack -= 1
                if stack == 0:
                    break
                a += c
            else:
                a += c
    else:
        a = ans.split("$")[0].strip()
    a = _strip_string(a)
    return a


def data_reader(dataset: str, root: Path):
    """(questions, answers) as data_reader reads them from the released dataset/ layout under `root`.

    MATH: the released MATH.json is not in ../shared/benchmarks (which has the per-problem
    originals as test.jsonl); its question is the problem and its answer find_math_answer(solution).
    """
    questions, answers = [], []
    decoder = json.JSONDecoder()
    if dataset == "aqua":
        for line in (root / "AQuA/AQuA.json").read_text().splitlines(True):
            json_res = decoder.raw_decode(line)[0]
            choice = "(" + "(".join(json_res["options"])
            choice = choice.replace("(", " (").replace(")", ") ")
            choice = "Answer Choices:" + choice
            questions.append(json_res["question"].strip() + "\n" + choice)
            answers.append(json_res["correct"])
    elif dataset == "math":
        for line in (root / "math/test.jsonl").read_text().splitlines():
            d = json.loads(line)
            questions.append(d["problem"])
            answers.append(find_math_answer(d["solution"]))
    elif dataset == "gsm8k":
        for line in (root / "gsm8k/gsm8k.jsonl").read_text().splitlines(True):
            json_res = decoder.raw_decode(line)[0]
            questions.append(json_res["question"].strip())
            answers.append(delete_extra_zero(json_res["answer"].split("#### ")[-1].replace(",", "")))
    elif dataset == "svamp":
        for line in json.loads((root / "SVAMP/SVAMP.json").read_text()):
            q = line["Body"].strip() + " " + line["Question"].strip()
            a = str(line["Answer"])
            if a[-2:] == ".0":
                a = a[:-2]
            questions.append(q)
            answers.append(delete_extra_zero(a))
    elif "mmlu" in dataset:
        for line in json.loads((root / "mmlu/mathematics.json").read_text()):
            options = f'(A) {line["choices"][0]} (B) {line["choices"][1]} (C) {line["choices"][2]} (D) {line["choices"][3]}'
            questions.append(line["question"] + "\n" + "Answer Choices: " + options)
            answers.append(["A", "B", "C", "D"][line["answer"]])
    elif dataset in ("simuleq", "sat"):
        for line in json.loads((root / f"{dataset}/{dataset}.json").read_text()):
            questions.append(line["question"])
            answers.append(str(line["answer"]))
    else:
        raise ValueError("dataset is not properly defined ...")
    return questions, answers
