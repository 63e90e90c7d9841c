"""Digits and numbers in label tensors: the vocabulary of digit tokens, number runs, places, weights.

A *number* is a maximal run of consecutive label positions inside one row whose labels are digit or
decimal-point tokens; an ignored position (or any other token) ends it. Every function here is
vectorised tensor code on the device of the labels: no Python loop over tokens or numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

PlaceWeighting = Literal["official", "continuous", "none"]
PLACE_WEIGHTINGS: tuple[str, ...] = ("official", "continuous", "none")
IGNORE_INDEX = -100


class DigitVocabError(ValueError):
    """The tokenizer cannot be used for digit-level losses (missing or multi-digit tokens)."""


_WORD_MARKERS = "▁Ġ "  # SentencePiece and byte-level BPE word-boundary markers


def _token_id(vocab: dict[str, int], text: str, tok: Any) -> int | None:
    """Id of the token that spells exactly `text`, alone, or None.

    Looks in the vocabulary first, then asks the tokenizer to encode the bare string (a
    SentencePiece tokenizer may prepend a lone word-boundary piece, which is dropped).
    """
    if text in vocab:
        return vocab[text]
    encode = getattr(tok, "encode", None)
    if encode is None:
        return None
    encoded = encode(text, add_special_tokens=False)
    ids = list(getattr(encoded, "ids", encoded))
    id_to_token = {i: t for t, i in vocab.items()}
    ids = [i for i in ids if id_to_token.get(i, "x").strip(_WORD_MARKERS) != ""]
    if len(ids) == 1 and id_to_token.get(ids[0], "").strip(_WORD_MARKERS) == text:
        return ids[0]
    return None


def _vocab_of(tok: Any) -> dict[str, int]:
    get_vocab = getattr(tok, "get_vocab", None)
    if get_vocab is None:
        raise TypeError(
            f"DigitVocab.from_tokenizer needs a tokenizer with get_vocab(), got {type(tok).__name__}"
        )
    return dict(get_vocab())


@dataclass(frozen=True)
class DigitVocab:
    """Token ids of the ten digits ``0``…``9`` (in order) and of the decimal point.

    `digit_ids[k]` is the id of the single-character token for digit k. `decimal_point_id` is the
    id of ``.``, or None when the vocabulary has none (then every number is an integer).
    """

    digit_ids: tuple[int, ...]
    decimal_point_id: int | None = None

    def __init__(self, digit_ids: Sequence[int], decimal_point_id: int | None = None) -> None:
        ids = tuple(int(i) for i in digit_ids)
        if len(ids) != 10:
            raise DigitVocabError(
                f"digit_ids must hold exactly 10 token ids (for 0..9 in order), got {len(ids)}"
            )
        if len(set(ids)) != 10:
            raise DigitVocabError(f"digit_ids must be 10 distinct token ids, got {list(ids)}")
        if any(i < 0 for i in ids):
            raise DigitVocabError(f"digit_ids must be non-negative token ids, got {list(ids)}")
        if decimal_point_id is not None:
            decimal_point_id = int(decimal_point_id)
            if decimal_point_id in ids or decimal_point_id < 0:
                raise DigitVocabError(
                    f"decimal_point_id {decimal_point_id} must be a non-negative id distinct from the digits"
                )
        object.__setattr__(self, "digit_ids", ids)
        object.__setattr__(self, "decimal_point_id", decimal_point_id)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, allow_multi_digit: bool = False) -> DigitVocab:
        """Find the digit and decimal-point tokens of a Hugging Face (or raw `tokenizers`) tokenizer.

        Raises DigitVocabError when a digit has no single-character token, or when the vocabulary
        also holds multi-digit tokens (GPT-2 style ``"123"``) and `allow_multi_digit` is False:
        digit-level losses cannot see the digits inside such tokens.
        """
        vocab = _vocab_of(tokenizer)
        digit_ids: list[int] = []
        missing: list[str] = []
        for k in range(10):
            token_id = _token_id(vocab, str(k), tokenizer)
            if token_id is None:
                missing.append(str(k))
            else:
                digit_ids.append(token_id)
        if missing:
            raise DigitVocabError(
                f"the tokenizer has no single-character token for digit(s) {', '.join(missing)}. "
                "Digit-level losses need a tokenizer that splits numbers into single digits "
                "(Llama, Qwen2.5, SmolLM2, Mistral do); add the ten digit tokens or use another model."
            )
        point_id = _token_id(vocab, ".", tokenizer)
        if not allow_multi_digit:
            multi = sorted(
                {
                    text
                    for token in vocab
                    if len(text := token.strip(_WORD_MARKERS)) > 1 and text.isascii() and text.isdigit()
                }
            )
            if multi:
                shown = ", ".join(repr(t) for t in multi[:5])
                raise DigitVocabError(
                    f"the tokenizer has {len(multi)} multi-digit tokens ({shown}, ...): it merges digits, "
                    "so numbers are not spelled digit by digit and digit losses would miss them. Use a "
                    "tokenizer that splits digits (Llama, Qwen2.5, SmolLM2), or pass "
                    "allow_multi_digit=True to apply the losses to single-digit tokens only."
                )
        return cls(digit_ids, point_id)

    def digit_ids_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The ten digit ids as a long tensor, in digit order."""
        return torch.tensor(self.digit_ids, dtype=torch.long, device=device)

    def check_width(self, vocab_width: int) -> None:
        """Raise when a logit width cannot hold every digit id (a head smaller than the vocab)."""
        largest = max(self.digit_ids + ((self.decimal_point_id,) if self.decimal_point_id is not None else ()))
        if largest >= vocab_width:
            raise ValueError(
                f"logits have {vocab_width} columns but digit/point token id {largest} needs at least "
                f"{largest + 1}: the logits do not come from the model this DigitVocab was built for"
            )


