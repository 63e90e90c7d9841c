"""Digits and numbers in label tensors: a tokenizer's number tokens, number runs, places, weights.

A *number token* spells ASCII digits, optionally after a word-boundary marker ("7", "123", "Ġ42").
A *number* is a maximal run of number tokens and '.' inside one row; a spaced token starts a new
one. Every digit of a number token is one *digit slot* with a target digit and a place over the
whole number ("123" "45" puts the 1 at place 4). All of it is vectorised tensor code.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from numloss.checks import check_choice, check_type

PlaceWeighting = Literal["official", "continuous", "none"]
PLACE_WEIGHTINGS: tuple[str, ...] = ("official", "continuous", "none")
MultiDigit = Literal["slots", "single", "refuse"]
MULTI_DIGIT_MODES: tuple[str, ...] = ("slots", "single", "refuse")
IGNORE_INDEX = -100

#: what every tokenizer is asked to write when DigitVocab decides by behaviour
PROBES: tuple[str, ...] = tuple(str(k) for k in range(10)) + ("1234.5", " 42", "3,141", "-7")

FAMILIES = (
    "digit-splitting tokenizers (Llama-1/2, Mistral, Qwen2.5, DeepSeek, SmolLM2) write one digit"
    " per token; chunking ones (Llama-3, tiktoken cl100k/o200k: 1-3 digits per token) and irregular"
    " BPE (GPT-2) do not"
)


class DigitVocabError(ValueError):
    """The tokenizer cannot be used for digit-level losses (missing or multi-digit tokens)."""


_WORD_MARKERS = "▁Ġ "  # SentencePiece and byte-level BPE word-boundary markers


def _token_id(vocab: dict[str, int], text: str, tok: Any) -> int | None:
    """Id of the one token that spells `text`: from the vocabulary, else by encoding it (a lone
    word-boundary piece SentencePiece may prepend is dropped); None when there is none."""
    if text in vocab:
        return vocab[text]
    if getattr(tok, "encode", None) is None:
        return None
    ids = _encode(tok, text)
    id_to_token = {i: t for t, i in vocab.items()}
    ids = [i for i in ids if id_to_token.get(i, "x").strip(_WORD_MARKERS) != ""]
    if len(ids) == 1 and id_to_token.get(ids[0], "").strip(_WORD_MARKERS) == text:
        return ids[0]
    return None


def _vocab_of(tok: Any) -> dict[str, int]:
    get_vocab = getattr(tok, "get_vocab", None)
    if get_vocab is None:
        raise TypeError(
            "DigitVocab.from_tokenizer needs a tokenizer with get_vocab(), got"
            f" {type(tok).__name__}"
        )
    return dict(get_vocab())


def _encode(tok: Any, text: str) -> list[int]:
    encoded = tok.encode(text, add_special_tokens=False)
    return list(getattr(encoded, "ids", encoded))


def number_token_text(token: str) -> tuple[str, bool] | None:
    """(digits, spaced) when `token` is ASCII digits after at most one word-boundary marker
    (▁, Ġ or a space; `spaced` says there was one), else None."""
    spaced = token[:1] in _WORD_MARKERS and len(token) > 1
    digits = token[1:] if spaced else token
    if digits and digits.isascii() and digits.isdigit():
        return digits, spaced
    return None


_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _count_digit_chars(token: str, special: frozenset[str] = frozenset()) -> int:
    """The digits `token` writes: a byte-fallback ``<0xHH>`` its one byte, a special token none,
    any other token its ASCII digit characters."""
    byte = _BYTE_TOKEN.fullmatch(token)
    if byte is not None:
        return int(0x30 <= int(byte.group(1), 16) <= 0x39)
    if token in special:
        return 0
    return sum(c.isascii() and c.isdigit() for c in token)


def _special_tokens(tok: Any) -> frozenset[str]:
    """The special and added control tokens of a tokenizer (transformers or raw `tokenizers`)."""
    names = set(getattr(tok, "all_special_tokens", ()) or ())
    decoder = getattr(tok, "added_tokens_decoder", None)
    if decoder is None and callable(getattr(tok, "get_added_tokens_decoder", None)):
        decoder = tok.get_added_tokens_decoder()
    for added in dict(decoder or {}).values():
        if getattr(added, "special", False):
            names.add(str(added))
    return frozenset(names)


def _checked_number_tokens(
    number_tokens: Iterable[tuple[int, str, bool]], taken: set[int]
) -> tuple[tuple[int, str, bool], ...]:
    """The number tokens as (id, digits, spaced), checked and sorted; `taken` holds used ids."""
    tokens = []
    for token_id, digits, spaced in number_tokens:
        token_id, digits, spaced = int(token_id), str(digits), bool(spaced)
        if not (digits and digits.isascii() and digits.isdigit()):
            raise DigitVocabError(
                f"number token {token_id} must spell ASCII digits, got {digits!r}"
            )
        if len(digits) == 1 and not spaced:
            raise DigitVocabError(
                f"number token {token_id} ({digits!r}) is a bare single digit: those are digit_ids"
            )
        if token_id < 0 or token_id in taken:
            raise DigitVocabError(f"number token id {token_id} is negative or used twice")
        taken.add(token_id)
        tokens.append((token_id, digits, spaced))
    return tuple(sorted(tokens, key=lambda t: (t[2], len(t[1]), t[1], t[0])))


def _digit_ids(vocab: dict[str, int], tokenizer: Any) -> list[int]:
    """The ids of the ten single-digit tokens, or a DigitVocabError naming the missing ones."""
    found = {k: _token_id(vocab, str(k), tokenizer) for k in range(10)}
    missing = [str(k) for k, token_id in found.items() if token_id is None]
    if missing:
        raise DigitVocabError(
            f"the tokenizer has no single-character token for digit(s) {', '.join(missing)}, so it "
            "cannot write every number and digit-level losses have no digit columns. Every "
            "tokenizer of the common families has them ("
            + FAMILIES
            + "); add the ten digit tokens or use another model."
        )
    return [int(found[k]) for k in range(10)]


def _classify_vocab(
    vocab: dict[str, int], digit_set: set[int], special: frozenset[str]
) -> tuple[list[tuple[int, str, bool]], list[tuple[int, int, bool]]]:
    """(number tokens as (id, digits, spaced), other tokens with digits as (id, count, spaced))."""
    numbers: list[tuple[int, str, bool]] = []
    unscored: list[tuple[int, int, bool]] = []
    for token, token_id in vocab.items():
        if token_id in digit_set:
            continue
        parsed = number_token_text(token)
        if parsed is not None:
            numbers.append((token_id, *parsed))
        elif (count := _count_digit_chars(token, special)) > 0:
            unscored.append((token_id, count, token[:1] in _WORD_MARKERS))
    return numbers, unscored


def _multi_digit_refusal(emitted: list[tuple[str, str, bool]]) -> DigitVocabError:
    """The error of `multi_digit="refuse"` for the emitted (token, digits, spaced) number tokens."""
    multi = sorted(token for token, digits, _ in emitted if len(digits) > 1)
    spaced = sorted(token for token, digits, s in emitted if len(digits) == 1 and s)
    kinds = []
    if multi:
        kinds.append(f"multi-digit tokens ({', '.join(map(repr, multi[:5]))})")
    if spaced:
        kinds.append(
            f"digit tokens with a leading word marker ({', '.join(map(repr, spaced[:5]))})"
        )
    return DigitVocabError(
        "the tokenizer writes numbers in tokens other than the ten bare digits: "
        f"{' and '.join(kinds)}; {FAMILIES}. Use multi_digit='slots' (the default) to score every "
        "digit inside them, or give the tokenizer a digit-splitting pre-tokenizer: "
        "tokenizer = numloss.digits.split_digits(tokenizer)."
    )


@dataclass(frozen=True)
class DigitVocab:
    """The number tokens of a tokenizer: the ten digits, the decimal point, multi-digit tokens.

    `digit_ids[k]`: the token of digit k. `decimal_point_id`: the token of '.', or None.
    `number_tokens`: every other number token as (id, digits, spaced), scored per digit slot.
    `unscored_digit_tokens`: (id, digit count[, spaced]) of tokens with digits that get no numeric
    term ("3,", "1st", multi-digit tokens in "single" mode); a number that holds one is not scored
    at all. `unscored_spaced`: those of them that start a new word.
    """

    digit_ids: tuple[int, ...]
    decimal_point_id: int | None = None
    number_tokens: tuple[tuple[int, str, bool], ...] = ()
    unscored_digit_tokens: tuple[tuple[int, int], ...] = ()
    unscored_spaced: tuple[int, ...] = ()

    def __init__(
        self,
        digit_ids: Sequence[int],
        decimal_point_id: int | None = None,
        number_tokens: Iterable[tuple[int, str, bool]] = (),
        unscored_digit_tokens: Iterable[tuple[int, int] | tuple[int, int, bool]] = (),
    ) -> None:
        ids = tuple(int(i) for i in digit_ids)
        if len(ids) != 10 or len(set(ids)) != 10 or min(ids) < 0:
            raise DigitVocabError(
                f"digit_ids must be exactly 10 distinct non-negative token ids (for 0..9 in order),"
                f" got {list(ids)}"
            )
        if decimal_point_id is not None:
            decimal_point_id = int(decimal_point_id)
            if decimal_point_id in ids or decimal_point_id < 0:
                raise DigitVocabError(
                    f"decimal_point_id {decimal_point_id} must be a non-negative id distinct from"
                    " the digits"
                )
        taken = set(ids) | ({decimal_point_id} if decimal_point_id is not None else set())
        entries = [tuple(entry) for entry in unscored_digit_tokens]
        if any(len(entry) not in (2, 3) for entry in entries):
            raise DigitVocabError(
                "unscored_digit_tokens entries must be (id, digit count) or (id, digit count,"
                " spaced)"
            )
        unscored = tuple(sorted((int(e[0]), int(e[1])) for e in entries))
        spaced = tuple(sorted(int(e[0]) for e in entries if len(e) == 3 and e[2]))
        object.__setattr__(self, "digit_ids", ids)
        object.__setattr__(self, "decimal_point_id", decimal_point_id)
        object.__setattr__(self, "number_tokens", _checked_number_tokens(number_tokens, taken))
        object.__setattr__(self, "unscored_digit_tokens", unscored)
        object.__setattr__(self, "unscored_spaced", spaced)

    @classmethod
    def from_tokenizer(
        cls,
        tokenizer: Any,
        allow_multi_digit: bool = False,
        multi_digit: MultiDigit = "slots",
    ) -> DigitVocab:
        """The number tokens of a Hugging Face (or raw `tokenizers`) tokenizer, decided by
        behaviour.

        When writing `PROBES` emits single digits only, only the ten are kept. Otherwise
        `multi_digit` decides: "slots" (default) scores every digit of every number token; "single"
        (or `allow_multi_digit=True`) keeps the ten digits; "refuse" raises DigitVocabError."""
        check_choice("multi_digit", multi_digit, MULTI_DIGIT_MODES)
        if allow_multi_digit:
            multi_digit = "single"
        vocab = _vocab_of(tokenizer)
        digit_ids = _digit_ids(vocab, tokenizer)
        point_id = _token_id(vocab, ".", tokenizer)
        numbers, unscored = _classify_vocab(vocab, set(digit_ids), _special_tokens(tokenizer))
        emitted = {i for probe in PROBES for i in _encode(tokenizer, probe)}
        id_to_token = {i: t for t, i in vocab.items()}
        mixed = sorted(id_to_token[i] for i, _, _ in unscored if i in emitted)
        if mixed:
            warnings.warn(
                "the tokenizer writes digits inside tokens that also hold other characters "
                f"({', '.join(map(repr, mixed[:5]))}): those digits get no numeric term "
                "(numloss.digits.digit_coverage measures the share that does)",
                stacklevel=2,
            )
        emitted_numbers = [(id_to_token[i], d, s) for i, d, s in numbers if i in emitted]
        if emitted_numbers and multi_digit == "refuse":
            raise _multi_digit_refusal(emitted_numbers)
        if not emitted_numbers or multi_digit == "single":
            # multi-digit entries never produced (or not wanted): their digits stay unscored
            unscored += [(i, len(digits), spaced) for i, digits, spaced in numbers]
            numbers = []
        return cls(digit_ids, point_id, numbers, unscored)

    def digit_ids_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The ten digit ids as a long tensor, in digit order."""
        return torch.tensor(self.digit_ids, dtype=torch.long, device=device)

    def number_table(self, device: torch.device | str | None = None) -> NumberTable:
        """The number-token table on `device` (cached)."""
        return _number_table(self, str(torch.device("cpu" if device is None else device)))

    def check_width(self, vocab_width: int) -> None:
        """Raise when a logit width cannot hold every digit id (a head smaller than the vocab)."""
        numbers = (i for i, _, _ in self.number_tokens)
        largest = max(*self.digit_ids, self.decimal_point_id or 0, *numbers)
        if largest >= vocab_width:
            raise ValueError(
                f"logits have {vocab_width} columns but digit/point token id {largest} needs at"
                f" least {largest + 1}: the logits do not come from the model this DigitVocab was"
                " built for"
            )


