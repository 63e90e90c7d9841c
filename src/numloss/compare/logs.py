"""The console of a comparison: the training runs it starts keep their chatter to themselves."""

from __future__ import annotations

import logging


def quiet_training_logs() -> None:
    """Keep the per-run training chatter (data summaries, Trainer warnings) off the terminal."""
    for name in ("numloss.train", "transformers", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars of every run
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass
