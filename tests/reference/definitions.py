"""Slow references written as plain loops, straight from the definitions in docs/losses.md.

Nothing here imports numloss's code: places are found by scanning each row, and every objective is
summed position by position with small tensor sums, so autograd gives the reference gradient.

Number tokens of any length ("Multi-digit number tokens"): each row is scanned left to right for
runs of number tokens and '.', a run is written out character by character and given places
(docs/losses.md), and each slot's digit logits are summed token by token: z_j(k) = log sum over the
target's group (same length and spacing) of exp(logit) of the tokens whose j-th digit is k. Digits
that no token of the group has in slot j are absent (probability 0) and skipped; DIST2's soft label
is restricted to the present digits. NTL's `reweigh` uses the full-softmax mass of the target's
group; DIST2's `point_ends_run` weight is a digit's position from the end of its run of digit
characters ('.' breaks a run). A single digit is a group of its own length: one slot.
"""

from __future__ import annotations

import math

import torch

IGNORE = -100


def ref_place_weight(i: int, weighting: str) -> float:
    if weighting == "none":
        return 1.0
    if i >= 0:
        return 2.0 * (i + 1)
    return 1.02 ** (i - 1) if weighting == "official" else 2.0 * 1.02**i


def ref_slots_row(
    row: list[int], tokens: dict[int, tuple[str, bool]], point_id: int | None
) -> list[list[tuple[int, int, int, int]]]:
    """Per position: [(slot j, target digit, place, position from the end of its digit run)]."""
    out: list[list[tuple[int, int, int, int]]] = [[] for _ in row]
    t = 0
    while t < len(row):
        if row[t] not in tokens and row[t] != point_id:
            t += 1
            continue
        start = t
        t += 1
        while t < len(row) and (row[t] == point_id or (row[t] in tokens and not tokens[row[t]][1])):
            t += 1
        chars: list[str] = []
        owner: list[tuple[int, int]] = []  # (position, slot) of each character
        for s in range(start, t):
            if row[s] == point_id:
                chars.append(".")
                owner.append((s, -1))
            else:
                for j, c in enumerate(tokens[row[s]][0]):
                    chars.append(f"d{c}")
                    owner.append((s, j))
        # a run's places: m is the index of its first '.' after a digit (else its length); the
        # j-th character gets m - 1 - j before it and -(j - m) after it
        digit_before = [any(x != "." for x in chars[:j]) for j in range(len(chars))]
        m = next((j for j, c in enumerate(chars) if c == "." and digit_before[j]), len(chars))
        places = [m - 1 - j if j < m else -(j - m) for j in range(len(chars))]
        from_end = [(chars[i:] + ["."]).index(".") for i in range(len(chars))]  # digits to the next '.'
        for (s, j), c, place, back in zip(owner, chars, places, from_end, strict=True):
            if j >= 0:
                out[s].append((j, int(c[1]), place, back))
    return out


