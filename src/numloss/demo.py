"""`numloss demo`: a worked example that prints every objective on one small batch.

It builds a character-level vocabulary, a batch of two answers with integers and decimals, random
logits, and prints loss, ce, aux and counts for each objective of `numloss.LOSSES`.
"""

from __future__ import annotations

import argparse

import torch

from numloss.digits import DigitVocab, find_digits
from numloss.losses import LOSSES, build_loss

_CHARS = list("0123456789.") + list(" =+-*/abcdefghijklmnopqrstuvwxyz")


def worked_example(seed: int = 0) -> list[tuple[str, float, float, float, int, int]]:
    """(name, loss, ce, aux, tokens, digits) of every objective on one fixed random batch."""
    vocab = DigitVocab(digit_ids=range(10), decimal_point_id=10)
    index = {c: i for i, c in enumerate(_CHARS)}
    rows = ["12+30=42", "3.5*2=7.0"]
    width = max(map(len, rows))
    labels = torch.full((len(rows), width), -100)
    for r, text in enumerate(rows):
        answer_start = text.index("=") + 1  # completion-only: the prompt is ignored
        labels[r, answer_start : len(text)] = torch.tensor([index[c] for c in text[answer_start:]])
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(len(rows), width, len(_CHARS) + 5, generator=generator)
    embedding = torch.randn(logits.shape[-1], 16, generator=generator)
    digits = find_digits(labels, vocab, logits.shape[-1])
    print(f"answers: {[r[r.index('=') + 1:] for r in rows]}; place indices of their digits: {digits.place.tolist()}")
    results = []
    for name in LOSSES:
        options = {"embedding": embedding} if name == "emo" else {}
        out = build_loss(name, vocab, **options)(logits, labels)
        results.append(
            (name, float(out.loss), float(out.ce), float(out.aux), int(out.num_tokens), int(out.num_digits))
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="numloss demo", description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"{'objective':<10}{'loss':>10}{'ce':>10}{'aux':>10}{'tokens':>8}{'digits':>8}")
    for name, loss, ce, aux, tokens, digits in worked_example(args.seed):
        print(f"{name:<10}{loss:>10.4f}{ce:>10.4f}{aux:>10.4f}{tokens:>8}{digits:>8}")
    return 0
