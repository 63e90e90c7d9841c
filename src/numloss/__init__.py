"""numloss: objectives that teach language models to write numbers correctly.

    from numloss import DigitVocab, build_loss
    vocab = DigitVocab.from_tokenizer(tokenizer)
    loss_fn = build_loss("del", vocab)
    out = loss_fn(logits, labels)   # aligned labels, -100 ignored
    out.loss.backward()

    numloss.patch(model, loss_fn)   # model(**batch, labels=labels).loss is now the numloss loss

Every public name is imported on first use (PEP 562), so `import numloss` and `numloss --help`
load no torch.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

from numloss.extras import load_on_first_use

__version__ = "0.1.0"

_LOSSES = (
    "LOSSES build_loss NumericLoss NumericLossOutput MLELoss DigitEntropyLoss NumberTokenLossWAS"
    " NumberTokenLossMSE Dist2Loss MixCELoss EMOLoss"
).split()
_DIGITS = ["DigitVocab", "DigitVocabError", "find_digits", "place_weights"]
# test_imports: _LOSSES is numloss.losses.__all__
__all__ = [*_DIGITS, "patch", "unpatch", *_LOSSES]

__getattr__, __dir__ = load_on_first_use(
    __name__,
    {
        **dict.fromkeys(_DIGITS, "digits"),
        **dict.fromkeys(_LOSSES, "losses"),
        "patch": "patch",
        "unpatch": "patch",
    },
)


class _Package(types.ModuleType):
    """`numloss.patch` is the function even after the submodule `numloss.patch` is imported (the
    import system then binds the submodule on its package: the setter below drops that)."""

    @property
    def patch(self) -> Callable[..., Any]:
        from numloss.patch import patch

        return patch

    @patch.setter
    def patch(self, module: types.ModuleType) -> None:
        pass


sys.modules[__name__].__class__ = _Package
