"""reasoning-gym generators with numeric answers as instruction examples; the output is the answer
as a sentence, "The answer is N." (reasoning-gym gives no working).
"""

from __future__ import annotations

from numloss.data.examples import Example
from numloss.extras import needs

GYM_SETS = ("basic_arithmetic", "decimal_arithmetic", "simple_equations", "gsm_symbolic")


def generate(name: str, n: int, seed: int = 0) -> list[Example]:
    """`n` examples of the reasoning-gym generator `name` (one of GYM_SETS), seeded."""
    if name not in GYM_SETS:
        raise ValueError(f"unknown reasoning-gym set {name!r}; choose one of {', '.join(GYM_SETS)}")
    if n <= 0:
        raise ValueError(f"a reasoning-gym set needs num_examples >= 1, got {n}")
    with needs("compare", "the gym: data sets (numloss.data.gym)"):
        import reasoning_gym

    dataset = reasoning_gym.create_dataset(name, size=n, seed=seed)
    pairs = [(entry["question"].strip(), str(entry["answer"]).strip()) for entry in dataset]
    return [
        Example(question, f"The answer is {answer}.", answer=answer) for question, answer in pairs
    ]
