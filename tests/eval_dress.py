"""Output dressings a chat model writes, beyond tests/test_eval_space.py's axes, each with its truth.

A family is a generator: given an item and the answer an output says (`said`, its value `value`
for open items) and the other answer (`other`), it yields (template id, output, truth mode). The
truth mode is the verdict a human reader gives: "said" (the output answers `said`) or "never"
(no answer: alternatives, a cut-off output, an empty one, a letter its own text contradicts).
Families: answers in other languages; Unicode digits; minus signs and dashes; thousands
separators (thin, narrow, no-break, apostrophe, LaTeX spaces); units and currency around a number;
arrows and relations before it; markdown (headings, blockquotes, lists, admonitions, emoji);
LaTeX emphasis, boxes and fractions; self-correction, verification paragraphs and hedges;
multiple-choice dress (letter with its text, another option's text, other languages); printed
program results (floats, trailing whitespace, labels); truncated and empty outputs; spelled-out
numbers. `cases` fills them for real items; tests/test_eval_differential.py scores them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from fractions import Fraction

from eval_cases import Case, answers_of, grouped, option_of  # tests/ is on sys.path (conftest.py)
from numloss.evaluate.answers import format_exact
from numloss.evaluate.benchmarks import Item

Dressed = Iterator[tuple[str, str, str]]  # (template id, output, truth mode)
Family = Callable[[Item, str, Fraction | None, str, Fraction | None], Dressed]

WORK = "Step 1: 3 + 4 = 7.\nStep 2: 7 * 2 = 14.\n"
_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def spell(n: int) -> str:
    """An integer 0 <= n < 10**6 in English words ("one hundred and five", "twenty-one")."""
    if n < 20:
        return _UNITS[n]
    if n < 100:
        return _TENS[n // 10] + ("-" + _UNITS[n % 10] if n % 10 else "")
    if n < 1000:
        return _UNITS[n // 100] + " hundred" + (" and " + spell(n % 100) if n % 100 else "")
    return spell(n // 1000) + " thousand" + (" " + spell(n % 1000) if n % 1000 else "")


def _open(item: Item, value: Fraction | None) -> bool:
    return item.kind != "choice" and value is not None


def _text(item: Item, said: str, value: Fraction | None) -> str:
    return format_exact(value) if _open(item, value) else said


LANGUAGE = ["La respuesta es {x}.", "La respuesta correcta es {x}", "Die Antwort lautet {x}.", "Die Antwort ist: {x}",
            "La réponse est {x}.", "Réponse : {x}", "答案是 {x}", "答案是{x}。", "答案：{x}", "最终答案：{x}", "所以答案为 {x}。",
            "Ответ: {x}", "A resposta é {x}.", "La risposta è {x}.", "答え：{x}", "正解は{x}です。", "정답: {x}",
            "Het antwoord is {x}.", "Odpowiedź: {x}", "Cevap: {x}", "الإجابة: {x}", "उत्तर: {x}", "Jawaban: {x}"]


def _each(prefix: str, forms: list[str] | dict[str, str], frames: dict[str, str]) -> Dressed:
    """Each form (named by its key, or its index in a list) in each frame ("@" is the form), named
    prefix + name + the frame's suffix; its truth: "said"."""
    for name, form in forms.items() if isinstance(forms, dict) else enumerate(forms):
        for suffix, frame in frames.items():
            yield f"{prefix}{name}{suffix}", frame.replace("@", form), "said"


STATED = {"": "The answer is @.", "-bare": WORK + "@", "-boxed": "$\\boxed{@}$"}


def listed(table: Dressed) -> Family:
    """The family of each (template id, template, truth mode) of `table`: {x} is the said answer, {o}
    the other ({other} as the item or the wrong fill spells it)."""
    table = list(table)

    def family(item: Item, said: str, value: Fraction | None, other: str, other_value: Fraction | None) -> Dressed:
        x, o = _text(item, said, value), _text(item, other, other_value)
        for name, template, truth in table:
            yield name, template.format(x=x, o=o, other=other), truth

    return family


