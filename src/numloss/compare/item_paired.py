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
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from numloss.compare.paired import mcnemar_exact_p, paired_t


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
    test = paired_t([p["diff"] for p in per_seed])
    # McNemar's detectable effect: the difference whose z = (b - c) / sqrt(b + c) reaches
    # z_0.975 + z_0.80 at the observed discordance rate q: delta = (1.96 + 0.84) sqrt(q / pairs)
    q = (b_all + c_all) / pairs
    return {
        "seeds": seeds,
        "per_seed": per_seed,
        "b": b_all,
        "c": c_all,
        "pairs": pairs,
        "mean_diff": test.mean,
        "mcnemar_p": mcnemar_exact_p(b_all, c_all),
        "sign_flip_p": sign_flip_p([p["diff"] for p in per_seed]),
        "mde_items": _mde_quantiles(math.inf) * math.sqrt(q / pairs) if q > 0 else math.nan,
        # the t interval and detectable effect over seeds: NaN below 2 seeds
        "sd_diff": test.sd,
        "ci95": list(test.ci),
        "mde_seeds": seed_level_mde(test.sd, test.n) if test.n >= 2 else math.nan,
    }


def seed_level_mde(sd_diff: float, seeds: int) -> float:
    """The seed-level paired t test's detectable effect (80 % power, two-sided 0.05) for `seeds`
    seeds at a per-seed difference SD of `sd_diff` (the planning formula of the docs)."""
    return _mde_quantiles(seeds - 1) * sd_diff / math.sqrt(seeds)
