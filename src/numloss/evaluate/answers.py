"""numloss's answer reader and comparison (the `numloss` protocol; `released.py` holds the paper's).

`cut_continuation` first drops what is not this item's answer: text before a closing ``</think>``,
a chat template's end-of-turn token and what follows, an invented next exercise. The answer is
then looked for, the first rule that finds one winning: after the last marker ("The answer is",
"Final answer:", a line "Answer:", a JSON "answer":, their kin in other languages: "La respuesta
es", "答案是"), after the last "####", inside the last ``\boxed{}`` not ruled out, else the last
number (none when the output is cut off mid-sentence). A correction after the answer ("18. Wait,
actually 25.") wins; alternatives ("18 or 25", "A or B") and struck-out text are no answer.
Choices: an explicit letter in any dress, else the option whose text or value the answer is; no
letter found, or a letter followed by another option's text, is no answer (no guess). Numbers are read
exactly (as fractions) in their usual dress: currency, units, LaTeX, thousands separators,
decimal commas, mixed numbers, spelled-out numbers, a scale after the number ("18k" is 18000,
never 18); float noise (15+ significant digits) is
rounded to 12. `number_matches` never passes a wrong digit: an integer or one-decimal gold needs
exactly that number, a gold with 2+ decimals also a more precise prediction strictly inside its
half-unit interval. MATH expressions go to math-verify. Every scan is linear in the output's
length and bounded by `read_limit`. The rules in full, with examples: docs/evaluation.md,
"Deviations from the released protocol".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from fractions import Fraction
from typing import Any

import regex

from numloss.evaluate.benchmarks import LETTERS, AnswerKind, Item, boxed_content

# ---------------------------------------------------------------- time bound
#
# Every pattern below is linear on any text (bounded or possessive quantifiers; far scans are
# loops over anchors found by a literal search). As a second line of defence every match runs
# under the `regex` timeout left by `read_limit`'s deadline: an output that still takes too long
# raises `ReadTimeout`, which the scorer records as that item's "unreadable" verdict.

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
    # a reader that cannot be interrupted (the released protocol's `re` patterns, which are linear)
    # is bounded after the fact: the same verdict as an interrupted one
    if deadline is not None and time.monotonic() > deadline:
        raise ReadTimeout(f"{_TOO_LONG} ({seconds:g} s)")


def _left() -> float | None:
    """Seconds left before the deadline (None: no deadline); ReadTimeout when none are left."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise ReadTimeout(_TOO_LONG)
    return left


def _rx(pattern: str, flags: int = 0) -> regex.Pattern:
    return regex.compile(pattern, flags | regex.V0)


def _timed(method: Callable[..., Any], *args: Any) -> Any:
    """`method(*args)` of a compiled pattern under the read deadline (ReadTimeout past it)."""
    try:
        return method(*args, timeout=_left())
    except TimeoutError as error:
        raise ReadTimeout(_TOO_LONG) from error


def _finditer(pattern: regex.Pattern, text: str) -> Iterator[regex.Match]:
    try:
        yield from pattern.finditer(text, timeout=_left())
    except TimeoutError as error:
        raise ReadTimeout(_TOO_LONG) from error


def _last(pattern: regex.Pattern, text: str) -> regex.Match | None:
    last = None
    for match in _finditer(pattern, text):
        last = match
    return last


def _search(pattern: regex.Pattern, text: str, pos: int = 0) -> regex.Match | None:
    return _timed(pattern.search, text, pos)


def _fullmatch(pattern: regex.Pattern, text: str) -> regex.Match | None:
    return _timed(pattern.fullmatch, text)


def _match(pattern: regex.Pattern, text: str, pos: int = 0) -> regex.Match | None:
    return _timed(pattern.match, text, pos)


def _sub(pattern: regex.Pattern, repl: Any, text: str) -> str:
    return _timed(pattern.sub, repl, text)


# ---------------------------------------------------------------- numbers

_NUMBER = _rx(
    r"""(?<![^\W\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]|\.)   # not inside a word (CJK glued to a number is no word: "答案是18") or after a decimal point
    (?<!\^|\^\{)                  # not an exponent ("cm^2", "2^{10}")
    (?P<sign>[-+−])?
    [$€£¥₹]?
    (?P<body>
        \d{1,3}(?:,\d{3})++(?:\.\d++)?   # 1,234,567.89
      | \d++(?:\.\d++)?(?:/\d++(?:\.\d++)?)?   # 12, 12.5, 3/4
      | \.\d++                          # .5
    )
    (?:[eE](?P<exp>[-+]?\d{1,6}+)(?!\d))?
    (?P<scale>[kK](?![^\W_])|[ \t](?:hundred|thousand|million|billion|trillion)(?![^\W_]))?   # "18k" is 18000, never 18
    (?P<percent>\s?%)?
    """,
    regex.X,
)
# digits, maybe grouped in thousands: a comma is a separator only when every group after it has
# three digits ("14,400", "1,234,567"); "4,6,14,15" is a list of four numbers
_DIGITS = r"(?:\d{1,3}(?:,\d{3})+|\d+)"
_FRAC = _rx(r"\\[dt]?frac[ \t]{0,8}\{([^{}]{0,200})\}[ \t]{0,8}\{([^{}]{0,200})\}")
_TEXT_CMD = _rx(r"\\(?:text|mbox|mathrm|textbf|textrm|mathbf|operatorname|underline|bm|boldsymbol|textsf|mathsf|hbox|textit|mathit|emph|texttt|mathtt|mathbb)[ \t]{0,4}\{([^{}]{0,200})\}")
_COLOR = _rx(r"\\(?:text)?color[ \t]{0,4}\{[A-Za-z]{1,20}\}[ \t]{0,4}(?:\{([^{}]{0,200})\})?")  # "\color{red}{18}" is 18
# a no-break, thin, narrow or figure space between digit groups of three ("14 400") is a thousands
# separator, as typeset; a plain space between numbers stays a space ("1 400" may be two numbers)
_TYPOGRAPHIC_THOUSANDS = _rx(r"(?<=(?<![\d.,])\d{1,3}(?:[\u00a0\u2009\u202f\u2007]\d{3})*+)[\u00a0\u2009\u202f\u2007](?=\d{3}(?![\d]))")
_PAREN_FRAC = _rx(r"\((-?\d{1,400}(?:\.\d{1,400})?)\)/\((\d{1,400}(?:\.\d{1,400})?)\)")
# "1.5 \times 10^{3}", "1.5 × 10^3", "1.5*10**3": scientific notation read as an exponent
_TIMES_TEN = _rx(r"(?<=\d)[ \t]{0,4}(?:\\times|\\cdot|×|·|\*)[ \t]{0,4}10[ \t]{0,4}(?:\^|\*\*)[ \t]{0,4}\{?[ \t]{0,4}([-+−]?\d{1,6})[ \t]{0,4}\}?")
# currency written as letters before the number ("Rs.18", "USD 10", "INR 5"): only a prefix
_CURRENCY_WORD = _rx(r"(?<![A-Za-z])(?:Rs|INR|USD|US\$|EUR|GBP|CAD|AUD|Rp|RM)\.?[ \t]{0,2}(?=[-−+]?[$€£¥₹]?\.?\d)")
# a mixed number "11 1/5" (a whole number, a space, a proper fraction)
_MIXED = _rx(r"(?<![\w.,/])(\d{1,12}+)[ \t]{1,3}(\d{1,12}+)/(\d{1,12}+)(?![\d.,/])")
# a decimal comma: one comma followed by other than three digits ("3,5", "12,25"), or
# "1.234,5" (dots for thousands); a comma list "4,6,14,15" is not one
_DECIMAL_COMMA = _rx(r"(?<![\w.,])(\d{1,3}+(?:\.\d{3})++|\d++),(\d{1,2}+|\d{4,}+)(?![\d,]|\.\d)")
NOISE_DIGITS = 15  # a written number with this many significant digits and a fraction is float noise
KEEP_DIGITS = 12  # ... and is read rounded to this many (never above the units place)
ROUNDED_GOLD_DECIMALS = 2  # a gold with this many decimals or more may be a rounding of its answer
MAX_EXPONENT = 400  # a number written with a larger power of ten is not an answer (1e999999 would stall)


def _frac_sub(match: regex.Match) -> str:
    # a fraction right after a whole number is a mixed number ("11\frac{1}{5}" is 11 1/5, not 111/5)
    before = match.string[match.start() - 1] if match.start() else ""
    return (" " if before.isdigit() else "") + f"({match.group(1)})/({match.group(2)})"


