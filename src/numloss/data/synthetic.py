"""numloss's own seeded synthetic sets: short worked solutions full of integers and decimals, ending
"The answer is N."; exact values (no float noise), and the same (name, n, seed) gives the same set.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from decimal import Decimal

from numloss.data.examples import Example


def fmt(value: int | Decimal) -> str:
    """A number as written in the outputs: no exponent, no trailing zeros after the point."""
    if isinstance(value, int):
        return str(value)
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _decimal(rng: random.Random, integer_digits: int, places: int) -> Decimal:
    whole = rng.randint(0, 10**integer_digits - 1)
    fraction = rng.randint(1, 10**places - 1)
    return Decimal(whole) + Decimal(fraction).scaleb(-places)


def _finish(instruction: str, working: str, answer: int | Decimal) -> Example:
    text = fmt(answer)
    return Example(instruction=instruction, output=f"{working} The answer is {text}.", answer=text)


def integer_arithmetic(rng: random.Random) -> Example:
    """a op b with integers up to 4 digits (products up to 3 x 2 digits)."""
    op = rng.choice("+-*")
    if op == "*":
        a, b = rng.randint(2, 999), rng.randint(2, 99)
        result = a * b
    else:
        a, b = rng.randint(0, 9999), rng.randint(0, 9999)
        result = a + b if op == "+" else a - b
    return _finish(f"What is {a} {op} {b}?", f"{a} {op} {b} = {result}.", result)


def decimal_arithmetic(rng: random.Random) -> Example:
    """a op b with one or two decimal places."""
    op = rng.choice("+-*")
    a = _decimal(rng, rng.randint(1, 3), rng.randint(1, 2))
    b = _decimal(rng, rng.randint(1, 2), rng.randint(1, 2))
    result = a + b if op == "+" else a - b if op == "-" else a * b
    expression = f"{fmt(a)} {op} {fmt(b)}"
    return _finish(f"What is {expression}?", f"{expression} = {fmt(result)}.", result)


_ITEMS = ("pens", "apples", "notebooks", "tickets", "boxes of tea", "bags of rice")
_NAMES = ("Ana", "Ben", "Chen", "Dana", "Emil", "Fatima", "Goran", "Hana")


def word_problem(rng: random.Random) -> Example:
    """Two- or three-step shopping problems: unit price x quantity, totals, change, discounts."""
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    price = _decimal(rng, 1, 2) + 1
    count = rng.randint(2, 12)
    cost = price * count
    kind = rng.randrange(3)
    if kind == 0:
        paid = (int(cost) // 10 + 1) * 10 + 10 * rng.randint(0, 2)
        change = Decimal(paid) - cost
        instruction = (
            f"{name} buys {count} {item} at {fmt(price)} dollars each and pays with {paid} dollars."
            f" How much change does {name} get?"
        )
        working = (
            f"The {item} cost {count} * {fmt(price)} = {fmt(cost)} dollars. The change is {paid} -"
            f" {fmt(cost)} = {fmt(change)} dollars."
        )
        return _finish(instruction, working, change)
    if kind == 1:
        extra_count = rng.randint(1, 9)
        extra_price = _decimal(rng, 1, 1) + 1
        extra = extra_price * extra_count
        total = cost + extra
        instruction = (
            f"{name} buys {count} {item} at {fmt(price)} dollars each and {extra_count} pencils at "
            f"{fmt(extra_price)} dollars each. How much does {name} spend in total?"
        )
        working = (
            f"The {item} cost {count} * {fmt(price)} = {fmt(cost)} dollars. The pencils cost "
            f"{extra_count} * {fmt(extra_price)} = {fmt(extra)} dollars. In total {fmt(cost)} + "
            f"{fmt(extra)} = {fmt(total)} dollars."
        )
        return _finish(instruction, working, total)
    percent = rng.choice((5, 10, 15, 20, 25, 50))
    discount = cost * percent / 100
    final = cost - discount
    instruction = (
        f"{name} buys {count} {item} at {fmt(price)} dollars each and gets a {percent}% discount on"
        f" the total. How much does {name} pay?"
    )
    working = (
        f"Before the discount the {item} cost {count} * {fmt(price)} = {fmt(cost)} dollars. The "
        f"discount is {fmt(cost)} * {percent} / 100 = {fmt(discount)} dollars. {name} pays "
        f"{fmt(cost)} - {fmt(discount)} = {fmt(final)} dollars."
    )
    return _finish(instruction, working, final)


def linear_equation(rng: random.Random) -> Example:
    """a*x + b = c with an integer solution, solved in two steps."""
    a = rng.randint(2, 19)
    x = rng.randint(-50, 99)
    b = rng.randint(-200, 200)
    c = a * x + b
    sign, magnitude = ("+", b) if b >= 0 else ("-", -b)
    moved = c - b
    working = (
        f"Subtract {b} from both sides: {a}x = {c} - {b} = {moved}."
        if b >= 0
        else f"Add {magnitude} to both sides: {a}x = {c} + {magnitude} = {moved}."
    )
    working += f" Divide by {a}: x = {moved} / {a} = {x}."
    return _finish(f"Solve for x: {a}x {sign} {magnitude} = {c}.", working, x)


GENERATORS: dict[str, Callable[[random.Random], Example]] = {
    "arithmetic": integer_arithmetic,
    "decimals": decimal_arithmetic,
    "word_problems": word_problem,
    "linear_equations": linear_equation,
}


def generate(name: str, n: int, seed: int = 0) -> list[Example]:
    """`n` examples of generator `name` (or "mix": the four generators in turn), seeded."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if name == "mix":
        makers = list(GENERATORS.values())
    elif name in GENERATORS:
        makers = [GENERATORS[name]]
    else:
        raise ValueError(
            f"unknown synthetic set {name!r}; choose one of {', '.join([*GENERATORS, 'mix'])}"
        )
    rng = random.Random(f"numloss-synthetic-{name}-{seed}")
    return [makers[i % len(makers)](rng) for i in range(n)]
