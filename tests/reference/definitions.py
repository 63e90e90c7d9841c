"""Slow references written as plain loops, straight from the definitions in docs/losses.md.

Nothing here imports numloss's loss code: places are found by scanning each row, and every
objective is summed position by position with scalar tensor arithmetic, so autograd gives the
reference gradient.
"""

from __future__ import annotations

import math

import torch

IGNORE = -100


def classes_of(labels_row: list[int], digit_ids: list[int], point_id: int | None) -> list[str]:
    """Per position: 'd0'..'d9', '.', or '' (anything else, ignored included)."""
    out = []
    for label in labels_row:
        if label in digit_ids:
            out.append(f"d{digit_ids.index(label)}")
        elif point_id is not None and label == point_id:
            out.append(".")
        else:
            out.append("")
    return out


def ref_places_row(classes: list[str]) -> list[int | None]:
    """Place index of every digit of one row (None elsewhere), scanning runs left to right."""
    places: list[int | None] = [None] * len(classes)
    t = 0
    while t < len(classes):
        if classes[t] == "":
            t += 1
            continue
        start = t
        while t < len(classes) and classes[t] != "":
            t += 1
        run = classes[start:t]
        m = len(run)
        seen_digit = False
        for j, c in enumerate(run):
            if c == "." and seen_digit:
                m = j
                break
            if c.startswith("d"):
                seen_digit = True
        for j, c in enumerate(run):
            if c.startswith("d"):
                places[start + j] = (m - 1 - j) if j < m else -(j - m)
    return places


def ref_digit_run_weights(classes: list[str]) -> list[int | None]:
    """Per digit: its position from the end of its run of digit tokens ('.' ends a run), last = 1."""
    weights: list[int | None] = [None] * len(classes)
    t = 0
    while t < len(classes):
        if not classes[t].startswith("d"):
            t += 1
            continue
        start = t
        while t < len(classes) and classes[t].startswith("d"):
            t += 1
        for j in range(start, t):
            weights[j] = t - j
    return weights


def ref_place_weight(i: int, weighting: str) -> float:
    if weighting == "none":
        return 1.0
    if i >= 0:
        return 2.0 * (i + 1)
    return 1.02 ** (i - 1) if weighting == "official" else 2.0 * 1.02**i


def ref_loss(
    name: str,
    logits: torch.Tensor,
    labels: torch.Tensor,
    digit_ids: list[int],
    point_id: int | None,
    alpha: float,
    num_items: float | None = None,
    num_digits: float | None = None,
    **options,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, ce, aux) of objective `name`, summed position by position."""
    rows, cols, width = logits.shape
    work = logits.double()
    ce_sum = work.new_zeros(())
    token_loss_sum = work.new_zeros(())
    aux_token_sum = work.new_zeros(())
    aux_digit_sum = work.new_zeros(())
    tokens = digits = 0
    weight_sum = 0.0
    embedding = options.get("embedding")
    if embedding is not None:
        unit = embedding.double() / embedding.double().norm(dim=-1, keepdim=True)
    for b in range(rows):
        row = labels[b].tolist()
        classes = classes_of(row, digit_ids, point_id)
        places = ref_places_row(classes)
        run_weights = ref_digit_run_weights(classes)
        for t in range(cols):
            y = row[t]
            if y == IGNORE:
                continue
            tokens += 1
            z_all = work[b, t]
            lse = torch.log(sum(torch.exp(z_all[v]) for v in range(width)))
            nll = lse - z_all[y]
            ce_sum = ce_sum + nll
            if name == "mixce":
                eta = options.get("eta", 0.5)
                w = eta + (1 - eta) * math.exp(-float(nll))
                token_loss_sum = token_loss_sum + w * nll
                aux_token_sum = aux_token_sum + (w - 1) * nll
            elif name == "emo":
                q = [torch.exp(z_all[v] - lse) for v in range(width)]
                expected = sum(q[v] * unit[v] for v in range(width))
                d = 1 - torch.dot(unit[y], expected)
                # the cost in the ratio: d, plus the detached target probability (adaptive form)
                c = d + (float(q[y]) if options.get("form", "adaptive") == "adaptive" else 0.0)
                if options.get("mode", 1) == 1:
                    ratio = float(nll) / max(float(c), 1e-6)
                    if options.get("max_ratio") is not None:
                        ratio = min(ratio, options["max_ratio"])
                    token_loss_sum = token_loss_sum + 0.5 * (nll + ratio * c)
                else:
                    ratio = float(c) / max(float(nll), 1e-6)
                    token_loss_sum = token_loss_sum + ratio * nll + c
                aux_token_sum = aux_token_sum + d
            else:
                token_loss_sum = token_loss_sum + nll
            if not classes[t].startswith("d"):
                continue
            digits += 1
            target = int(classes[t][1])
            z = [z_all[i] for i in digit_ids]
            z_lse = torch.log(sum(torch.exp(zk) for zk in z))
            p = [torch.exp(zk - z_lse) for zk in z]
            if name == "del":
                weighting = options.get("place_weighting", "official")
                u = ref_place_weight(places[t], weighting)
                term = 0
                # centered: the sigmoid reads z_k minus the mean of the ten, written out as a sum
                shift = sum(z) / 10 if options.get("sigmoid_input") == "centered" else 0
                for k in range(10):
                    s = 1 / (1 + torch.exp(-(z[k] - shift)))
                    bce = -torch.log(s) if k == target else -torch.log(1 - s)
                    factor = 1 + abs(k - target) if options.get("distance") == "l1" else 1
                    term = term + p[k] * bce * factor
                aux_digit_sum = aux_digit_sum + u * term / 10
            elif name in ("ntl-was", "ntl-mse"):
                if name == "ntl-was":
                    term, largest = sum(p[k] * abs(k - target) for k in range(10)), 9.0
                else:
                    term, largest = (sum(p[k] * k for k in range(10)) - target) ** 2, 81.0
                if options.get("reweigh"):
                    mass = sum(torch.exp(z_all[i] - lse) for i in digit_ids)
                    term = mass * term + 1.01 * largest * (1 - mass)
                aux_digit_sum = aux_digit_sum + term
            elif name == "dist2":
                tau = options.get("tau", 1.0)
                raw = [math.exp(-((k - target) ** 2) / tau) for k in range(10)]
                q = [r / sum(raw) for r in raw]
                kl = sum(q[k] * (math.log(q[k]) - torch.log(p[k])) for k in range(10) if q[k] > 0)
                u = 1.0
                if options.get("place_weight"):
                    if options.get("point_ends_run"):
                        u = float(run_weights[t])
                    elif places[t] >= 0:
                        u = float(places[t] + 1)
                weight_sum += u
                aux_digit_sum = aux_digit_sum + u * kl
    n_tok = max(num_items if num_items is not None else tokens, 1)
    n_dig = max(num_digits if num_digits is not None else digits, 1)
    ce = ce_sum / n_tok
    if name in ("mixce", "emo"):
        return token_loss_sum / n_tok, ce, aux_token_sum / n_tok
    normalize = options.get("normalize", "digits")
    if normalize == "tokens":
        aux = aux_digit_sum / n_tok
    elif normalize == "weights":
        # the step-wide count of this option is the step's sum of place weights
        aux = aux_digit_sum / max(num_digits if num_digits is not None else weight_sum, 1.0)
    else:
        aux = aux_digit_sum / n_dig
    return ce + alpha * aux, ce, aux