def _strip_latex(text: str) -> str:
    """LaTeX number dressing removed: \\frac{a}{b} -> a/b, \\text{..} kept as its words, \\$,
    \\%, \\!, braces, "\\times 10^{k}" -> "ek", currency words before a number."""
    s = _sub(_FRAC, _frac_sub, text)
    s = _sub(_COLOR, r"\1", s) if "color" in s else s
    s = _sub(_TEXT_CMD, r" \1 ", s)
    if "\\text" in s or "\\mbox" in s:  # one level of nesting: \text{\$10\text{ total}}
        s = _sub(_TEXT_CMD, r" \1 ", s)
    s = s.replace("\\$", "$").replace("\\%", "%").replace("\\!", "").replace("\\,", "")
    s = s.replace("{,}", ",").replace("\\left", "").replace("\\right", "")
    if "\u00a0" in s or "\u2009" in s or "\u202f" in s or "\u2007" in s:
        s = _sub(_TYPOGRAPHIC_THOUSANDS, ",", s)
    s = _sub(_PAREN_FRAC, r"\1/\2", s)
    s = _sub(_TIMES_TEN, r"e\1", s)
    s = _sub(_CURRENCY_WORD, " ", s)
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
    i, seen = start - 1, 0
    while i >= 0 and text[i].isspace() and seen < 64:  # bounded look-back: linear over the whole text
        i, seen = i - 1, seen + 1
    return i >= 0 and (text[i].isdigit() or text[i] in ")]}")


_NEGATIVE_WORD = _rx(r"(?:(?<![\w])negative|(?<![\w])minus)[ \t]{1,3}$", regex.I)


def _value(match: regex.Match, text: str) -> Fraction | None:
    body = match.group("body").replace(",", "")
    if len(body) > 4000:  # longer than any number an answer holds (and than int() reads)
        return None
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
        if abs(exp) > MAX_EXPONENT:
            return None
        value *= Fraction(10) ** exp
    value = _denoise(match.group("body"), value) if "/" not in body else value
    scale = match.group("scale")
    if scale:
        value *= _SCALES["thousand" if scale in "kK" else scale.strip()]
    sign = match.group("sign")
    if sign in ("-", "−") and not _is_binary_minus(text, match.start()):
        value = -value
    elif sign is None:
        # "negative 10" is -10; "minus 10" too, unless it follows an operand ("12 minus 10")
        head = text[max(0, match.start() - 12) : match.start()]
        word = _search(_NEGATIVE_WORD, head)
        if word and (word.group(0).lower().startswith("negative") or not _is_binary_minus(text, match.start() - len(word.group(0)))):
            value = -value
    return value


def _mixed_sub(match: regex.Match) -> str:
    whole, num, den = (int(g) for g in match.groups())
    if den == 0 or num >= den:  # "3 10/5" is two numbers, not a mixed number
        return match.group(0)
    return f"{whole * den + num}/{den}"


def _decimal_comma_sub(match: regex.Match) -> str:
    return match.group(1).replace(".", "") + "." + match.group(2)


def _number_text(text: str) -> str:
    """`text` with its number dress normalised: LaTeX, scientific and currency forms, decimal
    commas ("3,5" -> 3.5), mixed numbers ("11 1/5" -> 56/5)."""
    text = _sub(_EMPHASIS, " ", text) if "_" in text else text
    return _sub(_MIXED, _mixed_sub, _sub(_DECIMAL_COMMA, _decimal_comma_sub, _strip_latex(text)))


_EMPHASIS = _rx(r"(?<![^\W_])_++")  # "__18__" is 18 in bold; "x_1" is a subscript


def _number_matches_in(text: str) -> tuple[str, list[regex.Match]]:
    stripped = _number_text(text)
    return stripped, list(_finditer(_NUMBER, stripped))


def _values(text: str, backwards: bool = False) -> Iterator[Fraction]:
    """The numbers of `text` in order (or backwards), each converted only when asked for: the
    last number of a text of a million numbers is read in linear time."""
    stripped, matches = _number_matches_in(text)
    for match in reversed(matches) if backwards else matches:
        value = _value(match, stripped)
        if value is not None:
            yield value


def exact_numbers_in(text: str) -> list[Fraction]:
    """Every number in `text`, left to right, exactly (see the module doc for what is read)."""
    return list(_values(text))


def _last_number(text: str) -> Fraction | None:
    return next(_values(text, backwards=True), None)


def parse_exact(text: str) -> Fraction | None:
    """The first number in `text` (units and currency ignored), exactly, or None."""
    return next(_values(text), None)


def parse_number(text: str) -> float | None:
    """The first number in `text` (units and currency ignored), or None."""
    value = parse_exact(text)
    return None if value is None else float(value)


# ---------------------------------------------------------------- spelled-out numbers