@dataclass(frozen=True)
class NumberTable:
    """The number tokens of a DigitVocab as tensors: the columns the digit objectives gather.

    `columns` [C]: token ids, the ten digits first, then `DigitVocab.number_tokens`; `lengths`,
    `spaced`, `digits` [C, Lmax] (-1 past the end) and `values` (float64) describe each. `group`
    [C] indexes `groups`, one (length, spaced, columns) per kind of token; `complete[g]`: group g
    holds each of the 10^length digit strings once (its columns then in digit order).
    """

    columns: torch.Tensor
    lengths: torch.Tensor
    spaced: torch.Tensor
    digits: torch.Tensor
    values: torch.Tensor
    group: torch.Tensor
    groups: tuple[tuple[int, bool, torch.Tensor], ...]
    complete: tuple[bool, ...] = ()
    #: ids of `DigitVocab.unscored_digit_tokens`, and of those that start a new word
    unscored: torch.Tensor | None = None
    unscored_spaced: torch.Tensor | None = None

    @property
    def width(self) -> int:
        return int(self.columns.numel())


@functools.lru_cache(maxsize=32)
@torch.inference_mode(False)
def _number_table(vocab: DigitVocab, device: str) -> NumberTable:
    # cached across calls: built outside inference mode, or a first use under
    # torch.inference_mode() (an evaluation) would cache tensors that training cannot save for
    # backward
    entries = [(i, str(k), False) for k, i in enumerate(vocab.digit_ids)]
    entries += vocab.number_tokens
    longest = max(len(d) for _, d, _ in entries)
    keys = list(dict.fromkeys((len(d), s) for _, d, s in entries))  # kinds, in order of appearance
    group_of = [keys.index((len(d), s)) for _, d, s in entries]
    digit_rows = [[int(c) for c in d] + [-1] * (longest - len(d)) for _, d, _ in entries]
    group = torch.tensor(group_of, dtype=torch.long)
    groups = tuple(
        (length, spaced, torch.nonzero(group == g).squeeze(1).to(device))
        for g, (length, spaced) in enumerate(keys)
    )
    complete = tuple(
        len({d for _, d, s in entries if (len(d), s) == key}) == 10 ** key[0] == group_of.count(g)
        for g, key in enumerate(keys)
    )

    def tensor(values: list, dtype: torch.dtype = torch.long) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=device)

    return NumberTable(
        complete=complete,
        columns=tensor([i for i, _, _ in entries]),
        lengths=tensor([len(d) for _, d, _ in entries]),
        spaced=tensor([s for _, _, s in entries], torch.bool),
        digits=tensor(digit_rows),
        values=tensor([float(int(d)) for _, d, _ in entries], torch.float64),
        group=group.to(device),
        groups=groups,
        unscored=tensor([i for i, _ in vocab.unscored_digit_tokens]),
        unscored_spaced=tensor(list(vocab.unscored_spaced)),
    )


