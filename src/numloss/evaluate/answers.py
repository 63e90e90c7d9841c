"""numloss's reading: the released reading of an output, then a few named corrections.

`read(item, text, dataset)` first reads `text` exactly as the released code does
(`released.answer_clean`, quirks included), then applies `CORRECTIONS` in order. A correction
looks at the output and the item's kind and options, never at its gold (it is handed a `Task`,
which has no gold), and either does not fire or gives another text to read the released way, another
answer, or "unreadable" with a one-line reason. Where no correction fires, numloss reads what
released reads. `Reading.decided_by` names the last correction that changed the answer
("released" when none did). Numbers are compared exactly at the gold's precision
(`number_matches`), MATH expressions by math-verify, after `check_size` has refused numbers too
large to compare within the per-item bound. Each correction, its trigger and an example each way:
docs/evaluation.md, "Deviations from the released protocol".
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from fractions import Fraction
from typing import Any

import regex

from numloss.evaluate import released
from numloss.evaluate.benchmarks import LETTERS, Item

# ---------------------------------------------------------------- time bound
#
# Every pattern here is linear on any text; as a second line of defence a `regex` match runs
# under the timeout left by `read_limit`'s deadline, and the block is bounded after the fact.

READ_SECONDS = 10.0  # the scorer's bound on reading one output (one protocol, one attempt)
_DEADLINE: ContextVar[float | None] = ContextVar("numloss_read_deadline", default=None)
_TOO_LONG = "reading this output took longer than its time bound"


class ReadTimeout(TimeoutError):
    """Reading one output took longer than the per-item bound (`read_limit`)."""


@contextmanager
def read_limit(seconds: float | None = READ_SECONDS) -> Iterator[None]:
    """Bound everything read inside the block to `seconds` of wall time (None: no bound)."""
    deadline = None if seconds is None else time.monotonic() + seconds
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)
    # a reader that cannot be interrupted (the released `re` patterns, linear) is bounded after the
    # fact
    if deadline is not None and time.monotonic() > deadline:
        raise ReadTimeout(f"{_TOO_LONG} ({seconds:g} s)")


def _left() -> float | None:
    deadline = _DEADLINE.get()
    left = None if deadline is None else deadline - time.monotonic()
    if left is not None and left <= 0:
        raise ReadTimeout(_TOO_LONG)
    return left


def _rx(pattern: str, flags: int = 0) -> regex.Pattern:
    return regex.compile(pattern, flags | regex.V0)


def _search(pattern: regex.Pattern, text: str, pos: int = 0) -> regex.Match | None:
    """`pattern.search` under the read deadline (ReadTimeout past it)."""
    try:
        return pattern.search(text, pos, timeout=_left())
    except TimeoutError as error:
        raise ReadTimeout(_TOO_LONG) from error


def _all(pattern: regex.Pattern, text: str) -> list[regex.Match]:
    try:
        return list(pattern.finditer(text, timeout=_left()))
    except TimeoutError as error:
        raise ReadTimeout(_TOO_LONG) from error


# ---------------------------------------------------------------- numbers

# a longer output (a program's 10 MB of output, a model in a loop) is not read
MAX_READ_CHARS = 1 << 21
MAX_DIGITS = 400  # a number written with more digits is not compared (int() and sympy would stall)
MAX_EXPONENT = 400  # nor one with a larger power of ten ("1E+999999", "10^{999999999}")
NOISE_DIGITS = 15  # a number with a fraction and this many significant digits is float noise
KEEP_DIGITS = 12  # ... read rounded to this many (never above the units place)
ROUNDED_GOLD_DECIMALS = 2  # a gold with this many decimals or more may be a rounding of its answer
FRACTION_GOLD_DECIMALS = 3  # a decimal given for a fraction gold ("5/6") shows at least this many

_LONG_DIGITS = _rx(r"\d{" + str(MAX_DIGITS + 1) + "}")
_EXPONENT = _rx(
    r"(?:\^|(?<=[\d)}][ \t]{0,2})\*\*|(?<=\d)[eE]|\\times[ \t]{0,4}10[ \t]{0,4}\^)["
    r" \t{(]{0,4}[-+−]?[ \t]{0,4}(\d{1,20}+)"
)


class TooLarge(ValueError):
    """An output or a number too large to read and compare within the per-item bound
    (`check_size`)."""


def check_size(text: str) -> None:
    """Raise TooLarge when `text` is longer than MAX_READ_CHARS, holds a number of more than
    MAX_DIGITS digits, or a power of ten beyond MAX_EXPONENT: refused before any parser (int(),
    sympy inside math-verify) is given it, so reading and comparing stay within the bound."""
    if len(text) > MAX_READ_CHARS:
        raise TooLarge(f"the output is longer than {MAX_READ_CHARS} characters")
    if _search(_LONG_DIGITS, text):
        raise TooLarge(f"a number of more than {MAX_DIGITS} digits is not compared")
    for match in _all(_EXPONENT, text):
        if int(match.group(1)) > MAX_EXPONENT:
            raise TooLarge(
                f"an exponent above {MAX_EXPONENT} ({match.group(0).strip()[:30]}) is not compared"
            )


_PLAIN = _rx(r"[-+−]?\$?(\d{1,3}(?:,\d{3})++|\d++)?(\.\d++)?(?:/(\d++))?%?")
_FRAC = _rx(r"[-−]?\\[dt]?frac\{(\d{1,400})\}\{(\d{1,400})\}")


def plain_exact(text: str) -> Fraction | None:
    """`text` as an exact number when it is nothing but one ("-1,234.5", "$18", "45%", "3/4",
    "\\frac{3}{4}"); None otherwise."""
    s = text.strip().strip("$").replace("\\!", "").replace("\\$", "$").replace("\\%", "%").strip()
    if len(s) > 2 * MAX_DIGITS:
        return None
    frac = _FRAC.fullmatch(s)
    if frac:
        value = Fraction(int(frac.group(1)), int(frac.group(2))) if int(frac.group(2)) else None
        return -value if value is not None and s[0] in "-−" else value
    match = _PLAIN.fullmatch(s)
    if not match or not (match.group(1) or match.group(2)):
        return None
    body = s.lstrip("+-−$").rstrip("%").replace(",", "")
    num, _, den = body.partition("/")
    try:
        value = Fraction(num) / (Fraction(den) if den else 1)
    except (ValueError, ZeroDivisionError):
        return None
    return -value if s[0] in "-−" else value


def plain_number(text: str) -> float | None:
    """`plain_exact` as a float (an infinite one beyond a float's range)."""
    value = plain_exact(text)
    if value is None:
        return None
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


def _decimal(value: Fraction) -> Decimal:
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


def format_exact(value: Fraction | None) -> str:
    """A number as text that reads back to exactly it: "7", "46.5", "-0.25", "1/3"."""
    if value is None:
        return ""
    if value.denominator == 1:
        return str(value.numerator)
    # a terminating decimal's denominator, 2**a * 5**b, divides 10**max(a, b)
    if 10 ** value.denominator.bit_length() % value.denominator:
        return f"{value.numerator}/{value.denominator}"
    text = format(_decimal(value), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def gold_decimal(gold: str) -> Decimal | None:
    """A gold answer as an exact decimal ("1,234.50" -> 1234.50, "45%" -> 45), None if it is not
    one."""
    s = gold.strip().replace("$", "").rstrip("%").strip()
    # "4,6,14,15" is a list
    if not regex.fullmatch(r"[-+]?((?:\d{1,3}(?:,\d{3})+|\d+)(\.\d*)?|\.\d+)", s):
        return None
    return Decimal(s.replace(",", ""))


def number_matches(pred: Fraction | float | None, gold: str, pred_text: str | None = None) -> bool:
    """Whether `pred` is the gold number at the gold's own precision: an integer or one-decimal gold
    exactly; a gold with 2+ decimals also a more precise prediction strictly inside its half-unit
    interval; a fraction gold exactly, or by a decimal `pred_text` of 3+ decimals that rounds it."""
    if pred is None or (isinstance(pred, float) and (pred != pred or abs(pred) == float("inf"))):
        return False
    pred = Fraction(pred)
    target = gold_decimal(gold)
    if target is None:
        value = plain_exact(gold)
        if value is None or pred == value:
            return value is not None
        written = re.fullmatch(r"\s*[-+]?\d*\.(\d+)\s*", pred_text or "")
        if not written or len(written.group(1)) < FRACTION_GOLD_DECIMALS:
            return False
        step = Decimal(1).scaleb(-len(written.group(1)))
        return _quantize(_decimal(value), step) == Decimal(pred_text.strip())
    places = max(0, -target.as_tuple().exponent)  # the decimals written ("46.50": 2)
    if pred == Fraction(target):
        return True
    return places >= ROUNDED_GOLD_DECIMALS and abs(pred - Fraction(target)) < Fraction(
        1, 2 * 10**places
    )


# ---------------------------------------------------------------- corrections


@dataclass(frozen=True)
class Task:
    """What a correction may see of an item besides the output: never its gold."""

    kind: str
    options: tuple[str, ...]
    dataset: str  # the released dataset name: only "gsm8k" has triggers of its own ("####")


@dataclass(frozen=True)
class Unreadable:
    """A correction's verdict that the output gives no answer it can stand by."""

    reason: str


@dataclass(frozen=True)
class Correction:
    """A named fix of the released reading. `fire(task, text, prediction)` gets the text being read
    and the released-way prediction of it; it returns None (not fired), a `Read` (another text,
    read the released way), a string (another answer) or an `Unreadable`."""

    name: str
    kinds: frozenset[str]
    fire: Callable[[Task, str, str], Any]
    as_written: bool = False  # a number it gives is the prediction as it is (not through float())


@dataclass(frozen=True)
class Read:
    """Read this text instead, the released way."""

    text: str


@dataclass(frozen=True)
class Reading:
    """What numloss read: the prediction ("" for none), the rule that decided it, and, when a
    correction gave no answer, its one-line reason (no answer is a verdict, not an error: the
    runner's `note` is for outputs that could not be read)."""

    prediction: str
    decided_by: str = "released"
    note: str = ""


def released_reading(task: Task, text: str) -> str:
    """The released answer of `text`, numbers with the digits as written (`delete_extra_zero` is
    the `exact-digits` correction's to skip)."""
    if task.kind != "number":
        return released.answer_clean(task.dataset, task.kind, text)
    segment, marked = released.answer_segment(task.dataset, task.kind, text)
    found = re.findall(r"-?\d+/?\.?\d*", segment.replace(",", ""))
    return (found[0] if marked else found[-1]).rstrip(".").rstrip("/") if found else ""


# cuts: what is not this item's answer


def _harmony_final(task: Task, text: str, pred: str) -> Read | None:
    """gpt-oss harmony: the final channel's message, not the analysis before it."""
    at = text.rfind("<|channel|>final<|message|>")
    if at < 0:
        return None
    final = text[at + len("<|channel|>final<|message|>") :]
    return Read(re.split(r"<\|(?:end|return|call|start)\|>", final, maxsplit=1)[0])


def _think_block(task: Task, text: str, pred: str) -> Read | None:
    """A closed <think> block is working: the answer is what follows it (when something does)."""
    at = text.rfind("</think>")
    after = text[at + len("</think>") :] if at >= 0 else ""
    return Read(after) if after.strip() else None


_OTHER_ROLE = (
    r"(?:<\|im_start\|>|<\|start_header_id\|>|<start_of_turn>|<\|start\|>)["
    r" \t]{0,2}(?:user|system|human|tool|developer)"
    r"|\[INST\]|<｜User｜>|<\|(?:user|system)\|>|(?:User|Human|USER|HUMAN)[ \t]{0,2}:"
)
_END_OF_TURN = _rx(
    r"(?:<\|im_end\|>|<\|eot_id\|>|<\|end\|>|<\|return\|>|<end_of_turn>|</s>|<\|endoftext\|>|<\|end_of_text\|>"
    r"|<｜end▁of▁sentence｜>)[ \t\r\n]{0,40}(?=" + _OTHER_ROLE + ")"
)


def _end_of_turn(task: Task, text: str, pred: str) -> Read | None:
    """An end-of-turn token followed by another role's turn (a chat template's invented next
    turn): the answer is what comes before it."""
    match = _search(_END_OF_TURN, text)
    return Read(text[: match.start()]) if match else None


_NEXT = _rx(
    r"(?im)^[ \t>*#_]{0,8}(?:(?:(?:next|new|another)["
    r" \t]{1,3})?(?:question|problem|exercise|q|input|instruction|student|teacher|user|human|assistant|system)"  # noqa: E501
    r"(?:[ \t]{0,3}\d{1,3})?[ \t*]{0,3}(?:[:.：]|$)|\[INST\]|(?:now[ \t,]{1,3})?let'?s["
    r" \t]{1,3}try[ \t]{1,3}another|\d{1,3}[.)][ \t][^\n?]{1,200}\?[ \t*]{0,3}$)"
)


def _next_exercise(task: Task, text: str, pred: str) -> Read | None:
    """A line that opens another exercise or turn after the answer ("Question:", "Q2:", "Problem
    2:", "### Next Question", "Student:", "[INST]", "Now let's try another one", "2. What is 5 +
    9?", a role name alone on its line): what follows is not this item's answer."""
    for match in _all(_NEXT, text):
        if text[: match.start()].strip():
            return Read(text[: match.start()])
    return None


# lm-eval's minerva_math answer sentence (its get_unnormalized_answer reads the same span)
_MINERVA = _rx(r"The final answer is[ \t]{1,3}(.{1,400}?)\.?[ \t]{1,3}I hope it is correct")


def _minerva_final(task: Task, text: str, pred: str) -> Read | None:
    """The Minerva MATH answer sentence ("Final Answer: The final answer is $\\frac{9}{7}$. I hope
    it is correct."): its answer, as lm-eval reads it. The released code has no trigger there and
    reads the last number (a denominator, the "I" of "I hope" for a choice). When the sentence's
    answer is one number in dress and that is the number read, the released reading stands."""
    found = _search(_MINERVA, text)
    number = _one_number(found.group(1)) if found else None
    if not found or (number is not None and plain_exact(number) == plain_exact(pred)):
        return None
    return Read("The answer is " + found.group(1))


_AFTERWORD = _rx(
    r"(?im)^[ \t>*#_🔍✅\uFE0F]{0,12}(?:(?:explanation|note|notes|check|double-check|sanity["
    r" \t]check|verification|verify|reasoning|justification)\b[^\n:]{0,20}(?:[:*]|$)"
    r"|(?:now[ \t,]{1,3}|hmm,?[ \t]{1,3})?let(?:'s|[ \t]me)["
    r" \t]{1,3}(?:double-check|re-?check|check|verify)|to[ \t]verify|\(?not[ \t])"
)


def _afterword(task: Task, text: str, pred: str) -> Read | None:
    """An explanation, check or verification after the answer ("Explanation:", "Note:",
    "Let me double-check", "(Not 18.)"): the answer is what comes before it, when anything does."""
    match = _search(_AFTERWORD, text)
    return Read(text[: match.start()]) if match and text[: match.start()].strip() else None


_STRUCK = _rx(r"~~[^~\n]{1,400}+~~")
_EMPHASIS = _rx(r"</?(?:b|i|u|em|strong|mark)>|(?<!\w)__|__(?!\w)", regex.I)


def _markup(task: Task, text: str, pred: str) -> Read | None:
    """Struck-out text ("~~18~~ 25") is what the model withdrew; emphasis is dress around the
    answer: the released code reads the B of "<b>C</b>" as the letter, and no letter in "__C__"."""
    plain = _EMPHASIS.sub("", _STRUCK.sub(" ", text))
    return Read(plain) if plain != text else None


_CUE = _rx(
    r"(?i)(?:\bwait\b|\bactually\b|\bi[ \t]mean\b|\boops\b|\bsorry\b|\bcorrection\b|\bmake["
    r" \t]that\b|\bit[ \t]should[ \t]be\b)[^\n]{0,80}?"
    r"(?<![\w.])([-−]?\$?\d[\d,]*(?:\.\d+)?|\(?[A-J]\)?)[ \t.!)*]{0,4}$",
    regex.M,
)


def _self_correction(task: Task, text: str, pred: str) -> Read | None:
    """A correction after the answer ("18. Wait, actually it is 25.", "18, I mean 25", "A. Oops, it
    should be B.") whose line ends with an answer: that answer."""
    match = _search(_CUE, text)
    return Read("The answer is " + match.group(1)) if match and pred else None


_DANGLING = _rx(
    r"[ \t](?:and|the|of|by|then|we|plus|with|to|is|from|so|which|that|minus|times)[ \t]*$"
)


def _cut_off(task: Task, text: str, pred: str) -> Unreadable | None:
    """An output cut off mid-sentence on a line that holds an answer candidate ("We start with 18
    and then we", "Step 2: multiply by"): that candidate is working, not an answer. An answer given
    after a trigger before the cut ("The answer is (C) Kathy repairs phones at a") was finished."""
    body = text.rstrip()
    last = body.rsplit("\n", 1)[-1]
    if not pred or not _search(_DANGLING, body[-40:]) or not released_reading(task, last):
        return None
    marked = released.answer_segment(task.dataset, task.kind, last)[1]
    return None if marked else Unreadable("the output is cut off mid-sentence")


_TABLE_ANSWER = _rx(
    r"(?im)^[ \t]{0,4}\|[ \t*]{0,4}(?:final[ \t]{1,3}|correct[ \t]{1,3})?answer[ \t*:]{0,4}\|["
    r" \t]{0,4}([^|\n]{1,80}?)[ \t]{0,4}\|"
)


def _table_answer(task: Task, text: str, pred: str) -> Read | None:
    """A markdown table row "| Answer | (C) |": its cell is the answer (the released code reads
    the last letter or number of the whole output)."""
    if any(m in text for m in released.triggers(task.dataset, task.kind)):
        return None
    rows = _all(_TABLE_ANSWER, text)
    return Read("The answer is " + rows[-1].group(1)) if rows else None


# readings: the released answer of the (cut) text, corrected

_OPERATION = _rx(
    r"^[ \t$*(]{0,4}[-−]?\d[\d,.]{0,40}(?:[ \t]{0,3}[-+*/×x÷]["
    r" \t]{0,3}\(?[-−]?\d[\d,.]{0,40}\)?){1,12}[ \t]{0,3}=["
    r" \t]{0,3}\$?([-−]?\d[\d,]{0,40}(?:\.\d{1,40})?)(?![\d.,]\d)"
)


def _operation_result(task: Task, text: str, pred: str) -> str | None:
    """ "The answer is 5 + 3 = 8": the result of the sum, not its first operand."""
    segment, marked = released.answer_segment(task.dataset, task.kind, text)
    match = _search(_OPERATION, segment) if marked else None
    return match.group(1).replace(",", "").replace("−", "-") if match else None


_SEP = r"""[ \t$*)"'`.]{0,4}(?:[ \t]{1,3}(?:or|and)[ \t]{1,3}|[ \t]{0,3}[–—][ \t]{0,3}|[ \t]{1,3}to[ \t]{1,3})[ \t$*("'`]{0,4}"""  # noqa: E501
_ONE = r"(?:(?<![\d.])[-−]?\d[\d,.]{0,40}|(?<![\w])\(?[A-J]\)?(?![\w]))"
# "It could be 25 or 18; I am not sure."
_HEDGE = _rx(_ONE + r"[ \t]{1,3}or[ \t]{1,3}" + _ONE + r"[^\d\n]{0,60}$")
_ALTERNATIVES = _rx(
    r"""^[ \t$*("'`]{0,4}(?:either[ \t]{1,3}|between[ \t]{1,3})?(?:[-−]?\d[\d,.]{0,40}"""
    + _SEP
    + r"[-−]?\d|\(?[A-J]\)?"
    + _SEP
    + r"\(?[A-J]\)?(?![\w]))",
    regex.I,
)


def _alternatives(task: Task, text: str, pred: str) -> Unreadable | None:
    """ "The answer is 18 or 25", "between B and C", "18–20": two answers, no answer (the
    released code reads the first)."""
    segment, marked = released.answer_segment(task.dataset, task.kind, text)
    two = _search(_ALTERNATIVES, segment) if marked else _search(_HEDGE, text.rstrip()[-200:])
    return Unreadable("the answer names alternatives") if two else None


_NUMBER = re.compile(r"-?\d+/?\.?\d*")  # the released number pattern
_LIST_MARKER = re.compile(r"(?m)^[ \t]{0,8}(\d{1,3})[.)](?=[ \t])")


def _list_marker(task: Task, text: str, pred: str) -> str | Unreadable | None:
    """Without a trigger the released code reads the last number, which may be a list item's
    marker ("3. Answer: the rest"): the last number that is not one, else none."""
    segment, marked = released.answer_segment(task.dataset, task.kind, text)
    segment = segment.replace(",", "")
    markers = {m.start(1) for m in _LIST_MARKER.finditer(segment)}
    if marked or not markers:
        return None
    kept = [m.group(0) for m in _NUMBER.finditer(segment) if m.start() not in markers]
    pick = kept[-1].rstrip(".").rstrip("/") if kept else ""
    # "3. Answer: fifteen" read 15 before
    if pick == pred or pred not in {m.group(1) for m in _LIST_MARKER.finditer(segment)}:
        return None
    return pick or Unreadable("the only number read is a list item's marker")


_NOT_ANYWHERE = _rx(r"(?i)\bnot|n't|instead[ \t]of|rather[ \t]than")
_NOT = re.compile(r"(?i)(?:\bnot|n't|instead[ \t]of|rather[ \t]than)[ \t*_\"'`(\[“‘$]{1,6}$")


def _ruled_out(task: Task, text: str, pred: str) -> str | Unreadable | None:
    """ "The answer is the rest, not 15": a number named to be ruled out is no answer; the
    released rule over the other numbers, else none."""
    segment, marked = released.answer_segment(task.dataset, task.kind, text)
    segment = segment.replace(",", "")
    if not _search(_NOT_ANYWHERE, segment):
        return None
    ruled, kept = [], []
    for m in _NUMBER.finditer(segment):
        is_ruled = _NOT.search(segment[max(0, m.start() - 16) : m.start()])
        (ruled if is_ruled else kept).append(m.group(0))
    # the number read is not ruled out (or an earlier correction read "eighteen, not 25")
    if pred not in {n.rstrip(".").rstrip("/") for n in ruled}:
        return None
    pick = (kept[0] if marked else kept[-1]).rstrip(".").rstrip("/") if kept else ""
    return pick or Unreadable("the number read is ruled out ('not 15')")


# a letter stands alone in ASCII terms: CJK text beside it ("答案是A。") is no part of its word;
# a letter beside an operator ("\\frac{a+1}{2}", "1-a", "a^2") is a variable, and the text read
# goes on to option-text instead (an option's whole text "$t=\\frac{a+1}{2}$" reads as that option)
_LETTER = re.compile(r"(?<![A-Za-z0-9+\-/^\\])([A-Ja-j])(?![A-Za-z0-9+\-/^=])(?!['’]\w)")
# the letters' compatibility forms (full-width "Ａ", circled "Ⓐ") read as the letters they are
_LETTER_FORMS = str.maketrans(
    "ＡＢＣＤＥＦＧＨＩＪａｂｃｄｅｆｇｈｉｊⒶⒷⒸⒹⒺⒻⒼⒽⒾⒿⓐⓑⓒⓓⓔⓕⓖⓗⓘⓙ", "ABCDEFGHIJabcdefghij" * 2
)
_VERB = re.compile(
    r"[ \t]{1,3}(?:is|was|would|must|seems|looks|matches|fits|gives|works|holds|or|and|because|since)\b"  # noqa: E501
)  # no article before these
_NAMED = re.compile(r"(?i)(?:option|choice|answer|letter)[ \t:*(]{0,3}$")
_RULED_OUT = re.compile(
    r"(?i)(?:\bnot|n't|\bthan|\bover|\beliminate|\brule[ \t]out)[ \t*_\"'`(\[“‘]{1,6}$"
)


def _not_a_letter(task: Task, text: str, pred: str) -> str | Unreadable | None:
    """The released code upper-cases the text before looking for a letter, so the words "a" and
    "i" ("a boy"), the pronoun "I", an article opening a sentence ("A train goes ..." outside an
    answer) and a letter ruled out ("not (D)") read as letters: skip those. Its word boundary is
    Unicode's, so it reads no letter glued to CJK text ("答案是A。"), nor a full-width or circled
    one ("Ａ", "Ⓐ"): read those."""
    segment, marked = released.answer_segment(task.dataset, task.kind, text)
    segment = segment.translate(_LETTER_FORMS)
    letters = []
    for m in _LETTER.finditer(segment):
        c, word = m.group(1), re.match(r"[ \t]{1,3}[a-z]", segment[m.end() : m.end() + 4])
        article = (
            c == "A"
            and word
            and not marked
            and not _VERB.match(segment, m.end())
            and not _NAMED.search(segment[max(0, m.start() - 12) : m.start()])
        )
        if (c in "ai" and word) or (c in "Ii" and len(task.options) < 9) or article:
            continue
        if not _RULED_OUT.search(segment[max(0, m.start() - 16) : m.start()]):
            letters.append(c.upper())
    kept = (letters[0] if marked else letters[-1]) if letters else ""
    if kept == pred or not (kept or _is_letter(pred)):  # no letter either way: no-guess's case
        return None
    said = segment.strip()  # no letter, but an option's whole text: option-text reads it next
    if kept or _option_text(task, text, said):
        return kept or said
    return Unreadable("no letter in the answer: the letter read was a word or ruled out")


def _contradicted_letter(task: Task, text: str, pred: str) -> Unreadable | None:
    """ "The correct option is A: 6(√3 + √2)" where that text is another option's: no answer."""
    if not _is_letter(pred):
        return None
    at = _search(
        _rx(r"(?<![A-Za-z])\(?" + pred + r"[):.][ \t]{0,3}([^\n]{1,200}?)[ \t.]*$", regex.M), text
    )
    said = at.group(1).strip().rstrip(".").strip() if at else ""
    others = [o.strip() for i, o in enumerate(task.options) if LETTERS[i] != pred]
    return Unreadable("the letter's text is another option's") if said and said in others else None


def _option_text(task: Task, text: str, pred: str) -> str | None:
    """No letter read, and the answer is one option's whole text or number ("The answer is 8"
    for the option (A) 8): that option (the released code guesses 'A')."""
    if _is_letter(pred):
        return None
    said = pred.strip().strip(".").strip()
    value = plain_exact(said)
    found = {
        LETTERS[i]
        for i, option in enumerate(task.options)
        if option.strip().lower() == said.lower()
        or (value is not None and option_value(option) == value)
    }
    return found.pop() if len(found) == 1 else None


def _is_letter(pred: str) -> bool:
    return len(pred) == 1 and pred in released.CHOICE_LETTERS  # A-J, what the released code reads


def _no_guess(task: Task, text: str, pred: str) -> Unreadable | None:
    """No letter read: the released code guesses 'A'; numloss gives no answer."""
    return None if _is_letter(pred) else Unreadable("no letter A-J read (released guesses 'A')")


def _math_line(task: Task, text: str, pred: str) -> str | Unreadable | None:
    """MATH without a trigger or a box: the released code reads the last number, which in
    "\\dfrac{18}{2}" or "9 cm^2" is a denominator or an exponent; the last line's expression
    instead."""
    if released.answer_segment(task.dataset, task.kind, text)[1] or "boxed" in text:
        return None
    line = text.strip().rsplit("\n", 1)[-1].strip(" \t*$")
    line = line.split(":")[-1].strip(" \t*$") if ":" in line else line
    at = regex.search(r"(?:\^\{?|\\[dt]?frac\{[^{}]{0,40}\}\{)(-?\d*\.?\d+)[^\d]{0,12}$", line)
    # the number read is not an exponent or a denominator
    if not at or pred not in (at.group(1), released.strip_string(at.group(1))):
        return None
    prose = len(line) > 200 or regex.search(
        r"(?<![\\a-zA-Z])[a-zA-Z]{3,}(?![a-zA-Z])", regex.sub(r"\\text\{[^}]*\}", "", line)
    )
    return (
        Unreadable("the last number is inside an expression in prose")
        if prose
        else released.strip_string(line)
    )


_NAMES = """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety"""
_UNITS = {w: i if i < 20 else 10 * (i - 18) for i, w in enumerate(_NAMES.split())}  # twenty: 20
_SCALES = {"hundred": 100, "thousand": 10**3, "million": 10**6}
_WORD = "|".join(sorted([*_UNITS, *_SCALES], key=len, reverse=True))
_LEAD = (  # given as the answer, not "the right one"
    r"(?<=(?:^|[:=→∴#>|–✅]|\bis|\bbe|\bwas|\bequals|\bso|\blautet|\bes|是)[ \t*_\"'`$(“‘«,]{0,8})"
)
_SPELLED = _rx(
    _LEAD
    + r"(negative[ \t]{1,3}|minus[ \t]{1,3})?((?:"
    + _WORD
    + r")(?:(?:(?<=hundred|thousand|million)[ \t]{1,3}and[ \t]{1,3}|[ \t]{1,3}|-)(?:"
    + _WORD
    + r"))*+)(?![^\W_]|-)(?=[\s*_\"'`$)\]}»”’|]*+(?:is[ \t]the[ \t]answer)?(?:[.!。]|$))",
    regex.I,
)  # it ends its sentence
# "eighteen, not 25": 25 is no digit of the answer
_RULED_NUMBER = _rx(r"(?i),?[ \t]{0,3}(?<![a-z])not[ \t]{0,3}[-\d.]{1,40}")
_TIMES_TEN = _rx(
    r"(?<![\d.])(-?\d{1,20}(?:\.\d{1,20})?)[ \t]{0,2}(?:\\times|×|\\cdot)[ \t]{0,2}10["
    r" \t]{0,2}(?:\^|\*\*)[ \t]{0,2}\{?([-+]?\d{1,3})\}?"
)
_RUPEES = _rx(r"(?<![^\W_])Rs\.[ \t]?(?=\d)")


def _number_form(task: Task, text: str, pred: str) -> str | None:
    """The answer's number written out ("The answer is eighteen.", "\\boxed{Eighteen}") or as a
    power of ten ("1.8 \\times 10^{1}"), or after "Rs.": that number (the released code reads none,
    another number of the working, the mantissa or exponent, or "Rs.2" as .2)."""
    segment, marked = released.answer_segment(task.dataset, task.kind, text)
    # "$$" alone is no line
    lines = [line for line in segment.split("\n") if regex.search(r"[^\W_]", line)] or [""]
    line = lines[0 if marked else -1][:300]
    scaled = _TIMES_TEN.sub(
        lambda m: format_exact(Fraction(m.group(1)) * Fraction(10) ** int(m.group(2))),
        _RUPEES.sub(" ", line.replace(",", "")),
    )
    if scaled != line.replace(",", ""):  # "Rs.2" reads 2, not .2
        found = (
            _NUMBER.findall(scaled)
            if task.kind != "math"
            else [n for n in [_one_number(regex.split(r"[=:]", scaled)[-1])] if n]
        )
        # MATH: one number, no mathematics
        return (found[0] if marked else found[-1]).rstrip(".") if found else None
    line = _LIST_MARKER.sub("", _RULED_NUMBER.sub("", line))
    spelled = (
        None
        if any(c.isdigit() for c in line)
        else _search(
            _SPELLED,
            regex.sub(
                r"\\color\{\w{1,12}\}|\\[a-zA-Z]{1,20}|<[^<>\n]{1,40}>|[\\{}\[\]]", " ", line
            ),
        )
    )
    if spelled is None:
        return None
    total = current = 0
    # "one hundred and five thousand two": 105,002
    for word in regex.split(r"[\s-]+", spelled.group(2).lower()):
        scale = _SCALES.get(word, 0)
        if scale == 100:
            current = max(current, 1) * 100
        elif scale:
            total, current = total + max(current, 1) * scale, 0
        else:
            current += _UNITS.get(word, 0)
    return str(-(total + current) if spelled.group(1) else total + current)


def _float_noise(task: Task, text: str, pred: str) -> str | None:
    """A number with a fraction and 15+ significant digits ("60.00000000000001", a program's float
    arithmetic) is read rounded to 12 significant digits, never above the units place."""
    digits = pred.lstrip("-").replace(".", "").lstrip("0")
    if "." not in pred or "/" in pred or len(digits) < NOISE_DIGITS:
        return None
    value = _decimal(Fraction(pred))
    snapped = _quantize(value, Decimal(1).scaleb(min(value.adjusted() - KEEP_DIGITS + 1, 0)))
    return None if snapped is None else format_exact(Fraction(snapped))


def _exact_digits(task: Task, text: str, pred: str) -> str | None:
    """The released code passes a number through float(): two numbers that differ beyond the 16th
    digit read alike ("12345678901234567891" passes for ...890). numloss keeps the digits written.
    """
    normal = released.delete_extra_zero(pred)
    try:
        return pred if Fraction(normal) != Fraction(pred) else None
    except (ValueError, ZeroDivisionError):
        return None


_ALL = frozenset({"number", "math", "choice"})
CORRECTIONS: tuple[Correction, ...] = (
    Correction("end-of-turn", _ALL, _end_of_turn),
    Correction("harmony-final", _ALL, _harmony_final),
    Correction("think-block", _ALL, _think_block),
    Correction("next-exercise", _ALL, _next_exercise),
    Correction("minerva-final", _ALL, _minerva_final),
    Correction("afterword", _ALL, _afterword),
    Correction("markup", _ALL, _markup),
    Correction("self-correction", _ALL, _self_correction),
    Correction("cut-off", _ALL, _cut_off),
    Correction("table-answer", frozenset({"choice"}), _table_answer),
    Correction("operation-result", frozenset({"number"}), _operation_result),
    Correction("number-form", frozenset({"number", "math"}), _number_form),
    Correction("alternatives", _ALL, _alternatives),
    Correction("ruled-out", frozenset({"number"}), _ruled_out),
    Correction("list-marker", frozenset({"number"}), _list_marker),
    Correction("not-a-letter", frozenset({"choice"}), _not_a_letter),
    Correction("contradicted-letter", frozenset({"choice"}), _contradicted_letter),
    Correction("option-text", frozenset({"choice"}), _option_text),
    Correction("no-guess", frozenset({"choice"}), _no_guess),
    Correction("math-line", frozenset({"math"}), _math_line),
    Correction("float-noise", frozenset({"number"}), _float_noise),
    Correction("exact-digits", frozenset({"number"}), _exact_digits, as_written=True),
)


def read(item: Item, text: str, dataset: str = "") -> Reading:
    """numloss's reading of `text`: the released one, then `CORRECTIONS` in order (module doc)."""
    task = Task(item.kind, tuple(item.options), dataset)  # what a correction may see: no gold
    number = released.delete_extra_zero if task.kind == "number" else str
    # "1E+999999", 10 MB of output: refused, not converted
    long = len(text) > MAX_READ_CHARS
    if long or task.kind != "choice":
        check_size(text if long else released.answer_segment(task.dataset, task.kind, text)[0])
    raw = released_reading(task, text)
    prediction, decided = number(raw), "released"
    for correction in CORRECTIONS:
        result = correction.fire(task, text, raw) if task.kind in correction.kinds else None
        if result is None:
            continue
        if isinstance(result, Unreadable):
            return Reading("", correction.name, result.reason)
        if isinstance(result, Read):
            text, result = result.text, released_reading(task, result.text)
        raw, result = result, (result if correction.as_written else number(result))
        if result != prediction:
            prediction, decided = result, correction.name
    return Reading(prediction, decided)


def extract(item: Item, text: str, dataset: str = "") -> str:
    """numloss's prediction for `item` from `text` ("" when there is none)."""
    return read(item, text, dataset).prediction


def extract_exact(output: str) -> Fraction | None:
    """The number numloss reads from `output` for an open item, exactly (None for none)."""
    return plain_exact(extract(Item("", "", "0", "number"), output))


def extract_number(output: str) -> float | None:
    """`extract_exact` as a float."""
    return plain_number(extract(Item("", "", "0", "number"), output))


# ---------------------------------------------------------------- comparison


class GoldError(ValueError):
    """An item's gold answer is not of its kind (a data error, not a model output's)."""


def math_equal(pred: str, gold: str) -> bool:
    """Whether two MATH answers are equivalent: plain numbers by `number_matches`, the rest by
    math-verify (after `check_size`), else by their text."""
    if not pred.strip():
        return False
    check_size(pred)
    gold_value = plain_exact(gold)
    if gold_value is not None and plain_exact(pred) is not None:
        return number_matches(plain_exact(pred), gold, pred.strip().strip("$"))
    if gold_value is not None and (dressed := _one_number(pred)) is not None:
        return number_matches(plain_exact(dressed), gold, dressed)
    if len(pred) > 4 * len(gold) + 200:  # far longer than the gold: no parser is given it
        return _normalise(pred) == _normalise(gold)
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
    try:
        if gold_parsed and pred_parsed:
            return bool(verify(gold_parsed, pred_parsed))
    except Exception:
        pass
    return _normalise(pred) == _normalise(gold)


_DRESS_CMD = _rx(r"\\(?:text|mathrm|textbf|mbox|boxed|underline|bm|emph|color\{[a-z]{1,12}\})")
_ONE_NUMBER = _rx(
    r"(?<![\d.])[-−]?(?:\d{1,3}(?:,\d{3})++|\d++)(?:\.\d++)?(?![\w.]\d)|(?<![\d.])\.\d++"
)


def _one_number(pred: str) -> str | None:
    """For a plain-number gold: the one number of a prediction in dress ("18 \\text{ cm}", "\\$18",
    '{"answer": "€18"}', "18 units", and the same glued by the released code's space removal:
    "about2", "USD2", "2km/h"); None when it holds mathematics or another number (one ruled out,
    "not 9", is none)."""
    s = _DRESS_CMD.sub(" ", regex.sub(r"</?[a-z]{1,6}>|\*\*|__", " ", pred[:400]))
    for dressed, plain in (("\\$", "$"), ("\\%", "%"), ("\\!", ""), ("{,}", ",")):
        s = s.replace(dressed, plain)
    s = regex.sub(r"(?<=[A-Za-z])/(?=[A-Za-z])", " ", s)  # a unit's ratio ("km/h") is no division
    s = _RULED_NUMBER.sub(" ", s)  # "2, not 9" (glued: "2,not9"): 9 is ruled out
    s = regex.sub(r"(?<![\w)}])\+(?=\d)", "", s)  # a plus sign ("+2") is no sum
    if regex.search(r"\\(?:frac|sqrt|pi|cdot|times|dfrac)|[\^=+*/]|\d[ \t]{0,3}[-−]", s):
        return None
    found = _all(_ONE_NUMBER, s)
    return found[0].group(0).replace(",", "").replace("−", "-") if len(found) == 1 else None


def _normalise(text: str) -> str:
    return released.strip_string(text).lower()


def compare(item: Item, prediction: str) -> bool:
    """Whether numloss's `prediction` is `item`'s gold answer."""
    if not prediction:
        return False
    if item.kind == "number":
        if gold_decimal(item.answer) is None and plain_exact(item.answer) is None:
            raise GoldError(f"item {item.id}: gold answer {item.answer!r} is not a number")
        return number_matches(plain_exact(prediction), item.answer, prediction)
    if item.kind == "choice":
        return prediction == item.answer.upper()
    return math_equal(prediction, item.answer)


_OPTION_VALUE = _rx(
    r"[-+−]?\$?((?:\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?|\.\d+)(/\d+)?(\s?%|\s+[A-Za-z°²³/ .]+)?"
)


def option_value(option: str) -> Fraction | None:
    """An option's number when the option is just a number, maybe with a unit after a space
    ("80 km/h", "$4$", "25%"); None for anything else ("$5m+4p$", "x = 4")."""
    text = option.strip().strip("$").strip()
    if len(text) > 200 or not _OPTION_VALUE.fullmatch(text):
        return None
    return plain_exact(regex.sub(r"\s+[A-Za-z°²³/ .]+$", "", text))


@dataclass(frozen=True)
class Scored:
    """The prediction read from one output, whether it is right, its number, and the rule that
    decided it."""

    prediction: str
    correct: bool
    value: float | None = None
    decided_by: str = "released"


def score(item: Item, output: str) -> Scored:
    """Read `output` for `item` and compare the prediction with `item.answer` (public:
    `numloss.evaluate.score`)."""
    reading = read(item, output)
    value = plain_number(reading.prediction) if item.kind != "choice" else None  # "": None
    return Scored(reading.prediction, compare(item, reading.prediction), value, reading.decided_by)