_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if w != "_"}
_SCALES = {"hundred": 100, "thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_WORD = "|".join(sorted([*_UNITS, *_TENS, *_SCALES], key=len, reverse=True))
_SPELLED = _rx(
    r"(?<![^\W_]|-)(?:(?P<neg>negative|minus)[ \t]{1,3})?(?P<words>(?:" + _WORD + r")(?:(?:[ \t]{1,3}|-|[ \t]{1,3}and[ \t]{1,3})(?:"
    + _WORD + r"))*+)(?![^\W_]|-)", regex.I)


def _spelled(match: regex.Match | None) -> Fraction | None:
    """The value of a `_SPELLED` match ("two thousand and five", "negative ten"), or None."""
    if match is None:
        return None
    total, current = 0, 0
    for word in regex.split(r"[\s-]+", match.group("words").lower()):
        if word == "and":
            continue
        if word in _UNITS:
            current += _UNITS[word]
        elif word in _TENS:
            current += _TENS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        else:
            total += max(current, 1) * _SCALES[word]
            current = 0
    value = total + current
    return Fraction(-value if match.group("neg") else value)


def _spelled_at_start(segment: str) -> Fraction | None:
    """A spelled-out number that opens `segment` ("eighteen", "negative ten", "two thousand and five")."""
    head = segment[:400]
    if "\\" in head:  # "\\text{Two}", "\\[Two\\]"
        head = _strip_latex(head).replace("\\[", " ").replace("\\(", " ")
    return _spelled(_match(_SPELLED, head.lstrip(" \t\n:*_\"'`$([{“‘«")))


# ---------------------------------------------------------------- where the answer is

# "The answer is", "the final answer is", "The correct answer would be", "Final answer:"; at the
# start of a line "Answer:" / "**Final Answer:**"; a JSON key "answer":. A bare "answer:" inside
# a sentence is no marker ("To find the answer: 80,000 + ..." is working, not the answer).
_TRIGGERS = _rx(
    r"(?:\b(?:the|my|our)[ \t]{1,3}(?:(?:final|correct|right|best)[ \t]{1,3})?answer[ \t]{1,3}(?:is|would[ \t]{1,3}be|will[ \t]{1,3}be|should[ \t]{1,3}be)(?!\w)(?:[ \t]{0,3}:)?"
    r"|\bfinal[ \t]{1,3}answer(?:[ \t]{1,3}is)?[ \t*_]{0,4}:"
    # a line (a list item, a table row) that opens with "Answer", "Final answer", "Correct answer",
    # "My answer" and then ":", "=", a dash, a table bar, or nothing more: "### Final Answer\n18"
    r"|(?m:^)[ \t>*#_+|(-]{0,8}(?:\d{1,2}[.)][ \t]{1,3})?ans[ \t*_]{0,3}[.:：]"
    r"|(?m:^)[ \t>*#_+|(-]{0,8}(?:\d{1,2}[.)][ \t]{1,3})?(?:(?:final|correct|my|short)[ \t]{1,3})?answer[ \t*_]{0,4}"
    r"(?:[:：=|]|[-–—](?=[ \t])|[ \t#]{0,4}(?=\r?\n))"
    r"|(?:(?m:^)[ \t>*#_+|-]{0,8}|[.!?;,][ \t]{1,3})(?:(?:final|correct)[ \t]{1,3})?answer[ \t]{1,3}(?:is|would[ \t]{1,3}be)(?!\w)(?:[ \t]{0,3}:)?"
    r"|(?m:^)[ \t>*#_+|-]{0,8}(?:final[ \t]{1,3})?result[ \t*_]{0,4}(?:[:：]|→|=>)"
    r"|[\"'](?:final_?)?answer[\"'][ \t]{0,3}:"
    # the same markers in the other languages a chat model answers in: "La respuesta es", "Die
    # Antwort lautet", "答案是", "Ответ:", "正解は"
    r"|(?<![\w])(?:la[ \t]{1,3}respuesta(?:[ \t]{1,3}(?:correcta|final))?[ \t]{1,3}es(?:[ \t]{1,3}la)?"
    r"|die[ \t]{1,3}(?:richtige[ \t]{1,3})?antwort[ \t]{1,3}(?:lautet|ist)|la[ \t]{1,3}(?:bonne[ \t]{1,3})?réponse[ \t]{1,3}(?:correcte[ \t]{1,3})?est"
    r"|a[ \t]{1,3}resposta[ \t]{1,3}(?:correta[ \t]{1,3})?é|la[ \t]{1,3}risposta[ \t]{1,3}(?:corretta[ \t]{1,3})?è|het[ \t]{1,3}antwoord[ \t]{1,3}is)(?![\w])(?:[ \t]{0,3}:)?"
    r"|(?:最终|最後の|最后)?(?:答案|答え|正解|정답)(?:是|为|為|应为|應為|は|은|는|[ \t]{0,2}[:：])"
    r"|(?m:^)[ \t>*#_+|-]{0,8}(?:respuesta|réponse|antwort|ответ|resposta|risposta|antwoord|odpowiedź|cevap|jawaban|الإجابة|उत्तर)"
    r"(?:[ \t]{1,3}final)?[ \t*_]{0,4}[:：])",
    regex.I,
)
# choice items also name the option: "The correct option is C", "the right choice is (c)"
_CHOICE_TRIGGERS = _rx(r"\b(?:the|my)[ \t]{1,3}(?:(?:correct|right|best|final)[ \t]{1,3})?(?:option|choice)[ \t]{1,3}(?:is|would[ \t]{1,3}be)(?!\w)(?:[ \t]{0,3}:)?", regex.I)


def answer_segment(output: str, choice: bool = False) -> tuple[str, bool]:
    """The part of `output` that holds the final answer, and whether a marker located it."""
    trigger = _last(_TRIGGERS, output)
    if choice:
        option = _last(_CHOICE_TRIGGERS, output)
        if option is not None and (trigger is None or option.start() > trigger.start()):
            trigger = option
    if trigger is not None:
        return output[trigger.end() :], True
    if "####" in output:
        return output.rsplit("####", 1)[1], True
    boxed = _answer_box(output)
    if boxed is not None:
        return boxed, True
    return output, False


_BOX_RULED_OUT = _rx(r"(?:(?<![\w])not|n't|instead[ \t]of|rather[ \t]than)[ \t$(]{1,4}$", regex.I)


def _answer_box(output: str) -> str | None:
    """The content of the last `\\boxed{}` that is not named to be ruled out ("the original is
    right, not $\\boxed{18}$"), or None (at most 8 boxes are stepped back over: linear time)."""
    end = len(output)
    for _ in range(8):
        start = max(output.rfind("\\boxed", 0, end), output.rfind("\\fbox", 0, end))
        if start < 0:
            return None
        if not _search(_BOX_RULED_OUT, output[max(0, start - 16) : start]):
            return boxed_content(output[start:end])
        end = start
    return None


def extract_exact(output: str) -> Fraction | None:
    """The predicted number: the first number after a marker, else the last number of the output
    (a spelled-out number right after a marker, or in an output without digits, counts too)."""
    segment, marked = answer_segment(output)
    if marked:
        if not segment.strip(_DRESS_CHARS + ".\n\r"):
            return None  # "The answer is" and nothing after it (cut off): no answer, not an earlier number
        boxed = boxed_content(segment)
        target = boxed if boxed is not None else _result_of_sum(_sub(_HTML_TAG, "", segment[:4000]) + segment[4000:])
        if boxed is None and _match(_HEDGE, target):
            return None  # "The answer is 18 or 25", "between 18 and 25", "18–20": no one answer
        target = _corrected(target) or target
        spelled = _spelled_at_start(target)
        if spelled is not None:
            return spelled
        found = parse_exact(target)
        if found is not None:
            return found
    if _bare_spelled(output):  # the last line is a spelled-out number alone: "... = 14.\nEighteen."
        return _spelled_at_start(output.rstrip().rsplit("\n", 1)[-1].strip(" \t.!\"'`*_$()[]{}"))
    if _cut_off_in_working(output) or _search(_HEDGE_AT_END, output[-200:]):
        return None  # cut off mid-sentence ("We start with 18 and then we"), or alternatives: no one answer
    found = _last_number(output)
    return _spelled(_last(_SPELLED, output)) if found is None else found


# an answer given as alternatives or a range: "18 or 25", "either 18 or 25", "between 18 and 25", "18–20"
_HEDGE_NUMBER = r"[-−]?[$€£¥₹]?\d[\d,.]*+"
_HEDGE_CORE = (
    r"(?:(?:either[ \t]{1,3})?" + _HEDGE_NUMBER + r"(?:[ \t]{0,3}(?:[A-Za-z%]{1,12}[ \t]{1,3})?or[ \t]{1,3}|[–—])"
    r"|between[ \t]{1,3}" + _HEDGE_NUMBER + r"[ \t]{0,3}(?:[A-Za-z%]{1,12}[ \t]{1,3})?and[ \t]{1,3})" + _HEDGE_NUMBER
)
_HEDGE = _rx(r"[ \t\n*_$`\"'(“]{0,8}" + _HEDGE_CORE, regex.I)
_HEDGE_AT_END = _rx(_HEDGE_CORE + r"[^\d\n]{0,60}$", regex.I)  # "It could be 25 or 18; I am not sure."
# an output that stops mid-sentence on a word that cannot end one: the model ran out of tokens
_DANGLING = _rx(
    r"(?<![\w])(?:and|or|the|an|of|by|then|we|from|into|because|but|plus|minus|than|if)[ \t]{0,3}$",
    regex.I,
)
def _cut_off_in_working(output: str) -> bool:
    """Whether `output` stops mid-sentence (`_DANGLING`) on a line that holds a number: that number
    is working, not an answer ("We start with 18 and then we"); a cut-off line without one leaves
    the lines before it to be read ("18\n\nI think that is right, but let me also consider the")."""
    tail = output.rstrip()
    last_line = tail[tail.rfind("\n") + 1 :]
    return bool(_search(_DANGLING, tail[-40:])) and _search(_ANY_DIGIT, last_line[-400:]) is not None


# a correction after the answer: "18. Wait, actually it is 25.", "18, I mean 25", "18... no wait, 25."
_CORRECTION = _rx(
    r"(?<![\w])(?:wait|actually|oops|sorry|correction|i[ \t]mean|make[ \t]that|scratch[ \t]that|no[ \t]{0,2},)(?![\w])", regex.I)
# between the cue and the corrected number only the words of a correction: "Oops, I made an error:
# it should be 25", not "Sorry for the long explanation, 3 steps"
_CORRECTED_TO = _rx(
    r"(?:[ \t,.:;!…—–-]++|(?:it|it's|that|that's|this|the|answer|total|result|i|is|was|should|would|must|be|no|wait|actually"
    r"|mean|meant|made|make|an|a|error|mistake|oops|sorry|correct|correction|corrected|rather|instead|so|hmm|fix|fixed)(?![\w]))*+"
    r"(?<![\w.])(?P<answer>[-−+]?[$€£¥₹]?\.?\d[^\n]{0,40}?)[ \t]*$",
    regex.I,
)
_CORRECTION_ENDS = _rx(r"[-−+]?[$€£¥₹]?[\d.,/]+[ \t]{0,3}(?:[A-Za-z%°]{1,12})?[ \t]{0,2}[.!)*_]{0,3}")


def _correction_rests(segment: str) -> list[str]:
    """The rest of the line after each correction cue that follows the start of the answer in
    `segment` ("18. Wait, actually it is 25." -> [", actually it is 25.", " it is 25."])."""
    head = segment[:400]
    first = _search(_ANY_ALNUM, head)
    if first is None:
        return []
    rests = []
    for cue in _finditer(_CORRECTION, head):
        if cue.start() > first.start():
            line_end = head.find("\n", cue.end())
            rests.append(head[cue.end() : line_end if line_end >= 0 else len(head)])
    return rests


_ANY_ALNUM = _rx(r"[^\W_]")


def _corrected(segment: str) -> str | None:
    """What the answer in `segment` is corrected to, when a correction cue after its first number
    ("Wait", "actually", "I mean", "Oops") is followed on its line by a number that ends it: "18.
    Wait, actually it is 25." -> "25."; None when there is none ("Wait, let me check: 25 - 7 = 18"
    checks, it does not correct: the number there does not end its line)."""
    found = None
    for rest in _correction_rests(segment):
        to = _match(_CORRECTED_TO, rest)
        if to is not None and _fullmatch(_CORRECTION_ENDS, to.group("answer").strip()):
            found = to.group("answer")
    return found


def _corrected_letter(segment: str) -> str | None:
    """The letter the answer in `segment` is corrected to ("B... no wait, A."), or None."""
    found = None
    for rest in _correction_rests(segment):
        if len(rest) <= 60 and _search(_ANY_DIGIT, rest) is None:
            found = _bare_letter(rest) or found
    return found


_SUM = _rx(r"[\d\s.,+\-−*/×÷·()$%]*+")
_OPERATION = _rx(r"\d[ \t]{0,8}[-+−*/×÷·][ \t]{0,8}\$?\(?\d")


def _result_of_sum(segment: str) -> str:
    """The answer segment, or what follows "=" when its first line is arithmetic written out:
    "12 + 6 = 18" reads 18 (but "x = 5, y = 3" still reads 5, the first unknown)."""
    head, _, rest = segment.lstrip().partition("\n")
    left, eq, right = head.rpartition("=")
    if eq and any(c.isdigit() for c in left) and _fullmatch(_SUM, left) and _search(_OPERATION, left):
        return right + "\n" + rest
    return segment


def extract_number(output: str) -> float | None:
    """`extract_exact` as a float."""
    return _float(extract_exact(output))


def _float(value: Fraction | None) -> float | None:
    """`value` as a float; beyond a float's range ("1e400") an infinite one (metrics skip it)."""
    if value is None:
        return None
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


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
    if not regex.fullmatch(r"[-+]?(" + _DIGITS + r"(\.\d*)?|\.\d+)", s):  # "4,6,14,15" is a list, not 461415
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
        written = regex.fullmatch(r"\s*[-+]?\d*\.(\d+)\s*", pred_text or "")
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


# ---------------------------------------------------------------- letters
#
# A letter named as the answer, in any dress: "(C)", "C)", "C.", "[C]", "\"C\"", "'C'", "`C`",
# "**C**", "$C$", "\boxed{C}", "\text{(C)}", {"answer": "C"}. Capitals count wherever no word
# follows them directly; a lower-case letter only where it cannot be a word: in brackets or quotes,
# or closed by the end of the text or a punctuation mark other than ":" ("Option a: 60 is wrong"),
# so "the answer is a boy" and "a long way off" name no letter. An explicit letter always wins
# over matching an option's text or value: "A. 1 over 5" is option A even where 5 is option D.

_HTML = r"(?:b|strong|i|em|u|code|answer|mark)"
_OPEN_DRESS = r"(?:[ \t]{0,3}(?:\*\*|__|\\(?:boxed|text|textbf|mathrm|mathbf)\{|\\[(\[]|<" + _HTML + r">|[\"'`\[({$*_“‘«⟨「]))"
_CLOSE_DRESS = r"(?:[ \t]{0,3}(?:\*\*|__|\\[)\]]|</" + _HTML + r">|[\"'`\])}$*_”’»⟩」]))"
# the close is not possessive: "E) $78.20" is the letter E, then its option's text ("$" is no close there)
_LETTER_AT = _rx(
    r"[ \t]{0,3}(?P<open>" + _OPEN_DRESS + r"{0,4}+)[ \t]{0,2}(?P<letter>[A-Ea-e])(?P<close>" + _CLOSE_DRESS
    + r"{0,4})(?:[ \t]{0,3}(?P<end>$|\n)|[ \t]{0,3}(?P<punct>[.,;!?:)\]—–→|。，！？])|[ \t]{1,4}(?P<word>(?=\S)))"
)
# a letter named in a sentence: "C is correct", "So C must be the answer", "(C)" / "[C]" / "\"C\"" anywhere
_NAMED_LETTER = _rx(
    r"(?:(?<![\w(\[\"'`“*$\\])(?P<d>[A-Ea-e])|[(\[\"'`“‘«*$\\]{1,6}+(?P<d>[A-Ea-e]))[)\].\"'`”’»*$\\]{0,6}+"
    r"[ \t]{1,3}(?:is|must[ \t]be|should[ \t]be|would[ \t]be|seems[ \t]to[ \t]be)[ \t]{1,3}(?:the[ \t]{1,3})?(?:correct|right|answer|best|true|valid|one)(?!\w)"
    r"|[(\[](?P<e>[A-E])[)\]]"
    r"|(?<![\w])[\"'`*]{1,2}(?P<f>[A-E])[\"'`*]{1,2}(?![\w])"
)
# the words before a letter, in any case: "option C", "Option (c)", "ANSWER: D", "we choose c."
_LETTER_WORDS = _rx(
    r"(?<![\w])(?:option|choice|answer|choose|select|pick|go[ \t]with|letter)[ \t]{0,3}(?:is[ \t]{1,3})?[:\-]?"
    # only where a letter follows (a cheap filter in the pattern: "answer answer ..." calls no Python)
    r"(?=[ \t]{0,3}(?:\*\*|__|\\[a-z]{2,6}\{|\\\(|<" + _HTML + r">|[\"'`\[({$*_“‘«]){0,4}[ \t]{0,2}[A-Ea-e](?![A-Za-z]))",
    regex.I,
)


def _letter_in_dress(text: str, after_marker: bool) -> str | None:
    """The letter that opens `text` in any dress, or None. After a marker a capital may be followed
    by a word ("The answer is C because ..."); at the start of an output it may not ("A train ...").
    A lower-case letter needs a dress (brackets, quotes), the end, or a punctuation mark after it
    (not ":", "Option a: 60 is wrong"; at the start of an output not ",", "a, b and c are sides")."""
    match = _match(_LETTER_AT, text)
    if match is None:
        return None
    letter, opened, closed = match.group("letter"), match.group("open").strip(), match.group("close").strip()
    dressed = (bool(opened) and bool(closed)) or closed[:1] in (")", "]")
    if dressed or match.group("end") is not None:
        return letter.upper()
    punct = match.group("punct")
    if letter.isupper():
        return letter if (punct is not None or after_marker) else None
    if punct is None or punct == ":" or (punct == "," and not after_marker):
        return None
    return letter.upper()


# a letter mentioned to be ruled out: "(A) is wrong", "Option B is incorrect", "not (C)"
_RULED_OUT_AFTER = _rx(
    r"[ \t*_\"'`)\]”’]{0,6}(?:is|are|was|seems|would[ \t]be)?[ \t]{0,3}(?:not|n't|incorrect|wrong|false|invalid|too|impossible|eliminated|ruled)(?![\w])"
    r"|[ \t*_\"'`)\]”’]{0,6}(?:can(?:not|'t)|could(?:n't|[ \t]not))",
    regex.I,
)
_RULED_OUT_BEFORE = _rx(r"(?:(?<![\w])not|n't|(?<![\w])than|(?<![\w])over|(?<![\w])eliminate|(?<![\w])rule[ \t]out)[ \t*_\"'`(\[“‘]{1,6}$", regex.I)
# a line that is only a letter in dress: "(B)", "**C.**", "$$\nB\n$$" has its line "B", "Option (d)"
_LETTER_LINE = _rx(
    r"(?m:^)[ \t>*_#-]{0,8}(?:[^\d\n:：→∴]{0,30}[:：→∴][ \t]{0,3})?(?:(?:option|choice|letter|answer)[ \t:]{0,3})?"
    r"(?:\\[(\[]|\\boxed\{|<" + _HTML + r">|[\"'`“‘«\[({$*_]){0,6}"
    r"[ \t]{0,2}(?P<letter>[A-Ea-e])(?:\\[)\]]|</" + _HTML + r">|[\"'`”’»\])}$*_.!]){0,6}[ \t]{0,3}(?m:$)",
    regex.I,
)


_RULED_OUT_LOOKBACK = 16  # letters named to be ruled out that the reader steps back over (a bound: linear time)


def _ruled_out(text: str, start: int, end: int) -> bool:
    """Whether the letter mentioned at text[start:end] is named only to be ruled out."""
    return bool(_match(_RULED_OUT_AFTER, text[end : end + 40]) or _search(_RULED_OUT_BEFORE, text[max(0, start - 16) : start]))


def _named_letters(text: str, letters: str = LETTERS) -> list[tuple[int, str, bool]]:
    """(position, letter, strong) of the last letter among `letters` named by each rule: in a
    sentence ("C is correct", "choose (c)": strong), alone on its line (strong), or merely in
    brackets or quotes ("(C)", "'C'": weak); a letter named to be ruled out ("(A) is wrong",
    "not (B)") is skipped. Only the last of each rule is kept: linear in the text."""
    last_strong = last_weak = None
    strong, weak = [], []  # the last few of each rule, the latest first: ruled-out checks only on those
    for match in _finditer(_NAMED_LETTER, text):
        if match.group(match.lastgroup).upper() in letters:
            kept = strong if match.lastgroup == "d" else weak
            kept.append(match)
            if len(kept) > 2 * _RULED_OUT_LOOKBACK:
                del kept[:_RULED_OUT_LOOKBACK]
    for kept, is_strong in ((strong, True), (weak, False)):
        for match in reversed(kept[-_RULED_OUT_LOOKBACK:]):
            if not _ruled_out(text, match.start(), match.end()):
                found = (match.start(), match.group(match.lastgroup).upper(), is_strong)
                last_strong, last_weak = (found, last_weak) if is_strong else (last_strong, found)
                break
    last_word = last_line = None
    words = []
    for match in _finditer(_LETTER_WORDS, text):
        head = text[match.end() : match.end() + 24]
        letter = _letter_in_dress(head, True)
        if letter and letter in letters:
            words.append((match, letter, match.end() + head.upper().find(letter)))
            if len(words) > 2 * _RULED_OUT_LOOKBACK:
                del words[:_RULED_OUT_LOOKBACK]
    for match, letter, at in reversed(words[-_RULED_OUT_LOOKBACK:]):
        if not _ruled_out(text, match.start(), at + 1):
            last_word = (match.start(), letter, True)
            break
    for match in _finditer(_LETTER_LINE, text):
        if match.group("letter").upper() in letters:
            last_line = (match.start(), match.group("letter").upper(), True)
    return sorted(x for x in (last_strong, last_weak, last_word, last_line) if x is not None)


def _bare_letter(output: str) -> str | None:
    """A letter the output is, starts with ("c) ...", "C\nbecause ...", "A. 1 over 5") or ends with
    ("... so we choose c."). A lower-case "a" ending an output counts only when a full stop or
    bracket closes it: without one it is as likely the article of a cut-off sentence."""
    text = output.strip()
    if not text:
        return None
    start = _letter_in_dress(text[:64], False)
    if start:
        return start
    closed = text.rstrip("!").endswith((".", ")"))
    tail_text = _sub(_TAIL_MARKUP, "", text[-64:])
    # before the letter: a space or an opening mark; "*", "_" or "$" only as dress, not inside a term
    # ("a*b"), and ">" only closing a tag ("<b>C"), not a comparison ("$a>b$" is an option's text)
    tail = regex.search(r"(?:^|[\s(\"'`\[“‘«⟨「]|(?<![\w)\]}])[*_$]{1,2}|(?<=<" + _HTML + r">))"
                        r"([(\[\"'`“‘]?)([A-Ea-e])([)\]\"'`”’]?)$", tail_text)
    if tail is None or _ruled_out(tail_text, tail.start(2), tail.end(2)):
        return None
    # a lone "a" after a lead ("Final result: a", "∴ a") is no article
    led = tail_text[: tail.start()].rstrip().endswith((":", "：", "∴", "→", "=>", "="))
    if tail.group(2) != "a" or tail.group(3) or closed or led:
        return tail.group(2).upper()
    return None


_TAIL_MARKUP = _rx(r"(?:\\\)|\\\]|</" + _HTML + r">|[.!*$_`\s”’»⟩」。！✓✔✅☑\uFE0F])++$")  # "A ✓", "A。" end with the letter


_QA_LABEL = _rx(r"(?m:^)[ \t*_]{0,4}A[ \t*_]{0,2}[:：][ \t*_]{0,3}(?=(?:\\\(|[(\[\"'`“*$]){1,4}[A-Ea-e](?:\\\)|[)\]\"'`”*$]){1,4}[ \t.]{0,2}(?m:$))")
_LETTER_END = _rx(r".*[(\[][A-Ea-e][)\]][ \t.*$_`\"')\]»”’]*+$")  # a line that ends with a bracketed letter
_CHOICE_LEAD = _rx(r"(?:[ \t\r\n*:_|=→–—-]|\$\$|\\\[|[\"'`“‘«$({\[](?=[ \t]{0,2}(?:option|choice|letter)[ \t])|(?:option|choice|letter)(?![\w]))*+", regex.I)


def _choice_head(text: str) -> str:
    """The start of a letter answer without its lead-in: markup ("$$\\n", "\\[", "**", "= "), the word
    "option" / "choice" / "letter" ("\\boxed{option d}", "Answer: $$\\nC.\\n$$")."""
    head = text[:200]
    return head[_match(_CHOICE_LEAD, head).end() :]


def _letter_of_last_lines(output: str) -> str | None:
    """A letter given on one of the last lines, in dress or after a short lead ("...\n$$\nC: p = 12\n$$",
    "Therefore, the total is (A.).", "[Answer] “(d)”\n\nThanks for asking!")."""
    rest = output.rstrip()
    for _ in range(3):
        if not rest:
            return None
        line = _last_line(rest)
        letter = (_bare_letter(line) if len(line) <= 120 else None) or _letter_in_dress(_choice_head(line), False) or _line_letter(line)
        if letter is not None:
            return letter
        rest = rest.rsplit("\n", 1)[0].rstrip() if "\n" in rest else ""
    return None


def _normalise(text: str) -> str:
    return " ".join(_strip_latex(text).split()).strip(" .$").lower()


def extract_choice(output: str, options: tuple[str, ...] = ()) -> str | None:
    """The chosen letter A-E: an explicit letter, else the option whose text or plain value is given."""
    n = len(options) or len(LETTERS)
    letters = LETTERS[:n]
    boxed = boxed_content(output)
    if boxed is not None:
        head = _choice_head(_strip_latex(boxed) if "\\text" in boxed else boxed)  # "\\boxed{\\text{Option } A}"
        letter = _letter_in_dress(head, True)
        if letter and letter in letters and len(head.strip()) <= 12:
            return letter
    segment, marked = answer_segment(output, choice=True)
    if marked:
        head = _choice_head(segment)
        if _match(_LETTER_HEDGE, head):
            return None  # "A or B", "between B and C": no one answer
        corrected = _corrected_letter(segment)
        if corrected is not None and corrected in letters:
            return corrected
        letter = _letter_in_dress(head[:80], True)
        if letter is not None and options and _contradicted(head, letter, options):
            return None  # "A) 45" where 45 is option D's text: the letter and its text disagree
        if letter is None:  # the option's text, then its letter: "8 (C)", "$61 (A)."
            line = head[:200].split("\n", 1)[0]
            letter = _bare_letter(line) if len(line) <= 120 and _match(_LETTER_END, line) else None
        if letter and letter in letters:
            return letter
    label = _search(_QA_LABEL, output)  # "A: (b)": "A:" labels the answer of a Q/A pair
    if label is not None:
        letter = _letter_in_dress(output[label.end() : label.end() + 80], True)
        if letter and letter in letters:
            return letter
    named = _named_letters(output, letters)
    strong = [n for n in named if n[2]]  # a letter named as the answer or alone on its line beats a mere "(C)"
    if named:
        return (strong or named)[-1][1]
    letter = _bare_letter(output) or _letter_of_last_lines(output)
    if letter and letter in letters:
        return letter
    if not options:
        return None
    where = segment if marked else (output.strip().rsplit("\n", 1)[-1] if output.strip() else "")
    if len(where) > 2000:  # an option's text is short: compare the end of a long last line
        where = where[-2000:]
    whole = [i for i, option in enumerate(options) if _normalise(option) and _normalise(option) == _normalise(where)]
    if whole:  # the answer is an option's text, all of it ("1 over 5": not the option "5")
        return letters[whole[0]]
    pred = parse_exact(where) if marked else _last_number(where)
    if pred is not None:  # a value: the plain-number option with that value ("80" -> "80")
        for i, option in enumerate(options):
            if pred == option_value(option):
                return letters[i]
    # option text inside the answer, whole words only; the longest wins ("15" loses to "150")
    text = _normalise(where)
    hits = []
    for i, option in enumerate(options):
        o = _normalise(option)
        if o and regex.search(r"(?<![\w.])" + regex.escape(o) + r"(?![\w]|\.\d)", text):
            hits.append((len(o), i))
    return letters[max(hits)[1]] if hits else None


_LETTER_HEDGE = _rx(
    r"(?:either[ \t]{1,3})?[(\[]?[A-E][)\]]?[ \t]{1,3}or[ \t]{1,3}(?:option[ \t]{1,3})?[(\[]?[A-E](?![\w])"
    r"|between[ \t]{1,3}(?:options?[ \t]{1,3})?[(\[]?[A-Ea-e][)\]]?[ \t]{1,3}and[ \t]{1,3}[(\[]?[A-Ea-e](?![\w])",
)


def _contradicted(head: str, letter: str, options: tuple[str, ...]) -> bool:
    """Whether the text after the letter that opens `head` is another option's whole text or
    value and not the letter's own ("C) 45" where C is 40 and D is 45)."""
    found = _match(_LETTER_AT, head)
    index = LETTERS.index(letter)
    if found is None or index >= len(options):
        return False
    rest = _normalise(head[found.end() :].split("\n", 1)[0].lstrip(" \t:.—–)*_").rstrip(" \t.*_"))
    own = _normalise(options[index])
    if not rest or rest == own:
        return False
    value = option_value(rest)
    if value is not None and value == option_value(options[index]):
        return False
    return any(i != index and (rest == _normalise(o) or (value is not None and value == option_value(o)))
               for i, o in enumerate(options))


_OPTION_VALUE = regex.compile(r"[-+−]?\$?(" + _DIGITS + r"(\.\d+)?|\.\d+)(/\d+)?(\s?%|\s+[A-Za-z°²³/ .]+)?")


def option_value(option: str) -> Fraction | None:
    """An option's number when the option is just a number, maybe with a unit after a space
    ("80 km/h", "$4$", "25%"); None for anything else ("$5m+4p$", "x = 4", "5(√3 + 1)")."""
    text = _strip_latex(option).strip().strip("$").strip()
    if len(text) > 200 or not _OPTION_VALUE.fullmatch(text):
        return None
    return parse_exact(text)


# ---------------------------------------------------------------- MATH expressions

_MATH_NUMBER = _rx(r"(?<!\^|\^\{)-?(?:\d++(?:\.\d++)?|\.\d++)(?:/\d++)?(?:[eE][-+]?\d{1,6}+(?!\d)|[kK](?![^\W_])|[ \t](?:hundred|thousand|million|billion|trillion)(?![^\W_]))?")  # "10k" is not 10
_TABLE_RULE = _rx(r"[|:\- \t]*-{3,}[|:\- \t]*+|[*_]{3,}")  # "|---|", "---", "***"
_LIST_MARKER = _rx(r"^[ \t]{0,8}(?:[-*+•]|\d{1,2}[.)])[ \t]{1,4}(?=\S)")
_SKIP_LINE = {"", "$$", "$", "\\[", "\\]", "\\(", "\\)", ":", "```", "~~~", "**"}
_PY_LITERALS = {"True", "False", "None"}


_HTML_TAG = _rx(r"</?" + _HTML + r">")
# prose after the answer on its line: a stop or comma, a space and a word ("2, not 9", "2. I hope
# it is correct"); a LaTeX word (\\text{...}) starts with a backslash and is kept
_PROSE_AFTER = _rx(r"[.,;!][ \t]{1,4}(?=[A-Za-z]{2,}(?![\w{])|I[ \t])")


def _clean_math(text: str) -> str:
    text = _sub(_HTML_TAG, "", text)
    prose = _search(_PROSE_AFTER, text)
    if prose is not None and text[: prose.start()].strip(" \t*$`\"'“”"):
        text = text[: prose.start()]
    text = text.strip().strip("|").strip().strip("*_").rstrip(".!。！").strip().strip("*_$").strip()
    while text.endswith("}") and text.count("}") > text.count("{"):  # a JSON object's close: {"answer": "18"}
        text = text[:-1].rstrip().rstrip(",").rstrip()
    for left, right in (("\\[", "\\]"), ("\\(", "\\)"), ("`", "`"), ('"', '"'), ("'", "'"), ("“", "”"), ("‘", "’"), ("«", "»"), ("⟨", "⟩"), ("「", "」")):
        if text.startswith(left) and text.endswith(right) and len(text) > len(left) + len(right):
            text = text[len(left) : len(text) - len(right)].strip().rstrip(".").strip().strip("$").strip()
    return text


def _first_answer_line(segment: str) -> str:
    """The first line after a marker that holds an answer: a display block's content ("$$\n18\n$$")
    and a program's printed `True` before its number are stepped over."""
    lines = segment.strip().split("\n", 40)[:40]
    on_own_line = segment.lstrip(" \t*_").startswith(("\n", "\r"))
    for i, line in enumerate(lines):
        stripped = line.strip().strip("*").strip()
        if stripped in _SKIP_LINE or _fullmatch(_TABLE_RULE, stripped):
            continue
        if i > 0 or on_own_line:  # "Answer:\n\n- 2": a list item's marker is no minus sign
            line = _sub(_LIST_MARKER, "", line)
        if stripped in _PY_LITERALS and any(rest.strip() not in _SKIP_LINE for rest in lines[i + 1 :]):
            continue
        return line
    return lines[0] if lines else ""


def extract_math(output: str) -> str:
    """The final expression of a MATH-style output (boxed, after a trigger, else the last number)."""
    segment, marked = answer_segment(output)
    if marked:
        boxed = boxed_content(segment)
        if boxed is None:
            if not segment.strip(_DRESS_CHARS + ".\n\r") or _match(_HEDGE, segment):
                return ""  # nothing after the marker, or alternatives ("2 or 9"): no one answer
            corrected = _corrected(segment)
            if corrected is not None:
                return _clean_math(corrected)
        return _clean_math(boxed if boxed is not None else _first_answer_line(segment))
    if _cut_off_in_working(output) or _search(_HEDGE_AT_END, output[-200:]):
        return ""  # cut off mid-sentence, or alternatives: no one answer
    bare = _bare_number(output)  # the last line gives it bare: "...\n\\frac{2}{1}", "Total: 18"
    if bare is not None:
        return _clean_math(bare)
    if _bare_spelled(output):  # "... = 14.\nTwo."
        return format_exact(_spelled_at_start(output.rstrip().rsplit("\n", 1)[-1].strip(" \t.!\"'`*_$()[]{}")))
    last = _last(_MATH_NUMBER, output)  # ".5" is 0.5, not 5
    return last.group(0) if last else ""


def plain_number(text: str) -> float | None:
    """`text` as a number when it is nothing but one (fractions and LaTeX fractions included)."""
    return _float(plain_exact(text))


_PLAIN = regex.compile(r"[-+−]?[$€£¥₹]?(" + _DIGITS + r"(\.\d+)?|\.\d+)(/\d+)?%?")


def plain_exact(text: str) -> Fraction | None:
    """`plain_number`, exactly."""
    if len(text) > 4000:
        return None
    stripped = _strip_latex(text)
    if " " in stripped:
        stripped = _sub(_SPACE_THOUSANDS, "", stripped)
        if _search(_SPACED_DIGITS, stripped):
            return None  # "1. 2" (a list item's number, then the answer) is two numbers, not 1.2
        stripped = stripped.replace(" ", "")
    stripped = stripped.strip("$")
    if not _PLAIN.fullmatch(stripped):
        return None
    return parse_exact(stripped)


_SPACE_THOUSANDS = _rx(r"(?<=(?<![\d.])\d{1,3}(?: \d{3})*+) (?=\d{3}(?![\d.]))")  # "14 400": a space between thousands
_SPACED_DIGITS = _rx(r"[\d.] ++[\d.]")
# a unit that is a ratio after a number ("2 km/h", "3 m/s"): the slash is no division there
_UNIT_RATIO = _rx(r"(?<=\d[ \t]{1,2})(?:km|m|cm|mm|mi|ft|kg|g|lb|L|mL|l)/(?:h|hr|hour|s|sec|min|day|kg|g|L|l|m|cm|gal)(?![\w])")
_UNIT_WORDS = _rx(r"(?<![\\\w])(?!(?:hundred|thousand|million|billion|trillion)(?![\w]))[A-Za-z][A-Za-z.]*+|[°€£¥₹$%~≈]|\^\{?\\circ\}?|\\approx|\\sim")


def _single_number(text: str) -> Fraction | None:
    """The number `text` is, in any dress (currency, units, "percent", "~", `\\text{}`), when it
    holds one number and no other mathematics; None otherwise ("2\\sqrt{3}", "x + 1", "3, 4")."""
    if len(text) > 400:
        return None
    spelled = _fullmatch(_SPELLED, (_strip_latex(text) if "\\" in text else text).strip(" \t.\"'`*$“”"))
    if spelled is not None:  # "two", "negative ten", "\\text{Two}"
        return _spelled_at_start(spelled.group(0))
    s = _sub(_UNIT_RATIO, " ", _strip_latex(text))
    if regex.search(r"\\(?!approx|sim|circ)[A-Za-z]|[\^*+=×÷/]|\d[ \t]*[-−]", s.replace("^\\circ", "").replace("^{\\circ}", "")):
        return None
    rest = _sub(_UNIT_WORDS, " ", s.replace("^\\circ", " ").replace("^{\\circ}", " "))
    values = exact_numbers_in(rest)
    if len(values) != 1 or _sub(_NUMBER, "", _number_text(rest)).strip(" \t.,:;()[]{}\"'`*_") != "":
        return None
    return values[0]


def math_equal(pred: str, gold: str) -> bool:
    """Whether two MATH-style answers are equivalent (math-verify; plain numbers by `number_matches`).

    A prediction with "=" ("x = 14,\\!400", "12 + 6 = 18") for a gold without one is compared by
    what follows its last "=". A gold that is a plain number matches a prediction that is that
    number in any dress ("18 units", "~18", "€18", "\\text{18}", "187.5 percent")."""
    if not pred.strip():
        return False
    if "=" in pred and "=" not in gold:  # "x = 14,\\!400", "12 + 6 = 18": the right-hand side is the answer
        pred = pred.rsplit("=", 1)[1].strip().strip("$").strip()
    gold_value, pred_value = plain_exact(gold), plain_exact(pred)
    if gold_value is not None:
        plain_gold = _strip_latex(gold).replace(" ", "").strip("$")
        gold_text = plain_gold if gold_decimal(plain_gold) is not None else gold
        if pred_value is not None:
            return number_matches(pred_value, gold_text, pred.strip().strip("$"))
        dressed = _single_number(pred)
        if dressed is not None:
            return number_matches(dressed, gold_text)
        if not any(c.isdigit() for c in pred) and "\\" not in pred:
            return False  # words without a digit or a LaTeX command are not a number (no parser needed)
    check_size(pred)
    if len(pred) > 4 * len(gold) + 200:  # far longer than the gold: no parser is given it (it could stall)
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


# ---------------------------------------------------------------- what is not this item's answer

# A model answers, then goes on: it invents the next exercise under a header and answers that one
# too, or a chat template's end-of-turn token is followed by invented turns. Neither is this
# item's answer. A header is a line that starts with one of these words and a ":" / "." / number;
# "Next question", "New problem", ... and markdown "### Input:" headers always start a
# continuation; a bare "Question:" / "Example 2." does when a blank line or an answer precedes it
# (inside working, "Example:" may introduce a worked case).
_HEADER = _rx(
    r"(?m:^)[ \t>*_]{0,8}(?P<hashes>#{1,6})?[ \t*_]{0,4}"
    r"(?P<next>(?:next|new|another|following|follow[- ]up|bonus|similar|practice|additional|extra)[ \t]{1,3})?"
    r"(?P<word>question|problem|exercise|example|task|query|input|instruction|output|response|user|human|assistant|system"
    r"|student|teacher|q)(?![\w'])"
    r"[ \t*_]{0,3}(?P<number>#?\d{1,4}[ \t*_]{0,3})?(?P<end>[:.)\]]|(?m:$))",
    regex.I,
)
# an invented continuation in prose, at the start of a line: "Now let's try another one: ...",
# "Let us solve a similar problem", "Here is another question"
_PROSE_NEXT = _rx(
    r"(?m:^)[ \t>*_#]{0,8}(?:(?:now|next|ok|okay|great|alright)[ \t,!.]{1,3})?(?:let's|let[ \t]us|let[’']s|we[ \t]can|we'll|here[ \t]is|here's|here[’']s)"
    r"[ \t]{1,3}(?:(?:try|do|solve|look[ \t]at|work[ \t]on|move[ \t]on[ \t]to|practice(?:[ \t]with)?)[ \t]{1,3})?"
    r"(?:another|the[ \t]next|a[ \t]similar|a[ \t]new|one[ \t]more)[ \t]{1,3}(?:one|question|problem|exercise|example|task)(?![\w])",
    regex.I,
)
_ANY_DIGIT = _rx(r"\d")
_ALWAYS_WORDS = {"input", "instruction", "output", "response", "user", "human", "assistant", "system", "student", "teacher"}
# a chat role's name alone on a line: a template rendered without its special tokens ("\nassistant\n")
_ROLE_LINE_WORDS = {"user", "assistant", "system", "human"}
_END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>", "</s>", "<end_of_turn>", "<|end|>",
                "<｜end▁of▁sentence｜>", "<|im_start|>", "<|start_header_id|>", "<start_of_turn>", "[INST]", "<|user|>",
                "<|assistant|>", "<|system|>", "<｜User｜>", "<｜Assistant｜>")


