"""Slow reference for the digit objectives on number tokens of any length.

Written from the definition in docs/losses.md ("Multi-digit number tokens"), with no numloss
code: each row is scanned left to right for runs of number tokens and '.', a run is written out
character by character and given places by `ref_places_row`, and each slot's digit logits are
summed token by token: z_j(k) = log sum over the target's group (same length and spacing) of
exp(logit) of the tokens whose j-th digit is k (one small tensor sum per digit k). Digits that no token of the group has in slot j
are absent (probability 0) and skipped; DIST2's soft label is restricted to the present digits.
NTL's `reweigh` uses the full-softmax mass of the target's group; DIST2's `point_ends_run` weight
is a digit's position from the end of its run of digit characters ('.' breaks a run).
"""

from __future__ import annotations

import math

import torch

from reference.definitions import IGNORE, ref_place_weight, ref_places_row


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
        places = ref_places_row(chars)
        from_end = [0] * len(chars)
        for i in range(len(chars) - 1, -1, -1):
            if chars[i] != ".":
                from_end[i] = 1 + (from_end[i + 1] if i + 1 < len(chars) and chars[i + 1] != "." else 0)
        for (s, j), c, place, back in zip(owner, chars, places, from_end, strict=True):
            if j >= 0:
                out[s].append((j, int(c[1]), place, back))
    return out


def ref_number_loss(
    name: str,
    logits: torch.Tensor,
    labels: torch.Tensor,
    digit_ids: list[int],
    point_id: int | None,
    number_tokens: list[tuple[int, str, bool]],
    alpha: float,
    level: str = "digit",
    **options,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, ce, aux) of a digit objective, position by position, slot by slot."""
    tokens = {i: (str(k), False) for k, i in enumerate(digit_ids)}
    tokens.update({i: (d, s) for i, d, s in number_tokens})
    rows, cols, width = logits.shape
    work = logits.double()
    ce_sum = work.new_zeros(())
    aux_sum = work.new_zeros(())
    token_count = term_count = 0
    weight_sum = 0.0
    for b in range(rows):
        row = labels[b].tolist()
        slots = ref_slots_row(row, tokens, point_id)
        for t in range(cols):
            y = row[t]
            if y == IGNORE:
                continue
            token_count += 1
            x = work[b, t]
            ce_sum = ce_sum + torch.log(torch.exp(x).sum()) - x[y]
            if y not in tokens:
                continue
            if level == "token":
                term_count += 1
                ids = list(tokens)
                lse = torch.log(torch.exp(x[ids]).sum())
                p = {i: torch.exp(x[i] - lse) for i in ids}
                target = int(tokens[y][0])
                if name == "ntl-was":
                    aux_sum = aux_sum + sum(p[i] * abs(int(tokens[i][0]) - target) for i in ids)
                else:
                    aux_sum = aux_sum + (sum(p[i] * int(tokens[i][0]) for i in ids) - target) ** 2
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
                else:
                    raise ValueError(f"no reference for {name!r}")
    ce = ce_sum / max(token_count, 1)
    denominator = {"tokens": token_count, "weights": weight_sum}.get(options.get("normalize", "digits"), term_count)
    aux = aux_sum / max(denominator, 1)
    return ce + alpha * aux, ce, aux