def digits(item: Item, said: str, value: Fraction | None, other: str, other_value: Fraction | None) -> Dressed:
    s = format_exact(value)
    forms = {"fullwidth": s.translate(str.maketrans("0123456789.-", "０１２３４５６７８９．－")),
             "arabic-indic": s.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")),
             "devanagari": s.translate(str.maketrans("0123456789", "०१२३४५६७८९"))}
    yield from _each("", forms, STATED)


def minus(item: Item, said: str, value: Fraction | None, other: str, other_value: Fraction | None) -> Dressed:
    size = format_exact(abs(value))
    if value >= 0:  # a dash that is punctuation is no sign; a range is no answer
        yield "dash-punct", f"The answer is – {size}.", "said"
        yield "answer-en-dash", f"Answer – {size}", "said"
        yield "answer-em-dash", f"Answer — {size}", "said"
        yield "range", f"The answer is {size}–{format_exact(abs(value) + 2)}.", "never"
        return
    yield from _each("sign-", {f"{ord(sign):x}": sign + size for sign in "−–—－"}, {"": "The answer is @.", "-boxed": "\\boxed{@}", "-bare": WORK + "@"})


def separators(item: Item, said: str, value: Fraction | None, other: str, other_value: Fraction | None) -> Dressed:
    if abs(value) < 1000 or value.denominator != 1:
        return
    seps = {"thin": "\u2009", "narrow": "\u202f", "nbsp": "\u00a0", "space": " ", "apostrophe": "'", "latex-thin": "\\,",
            "latex-bang": ",\\!", "latex-space": "\\;"}
    yield from _each("sep-", {name: grouped(value, sep) for name, sep in seps.items()}, STATED)


UNITS_AFTER = [" apples", " dollars", "%", " cm²", " m²", " km/h", " m/s", "°C", " €", " USD", " cm^2", " m³", " kg",
               " hours", " yuan", "元", " euros", " years old", " sq ft", " points", " per cent"]
UNITS_BEFORE = ["$", "US$", "€", "£", "¥", "₹", "₩", "CHF ", "R$", "$ ", "HK$", "RMB "]


def units(item: Item, said: str, value: Fraction | None, other: str, other_value: Fraction | None) -> Dressed:
    a = format_exact(value)
    yield from _each("after", UNITS_AFTER, {"": f"The answer is {a}@.", "-bare": WORK + f"**{a}@**", "-boxed": f"\\boxed{{{a}\\text{{@}}}}"})
    if value >= 0:  # "@" is the unit
        yield from _each("before", UNITS_BEFORE, {"": f"The answer is @{a}.", "-cents": f"Final answer: @{a}" + (".00" if value.denominator == 1 else "")})


RELATIONS = ["≈ {x}", "= {x}", "→ {x}", "⇒ {x}", "⟹ {x}", "=> {x}", "-> {x}", "\\Rightarrow {x}", "\\implies {x}", "∴ {x}",
             "$\\therefore$ {x}", ":= {x}", "\\approx {x}", "⟶ {x}", "➡️ {x}", "Thus: {x}"]


MARKDOWN = ["## {x}", "# {x}", "### **{x}**", "> {x}", "> **Answer:** {x}", "> The answer is {x}.", "* {x}", "- **{x}**",
            "> [!NOTE]\n> The answer is {x}.", "!!! success \"Answer\"\n    {x}", "✅ {x}", "✅ **Final answer: {x}**",
            "🎯 Answer: {x}", "📌 {x}", "👉 **{x}**", "Final answer ✅: {x}", "🔢 The answer is {x} 🎉", "---\n**{x}**\n---",
            "| Answer |\n|---|\n| {x} |", "```\n{x}\n```", "**Answer**\n\n{x}", "## Final Answer\n\n> **{x}**", "1. {x}",
            "Answer:\n\n- {x}", "**Final answer**: `{x}`", "==> {x}"]