def _first_answer_at(text: str) -> int:
    """Where the first answer marker of `text` is (len(text) when there is none)."""
    found = [m.start() for m in (_search(_TRIGGERS, text), _search(_CHOICE_TRIGGERS, text)) if m] + [i for i in (text.find("####"), text.find("\\boxed")) if i >= 0]
    return min(found, default=len(text))


def _blank_line_before(text: str, at: int) -> bool:
    """Whether a blank line ends just before `at` (a bounded look-back: linear over all headers)."""
    i, newlines = at - 1, 0
    while i >= 0 and at - i < 256 and text[i] in " \t\r\n":
        newlines += text[i] == "\n"
        i -= 1
    return newlines >= 2


def _blank_or_start(text: str, at: int, start: int) -> bool:
    """Whether a blank line, or the start of the text (after `start`), comes just before `at`."""
    return _blank_line_before(text, at) or not text[start:at].strip() or text[max(start, at - 2) : at].endswith(("\n\n", ">"))


def _bare_spelled(before: str) -> bool:
    """Whether the last line of `before` is a spelled-out number alone in its dress ("$fifty-eight$",
    "**Twelve.**"): an answer given bare, as a digit would be."""
    lines = before.rstrip().rsplit("\n", 1)
    last = lines[-1].strip(" \t.!\"'`*_$()[]{}")
    return bool(last) and _fullmatch(_SPELLED, last) is not None