def split_digits(tokenizer: Any) -> Any:
    """Give a fast tokenizer (transformers or raw `tokenizers`) a digit-splitting pre-tokenizer,
    in place, before its own, and return it: every number is then written one digit per token."""
    from numloss.extras import needs

    with needs("hf", "numloss.digits.split_digits"):
        from tokenizers import pre_tokenizers

    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if not hasattr(backend, "pre_tokenizer"):
        raise TypeError(
            "split_digits needs a fast tokenizer (transformers PreTrainedTokenizerFast or "
            f"tokenizers.Tokenizer), got {type(tokenizer).__name__}: load it with use_fast=True"
        )
    vocab = backend.get_vocab()
    missing = [str(k) for k in range(10) if str(k) not in vocab]
    if missing:
        raise DigitVocabError(
            "split_digits: the vocabulary has no single-character token for digit(s)"
            f" {', '.join(missing)}, so numbers cannot be split into digit tokens"
        )
    split = pre_tokenizers.Digits(individual_digits=True)
    current = backend.pre_tokenizer
    backend.pre_tokenizer = split if current is None else pre_tokenizers.Sequence([split, current])
    return tokenizer


@dataclass(frozen=True)
class DigitPositions:
    """The digit slots of a flattened [B*T] label tensor, one per digit of every number token.

    Per slot [K]: flat position `index` (ascending, repeated per digit of a token), `target`
    digit, `place` over the whole number (units 0, first decimal -1), `slot` inside its token,
    `column` in `number_table()`, and `row_of` into `rows` [P], the number-token positions.
    """

    index: torch.Tensor
    target: torch.Tensor
    place: torch.Tensor
    slot: torch.Tensor
    column: torch.Tensor
    rows: torch.Tensor
    row_of: torch.Tensor

    @property
    def count(self) -> int:
        """Digit slots (the digit objectives' N_dig)."""
        return int(self.index.numel())

    @property
    def token_count(self) -> int:
        """Number-token positions (`level="token"` objectives score one term each)."""
        return int(self.rows.numel())


