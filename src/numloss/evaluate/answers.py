"""numloss's answer extraction and comparison (the `numloss` protocol; `released.py` holds the paper's).

Where the answer is looked for, in order (the first rule that finds one wins):

1. after the last "The answer is" / "the answer is:" / "final answer is" / "Final answer:" (a bare
   "answer:" is not a marker: "To find the answer: 80,000 + ..." is working, not the answer); a
   first line that is arithmetic written out ("12 + 6 = 18") gives what follows its "=";
2. after the last "####" (GSM8K's marker);
3. inside the last ``\\boxed{...}``;
4. numbers: the last number of the whole output. Choices: an explicit letter in any case ("(C)",
   "(c)", "c)", "answer is c.", "Answer: c", "option C", ``\\boxed{c}``, a bare "c", an output
   ending "we choose c."; a lower-case letter only where it cannot be a word, so "a boy" is never
   A); then the option whose whole text the answer is ("1 over 5"); then, only for options that are a number (maybe with a unit after a
   space: "80 km/h"; never "$5m+4p$"), the option whose value equals the answer's number; then the option whose text appears, as whole words, in the
   answer (the longest such option). No letter found is no answer (no guess).

Numbers are read exactly (as fractions, never through a float) with thousands separators
("1,234"; a comma separates thousands only when every group after it has three digits, so
"4,6,14,15" is a list of four numbers and a gold like it is compared as a list), signs (also U+2212 "−"; a minus counts as a sign only when it touches the digits and
does not follow a digit or a closing bracket, so "8 - 3" reads 8 then 3), decimals, fractions
("3/4", ``\\frac{3}{4}``), percentages ("45%" reads as 45, the way the benchmarks write
percentage answers: no x/100), exponents, currency and units around them ("$46.50", "12 km/h").
Float noise: a number written with a fractional part and 15 or more significant digits (what a
program printing a binary float gives, 60.00000000000001, 583.3333333333334) is rounded to 12
significant digits when read, never above the units place (1234567890123.4500001 reads
1234567890123).

Comparison with a gold number (`number_matches`) never passes a wrong digit:

- an integer gold ("18") or a gold with one decimal ("0.3") matches only a prediction that is
  exactly that number ("0.30" too; 0.25, 0.26 and 0.3001 do not);
- a gold with d >= 2 decimals ("583.3333", "8695.65") may be a rounding of its answer: it matches
  the same number, or a more precise prediction strictly inside its half-unit interval: 583.33333
  matches, 583.333 and 583.3334 do not, and a tie (0.245 for "0.25") does not.

MATH-style expressions are compared with math-verify (plain numbers by the rule above).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from fractions import Fraction

from numloss.evaluate.benchmarks import LETTERS, AnswerKind, Item, boxed_content

_TRIGGERS = re.compile(r"(?:the (?:final )?answer is\s*:?|final answer\s*:)", re.I)
_NUMBER = re.compile(
    r"""(?<![\w.])                 # not inside a word or after a decimal point
    (?P<sign>[-+−])?
    \$?
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
# digits, maybe grouped in thousands: a comma is a separator only when every group after it has
# three digits ("14,400", "1,234,567"); "4,6,14,15" is a list of four numbers
_DIGITS = r"(?:\d{1,3}(?:,\d{3})+|\d+)"
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
NOISE_DIGITS = 15  # a written number with this many significant digits and a fraction is float noise
KEEP_DIGITS = 12  # ... and is read rounded to this many (never above the units place)
ROUNDED_GOLD_DECIMALS = 2  # a gold with this many decimals or more may be a rounding of its answer