def cut_continuation(text: str) -> str:
    """`text` up to what is not this item's answer: a think block before the answer is dropped, and
    the text is cut at a chat template's end-of-turn token and at an invented next exercise."""
    if "</think>" in text:
        after = text.rsplit("</think>", 1)[1]
        if after.strip():
            text = after
    start = 0  # tokens that open the text (a template's start) are stepped over, not cut at
    while True:
        while start < len(text) and text[start].isspace():  # no slice per token: linear in a run of tokens
            start += 1
        token = next((t for t in _END_OF_TURN if text.startswith(t, start)), None)
        if token is None:
            break
        start += len(token)
    cuts = [at for at in (text.find(t, start) for t in _END_OF_TURN) if at >= 0]
    if cuts:
        text = text[: min(cuts)]
    first_answer = None
    bare_before = _BareLines()
    for match in _finditer(_HEADER, text):
        if match.start() <= start:
            continue
        word = match.group("word").lower()
        hashes = bool(match.group("hashes"))
        alone = match.group("end") == ""  # the header ends its line without punctuation ("Exercise 2", "assistant")
        if alone and not hashes and match.group("number") is None and not (
                word in _ROLE_LINE_WORDS and _blank_or_start(text, match.start(), start)):
            continue  # a line that is only the word ("Input") without a header's punctuation
        if word == "output" and not hashes:
            continue  # "Output:" after a program is its printed result, not a new exercise
        always = (bool(match.group("next")) or (hashes and word != "q") or (word in _ALWAYS_WORDS and match.group("end") == ":")
                  or (alone and word in _ROLE_LINE_WORDS))
        if not always and not _blank_line_before(text, match.start()):
            if first_answer is None:
                first_answer = _first_answer_at(text)
                first_digit = _search(_ANY_DIGIT, text)
                first_digit_at = first_digit.start() if first_digit else len(text)
            # a numbered header ("Exercise 3:") after an answer given bare ("[58]", "`b.`")
            # (numbered 2 or more: "Example 1:" may open a worked case inside the working)
            before = text[max(start, match.start() - 64) : match.start()]
            numbered = match.group("number") is not None and int(match.group("number").strip(" \t*_#")) >= 2 and (
                first_digit_at < match.start() or _bare_letter(before) is not None or _bare_spelled(before))
            bare = bare_before(text, start, match.start())
            if first_answer >= match.start() and not numbered and not bare:
                continue
        if text[start : match.start()].strip():
            text = text[: match.start()]
            break
    prose = _search(_PROSE_NEXT, text, start)  # only after an answer ("let's try another one" may be working)
    if prose is not None and (_first_answer_at(text[: prose.start()]) < prose.start()
                              or bare_before(text, start, prose.start())):
        text = text[: prose.start()]
    first_marker = _first_answer_at(text)
    for question in _finditer(_NUMBERED_QUESTION, text):  # "\n\n2. What is 5 + 9?" after an answer
        if question.start() > start and _blank_line_before(text, question.start()) and (
                first_marker < question.start()
                or bare_before(text, start, question.start())):
            text = text[: question.start()]
            break
    explain = _search(_EXPLAIN, text, start)
    if explain is not None and bare_before(text, start, explain.start()):
        rest = text[explain.start() :]
        if _first_answer_at(rest) == len(rest):  # an explanation that names no answer of its own
            text = text[: explain.start()]
    return text


