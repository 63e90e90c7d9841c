"""Generation backends: a transformers causal LM (batched greedy decoding, see HFGenerator) and
vLLM.

Both take a list of prompt strings and return one `Generation` per prompt, in order, with greedy
decoding and the stop strings cut off (a model trained on the Alpaca template tends to start a new
"### Instruction:" block after its answer).
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from numloss.checks import check_int

DEFAULT_STOP = ("### Instruction", "### Input", "### Response", "\n\n\n\n")


class BackendUnavailable(RuntimeError):
    """The requested generation backend cannot run here (not installed, no GPU)."""


@dataclass(frozen=True)
class Generation:
    """One completion: its text (stop strings cut) and the number of tokens generated."""

    text: str
    new_tokens: int


class Generator(Protocol):
    """Anything that turns prompts into completions, greedily, in order."""

    def generate(
        self, prompts: Sequence[str], max_new_tokens: int | None = None
    ) -> list[Generation]: ...


def resolve_device(device: str | None) -> str:
    """The torch device to run on: `device`, or cuda when this torch sees a GPU, else cpu.
    ValueError for a name torch does not know, BackendUnavailable for one it cannot use here."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"--device {device!r} is not a torch device; use cpu, cuda, cuda:N or mps (default:"
            " cuda when available)"
        ) from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                "this torch is built without CUDA"
                if torch.version.cuda is None
                else "no CUDA GPU is visible"
            )
            raise BackendUnavailable(
                f"--device {device}: {why}; use --device cpu (or omit --device)"
            )
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise BackendUnavailable(
                f"--device {device}: only {torch.cuda.device_count()} CUDA GPU(s) visible (cuda:0"
                f" to cuda:{torch.cuda.device_count() - 1})"
            )
    elif parsed.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise BackendUnavailable(
                f"--device {device}: MPS is not available here; use --device cpu"
            )
    elif parsed.type != "cpu":
        raise ValueError(f"--device {device!r}: numloss eval runs on cpu, cuda or mps")
    return device


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """`text` up to the first occurrence of any stop string."""
    return text[: min((at for s in stop if (at := text.find(s)) >= 0), default=len(text))]


