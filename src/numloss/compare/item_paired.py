"""Item-paired tests between two arms of a grid scored item by item (the pretrained arm).

Arms trained with the same seed are scored on the same items, so a comparison is paired twice:
by item (exact McNemar on the discordant items pooled over seeds: do these trained models
differ on these items?) and by seed (the mean per-seed difference with its t interval and the
exact sign-flip test; 4 seeds can never reach 0.05 there). The detectable effects (80 % power,
two-sided 0.05) keep the docs' planning formula (t(0.975) + t(0.80)) sd / sqrt(n), not the
noncentral-t solution of `paired.minimum_detectable_effect`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from numloss.compare.paired import holm, mcnemar_exact_p


def _mde_quantiles(df: float) -> float:
    """t(0.975, df) + t(0.80, df): the planning formula's two-sided 5 % plus 80 % power terms
    (df inf: the normal's)."""
    return float(stats.t.ppf(0.975, df) + stats.t.ppf(0.80, df))


def discordant(bits_a: str, bits_b: str) -> tuple[int, int]:
    """(items right under A only, items right under B only) of two 0/1 verdict strings."""
    if len(bits_a) != len(bits_b):
        raise ValueError(
            f"verdict strings of different lengths ({len(bits_a)} vs {len(bits_b)}): not the same"
            " items"
        )
    b = sum(x == "1" and y == "0" for x, y in zip(bits_a, bits_b, strict=True))
    c = sum(x == "0" and y == "1" for x, y in zip(bits_a, bits_b, strict=True))
    return b, c


def sign_flip_p(diffs: Sequence[float]) -> float:
    """Exact two-sided p of the paired sign-flip test: the share of the 2^n sign patterns whose
    |mean| is at least the observed one (n <= 16)."""
    xs = list(diffs)
    if not xs:
        return float("nan")
    if len(xs) > 16:
        raise ValueError("sign_flip_p enumerates 2^n patterns: at most 16 pairs")
    if len(xs) == 1:
        return 1.0  # both patterns are as extreme; scipy refuses a sample of one
    result = stats.permutation_test(
        (np.array(xs),),
        np.mean,
        permutation_type="samples",
        vectorized=True,
        n_resamples=np.inf,
        alternative="two-sided",
    )
    return float(result.pvalue)


def paired_comparison(a: dict[int, str], b: dict[int, str]) -> dict[str, Any]:
    """Arm A against arm B from their per-seed verdict strings ({seed: "0110..."}), seeds in common.

    Returns the per-seed and pooled discordant counts, McNemar's p, the seed-level mean difference
    (A - B, in exact-match share) with its t interval and sign-flip p, and both detectable effects.
    """
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError("no seed in common between the two arms")
    per_seed = []
    for s in seeds:
        disc = discordant(a[s], b[s])
        n = len(a[s])
        per_seed.append(
            {"seed": s, "n": n, "b": disc[0], "c": disc[1], "diff": (disc[0] - disc[1]) / n}
        )
    b_all, c_all = sum(p["b"] for p in per_seed), sum(p["c"] for p in per_seed)
    pairs = sum(p["n"] for p in per_seed)
    diffs = [p["diff"] for p in per_seed]
    mean = statistics.fmean(diffs)
    out: dict[str, Any] = {
        "seeds": seeds,
        "per_seed": per_seed,
        "b": b_all,
        "c": c_all,
        "pairs": pairs,
        "mean_diff": mean,
        "mcnemar_p": mcnemar_exact_p(b_all, c_all),
        "sign_flip_p": sign_flip_p(diffs),
    }
    # McNemar's detectable effect: the difference whose z = (b - c) / sqrt(b + c) reaches
    # z_0.975 + z_0.80 at the observed discordance rate q: delta = (1.96 + 0.84) sqrt(q / pairs)
    q = (b_all + c_all) / pairs
    out["mde_items"] = _mde_quantiles(math.inf) * math.sqrt(q / pairs) if q > 0 else float("nan")
    if len(diffs) >= 2:
        df = len(diffs) - 1
        sd = statistics.stdev(diffs)
        half = stats.t.ppf(0.975, df) * sd / math.sqrt(len(diffs))
        out.update(
            sd_diff=sd, ci95=[mean - half, mean + half], mde_seeds=seed_level_mde(sd, len(diffs))
        )
    else:
        out.update(sd_diff=float("nan"), ci95=[float("nan"), float("nan")], mde_seeds=float("nan"))
    return out


#: the pre-registered comparisons of the three-arm pretrained grids (configs/<name>.yaml): the
#: primary pairs (Holm-adjusted McNemar p over them) and the pairs shown beside them (not in Holm)
DESIGNS: dict[str, tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]] = {
    "compare-smollm2-words-centered": (
        (("del-centered-a0.3", "mle"), ("del-centered-a0.3", "del-a0.3")),
        (("del-a0.3", "mle"),),
    ),
    "compare-smollm2-words-gentle": (
        (("del-centered-a1.28", "mle"), ("del-a1.28", "mle")),
        (("del-centered-a1.28", "del-a1.28"),),
    ),
}


def design_comparisons(
    bits: dict[str, dict[int, str]],
    primary: Sequence[tuple[str, str]],
    beside: Sequence[tuple[str, str]] = (),
) -> dict[tuple[str, str], dict[str, Any]]:
    """`paired_comparison` of every (arm, against) pair of a design whose two arms share a seed in
    `bits` ({label: {seed: verdict string}}); the primary pairs carry `mcnemar_p_holm` (Holm over
    those of them present), the pairs beside them do not."""
    comparisons: dict[tuple[str, str], dict[str, Any]] = {}
    for arm, against in (*primary, *beside):
        if set(bits.get(arm, {})) & set(bits.get(against, {})):
            comparisons[(arm, against)] = paired_comparison(bits[arm], bits[against])
    tested = [pair for pair in primary if pair in comparisons]
    for pair, p in zip(
        tested, holm([comparisons[pair]["mcnemar_p"] for pair in tested]), strict=True
    ):
        comparisons[pair]["mcnemar_p_holm"] = p
    return comparisons


def design_reading(arm: str, against: str, c: dict[str, Any], alpha: float = 0.05) -> str:
    """The reading fixed in the designs of the three-arm grids, for one primary comparison `c`
    (with its `mcnemar_p_holm`) of `arm` against `against` (MLE, or raw DEL for a centred arm),
    and, where the seed-level interval holds 0, that training randomness alone could give it (the
    docs and the demo both say it through this function)."""
    if c["mcnemar_p_holm"] > alpha:
        return f"not told apart (the items detect {100 * c['mde_items']:.1f} points)"
    if against != "mle":
        reading = (
            "centring removes (part of) raw DEL's harm"
            if c["mean_diff"] > 0
            else "centring makes it worse"
        )
    else:
        reading = "better than MLE" if c["mean_diff"] > 0 else "worse than MLE"
    if len(c["seeds"]) >= 2 and c["ci95"][0] <= 0 <= c["ci95"][1]:
        reading += (
            " on these items (its seed-level interval holds 0: training randomness alone could"
            " give it)"
        )
    return reading


def seed_level_mde(sd_diff: float, seeds: int) -> float:
    """The seed-level paired t test's detectable effect (80 % power, two-sided 0.05) for `seeds`
    seeds at a per-seed difference SD of `sd_diff` (the planning formula of the docs)."""
    return _mde_quantiles(seeds - 1) * sd_diff / math.sqrt(seeds)