def _strip_latex(text: str) -> str:
    """LaTeX number dressing removed: \\frac{a}{b} -> a/b, \\text{..} units, \\$, \\%, \\!, braces."""
    s = _FRAC.sub(r"(\1)/(\2)", text)
    s = re.sub(r"\\text\{[^{}]*\}|\\mbox\{[^{}]*\}", " ", s)
    s = s.replace("\\$", "$").replace("\\%", "%").replace("\\!", "").replace("\\,", "")
    s = s.replace("{,}", ",").replace("\\left", "").replace("\\right", "")
    s = re.sub(r"\((-?\d+(?:\.\d+)?)\)/\((\d+(?:\.\d+)?)\)", r"\1/\2", s)
    return s


def _decimal(value: Fraction) -> Decimal:
    """`value` as a Decimal, to 60 significant digits (exact for every decimal a model writes)."""
    with localcontext() as ctx:
        ctx.prec = 60
        return Decimal(value.numerator) / Decimal(value.denominator)


def _quantize(value: Decimal, step: Decimal) -> Decimal | None:
    with localcontext() as ctx:
        ctx.prec = 900
        try:
            return value.quantize(step, rounding=ROUND_HALF_UP)
        except InvalidOperation:
            return None


def _denoise(body: str, value: Fraction) -> Fraction:
    digits = body.replace(",", "").replace(".", "").lstrip("0")
    if "." not in body or len(digits) < NOISE_DIGITS or value == 0:
        return value
    d = _decimal(value)
    # never above the units place: float noise sits in the fraction, an integer digit is data
    snapped = _quantize(d, Decimal(1).scaleb(min(d.adjusted() - KEEP_DIGITS + 1, 0)))
    return value if snapped is None else Fraction(snapped)


def _is_binary_minus(text: str, start: int) -> bool:
    """Whether the sign at `start` follows an operand (a digit or closing bracket, spaces allowed)."""
    before = text[:start].rstrip()
    return bool(before) and (before[-1].isdigit() or before[-1] in ")]}")


def _value(match: re.Match[str], text: str) -> Fraction | None:
    body = match.group("body").replace(",", "")
    try:
        if "/" in body:
            num, den = body.split("/")
            if Fraction(den) == 0:
                return None
            value = Fraction(num) / Fraction(den)
        else:
            value = Fraction(body)
    except (ValueError, ZeroDivisionError):
        return None
    if match.group("exp"):
        exp = int(match.group("exp"))
        if abs(exp) > 400:
            return None
        value *= Fraction(10) ** exp
    value = _denoise(match.group("body"), value) if "/" not in body else value
    sign = match.group("sign")
    if sign in ("-", "−") and not _is_binary_minus(text, match.start()):
        value = -value
    return value


def exact_numbers_in(text: str) -> list[Fraction]:
    """Every number in `text`, left to right, exactly (see the module doc for what is read)."""
    stripped = _strip_latex(text)
    out = []
    for match in _NUMBER.finditer(stripped):
        value = _value(match, stripped)
        if value is not None:
            out.append(value)
    return out


def parse_exact(text: str) -> Fraction | None:
    """The first number in `text` (units and currency ignored), exactly, or None."""
    found = exact_numbers_in(text)
    return found[0] if found else None


def parse_number(text: str) -> float | None:
    """The first number in `text` (units and currency ignored), or None."""
    value = parse_exact(text)
    return None if value is None else float(value)


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


def extract_exact(output: str) -> Fraction | None:
    """The predicted number: the first number after a marker, else the last number of the output."""
    segment, marked = answer_segment(output)
    if marked:
        boxed = boxed_content(segment)
        found = exact_numbers_in(boxed if boxed is not None else _result_of_sum(segment))
        if found:
            return found[0]
    found = exact_numbers_in(output)
    return found[-1] if found else None


_SUM = re.compile(r"[\d\s.,+\-−*/×÷·()$%]*\d[\d\s.,+\-−*/×÷·()$%]*")