def latex(item: Item, said: str, value: Fraction | None, other: str, other_value: Fraction | None) -> Dressed:
    if _open(item, value):
        a, o = format_exact(value), _text(item, other, other_value)
        forms = [f"\\text{{{a}}}", f"\\mathbf{{{a}}}", f"\\textbf{{{a}}}", f"{{\\bf {a}}}", f"\\underline{{{a}}}",
                 f"\\color{{red}}{{{a}}}", f"\\textcolor{{blue}}{{{a}}}", f"\\displaystyle {a}", f"\\boxed{{\\mathbf{{{a}}}}}",
                 f"\\boxed{{{{{a}}}}}", f"\\boxed{{{a}.}}", f"\\boxed{{\\${a}}}", f"\\${a}", f"{a}^\\circ", f"\\boxed{{{a}^\\circ}}",
                 f"\\boxed{{{a} \\text{{ apples}}}}", f"\\(\\boxed{{{a}}}\\)", f"\\boxed{{x={a}}}", f"\\bm{{{a}}}",
                 f"\\boldsymbol{{{a}}}", f"\\textsf{{{a}}}", f"\\quad {a}", f"\\boxed{{\\textbf{{{a}}}}}", f"\\hbox{{{a}}}"]
        if value.denominator == 1 and value != 0:
            forms += [f"\\dfrac{{{2 * value}}}{{2}}", f"\\frac{{{3 * value}}}{{3}}", f"\\tfrac{{{2 * value}}}{{2}}"]
        yield from _each("tex", forms, {"": "The answer is $@$.", "-display": WORK + "$$@$$", "-final": "Final answer: @"})
        yield "two-boxes", f"First attempt: $\\boxed{{{o}}}$. That was wrong; recomputing gives $\\boxed{{{a}}}$.", "said"
        yield "box-ruled-out", f"$\\boxed{{{a}}}$\n\nHmm, let me recheck... no, the original is right, not $\\boxed{{{o}}}$.", "said"
        if other_value is not None:
            yield "box-sum", f"$\\boxed{{{format_exact(value + 7)} - 7 = {a}}}$", "said"
        return
    if item.kind != "choice":  # a list gold ("4,6,14,15") has no LaTeX dress here
        return
    forms = [f"\\boxed{{\\text{{({said})}}}}", f"\\boxed{{\\textbf{{{said}}}}}", f"\\boxed{{\\mathbf{{{said}}}}}", f"\\textbf{{({said})}}",
             f"\\text{{Option {said}}}", f"\\boxed{{{said})}}", f"\\boxed{{({said})}}", f"\\boxed{{\\text{{Option }} {said}}}",
             f"\\fbox{{{said}}}", f"\\boxed{{{said}: {option_of(item, said)}}}", f"\\underline{{{said}}}", f"\\color{{green}}{{{said}}}"]
    yield from _each("texc", forms, {"": "The answer is $@$.", "-display": "We compare the options.\n$$@$$"})
    yield "two-boxes-letter", f"First attempt: $\\boxed{{{other}}}$. That was wrong; rechecking gives $\\boxed{{{said}}}$.", "said"