# a numbered question of its own: a list item that asks ("2. What is 5 + 9?")
_NUMBERED_QUESTION = _rx(r"(?m:^)[ \t*_#]{0,6}\d{1,3}[.)][ \t]{1,3}[^\n?]{1,300}+\?[ \t*_]{0,3}(?m:$)")
# an explanation after the answer: "18\nExplanation: the other value, 25, is ...", "(B)\nCheck: ..."
_EXPLAIN = _rx(
    r"(?m:^)[ \t*_#>]{0,8}(?:[\p{So}\uFE0F][ \t]{0,2}){0,2}(?:(?:(?:double|sanity|cross|quick)[- ])?(?:explanation|check|checking|verification|verify|reasoning|justification|note|proof|why|rationale)"
    r"|to[ \t]verify|to[ \t]check|to[ \t]double[- ]check)[ \t*_]{0,4}[:：]"
    # "Let me verify ...", "Now let's double-check by ...": a check that need not open with a label
    r"|(?m:^)[ \t*_#>]{0,8}(?:(?:now|finally)[ \t,]{1,3})?(?:let[ \t]me|let's|let[’']s|let[ \t]us|i'll|we[ \t]can)[ \t]{1,3}(?:double[- ]check|verify|check|confirm)(?![\w])",
    regex.I,
)
# a short lead before an answer on its line, without working ("x = 4" and "Step 1: 4" are steps):
# the last one for a number ("Therefore, the total is 18"), the first for a letter ("Total: **A: 5**")
_LINE_LEAD = _rx(r"^[^\d=\n]{0,40}(?:[:：→∴,]|=>|[ \t](?:is|get|gives|equals|obtain|find|choose|pick)(?=[ \t]))[ \t]{0,4}")
_LINE_LEAD_FIRST = _rx(r"^[^\d=\n]{0,40}?(?:[:：→∴,]|=>|[ \t](?:is|get|gives|equals|obtain|find|choose|pick)(?=[ \t]))[ \t]{0,4}")


