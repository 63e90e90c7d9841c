"""numloss: objectives that teach language models to write numbers correctly.

    from numloss import DigitVocab, build_loss
    vocab = DigitVocab.from_tokenizer(tokenizer)
    loss_fn = build_loss("del", vocab)
    out = loss_fn(logits, labels)   # aligned labels, -100 ignored
    out.loss.backward()

    numloss.patch(model, loss_fn)   # model(**batch, labels=labels).loss is now the numloss loss
"""

from numloss import losses
from numloss.digits import DigitVocab, DigitVocabError, find_digits, number_places, place_weights
from numloss.losses import *  # noqa: F403 - the objectives, LOSSES and build_loss (numloss.losses.__all__)
from numloss.patch import patch, unpatch  # binds numloss.patch to the function, not the module

__version__ = "0.1.0"

__all__ = ["DigitVocab", "DigitVocabError", "find_digits", "number_places", "place_weights", "patch", "unpatch"]
__all__ += losses.__all__