@dataclass(frozen=True)
class DigitPositions:
    """The digit positions of a flattened [B*T] label tensor.

    `index`: flat positions whose label is a digit (ascending). `target`: the digit (0..9) at each.
    `place`: the place index of each digit (units 0, tens 1, first decimal -1, ...).
    """

    index: torch.Tensor
    target: torch.Tensor
    place: torch.Tensor

    @property
    def count(self) -> int:
        return int(self.index.numel())


def digit_lookup(vocab: DigitVocab, width: int, device: torch.device) -> torch.Tensor:
    """A [width + 1] table: digit value (0..9) for digit ids, 10 for '.', -1 otherwise.

    The extra last slot serves ignored labels (mapped there before the lookup).
    """
    table = torch.full((width + 1,), -1, dtype=torch.long, device=device)
    table[vocab.digit_ids_tensor(device)] = torch.arange(10, device=device)
    if vocab.decimal_point_id is not None and vocab.decimal_point_id < width:
        table[vocab.decimal_point_id] = 10
    return table


def label_classes(
    labels: torch.Tensor,
    vocab: DigitVocab,
    width: int | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> torch.Tensor:
    """Per label: its digit 0..9, 10 for the decimal point, -1 for anything else (ignored included).

    Labels outside [0, width) other than `ignore_index` are an error: they cannot index the logits.
    """
    if labels.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"labels must be an integer tensor, got {labels.dtype}")
    labels = labels.long()
    if width is None:
        width = max(int(labels.max()) + 1 if labels.numel() else 0, max(vocab.digit_ids) + 1)
    valid = labels != ignore_index
    if labels.numel():
        bad = valid & ((labels < 0) | (labels >= width))
        if bool(bad.any()):
            example = int(labels[bad][0])
            raise ValueError(
                f"label {example} is outside the logit width {width} (and is not the ignore index "
                f"{ignore_index}): labels and logits come from different vocabularies"
            )
    table = digit_lookup(vocab, width, labels.device)
    return table[torch.where(valid, labels, width)]