_IS_THE_ANSWER = _rx(r"[ \t]{1,3}(?:is|as)[ \t]{1,3}(?:the|my|our)[ \t]{1,3}(?:(?:final|correct|right)[ \t]{1,3})?(?:answer|value|result|option|choice)[ \t]{0,2}[.!]?$", regex.I)
_ASSIGNED = _rx(r"^(?:[A-Za-z]{1,2}[ \t]{0,2})?=[ \t]{0,2}")  # "x = 18", "= 18"
_DRESS_CHARS = " \t*_`\"'“”‘’«»⟨⟩「」$!:✓✔✅☑🎯📌👉➡🔢🎉\uFE0F"  # emoji a chat model puts around an answer


def _last_line(before: str, emoji: bool = False) -> str:
    """The last line of `before`, a display block that ends it joined into one line ("So, $$\n18\n$$
    is the answer." -> "So, $$ 18 $$ is the answer."; "$$\n18\n$$." -> "$$ 18 $$.")."""
    lines = [_sub(_HTML_TAG, "", line).strip() for line in before.rstrip().rsplit("\n", 5)]
    if not emoji:  # "✅ **B**": an emoji opening the line is dress (a number's dress strip keeps it, to see "✅ x = 8" dressed)
        lines = [_sub(_EMOJI_LEAD, "", line) for line in lines]
    if len(lines) > 1 and lines[-1].startswith(_DISPLAY_CLOSE):
        for i in range(len(lines) - 2, -1, -1):
            if lines[i].endswith(_DISPLAY_OPEN) or lines[i] in _DISPLAY_OPEN:
                return " ".join(lines[i:])
    return lines[-1] if lines else ""


_EMOJI_LEAD = _rx(r"^[ \t]{0,8}(?:[\p{So}\uFE0F][ \t]{0,3})++")  # "✅ **B**": an emoji opening a line is dress
_DISPLAY_OPEN = ("$$", "\\[", "$", "```", "~~~")
_DISPLAY_CLOSE = ("$$", "\\]", "$", "```", "~~~")


