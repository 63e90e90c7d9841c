"""Generation backends: transformers `generate` (batched, left-padded, greedy) and vLLM.

Both take a list of prompt strings and return one `Generation` per prompt, in order, with greedy
decoding and the stop strings cut off (a model trained on the Alpaca template tends to start a new
"### Instruction:" block after its answer).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

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

    def generate(self, prompts: Sequence[str]) -> list[Generation]: ...


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """`text` up to the first occurrence of any stop string."""
    end = len(text)
    for s in stop:
        at = text.find(s)
        if at >= 0:
            end = min(end, at)
    return text[:end]


class HFGenerator:
    """Batched greedy generation with a transformers causal LM.

    Prompts are sorted by length (longest first, so an out-of-memory shows up in the first batch)
    and left-padded, which is what decoder-only `generate` needs for batches. `self.tokens` and
    `self.seconds` accumulate the generated-token count and the time spent, for tokens/s.
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
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens
        self.stop, self.progress = tuple(stop), progress
        self.tokens, self.seconds = 0, 0.0
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if self.pad_id is None:
            raise ValueError("the tokenizer has neither a pad nor an eos token; batched generation needs one")
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        self.eos_id = eos if eos is not None else tokenizer.eos_token_id

    def _config(self) -> Any:
        from transformers import GenerationConfig

        return GenerationConfig(
            max_new_tokens=self.max_new_tokens,
            do_sample=False,
            num_beams=1,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_id,
            # stop each row at a stop string (not only at EOS): the rest would be thrown away
            stop_strings=list(self.stop) or None,
        )

    @torch.no_grad()
    def _batch(self, prompts: Sequence[str]) -> list[Generation]:
        tok = self.tokenizer
        side = tok.padding_side
        tok.padding_side = "left"
        try:
            enc = tok(list(prompts), return_tensors="pt", padding=True)
        finally:
            tok.padding_side = side
        device = next(self.model.parameters()).device
        enc = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        out = self.model.generate(**enc, generation_config=self._config(), tokenizer=tok)
        new = out[:, enc["input_ids"].shape[1] :]
        results = []
        eos_ids = set(self.eos_id if isinstance(self.eos_id, list) else [self.eos_id])
        for row in new.tolist():
            count = len(row)
            for j, token in enumerate(row):
                if token in eos_ids or token == self.pad_id:  # finished rows are padded
                    count = j + (token in eos_ids)
                    break
            text = tok.decode(row[:count], skip_special_tokens=True)
            results.append(Generation(cut_at_stop(text, self.stop), count))
        return results

    def generate(self, prompts: Sequence[str]) -> list[Generation]:
        """Greedy completions of `prompts`, in the order given."""
        from tqdm.auto import tqdm

        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        results: list[Generation | None] = [None] * len(prompts)
        was_training = self.model.training
        self.model.eval()
        start = time.perf_counter()
        try:
            with tqdm(total=len(prompts), desc="generate", unit="prompt", disable=not self.progress) as bar:
                for b in range(0, len(order), self.batch_size):
                    chunk = order[b : b + self.batch_size]
                    for index, generation in zip(chunk, self._batch([prompts[i] for i in chunk]), strict=True):
                        results[index] = generation
                        self.tokens += generation.new_tokens
                    bar.update(len(chunk))
        finally:
            self.seconds += time.perf_counter() - start
            self.model.train(was_training)
        return [r for r in results if r is not None]


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
        vllm = import_vllm()
        self.llm = vllm.LLM(model=model_path, tensor_parallel_size=tensor_parallel_size, dtype=dtype)
        self.params = vllm.SamplingParams(temperature=0.0, top_p=1.0, max_tokens=max_new_tokens, stop=list(stop))
        self.tokens, self.seconds = 0, 0.0

    def generate(self, prompts: Sequence[str]) -> list[Generation]:
        start = time.perf_counter()
        outputs = self.llm.generate(list(prompts), self.params)
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
            "the vLLM backend needs the 'vllm' package, which is not installed: install it on a "
            "machine with a CUDA GPU (pip install 'numloss[vllm]'), or use --backend hf"
        ) from None
    return vllm