CORRECTIONS = [
    ("strike", "The answer is ~~{o}~~ {x}.", "said"),
    ("strike-bold", "The answer is ~~{o}~~ **{x}**", "said"),
    ("strike-line", "~~The answer is {o}.~~\nThe answer is {x}.", "said"),
    ("wait-answer", "The answer is {o}. Wait, that's wrong. The answer is {x}.", "said"),
    ("wait-actually", "The answer is {o}. Wait, actually it is {x}.", "said"),
    ("correction", "The answer is {o}.\n\nCorrection: the answer is {x}.", "said"),
    ("i-mean", "The answer is {o}, I mean {x}.", "said"),
    ("no-wait", "So the answer is {o}... no wait, {x}.", "said"),
    ("oops", "The answer is {o}. Oops, I made an error: it should be {x}.", "said"),
    ("wait-check", "The answer is {x}. Wait, let me check: {o} is what we had before the last step.", "said"),
    ("repeat", "The answer is {x}.\nThe answer is {x}.\nThe answer is {x}.", "said"),
    ("repeat-final", "The answer is {x}.\n\nFinal answer: {x}", "said"),
    ("verify-after", "The answer is {x}.\n\nLet me verify: if we forgot the discount we would get {o}, so {x} is right.", "said"),
    ("double-check", "{x}\n\nDouble-check: without the last step we would have {o}.", "said"),
    ("sanity", "**{x}**\n\nSanity check: the other reading gives {o}, which does not fit.", "said"),
    ("to-verify", "Total: {x}\n\nTo verify: {o} would be the count before the last step.", "said"),
    ("verification-emoji", "✅ {x}\n\n🔍 Verification: {o} is the value before the final step.", "said"),
    ("lets-check", "So we get {x}.\n\nLet's check: starting from {o} gives a different total.", "said"),
    ("bold-verification", "**Answer: {x}**\n\n**Verification**: {o} would be wrong.", "said"),
    ("md-check", "### Answer\n{x}\n\n### Check\nIf we used {o} the sum fails.", "said"),
    ("because-other", "The answer is {x} because {o} fails the check.", "said"),
    ("hope-not-other", "The answer is {x}. I hope it is correct (not {o}).", "said"),
    ("either", "The answer is {x} or {o}.", "never"),
    ("unsure", "It could be {x} or {o}; I am not sure.", "never"),
    ("between", "The answer is between {o} and {x}.", "never"),
]


CHOICE_DRESS = ["Option {L}", "choice ({l})", "{L}:", "**{L}.**", "[{L}]", "Answer - {L}", "the correct option is {L}) {O}",
                "The correct option is: **{L}**", "Correct answer: ({l})", "Answer: {L} ({O})", "**Answer: ({L})**",
                "{L} is the correct answer.", "The right choice is {L}.", "I choose {L}.", "My final choice: {L}", "Answer → {L}",
                "Answer ➜ ({L})", "✅ {L}", "✅ **{L}**", "> **{L}**", "## {L}", "- [x] {L}", "Option **{L}** is correct.",
                "Correct option: {L}", "Selected: {L}", "Solution: {L}", "{L} ✓", "The answer is option ({l}).", "**({L}) {O}**",
                "The answer: {L}", "Answer = {L}", "The best answer is {L}.", "答案是 {L}", "答案：{L}", "La respuesta es la {L}.",
                "Die richtige Antwort ist {L}.", "Réponse : {L}", "正确答案是{L}。", "选{L}", "所以答案为 {L}。", "Answer:{L}",
                "ANSWER: ({L})", "answer: {l}", "Therefore, {L}.", "Hence the answer is **Option {L}**.", "=> {L}", "So it's {L}.",
                "The answer should be {L}.", "I'd go with {L}.", "Final: {L}", "{L} — {O}", "Answer: {L} — {O}",
                "The answer is {O} ({L})."]


def choice_dress(item: Item, said: str, value: Fraction | None, other: str, other_value: Fraction | None) -> Dressed:
    if item.kind != "choice":
        return
    fields = {"L": said, "l": said.lower(), "O": option_of(item, said)}
    yield from _each("mc", [d.format(**fields) for d in CHOICE_DRESS], {"": WORK + "@", "-first": "@\n\nExplanation: we compared the options."})
    theirs = option_of(item, other)
    if theirs.strip() and theirs.strip() != fields["O"].strip():  # the letter and another option's text: which one?
        yield "contradicted", f"The answer is {said}) {theirs}", "never"
        yield "contradicted-colon", f"Answer: ({said}) {theirs}", "never"
        yield "contradicted-option", f"The correct option is {said}: {theirs}.", "never"
    yield "not-other", f"The answer is {said}, not {other}.", "said"
    yield "other-wrong", f"{other} is incorrect because the sum is off. The correct option is {said}.", "said"
    yield "either-letter", f"The answer is {said} or {other}.", "never"
    yield "eliminate", f"We eliminate {other}. So {said}.", "said"