def _bare_number(before: str) -> str | None:
    """The number the last line of `before` gives bare, in its dress ("18", "**$18.00**", "\\(18\\)",
    "\\frac{2}{1}"), alone, after a short lead that holds no digit and no "=" ("Total: 18",
    "Therefore, the total is 18.", not "x = 4" or "Step 1: 4"), or before "is the answer"."""
    line = _last_line(before, emoji=True)
    if not line or len(line) > 120:
        return None
    line = line[: m.start()] if (m := _search(_IS_THE_ANSWER, line)) else line
    lead = _match(_LINE_LEAD, line)
    value = undressed = line[lead.end() :] if lead else line
    for _ in range(3):  # dress inside dress: "$$ [+58] $$", "\\( (18) \\)."
        value = value.strip(_DRESS_CHARS).rstrip(".").strip(_DRESS_CHARS)
        if value.startswith(("\\(", "\\[")) and value.endswith(("\\)", "\\]")):
            value = value[2:-2]
        elif value[:1] + value[-1:] in ("()", "[]"):
            value = value[1:-1]
    # "Outcome: x = 18", "**x = 18**", "$$\nx = 18\n$$"; a line "x = 4" alone, undressed, is working
    assigned = _match(_ASSIGNED, value) if lead or value != undressed.strip() else None
    value = value[assigned.end() :] if assigned else value
    if not value or not (_match(_NUMBER_OPENS, value) or _fullmatch(_SPELLED, value)):
        return None  # "we get .5" is a sentence, not a number in dress
    if _single_number(value) is not None or plain_exact(value.strip("$")) is not None:
        return value
    return None


_NUMBER_OPENS = _rx(r"(?:(?:about|approximately|around|roughly|nearly|exactly|only|just)[ \t]{1,3}|(?:Rs|INR|USD|US|EUR|GBP|CAD|AUD|Rp|RM)\.?[ \t]{0,2})?[^A-Za-z]", regex.I)


class _BareLines:
    """`_bare_answer_line` of the text before a position, for many positions of one output: a
    looping output repeats its lines, so each distinct line is judged once, and at most
    `BUDGET` distinct lines are judged (beyond that none counts): linear in the output."""

    BUDGET = 64

    def __init__(self) -> None:
        self.seen: dict[str, bool] = {}

    def __call__(self, text: str, start: int, at: int) -> bool:
        before = text[max(start, at - 256) : at]
        key = before.rstrip()[-80:]
        if key not in self.seen:
            if len(self.seen) >= self.BUDGET:
                return False
            self.seen[key] = _bare_answer_line(before)
        return self.seen[key]


_LEAD_END = _rx(r"[:：→∴,]|=>|[ \t](?:is|get|gives|equals|obtain|find|choose|pick)(?=[ \t])")


def _line_letter(line: str) -> str | None:
    """The letter a line gives after a short lead without working ("Total: **A: 5(√3 + 1)**",
    "Therefore, the total is «B: 6»", "So, (A.) is the answer."), or None."""
    line = line[: m.start()] if (m := _search(_IS_THE_ANSWER, line)) else line
    head = line[:60]
    for lead in _finditer(_LEAD_END, head):
        if "=" in head[: lead.start()] or _search(_ANY_DIGIT, head[: lead.start()]):
            return None  # working ("x = 4, so"), not a lead
        rest = _choice_head(line[lead.end() :])
        if rest.rstrip() == "a" or rest.startswith(("a ", "a\t")):
            continue  # "So the total is a" (cut off), "is a lot": the article
        letter = _letter_in_dress(rest, True)
        if letter is not None:
            return letter
    return None


def _bare_answer_line(before: str) -> bool:
    """Whether the last line of `before` is an answer given bare: a number (`_bare_number`) or a
    letter in its dress ("(B)", "Result → **A**.")."""
    line = _last_line(before)
    if not line or len(line) > 120:
        return False
    if _bare_letter(line) is not None or _bare_number(before) is not None:  # its own last line, emoji kept ("✅ x = 8")
        return True
    if _line_letter(line) is not None or (len(line) <= 120 and _match(_LETTER_END, line)):  # "So, (6(√3) (B)) is the answer."
        return True
    return any(strong for _, _, strong in _named_letters(line))  # "So, choose (A): $61", "c is correct"


MAX_READ_CHARS = 1 << 21  # a longer output (a program's 10 MB of output, a model in a loop) is not read
MAX_DIGITS = 400  # a number of more digits is not compared (int() and sympy would stall)
_LONG_DIGITS = _rx(r"\d{" + str(MAX_DIGITS + 1) + "}")
# a power of ten as a model or a program writes it: "1E+999999", "10^{999999999}", "10**400", "\times 10^{9}"
_EXPONENT = _rx(r"(?:\^|(?<=[\d)}][ \t]{0,2})\*\*|(?<=\d)[eE])[ \t{(]{0,4}[-+−]?[ \t]{0,4}(\d{1,20}+)")


class TooLarge(ValueError):
    """An output or a number too large to read and compare within the per-item bound (`check_size`)."""


def check_size(text: str) -> None:
    """Raise TooLarge when `text` is longer than MAX_READ_CHARS, holds a number of more than
    MAX_DIGITS digits, or a power of ten beyond MAX_EXPONENT: refused before any parser (int(),
    sympy inside math-verify) is given it, so reading and comparing stay within the bound."""
    if len(text) > MAX_READ_CHARS:
        raise TooLarge(f"the output is longer than {MAX_READ_CHARS} characters")
    if _search(_LONG_DIGITS, text):
        raise TooLarge(f"a number of more than {MAX_DIGITS} digits is not compared")
    for match in _finditer(_EXPONENT, text):
        if int(match.group(1)) > MAX_EXPONENT:
            raise TooLarge(f"a power of ten above {MAX_EXPONENT} ({match.group(0).strip()[:30]}) is not compared")


@dataclass(frozen=True)
class Reading:
    """A protocol's reading of one output: the prediction ("" for none) and what decided it
    ("released", or "numloss" where numloss's reader reads otherwise than the released code)."""

    prediction: str
    decided_by: str = "released"
    note: str = ""


def extract(item: Item, text: str) -> str:
    """numloss's prediction for `item` from `text`, as text ("" when there is none); TooLarge for
    an output `check_size` refuses (numbers only where they are compared: not for choice items)."""
    if len(text) > MAX_READ_CHARS or item.kind != "choice":
        check_size(text)
    if "~~" in text:  # before the cut: a line "~~18~~ 25" gives its answer bare
        text = _sub(_STRUCK, " ", text)
    text = cut_continuation(_unstyle(text))
    if item.kind == "number":
        return format_exact(extract_exact(text))
    if item.kind == "choice":
        return extract_choice(text, item.options) or ""
    return extract_math(text)


# LaTeX emphasis ("\\underline{A}", "\\color{green}{x = 25}") is dress: the command is dropped, its
# argument kept; a colour switch without braces after it ("\\color{red} A") is dropped; a check
# mark beside an answer ("B ✓", "(A ✓)") is dress too
_STYLE = _rx(r"\\(?:underline|bm|boldsymbol|textsf|mathsf|hbox|textit|mathit|emph|texttt|mathtt|(?:text)?color[ \t]{0,4}\{[A-Za-z]{1,20}\})"
             r"[ \t]{0,4}\{((?:[^{}\n]|\{[^{}\n]{0,200}\}){0,400})\}")
_COLOR_ALONE = _rx(r"\\color[ \t]{0,4}\{[A-Za-z]{1,20}\}")
_CHECK_MARK = _rx(r"[ \t]{0,2}[✓✔☑]\uFE0F?")


def _unstyle(text: str) -> str:
    """`text` without LaTeX emphasis commands (their arguments kept), colour switches and check marks."""
    if "✓" in text or "✔" in text or "☑" in text:
        text = _sub(_CHECK_MARK, "", text)
    if "\\" not in text:
        return text
    return _sub(_COLOR_ALONE, "", _sub(_STYLE, r"\1", text))


_STRUCK = _rx(r"~~[^~\n]{1,400}+~~")  # struck-out text is what the model withdrew: "The answer is ~~18~~ 25"


class GoldError(ValueError):
    """An item's gold answer is not of its kind (a data error, not a model output's)."""


def compare(item: Item, prediction: str) -> bool:
    """Whether numloss's `prediction` (from `extract`) is `item`'s gold answer."""
    if not prediction:
        return False
    kind: AnswerKind = item.kind
    if kind == "number":
        if gold_decimal(item.answer) is None and parse_exact(item.answer) is None:
            raise GoldError(f"item {item.id}: gold answer {item.answer!r} is not a number")
        return number_matches(parse_exact(prediction), item.answer, prediction)
    if kind == "choice":
        return prediction == item.answer.upper()
    return math_equal(prediction, item.answer)


def score(item: Item, output: str) -> Scored:
    """Extract the answer of `item.kind` from `output` and compare it with `item.answer`."""
    prediction = extract(item, output)
    value = plain_number(prediction) if item.kind != "choice" and prediction else None
    return Scored(prediction, compare(item, prediction), value)