def place_weights(places: torch.Tensor, weighting: PlaceWeighting = "official") -> torch.Tensor:
    """Weight u(i) of each place index, float32: 2(i+1) for i >= 0, and for i < 0 1.02^(i-1)
    ("official", the released code) or 2 * 1.02^i ("continuous", the paper); "none": 1."""
    check_type("place_weights: places", places, torch.Tensor, "a torch.Tensor of place indices")
    check_choice("place_weighting", weighting, PLACE_WEIGHTINGS)
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


def number_lookup(vocab: DigitVocab, width: int, device: torch.device) -> torch.Tensor:
    """A [width + 1] table: each number token's column in `number_table()`, -2 for '.', -3 for an
    unscored token with digits (-4 when spaced), -1 otherwise (the last slot: ignored labels)."""
    table = torch.full((width + 1,), -1, dtype=torch.long, device=device)
    numbers = vocab.number_table(device)
    for ids, mark in ((numbers.unscored, -3), (numbers.unscored_spaced, -4)):
        if ids is not None and ids.numel():
            table[ids[ids < width]] = mark
    columns = numbers.columns
    table[columns] = torch.arange(columns.numel(), device=device)
    if vocab.decimal_point_id is not None and vocab.decimal_point_id < width:
        table[vocab.decimal_point_id] = -2
    return table


