"""`numloss demo`: the default comparison, small enough for a laptop (what `make demo` runs).

Trains the tiny character-level model once per objective and seed of `configs/compare-demo.yaml`
(run from the repository root, or pass a config): MLE, DEL (alpha 0.3) and NTL-WAS x 4 seeds on
the default task, two runs at a time. Every 200 steps each run is checked on 200 held-out items;
it has learnt the task at the first check with exact match >= 80 % and stops there. The demo
prints how many runs of each objective learnt it and by which step (the learnt-by-step curves are
in `runs/demo/learnt_by_step.png`), then the final exact match. Four seeds show the spread of a
bimodal outcome; they do not rank objectives (docs/results.md). Started again, it skips the runs
that already finished. The full grid: `numloss compare configs/compare.yaml`.

`numloss demo --worked-example` prints instead every objective's loss terms on one fixed batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from numloss.digits import DigitVocab, find_digits
from numloss.losses import LOSSES, build_loss

_CHARS = list("0123456789.") + list(" =+-*/abcdefghijklmnopqrstuvwxyz")
DEMO_CONFIG = Path("configs/compare-demo.yaml")


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


def _print_worked_example(seed: int) -> None:
    print(f"{'objective':<10}{'loss':>10}{'ce':>10}{'aux':>10}{'tokens':>8}{'digits':>8}")
    for name, loss, ce, aux, tokens, digits in worked_example(seed):
        print(f"{name:<10}{loss:>10.4f}{ce:>10.4f}{aux:>10.4f}{tokens:>8}{digits:>8}")


def main(argv: list[str] | None = None) -> int:
    """`numloss demo` entry point (see the module docstring)."""
    from numloss.compare import build_parser, quiet_training_logs, resolve, run_comparison
    from numloss.config import ConfigError

    parser = build_parser("numloss demo")
    parser.description = __doc__
    parser.add_argument("--worked-example", action="store_true", help="print every loss on one fixed batch and exit")
    parser.add_argument("--seed", type=int, default=0, help="seed of the worked example's batch")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.worked_example:
        _print_worked_example(args.seed)
        return 0
    if args.config is None:
        if not DEMO_CONFIG.is_file():
            print(
                f"numloss demo: {DEMO_CONFIG} not found; run it from the numloss repository root "
                "(where `make demo` runs) or pass a comparison config: numloss demo CONFIG.yaml",
                file=sys.stderr,
            )
            return 2
        args.config = str(DEMO_CONFIG)
    try:
        compare = resolve(args, default_config=None)
    except ConfigError as error:
        print(f"numloss demo: {error}", file=sys.stderr)
        return 2
    if not args.verbose:
        quiet_training_logs()
    objectives = ", ".join(s.label for s in compare.objectives)
    print(
        f"numloss demo: {len(compare.objectives)} objectives ({objectives}) x seeds {compare.seeds} on the "
        f"tiny model; report in {compare.output_dir}/. Finished runs are kept: run again to continue.\n"
        "A run has learnt the task at its first check with held-out exact match >= 80 % (every 200 steps). "
        "Four seeds per objective show the spread; they do not rank objectives (docs/results.md; the full "
        "grid: numloss compare configs/compare.yaml).",
        flush=True,
    )
    run_comparison(compare, progress=not args.no_progress)
    return 0