def number_places(classes: torch.Tensor) -> torch.Tensor:
    """Place index of every digit position of a [B, T] (or [T]) tensor of label classes.

    `classes` holds 0..9 for digits, 10 for '.', anything else (< 0) for non-number positions, as
    `label_classes` returns. Returns a long tensor of the same shape: the place index i at digit
    positions, 0 elsewhere (use `classes` in 0..9 as the mask). See DESIGN.md section 1:
    with m the index in the run of the first '.' that has a digit before it, integer digits (j < m)
    get m-1-j, decimal digits (j > m) get -(j-m); with no such '.', m is the run length.
    """
    if classes.dim() == 1:
        return number_places(classes[None])[0]
    if classes.dim() != 2:
        raise ValueError(f"classes must be [B, T], got shape {tuple(classes.shape)}")
    rows, cols = classes.shape
    flat = classes.reshape(-1)
    n = flat.numel()
    places = torch.zeros(n, dtype=torch.long, device=classes.device)
    if n == 0:
        return places.view(rows, cols)
    is_number = flat >= 0
    is_digit = is_number & (flat < 10)
    previous = torch.zeros_like(is_number)
    previous[1:] = is_number[:-1]
    previous.view(rows, cols)[:, 0] = False  # a run never continues from the previous row
    starts = is_number & ~previous
    run_id = torch.cumsum(starts.long(), 0) - 1  # valid at number positions
    position = torch.arange(n, device=classes.device)
    number_pos = position[is_number]
    if number_pos.numel() == 0:
        return places.view(rows, cols)
    run_of = run_id[is_number]
    run_start = position[starts]
    j = number_pos - run_start[run_of]  # index inside the run
    num_runs = run_start.numel()
    run_length = torch.bincount(run_of, minlength=num_runs)
    # digits seen before each position of its run, to find the first '.' that follows a digit
    digit_cum = torch.cumsum(is_digit.long(), 0)
    digits_before = (digit_cum - is_digit.long())[is_number] - (
        digit_cum[run_start] - is_digit[run_start].long()
    )[run_of]
    point_here = (flat[is_number] == 10) & (digits_before > 0)
    first_point = run_length.clone()
    first_point.scatter_reduce_(
        0, run_of[point_here], j[point_here], reduce="amin", include_self=True
    )
    m = first_point[run_of]
    place = torch.where(j < m, m - 1 - j, m - j)
    places[is_number] = torch.where(is_digit[is_number], place, torch.zeros_like(place))
    return places.view(rows, cols)


def place_weights(places: torch.Tensor, weighting: PlaceWeighting = "official") -> torch.Tensor:
    """Weight u(i) of each place index, float32 (DESIGN.md section 1).

    official: 2(i+1) for i >= 0, 1.02^(i-1) for i < 0 (the released code);
    continuous: 2(i+1) for i >= 0, 2 * 1.02^i for i < 0 (the paper's text);
    none: 1.
    """
    if weighting not in PLACE_WEIGHTINGS:
        raise ValueError(f"place_weighting must be one of {PLACE_WEIGHTINGS}, got {weighting!r}")
    places_f = places.to(torch.float32)
    if weighting == "none":
        return torch.ones_like(places_f)
    base = torch.tensor(1.02, dtype=torch.float32, device=places.device)
    integer = 2.0 * (places_f + 1.0)
    if weighting == "official":
        decimal = torch.pow(base, places_f - 1.0)
    else:
        decimal = 2.0 * torch.pow(base, places_f)
    return torch.where(places >= 0, integer, decimal)


def find_digits(
    labels: torch.Tensor,
    vocab: DigitVocab,
    width: int | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> DigitPositions:
    """Digit positions, their target digits and place indices of aligned labels.

    Labels are [B, T] (rows are separate sequences) or [T] (one sequence). Positions are indices
    into the flattened labels.
    """
    labels_2d = labels if labels.dim() == 2 else labels.reshape(1, -1)
    classes = label_classes(labels_2d, vocab, width, ignore_index)
    places = number_places(classes).reshape(-1)
    flat = classes.reshape(-1)
    index = torch.nonzero((flat >= 0) & (flat < 10), as_tuple=False).squeeze(1)
    return DigitPositions(index=index, target=flat[index], place=places[index])