def find_digits(
    labels: torch.Tensor,
    vocab: DigitVocab,
    width: int | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> DigitPositions:
    """Every digit slot of aligned labels [B, T] (or [T]): flat position, target, place.

    A number's digits are read left to right across its tokens and placed over the whole number:
    with m the index of the first '.' after a digit (else the number's length), digit j gets
    m-1-j before it and -(j-m) after it (docs/losses.md). A number that holds a token of
    `vocab.unscored_digit_tokens` gets no slots: its places cannot be known.
    """
    check_type("find_digits: labels", labels, torch.Tensor, "an integer torch.Tensor of labels")
    check_type("find_digits: vocab", vocab, DigitVocab, "a DigitVocab (DigitVocab.from_tokenizer)")
    if labels.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"labels must be an integer tensor, got {labels.dtype}")
    labels_2d = (labels if labels.dim() == 2 else labels.reshape(1, -1)).long()
    device = labels_2d.device
    table = vocab.number_table(device)
    if width is None:
        largest = int(table.columns.max()) + 1
        width = max(int(labels_2d.max()) + 1 if labels_2d.numel() else 0, largest)
    else:  # labels alone (counting digits) may hold no '.': only a logit width must hold every id
        vocab.check_width(width)
    bad = (labels_2d != ignore_index) & ((labels_2d < 0) | (labels_2d >= width))
    if bool(bad.any()):
        raise ValueError(
            f"label {int(labels_2d[bad][0])} is outside the logit width {width} (and is not the"
            f" ignore index {ignore_index}): labels and logits come from different vocabularies"
        )
    column, is_token, spaced = _number_columns(labels_2d, vocab, width, ignore_index)
    is_point = column == -2
    length = torch.where(is_token, table.lengths[column.clamp_min(0)], torch.zeros_like(column))
    in_run = is_token | is_point
    starts = _run_starts(in_run, spaced, *labels_2d.shape)
    run_id = torch.cumsum(starts.long(), 0) - 1
    position = torch.arange(column.numel(), device=device)
    run_start = position[starts]
    chars = torch.where(is_point, torch.ones_like(length), length)
    offset = _since_run_start(chars, run_start, run_id)  # characters before, inside the run
    digits_before = _since_run_start(length, run_start, run_id)
    run_chars = torch.zeros(run_start.numel(), dtype=torch.long, device=device)
    run_chars.scatter_add_(0, run_id[in_run], chars[in_run])
    point_here = is_point & (digits_before > 0)
    first_point = run_chars.scatter_reduce(
        0, run_id[point_here], offset[point_here], reduce="amin", include_self=True
    )
    rows = position[is_token]
    token_length = length[rows]
    row_of = torch.repeat_interleave(torch.arange(rows.numel(), device=device), token_length)
    first_slot = torch.cumsum(token_length, 0) - token_length
    slot = torch.arange(row_of.numel(), device=device) - first_slot[row_of]
    index = rows[row_of]
    char = offset[index] + slot
    m = first_point[run_id[index]] if run_start.numel() else char
    place = torch.where(char < m, m - 1 - char, m - char)
    target = table.digits[column[index], slot] if index.numel() else index.clone()
    return DigitPositions(
        index=index,
        target=target,
        place=place,
        slot=slot,
        column=column[index],
        rows=rows,
        row_of=row_of,
    )


