"""Generation backends: batched greedy generation equals one-by-one; the vLLM guard."""

import pytest
import torch

from numloss.evaluate.generate import BackendUnavailable, HFGenerator, cut_at_stop, import_vllm
from numloss.models.tiny import build_char_tokenizer, build_tiny_model


def scrambled_tiny_model():
    """A 2-layer tiny model with large random weights, so greedy outputs vary between prompts."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, num_layers=2, hidden_size=64, num_heads=2)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    return model, tokenizer


PROMPTS = [
    "What is 2+2?",
    "A much longer prompt about 12 apples and 7 pears: how many fruits are there?",
    "x",
    "Solve 3x = 12 for x.",
    "Ana has 5 pens.",
]


def test_batched_left_padded_generation_equals_one_by_one():
    model, tokenizer = scrambled_tiny_model()
    one = HFGenerator(model, tokenizer, batch_size=1, max_new_tokens=10, stop=(), progress=False).generate(PROMPTS)
    batched = HFGenerator(model, tokenizer, batch_size=4, max_new_tokens=10, stop=(), progress=False).generate(PROMPTS)
    assert [g.text for g in batched] == [g.text for g in one]
    assert len({g.text for g in one}) > 2  # the outputs differ, so the order really is checked
    assert all(g.new_tokens == 10 for g in batched)
    assert tokenizer.padding_side == "right"  # restored after generation


def test_generator_counts_tokens_and_time_and_cuts_stop_strings():
    model, tokenizer = scrambled_tiny_model()
    free = HFGenerator(model, tokenizer, batch_size=2, max_new_tokens=8, stop=(), progress=False)
    texts = [g.text for g in free.generate(PROMPTS[:2])]
    assert free.tokens == 16 and free.seconds > 0
    stop = texts[0][2:4]
    cut = HFGenerator(model, tokenizer, batch_size=2, max_new_tokens=8, stop=(stop,), progress=False)
    assert cut.generate(PROMPTS[:1])[0].text == texts[0][: texts[0].find(stop)]


def test_cut_at_stop():
    assert cut_at_stop("x = 3\nprint(x)\n### Instruction:\nmore", ("### Instruction",)) == "x = 3\nprint(x)\n"
    assert cut_at_stop("no stop here", ("###",)) == "no stop here"


def test_bad_settings_are_refused():
    model, tokenizer = scrambled_tiny_model()
    with pytest.raises(ValueError, match="batch_size"):
        HFGenerator(model, tokenizer, batch_size=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        HFGenerator(model, tokenizer, max_new_tokens=0)


def test_vllm_guard_says_what_to_do(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_vllm(name, *args, **kwargs):
        if name == "vllm":
            raise ImportError("No module named 'vllm'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_vllm)
    with pytest.raises(BackendUnavailable, match=r"--backend hf"):
        import_vllm()
