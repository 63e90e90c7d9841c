"""Pull the final answer out of a model's output and decide whether it matches the gold answer.

Where the answer is looked for, in order (the first rule that finds one wins):

1. after the last "The answer is" / "the answer is:" / "Final answer:" (MAmmoTH's trigger);
2. after the last "####" (GSM8K's marker);
3. inside the last ``\\boxed{...}``;
4. numbers: the last number of the whole output. Choices: an explicit "(C)" / "answer: C" /
   "option C"; then the option whose numeric value equals the answer's number; then the option
   whose text appears, as whole words, in the answer (the longest such option).

Numbers are read with thousands separators ("1,234"), signs (also U+2212 "−"), decimals,
fractions ("3/4", ``\\frac{3}{4}``), percentages ("45%" reads as 45, the way the benchmarks
write percentage answers), currency and units around them ("$46.50", "12 km/h"). Two numbers match
when they agree to a relative tolerance of 1e-6 (absolute for |gold| < 1), so "46.50" = "46.5" and
6.999999999 = 7, but 6.67 != 6.6667 and 70501 != 70500. MATH-style expressions are compared with math-verify.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from numloss.evaluate.benchmarks import LETTERS, AnswerKind, Item, boxed_content

_TRIGGERS = re.compile(r"(?:the (?:final )?answer is\s*:?|final answer\s*:|answer\s*:)", re.I)
_NUMBER = re.compile(
    r"""(?<![\w.])                 # not inside a word or after a decimal point
    (?P<sign>[-+−]\s?)?
    \$?\s?
    (?P<body>
        \d{1,3}(?:,\d{3})+(?:\.\d+)?   # 1,234,567.89
      | \d+(?:\.\d+)?(?:/\d+(?:\.\d+)?)?   # 12, 12.5, 3/4
      | \.\d+                          # .5
    )
    (?:[eE](?P<exp>[-+]?\d+))?
    (?P<percent>\s?%)?
    """,
    re.X,
)
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
REL_TOL = 1e-6


def _strip_latex(text: str) -> str:
    """LaTeX number dressing removed: \\frac{a}{b} -> a/b, \\text{..} units, \\$, \\%, \\!, braces."""
    s = _FRAC.sub(r"(\1)/(\2)", text)
    s = re.sub(r"\\text\{[^{}]*\}|\\mbox\{[^{}]*\}", " ", s)
    s = s.replace("\\$", "$").replace("\\%", "%").replace("\\!", "").replace("\\,", "")
    s = s.replace("{,}", ",").replace("\\left", "").replace("\\right", "")
    s = re.sub(r"\((-?\d+(?:\.\d+)?)\)/\((\d+(?:\.\d+)?)\)", r"\1/\2", s)
    return s


def _value(match: re.Match[str]) -> float | None:
    body = match.group("body").replace(",", "")
    try:
        if "/" in body:
            num, den = body.split("/")
            value = float(Fraction(num) / Fraction(den)) if float(den) != 0 else None
        else:
            value = float(body)
    except (ValueError, ZeroDivisionError):
        return None
    if value is None:
        return None
    if match.group("exp"):
        value *= 10.0 ** int(match.group("exp"))
    if match.group("sign") and match.group("sign").strip() in "-−":
        value = -value
    return value


def numbers_in(text: str) -> list[float]:
    """Every number in `text`, left to right, as floats (see the module doc for what is read)."""
    out = []
    for match in _NUMBER.finditer(_strip_latex(text)):
        value = _value(match)
        if value is not None and math.isfinite(value):
            out.append(value)
    return out


def parse_number(text: str) -> float | None:
    """The first number in `text` (units and currency ignored), or None."""
    found = numbers_in(text)
    return found[0] if found else None


def answer_segment(output: str) -> tuple[str, bool]:
    """The part of `output` that holds the final answer, and whether a marker located it."""
    triggers = list(_TRIGGERS.finditer(output))
    if triggers:
        return output[triggers[-1].end() :], True
    if "####" in output:
        return output.rsplit("####", 1)[1], True
    boxed = boxed_content(output)
    if boxed is not None:
        return boxed, True
    return output, False


def extract_number(output: str) -> float | None:
    """The predicted number: the first number after a marker, else the last number of the output."""
    segment, marked = answer_segment(output)
    if marked:
        boxed = boxed_content(segment)
        found = numbers_in(boxed if boxed is not None else segment)
        if found:
            return found[0]
    found = numbers_in(output)
    return found[-1] if found else None


def format_number(value: float | None) -> str:
    """A number as the shortest decimal string that reads back to it ("7", "46.5", "-0.25")."""
    if value is None:
        return ""
    if value == int(value) and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def numbers_match(pred: float | None, gold: float, rel_tol: float = REL_TOL) -> bool:
    """Whether `pred` equals `gold` to `rel_tol` (relative, absolute below |gold| = 1)."""
    if pred is None or not math.isfinite(pred):
        return False
    return abs(pred - gold) <= rel_tol * max(1.0, abs(gold))


_EXPLICIT_LETTER = [
    re.compile(r"(?:answer|option|choice)\s*(?:is|would be|:)?\s*:?\s*\(?([A-E])\)?(?![\w])", re.I),
    re.compile(r"\(([A-E])\)"),
]


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", _strip_latex(text)).strip(" .$").lower()


def extract_choice(output: str, options: tuple[str, ...] = ()) -> str | None:
    """The chosen letter A-E: an explicit letter, else the option whose text or value is given."""
    n = len(options) or len(LETTERS)
    letters = LETTERS[:n]
    segment, marked = answer_segment(output)
    if marked:
        head = segment.strip()[:80]
        match = re.match(r"\s*\(?([A-E])\)?(?![\w'])", head)
        if match and match.group(1) in letters:
            return match.group(1)
    for pattern in _EXPLICIT_LETTER:
        found = [m.group(1).upper() for m in pattern.finditer(output)]
        found = [f for f in found if f in letters]
        if found:
            return found[-1]
    if not options:
        return None
    where = segment if marked else (output.strip().splitlines()[-1] if output.strip() else "")
    pred = extract_number(where)
    if pred is not None:  # a value: the option with that value ("80" -> "80 km/h")
        for i, option in enumerate(options):
            value = parse_number(option)
            if value is not None and numbers_match(pred, value):
                return letters[i]
    # option text inside the answer, whole words only; the longest wins ("15" loses to "150")
    text = _normalise(where)
    hits = []
    for i, option in enumerate(options):
        o = _normalise(option)
        if o and re.search(r"(?<![\w.])" + re.escape(o) + r"(?![\w]|\.\d)", text):
            hits.append((len(o), i))
    return letters[max(hits)[1]] if hits else None


def extract_math(output: str) -> str:
    """The final expression of a MATH-style output (boxed, after a trigger, else the last number)."""
    segment, marked = answer_segment(output)
    if marked:
        boxed = boxed_content(segment)
        text = boxed if boxed is not None else segment.strip().split("\n")[0]
        return text.strip().rstrip(".").strip().strip("$").strip()
    found = re.findall(r"-?\d+(?:\.\d+)?(?:/\d+)?", output)
    return found[-1] if found else ""


def math_equal(pred: str, gold: str) -> bool:
    """Whether two MATH-style answers are equivalent (math-verify; numbers within REL_TOL)."""
    if not pred.strip():
        return False
    gold_value, pred_value = plain_number(gold), plain_number(pred)
    if gold_value is not None and pred_value is not None:
        return numbers_match(pred_value, gold_value)
    from math_verify import parse, verify

    def parsed(text: str) -> list:
        for candidate in (f"${text}$", text):
            try:
                result = parse(candidate)
            except Exception:
                result = []
            if result:
                return result
        return []

    gold_parsed, pred_parsed = parsed(gold), parsed(pred)
    if not gold_parsed or not pred_parsed:
        return _normalise(pred) == _normalise(gold)
    try:
        return bool(verify(gold_parsed, pred_parsed))
    except Exception:
        return _normalise(pred) == _normalise(gold)


def plain_number(text: str) -> float | None:
    """`text` as a number when it is nothing but one (fractions and LaTeX fractions included)."""
    stripped = _strip_latex(text).replace(" ", "").strip("$")
    if not re.fullmatch(r"[-+−]?\$?(\d[\d,]*(\.\d+)?|\.\d+)(/\d+)?%?", stripped):
        return None
    return parse_number(stripped)


@dataclass(frozen=True)
class Scored:
    """The prediction read from one output and whether it is right.

    `prediction` is the answer as text ("" when none was found); `value` the predicted number for
    number items (None otherwise or when none was found).
    """

    prediction: str
    correct: bool
    value: float | None = None


def score(item: Item, output: str) -> Scored:
    """Extract the answer of `item.kind` from `output` and compare it with `item.answer`."""
    kind: AnswerKind = item.kind
    if kind == "number":
        value = extract_number(output)
        gold = parse_number(item.answer)
        if gold is None:
            raise ValueError(f"item {item.id}: gold answer {item.answer!r} is not a number")
        return Scored(format_number(value), numbers_match(value, gold), value)
    if kind == "choice":
        letter = extract_choice(output, item.options)
        return Scored(letter or "", letter == item.answer.upper())
    prediction = extract_math(output)
    return Scored(prediction, math_equal(prediction, item.answer), plain_number(prediction))