def programs(item: Item, said: str, value: Fraction | None, other: str, other_value: Fraction | None) -> Dressed:
    if item.kind != "number":
        return
    a = format_exact(value)
    shapes = [f"print({a}.0)" if value.denominator == 1 else f"print({a})", f"x = {a}\nprint(x, end='   \\n\\n')",
              f"print(float({a}))", f"print(f'{{{a}:.2f}}')", f"print('Answer:', {a})", f"print({a})\nprint(None)",
              f"print(f'${{{a}:,.2f}}')", f"print({{'answer': {a}}})"]
    yield from _each("prog", shapes, {"": "@"})


TRUNCATED = [
    ("empty", "", "never"),
    ("whitespace", "  \n\t \n", "never"),
    ("after-answer", "The answer is {x}.\n\nTo double-check this we compute {o} - ", "said"),
    ("after-bare", "**{x}**\n\nNow let me double-check by starting from {o} and", "said"),
    ("bare-then-cut", "{x}\n\nI think that is right, but let me also consider the", "said"),
    ("mid-sentence", "First we compute the total. We start with {x} and then we", "never"),
    ("mid-step", "We start with {x} apples.\nStep 2: multiply by", "never"),
    ("marker-only", WORK + "The answer is", "never"),
    ("final-only", WORK + "Final answer:", "never"),
]


def spelled(item: Item, said: str, value: Fraction | None, other: str, other_value: Fraction | None) -> Dressed:
    if value.denominator != 1 or not 0 <= value < 10**6:
        return
    word = spell(int(value))
    capital = word[0].upper() + word[1:]
    for name, output in (("answer", f"The answer is {word}."), ("bare", WORK + f"{capital}."), ("bold", WORK + f"**{capital}**"),
                         ("then-digits", f"The answer is {word} ({value})."), ("digits-then", f"The answer is {value} ({word})."),
                         ("units", f"The answer is {word} apples."), ("final", f"Final answer: {capital}"),
                         ("caps", f"The answer is {word.upper()}."), ("boxed-text", f"$\\boxed{{\\text{{{word}}}}}$")):
        yield f"spelled-{name}", output, "said"


FAMILIES: dict[str, Family] = {
    "language": listed(_each("lang", LANGUAGE, {"": "@", "-work": WORK + "@", "-not-other": WORK + "@\n(Not {other}.)"})),
    "digits": digits, "minus": minus, "separators": separators, "units": units,
    "relations": listed(_each("rel", RELATIONS, {"": WORK + "@", "-final": "Final: @", "-inline": "So the total @."})),
    "markdown": listed(_each("md", MARKDOWN, {"": WORK + "@", "-other-before": "First guess was {other}, which is wrong.\n@"})),
    "latex": latex, "corrections": listed(CORRECTIONS), "choice-dress": choice_dress, "programs": programs,
    "truncated": listed(TRUNCATED), "spelled": spelled,
}
#: the families that dress a plain open answer (its value): none for a letter or a list
OPEN = {"digits", "minus", "separators", "units", "programs", "spelled"}


def cases(benchmark: str, items: list[Item], per_family: int | None, rng: random.Random, programs: int | None = 2) -> list[Case]:
    """Per item, `per_family` templates of each family drawn by `rng` (None: all; at most
    `programs` of the program family, which run in the sandbox), each filled with the right and
    the wrong answer: cases of kind "family/template" whose truth is whether the output answers the gold."""
    out = []
    for item in items:
        (right, rv), (wrong, wv) = answers_of(item)
        for family, generate in FAMILIES.items():
            if family in OPEN and not _open(item, rv):
                continue
            fills = {said_right: list(generate(item, said, sv, other, ov))
                     for said, sv, other, ov, said_right in ((right, rv, wrong, wv, True), (wrong, wv, right, rv, False))}
            ids = sorted({t for t, _, _ in fills[True]} & {t for t, _, _ in fills[False]})
            limit = programs if family == "programs" else per_family
            chosen = set(ids if limit is None else rng.sample(ids, min(limit, len(ids))))
            out += [Case(f"{family}/{template}", benchmark, item, output, None, said_right and mode == "said")
                    for said_right, made in fills.items() for template, output, mode in made if template in chosen]
    return out