def _result_of_sum(segment: str) -> str:
    """The answer segment, or what follows "=" when its first line is arithmetic written out:
    "12 + 6 = 18" reads 18 (but "x = 5, y = 3" still reads 5, the first unknown)."""
    head, _, rest = segment.lstrip().partition("\n")
    left, eq, right = head.rpartition("=")
    if eq and _SUM.fullmatch(left) and re.search(r"\d\s*[-+−*/×÷·]\s*\$?\(?\d", left):
        return right + "\n" + rest
    return segment


def extract_number(output: str) -> float | None:
    """`extract_exact` as a float."""
    value = extract_exact(output)
    return None if value is None else float(value)


def format_exact(value: Fraction | None) -> str:
    """A number as text that reads back to exactly it: "7", "46.5", "-0.25", "1/3"."""
    if value is None:
        return ""
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    if den != 1:
        return f"{value.numerator}/{value.denominator}"
    text = format(_decimal(value), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_number(value: float | None) -> str:
    """A float as the shortest decimal string that reads back to it ("7", "46.5", "-0.25")."""
    if value is None:
        return ""
    if value == int(value) and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def gold_decimal(gold: str) -> Decimal | None:
    """A gold answer as an exact decimal ("1,234.50" -> 1234.50, "45%" -> 45), None if it is not one."""
    s = gold.strip().replace("$", "").rstrip("%").strip()
    if not re.fullmatch(r"[-+]?(" + _DIGITS + r"(\.\d*)?|\.\d+)", s):  # "4,6,14,15" is a list, not 461415
        return None
    s = s.replace(",", "")
    try:
        return Decimal(s)
    except InvalidOperation:
        return None


FRACTION_GOLD_DECIMALS = 3  # a decimal given for a fraction gold ("5/6") shows at least this many decimals


def number_matches(pred: Fraction | float | None, gold: str, pred_text: str | None = None) -> bool:
    """Whether `pred` is the gold number `gold` at the gold's own precision (module doc).

    A fraction gold ("3/4", "\\frac{5}{6}") is matched exactly, or by a decimal `pred_text` with at
    least FRACTION_GOLD_DECIMALS decimals that is the gold rounded to that many ("0.833" for 5/6).
    """
    if pred is None:
        return False
    if isinstance(pred, float):
        if pred != pred or pred in (float("inf"), float("-inf")):
            return False
        pred = Fraction(pred)
    target = gold_decimal(gold)
    if target is None:
        value = parse_exact(gold)
        if value is None:
            return False
        if pred == value:
            return True
        written = re.fullmatch(r"\s*[-+]?\d*\.(\d+)\s*", pred_text or "")
        if not written or len(written.group(1)) < FRACTION_GOLD_DECIMALS:
            return False
        return _quantize(_decimal(value), Decimal(1).scaleb(-len(written.group(1)))) == Decimal(pred_text.strip())
    written = gold.strip().replace(",", "").replace("$", "").rstrip("%").strip()
    places = len(written.split(".", 1)[1]) if "." in written else 0
    if pred == Fraction(target):
        return True
    if places < ROUNDED_GOLD_DECIMALS:  # an integer or one-decimal gold ("0.3"): exactly that number
        return False
    # a gold that may be a rounding ("583.3333", "8695.65"): a more precise prediction strictly
    # inside its half-unit interval; a tie ("0.245" for "0.25") could be either neighbour's
    half_unit = Fraction(1, 2 * 10**places)
    return abs(pred - Fraction(target)) < half_unit


# A letter named as the answer. Capitals: "(C)", "C", "C)". Lower case only where it cannot be a
# word: bracketed ("(c)", "c)") or standing alone before the end or a punctuation mark ("The answer
# is c.", "Answer: c"); so "the answer is a boy" and "a long way off" name no letter.
_CLOSE = r"(?=\s*(?:$|[.,;!?)\]]))"
_LETTER_HERE = re.compile(
    r"\s*(?:\*\*)?\$?(?:\(([A-Ea-e])\)|([A-E])(?![\w'])|([a-e])\)|([a-e])" + _CLOSE + ")"
)
_EXPLICIT_LETTER = [
    re.compile(r"(?i:answer|option|choice)\s*(?i:is|would be|:)?\s*:?\s*(?:\(([A-Ea-e])\)|([A-E])(?![\w'])|([a-e])\)|([a-e])" + _CLOSE + ")"),
    re.compile(r"\(([A-E])\)"),
]


def _letter_of(match: re.Match[str] | None) -> str | None:
    if match is None:
        return None
    return next(g for g in match.groups() if g).upper()


def _bare_letter(output: str) -> str | None:
    """A letter the output is, starts with ("c) ...") or ends with ("... so we choose c."). A
    lower-case "a" ending an output counts only when a full stop or bracket closes it: without
    one it is as likely the article of a cut-off sentence ("the total is a")."""
    text = output.strip()
    start = re.match(r"\(?([A-Ea-e])\)(?!\S)", text)
    if start:
        return start.group(1).upper()
    closed = text.rstrip("!").endswith((".", ")"))
    text = text.rstrip(".!").strip().strip("*$").strip()
    whole = re.fullmatch(r"\(?([A-Ea-e])\)?", text)
    if whole:
        return whole.group(1).upper()
    tail = re.search(r"(?:^|[\s(])(\(?)([A-Ea-e])(\)?)$", text)
    if tail and (tail.group(2) != "a" or tail.group(3) or closed):
        return tail.group(2).upper()
    return None


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", _strip_latex(text)).strip(" .$").lower()


def extract_choice(output: str, options: tuple[str, ...] = ()) -> str | None:
    """The chosen letter A-E: an explicit letter, else the option whose text or plain value is given."""
    n = len(options) or len(LETTERS)
    letters = LETTERS[:n]
    boxed = boxed_content(output)
    if boxed is not None:
        match = re.fullmatch(r"\s*(?:\\text\{)?\(?([A-Ea-e])\)?\}?\s*", boxed)
        if match and match.group(1).upper() in letters:
            return match.group(1).upper()
    segment, marked = answer_segment(output)
    if marked:
        letter = _letter_of(_LETTER_HERE.match(segment.strip()[:80]))
        if letter and letter in letters:
            return letter
    for pattern in _EXPLICIT_LETTER:
        found = [_letter_of(m) for m in pattern.finditer(output)]
        found = [f for f in found if f in letters]
        if found:
            return found[-1]
    letter = _bare_letter(output)
    if letter and letter in letters:
        return letter
    if not options:
        return None
    where = segment if marked else (output.strip().splitlines()[-1] if output.strip() else "")
    whole = [i for i, option in enumerate(options) if _normalise(option) and _normalise(option) == _normalise(where)]
    if whole:  # the answer is an option's text, all of it ("1 over 5": not the option "5")
        return letters[whole[0]]
    pred = extract_exact(where)
    if pred is not None:  # a value: the plain-number option with that value ("80" -> "80")
        for i, option in enumerate(options):
            if pred == option_value(option):
                return letters[i]
    # option text inside the answer, whole words only; the longest wins ("15" loses to "150")
    text = _normalise(where)
    hits = []
    for i, option in enumerate(options):
        o = _normalise(option)
        if o and re.search(r"(?<![\w.])" + re.escape(o) + r"(?![\w]|\.\d)", text):
            hits.append((len(o), i))
    return letters[max(hits)[1]] if hits else None


_OPTION_VALUE = re.compile(r"[-+−]?\$?(" + _DIGITS + r"(\.\d+)?|\.\d+)(/\d+)?(\s?%|\s+[A-Za-z°²³/ .]+)?")


def option_value(option: str) -> Fraction | None:
    """An option's number when the option is just a number, maybe with a unit after a space
    ("80 km/h", "$4$", "25%"); None for anything else ("$5m+4p$", "x = 4", "5(√3 + 1)")."""
    text = _strip_latex(option).strip().strip("$").strip()
    if not _OPTION_VALUE.fullmatch(text):
        return None
    return parse_exact(text)


def extract_math(output: str) -> str:
    """The final expression of a MATH-style output (boxed, after a trigger, else the last number)."""
    segment, marked = answer_segment(output)
    if marked:
        boxed = boxed_content(segment)
        text = boxed if boxed is not None else segment.strip().split("\n")[0]
        return text.strip().strip("*").rstrip(".").strip().strip("*$").strip()
    found = re.findall(r"-?(?:\d+(?:\.\d+)?|\.\d+)(?:/\d+)?", output)  # ".5" is 0.5, not 5
    return found[-1] if found else ""


def plain_number(text: str) -> float | None:
    """`text` as a number when it is nothing but one (fractions and LaTeX fractions included)."""
    value = plain_exact(text)
    return None if value is None else float(value)


def plain_exact(text: str) -> Fraction | None:
    """`plain_number`, exactly."""
    stripped = _strip_latex(text).replace(" ", "").strip("$")
    if not re.fullmatch(r"[-+−]?\$?(" + _DIGITS + r"(\.\d+)?|\.\d+)(/\d+)?%?", stripped):
        return None
    return parse_exact(stripped)


def math_equal(pred: str, gold: str) -> bool:
    """Whether two MATH-style answers are equivalent (math-verify; plain numbers by `number_matches`).

    A prediction with "=" ("x = 14,\\!400", "12 + 6 = 18") for a gold without one is compared by
    what follows its last "="."""
    if not pred.strip():
        return False
    if "=" in pred and "=" not in gold:  # "x = 14,\\!400", "12 + 6 = 18": the right-hand side is the answer
        pred = pred.rsplit("=", 1)[1].strip().strip("$").strip()
    gold_value, pred_value = plain_exact(gold), plain_exact(pred)
    if gold_value is not None and pred_value is not None:
        plain_gold = _strip_latex(gold).replace(" ", "").strip("$")
        return number_matches(pred_value, plain_gold if gold_decimal(plain_gold) is not None else gold, pred.strip().strip("$"))
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


@dataclass(frozen=True)
class Scored:
    """The prediction read from one output and whether it is right.

    `prediction` is the answer as text ("" when none was found); `value` the predicted number for
    number items (None otherwise or when none was found).
    """

    prediction: str
    correct: bool
    value: float | None = None


# A blank line and then a new problem: the model went on to invent another question (what the
# released code's "in-context" rule and the "\n\nProblem" stop string are for); its answer is
# not this item's.
_NEXT_PROBLEM = re.compile(r"\n[ \t]*\n\s*(?:#+\s*)?(?:Problem|Question|Q|Example|Exercise)\s*\d*\s*[:.]", re.I)


def extract(item: Item, text: str) -> str:
    """numloss's prediction for `item` from `text`, as text ("" when there is none)."""
    text = _NEXT_PROBLEM.split(text, maxsplit=1)[0]
    if item.kind == "number":
        return format_exact(extract_exact(text))
    if item.kind == "choice":
        return extract_choice(text, item.options) or ""
    return extract_math(text)


def compare(item: Item, prediction: str) -> bool:
    """Whether numloss's `prediction` (from `extract`) is `item`'s gold answer."""
    if not prediction:
        return False
    kind: AnswerKind = item.kind
    if kind == "number":
        if gold_decimal(item.answer) is None and parse_exact(item.answer) is None:
            raise ValueError(f"item {item.id}: gold answer {item.answer!r} is not a number")
        return number_matches(parse_exact(prediction), item.answer, prediction)
    if kind == "choice":
        return prediction == item.answer.upper()
    return math_equal(prediction, item.answer)


def score(item: Item, output: str) -> Scored:
    """Extract the answer of `item.kind` from `output` and compare it with `item.answer`."""
    prediction = extract(item, output)
    value = plain_number(prediction) if item.kind != "choice" and prediction else None
    return Scored(prediction, compare(item, prediction), value)
