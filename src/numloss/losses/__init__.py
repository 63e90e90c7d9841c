"""The objectives: one file each, a registry, the shared output type.

loss_fn = build_loss("del", vocab)     # alpha 0.03 on the step's digit mean (the default)
out = loss_fn(logits, labels)          # NumericLossOutput(loss, ce, aux, num_tokens, num_digits)
"""

from __future__ import annotations

from typing import Any

from numloss.checks import check_type
from numloss.digits import DigitVocab
from numloss.losses.base import NumericLoss, NumericLossOutput
from numloss.losses.digit_entropy import DigitEntropyLoss
from numloss.losses.dist2 import Dist2Loss
from numloss.losses.emo import EMOLoss
from numloss.losses.mixce import MixCELoss
from numloss.losses.mle import MLELoss
from numloss.losses.ntl import NumberTokenLossMSE, NumberTokenLossWAS

LOSSES: dict[str, type[NumericLoss]] = {
    klass.name: klass
    for klass in (
        MLELoss,
        DigitEntropyLoss,
        NumberTokenLossWAS,
        NumberTokenLossMSE,
        Dist2Loss,
        MixCELoss,
        EMOLoss,
    )
}


def build_loss(name: str, vocab: DigitVocab, **options: Any) -> NumericLoss:
    """The objective `name` (one of `LOSSES`) with its options; unknown options are errors."""
    check_type("build_loss: name", name, str, f"an objective name (one of {', '.join(LOSSES)})")
    key = name.lower().replace("_", "-")
    if key not in LOSSES:
        raise ValueError(f"unknown objective {name!r}; choose one of {', '.join(LOSSES)}")
    klass = LOSSES[key]
    allowed = klass.option_names()
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TypeError(
            f"objective {key!r} has no option(s) {', '.join(map(repr, unknown))}; its options are "
            f"{', '.join(allowed)}"
        )
    return klass(vocab, **options)


__all__ = ["LOSSES", "build_loss", "NumericLoss", "NumericLossOutput"]
__all__ += [klass.__name__ for klass in LOSSES.values()]