class HFGenerator:
    """Batched greedy generation with a transformers causal LM, its own decoding loop.

    Prompts are sorted longest first (an out-of-memory shows in the first batch; results come back
    in the order given). Per batch, the prompts' common token prefix is run once and its cache
    copied to every row; a row leaves the batch (and the cache) as soon as it produces EOS, a stop
    string or `max_new_tokens` tokens; the cache writes into spare room (`_Roomy`) instead of
    re-concatenating. Batch size 1 equals one-by-one decoding up to float rounding. `tokens` and
    `seconds` accumulate the generated tokens (EOS and stop-string tokens included) and the time.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        batch_size: int = 8,
        max_new_tokens: int = 512,
        stop: Sequence[str] = DEFAULT_STOP,
        progress: bool = True,
    ) -> None:
        check_int("batch_size", batch_size, 1)
        check_int("max_new_tokens", max_new_tokens, 1)
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens
        self.stop, self.progress = tuple(s for s in stop if s), progress
        self.tokens, self.seconds = 0, 0.0
        self._limit = max_new_tokens
        self._bar: Any = None  # one progress bar across generate() calls (`_on_row`)
        # a total given by `expect`; fallback rows generated
        self._expected, self.fallbacks = False, 0
        self.pad_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        if self.pad_id is None:
            raise ValueError(
                "the tokenizer has neither a pad nor an eos token; batched generation needs one"
            )
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        # the end of a turn is this model's own: its generation config's eos ids (a chat model's
        # end-of-turn token among them) and its tokenizer's eos, never another family's tokens
        eos_ids = [*(eos if isinstance(eos, (list, tuple)) else [eos]), tokenizer.eos_token_id]
        self.eos_ids = frozenset(int(e) for e in eos_ids if e is not None)
        forward = inspect.signature(_base_model(model).forward).parameters
        self._cache_arg = "cache" if "cache" in forward else "past_key_values"
        self._keep_last = "logits_to_keep" in forward

    def _forward(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor | None,
        positions: torch.Tensor | None,
        cache: Any,
    ) -> torch.Tensor:
        """Run `ids` [B, T] through the model on top of `cache`; the float32 logits of the last
        position [B, V]."""
        kwargs: dict[str, Any] = {self._cache_arg: cache, "use_cache": True}
        if mask is not None:
            kwargs.update(attention_mask=mask, position_ids=positions)
        if self._keep_last:
            kwargs["logits_to_keep"] = 1
        return self.model(input_ids=ids, **kwargs).logits[:, -1].float()

    def _finished(self, tokens: list[int]) -> bool:
        """Whether a row that has generated `tokens` is done (EOS, a stop string, or the token
        limit)."""
        if tokens[-1] in self.eos_ids or len(tokens) >= self._limit:
            return True
        if not self.stop:
            return False
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return any(s in text for s in self.stop)

    def _batch(
        self, rows: Sequence[Sequence[int]], on_row: Callable[[int], Any] | None = None
    ) -> list[list[int]]:
        """Greedy continuations (token ids, EOS included) of the tokenized prompts `rows`;
        `on_row(1)` is called as each row finishes (the progress bar moves per item)."""
        device = next(self.model.parameters()).device
        size = len(rows)
        cache = new_cache(self.model)
        shared = shared_prefix(rows) if size > 1 else 0
        if shared:
            self._forward(torch.tensor([list(rows[0][:shared])], device=device), None, None, cache)
            cache.batch_repeat_interleave(size)
        tails = [list(r[shared:]) for r in rows]
        width = max(len(t) for t in tails)
        ids = torch.full((size, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((size, shared + width), dtype=torch.long)
        mask[:, :shared] = 1
        positions = torch.zeros((size, width), dtype=torch.long)
        for i, tail in enumerate(tails):
            pad = width - len(tail)
            ids[i, pad:] = torch.tensor(tail, dtype=torch.long)
            mask[i, shared + pad :] = 1
            positions[i, pad:] = torch.arange(shared, shared + len(tail))
        ids, mask, positions = ids.to(device), mask.to(device), positions.to(device)
        following = self._forward(ids, mask, positions, cache).argmax(-1)
        position = positions[:, -1] + 1
        out: list[list[int]] = [[] for _ in rows]
        alive = list(range(size))  # the prompt index of each batch row still generating
        while True:
            keep = []
            for slot, (row, token) in enumerate(zip(alive, following.tolist(), strict=True)):
                out[row].append(token)
                if not self._finished(out[row]):
                    keep.append(slot)
                elif on_row is not None:
                    on_row(1)
            if not keep:
                return out
            if len(keep) < len(alive):  # drop the finished rows from the batch and its cache
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                mask, position, following = mask[index], position[index], following[index]
                alive = [alive[slot] for slot in keep]
            mask = torch.cat([mask, mask.new_ones((len(alive), 1))], dim=1)
            following = self._forward(following[:, None], mask, position[:, None], cache).argmax(-1)
            position = position + 1

    def expect(self, items: int) -> None:
        """Open the progress bar with its total: the `items` whose first output will be generated.
        Their rows move it one each; chain-of-thought fallbacks (`generate(..., fallback=True)`)
        are counted beside it, so the total is right from the start."""
        self._bar = self._new_bar(items)
        self._expected = True

    def _new_bar(self, total: int) -> Any:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc="generate", unit="item", disable=not self.progress)

    def _on_row(self, prompts: int, fallback: bool) -> Callable[[int], Any]:
        """What each finished row of `prompts` calls: the progress bar's update (without `expect`,
        its total raised by `prompts` first) or, for fallbacks of expected items, their count."""
        if self._bar is None:
            self._bar = self._new_bar(0)
        if fallback and self._expected:
            return self._fallback_done
        if not self._expected:
            self._bar.total += prompts
            self._bar.refresh()
        return self._bar.update

    def _fallback_done(self, n: int) -> None:
        self.fallbacks += n
        self._bar.set_postfix_str(f"fallbacks {self.fallbacks}")

    def close_progress(self) -> None:
        """Close the progress bar (the next generate() starts a new one)."""
        if self._bar is not None:
            self._bar.close()
            self._bar, self._expected = None, False

    def generate(
        self, prompts: Sequence[str], max_new_tokens: int | None = None, fallback: bool = False
    ) -> list[Generation]:
        """Greedy completions of `prompts`, in the order given (`max_new_tokens` overrides the
        default). `fallback`: these are chain-of-thought fallbacks of items already counted by the
        progress bar; they show as its "fallbacks" count instead of moving it."""
        if not prompts:
            return []
        if max_new_tokens is not None:
            check_int("max_new_tokens", max_new_tokens, 1)
        self._limit = max_new_tokens or self.max_new_tokens
        rows = self.tokenizer(list(prompts))["input_ids"]
        empty = [i for i, row in enumerate(rows) if not row]
        if empty:
            raise ValueError(
                f"prompt {empty[0]} tokenizes to no tokens; generation needs at least one"
            )
        order = sorted(range(len(prompts)), key=lambda i: -len(rows[i]))
        results: list[Generation | None] = [None] * len(prompts)
        was_training = self.model.training
        self.model.eval()
        start = time.perf_counter()
        try:
            on_row = self._on_row(len(prompts), fallback)
            with torch.inference_mode():
                for b in range(0, len(order), self.batch_size):
                    chunk = order[b : b + self.batch_size]
                    for index, tokens in zip(
                        chunk, self._batch([rows[i] for i in chunk], on_row), strict=True
                    ):
                        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
                        results[index] = Generation(cut_at_stop(text, self.stop), len(tokens))
                        self.tokens += len(tokens)
        finally:
            self.seconds += time.perf_counter() - start
            self.model.train(was_training)
        return [r for r in results if r is not None]


def shared_prefix(rows: Sequence[Sequence[int]]) -> int:
    """Length of the token prefix common to all `rows`, leaving every row at least one token of its
    own."""
    first, limit = rows[0], min(len(r) for r in rows) - 1
    for n in range(limit):
        token = first[n]
        if any(r[n] != token for r in rows):
            return n
    return max(limit, 0)


def _base_model(model: Any) -> Any:
    """The transformers model under a PEFT wrapper (whose own forward takes **kwargs), else
    `model`."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def new_cache(model: Any) -> Any:
    """A `DynamicCache` for `model` whose full-attention layers are `RoomyLayer`s (see
    `roomy_layer_class`); sliding-window or other special layers stay as transformers builds them.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    try:
        cache = DynamicCache(config=model.config)
    except TypeError:  # a transformers without config-built caches
        cache = DynamicCache()
    roomy = roomy_layer_class()
    if cache.layers:
        cache.layers = [roomy() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    elif getattr(cache, "layer_class_to_replicate", None) is DynamicLayer:
        cache.layer_class_to_replicate = roomy
    return cache


class _Roomy:
    """A full-attention cache layer that writes each step's keys/values into spare room (grown by
    doubling) instead of `torch.cat`-ing the whole cache every step as `DynamicLayer` does;
    `keys`/`values` are views of the filled part, so attention and masks see the same shapes.
    Mixed into transformers' `DynamicLayer` by `roomy_layer_class`. It holds the operations of
    `HFGenerator`'s greedy loop (update, batch repeat and select, reset); transformers' `generate`
    (beam search's reorder, assisted decoding's crop) is never run on it."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.room_keys: torch.Tensor | None = None
        self.room_values: torch.Tensor | None = None
        self.length = 0

    def _view(self) -> None:
        assert self.room_keys is not None and self.room_values is not None
        self.keys = self.room_keys[:, :, : self.length]
        self.values = self.room_values[:, :, : self.length]

    @staticmethod
    def _grown(
        room: torch.Tensor | None, states: torch.Tensor, length: int, needed: int
    ) -> torch.Tensor:
        shape = (*states.shape[:2], max(2 * needed, 32), states.shape[-1])
        grown = states.new_empty(shape)
        if room is not None and length:
            grown[:, :, :length] = room[:, :, :length]
        return grown

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if self.room_keys is None or self.room_values is None or end > self.room_keys.shape[-2]:
            self.room_keys = self._grown(self.room_keys, key_states, self.length, end)
            self.room_values = self._grown(self.room_values, value_states, self.length, end)
        self.room_keys[:, :, self.length : end] = key_states
        self.room_values[:, :, self.length : end] = value_states
        self.length = end
        self._view()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def _select(self, select: Any) -> None:
        if self.is_initialized and self.room_keys is not None and self.room_values is not None:
            self.room_keys, self.room_values = select(self.room_keys), select(self.room_values)
            self._view()

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._select(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._select(lambda t: t[indices.to(t.device)])

    def reset(self) -> None:
        super().reset()
        self.room_keys = self.room_values = None
        self.length = 0


@functools.cache
def roomy_layer_class() -> type:
    """`RoomyLayer` (`_Roomy` on `DynamicLayer`), made on first use so that importing this module
    does not import transformers."""
    from transformers.cache_utils import DynamicLayer

    class RoomyLayer(_Roomy, DynamicLayer):
        """The full-attention cache layer of `new_cache`."""

    return RoomyLayer


class VLLMGenerator:
    """Greedy generation with vLLM (a CUDA GPU and `pip install vllm`); tensor parallel optional."""

    def __init__(
        self,
        model_path: str,
        max_new_tokens: int = 512,
        stop: Sequence[str] = DEFAULT_STOP,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
    ) -> None:
        self.vllm = vllm = import_vllm()
        self.llm = vllm.LLM(
            model=model_path, tensor_parallel_size=tensor_parallel_size, dtype=dtype
        )
        self.max_new_tokens, self.stop = max_new_tokens, list(stop)
        self.tokens, self.seconds = 0, 0.0

    def generate(
        self, prompts: Sequence[str], max_new_tokens: int | None = None
    ) -> list[Generation]:
        start = time.perf_counter()
        limit = max_new_tokens or self.max_new_tokens
        params = self.vllm.SamplingParams(
            temperature=0.0, top_p=1.0, max_tokens=limit, stop=self.stop
        )
        outputs = self.llm.generate(list(prompts), params)
        self.seconds += time.perf_counter() - start
        results = [Generation(o.outputs[0].text, len(o.outputs[0].token_ids)) for o in outputs]
        self.tokens += sum(r.new_tokens for r in results)
        return results


def import_vllm() -> Any:
    """The vllm module, or BackendUnavailable saying how to get it or what to use instead."""
    try:
        import vllm
    except ImportError:
        raise BackendUnavailable(
            "the vLLM backend needs the 'vllm' package, which is not installed: install it on a"
            " machine with a CUDA GPU (numloss's [vllm] extra: pip install -e '.[vllm]' from a"
            " clone), or use --backend hf"
        ) from None
    return vllm