def ref_loss(
    name: str,
    logits: torch.Tensor,
    labels: torch.Tensor,
    digit_ids: list[int],
    point_id: int | None,
    alpha: float,
    number_tokens: list[tuple[int, str, bool]] = (),
    num_items: float | None = None,
    num_digits: float | None = None,
    level: str = "digit",
    **options,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, ce, aux) of objective `name`, position by position and digit slot by slot."""
    tokens = {i: (str(k), False) for k, i in enumerate(digit_ids)}
    tokens.update({i: (d, s) for i, d, s in number_tokens})
    work = logits.double()
    ce_sum = token_loss_sum = aux_sum = work.new_zeros(())
    token_count = term_count = 0
    weight_sum = 0.0
    unit = torch.nn.functional.normalize(options["embedding"].double(), dim=-1) if name == "emo" else None
    for b, row in enumerate(labels.tolist()):
        slots = ref_slots_row(row, tokens, point_id)
        for t, y in enumerate(row):
            if y == IGNORE:
                continue
            token_count += 1
            x = work[b, t]
            lse = torch.log(torch.exp(x).sum())
            nll = lse - x[y]
            ce_sum = ce_sum + nll
            if name == "mixce":
                eta = options.get("eta", 0.5)
                w = eta + (1 - eta) * math.exp(-float(nll))
                token_loss_sum = token_loss_sum + w * nll
                aux_sum = aux_sum + (w - 1) * nll
            elif name == "emo":
                d = 1 - torch.dot(unit[y], torch.exp(x - lse) @ unit)
                # the cost in the ratio: d, plus the detached target probability (adaptive form)
                c = d + (math.exp(-float(nll)) if options.get("form", "adaptive") == "adaptive" else 0.0)
                if options.get("mode", 1) == 1:
                    ratio = float(nll) / max(float(c), 1e-6)
                    if options.get("max_ratio") is not None:
                        ratio = min(ratio, options["max_ratio"])
                    token_loss_sum = token_loss_sum + 0.5 * (nll + ratio * c)
                else:
                    ratio = float(c) / max(float(nll), 1e-6)
                    token_loss_sum = token_loss_sum + ratio * nll + c
                aux_sum = aux_sum + d
            if name in ("mle", "mixce", "emo") or y not in tokens:
                continue
            if level == "token":
                term_count += 1
                ids = list(tokens)
                p = torch.softmax(x[ids], -1)
                values = [int(tokens[i][0]) for i in ids]
                target = int(tokens[y][0])
                if name == "ntl-was":
                    aux_sum = aux_sum + sum(p[n] * abs(v - target) for n, v in enumerate(values))
                else:
                    aux_sum = aux_sum + (sum(p[n] * v for n, v in enumerate(values)) - target) ** 2
                continue
            length, spaced = len(tokens[y][0]), tokens[y][1]
            group = [i for i, (d, s) in tokens.items() if len(d) == length and s == spaced]
            group_mass = torch.exp(x[group]).sum() / torch.exp(x).sum()
            for j, target, place, back in slots[t]:
                term_count += 1
                members = {k: [i for i in group if tokens[i][0][j] == str(k)] for k in range(10)}
                present = [k for k in range(10) if members[k]]
                z = {k: torch.log(torch.exp(x[members[k]]).sum()) for k in present}
                z_lse = torch.log(sum(torch.exp(z[k]) for k in present))
                p = {k: torch.exp(z[k] - z_lse) for k in present}
                if name == "del":
                    if options.get("p_weights") == "detached":  # p constant in the gradient
                        p = {k: v.detach() for k, v in p.items()}
                    u = ref_place_weight(place, options.get("place_weighting", "official"))
                    term = 0
                    # centered: minus the mean over the digits the slot can hold
                    centered = options.get("sigmoid_input") == "centered"
                    shift = sum(z[k] for k in present) / len(present) if centered else 0
                    for k in present:
                        s = 1 / (1 + torch.exp(-(z[k] - shift)))
                        bce = -torch.log(s) if k == target else -torch.log(1 - s)
                        factor = 1 + abs(k - target) if options.get("distance") == "l1" else 1
                        term = term + p[k] * bce * factor
                    aux_sum = aux_sum + u * term / 10
                elif name in ("ntl-was", "ntl-mse"):
                    if name == "ntl-was":
                        term, largest = sum(p[k] * abs(k - target) for k in present), 9.0
                    else:
                        term, largest = (sum(p[k] * k for k in present) - target) ** 2, 81.0
                    if options.get("reweigh"):
                        term = group_mass * term + 1.01 * largest * (1 - group_mass)
                    aux_sum = aux_sum + term
                elif name == "dist2":
                    tau = options.get("tau", 1.0)
                    raw = {k: math.exp(-((k - target) ** 2) / tau) for k in present}
                    q = {k: raw[k] / sum(raw.values()) for k in present}
                    kl = sum(q[k] * (math.log(q[k]) - torch.log(p[k])) for k in present if q[k] > 0)
                    weight = 1.0
                    if options.get("place_weight"):
                        weight = back if options.get("point_ends_run") else (place + 1 if place >= 0 else 1)
                    weight_sum += weight
                    aux_sum = aux_sum + kl * weight
    n_tok = max(num_items if num_items is not None else token_count, 1)
    ce = ce_sum / n_tok
    if name in ("mixce", "emo"):
        return token_loss_sum / n_tok, ce, aux_sum / n_tok
    # the step-wide digit count is, with normalize="weights", the step's sum of place weights
    normalize = options.get("normalize", "digits")
    by_digits = num_digits if num_digits is not None else weight_sum if normalize == "weights" else term_count
    aux = aux_sum / (n_tok if normalize == "tokens" else max(by_digits, 1))
    return ce + alpha * aux, ce, aux