def _number_columns(
    labels_2d: torch.Tensor, vocab: DigitVocab, width: int, ignore_index: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per flat label: (its `number_lookup` code, is a scored number token, starts a new word);
    a number token in a run with an unscored token is not scored."""
    table = vocab.number_table(labels_2d.device)
    flat = labels_2d.reshape(-1)
    lookup = number_lookup(vocab, width, labels_2d.device)
    column = lookup[torch.where(flat != ignore_index, flat, width)]
    is_token = column >= 0
    spaced = is_token & table.spaced[column.clamp_min(0)]
    unscored = (column == -3) | (column == -4)
    if bool(unscored.any()):
        in_run = is_token | (column == -2) | unscored
        touched = _runs_touching(in_run, spaced | (column == -4), unscored, *labels_2d.shape)
        is_token = is_token & ~touched
        spaced = spaced & is_token
    return column, is_token, spaced


def _since_run_start(
    counts: torch.Tensor, run_start: torch.Tensor, run_id: torch.Tensor
) -> torch.Tensor:
    """Per position: the sum of `counts` before it inside its run (whole tensor without runs)."""
    before = torch.cumsum(counts, 0) - counts
    if not run_start.numel():
        return before
    return before - before[run_start][run_id.clamp_min(0)]


def _run_starts(in_run: torch.Tensor, spaced: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Flat positions where a run of `in_run` positions starts: after a gap, at a row's first
    column, or at a `spaced` token (a new word)."""
    previous = torch.zeros_like(in_run)
    if in_run.numel():
        previous[1:] = in_run[:-1]
        previous.view(rows, cols)[:, 0] = False  # a run never continues from the previous row
    return in_run & (~previous | spaced)


def _runs_touching(
    in_run: torch.Tensor, spaced: torch.Tensor, marked: torch.Tensor, rows: int, cols: int
) -> torch.Tensor:
    """True at every position of a run (as `_run_starts` cuts them) that holds a `marked`
    position."""
    run_id = torch.cumsum(_run_starts(in_run, spaced, rows, cols).long(), 0) - 1
    hit = torch.zeros(
        int(run_id.max()) + 2 if run_id.numel() else 1, dtype=torch.bool, device=in_run.device
    )
    hit[run_id[marked & in_run].clamp_min(0)] = True
    return in_run & hit[run_id.clamp_min(0)]


def digit_coverage(
    labels: torch.Tensor, vocab: DigitVocab, ignore_index: int = IGNORE_INDEX
) -> tuple[int, int]:
    """(digit slots `find_digits` scores, all digit characters of the scored labels), the
    training log's `digit_share`: well below 1 for a merging tokenizer in "single" mode."""
    table = vocab.number_table(labels.device)
    chars = dict(zip(table.columns.tolist(), table.lengths.tolist(), strict=True))
    chars.update(vocab.unscored_digit_tokens)
    ids, counts = torch.unique(labels[labels != ignore_index], return_counts=True)
    total = sum(chars.get(i, 0) * n for i, n in zip(ids.tolist(), counts.tolist(), strict=True))
    return find_digits(labels, vocab, None, ignore_index).count, total
