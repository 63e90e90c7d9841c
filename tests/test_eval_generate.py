"""Generation backends: batched greedy generation equals one-by-one; a model's own end of turn; the vLLM guard."""

import pytest
import torch

from numloss.evaluate.generate import (
    BackendUnavailable,
    Generation,
    HFGenerator,
    cut_at_stop,
    import_vllm,
    new_cache,
    roomy_layer_class,
)
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


TEMPLATE = "### Instruction:\n{}\n\n### Response:"
TEMPLATED = [TEMPLATE.format(p) for p in PROMPTS]  # a long common prefix, then tails of different lengths


@pytest.mark.parametrize(("prompts", "batch_size", "tokens"), [
    (PROMPTS + PROMPTS[1:2], 2, 10),  # the first batch is one prompt twice: its shared prefix leaves each row a token
    (TEMPLATED + ["y", TEMPLATE.format("a question of middling length here")], 3, 6),  # a shared prefix, tails of all lengths
])
def test_batched_generation_sorted_by_length_equals_one_by_one_in_the_given_order(prompts, batch_size, tokens):
    model, tokenizer = scrambled_tiny_model()
    one = [HFGenerator(model, tokenizer, batch_size=1, max_new_tokens=tokens, stop=(), progress=False).generate([p])[0] for p in prompts]
    batched = HFGenerator(model, tokenizer, batch_size=batch_size, max_new_tokens=tokens, stop=(), progress=False).generate(prompts)
    assert batched == one  # texts and token counts
    assert len({g.text for g in one}) > 3  # the outputs differ, so the order really is checked
    assert tokenizer.padding_side == "right"  # left as it was


def test_finished_rows_leave_the_batch_and_outputs_equal_transformers_generate():
    model, tokenizer = scrambled_tiny_model()
    with torch.no_grad():
        free = HFGenerator(model, tokenizer, batch_size=8, max_new_tokens=12, stop=(), progress=False)._batch(
            tokenizer(TEMPLATED)["input_ids"]
        )
    # make a token the model really emits the EOS, one that some rows emit early and some never
    candidates = {t for row in free for t in row[:6]}
    eos = max(candidates, key=lambda t: (any(t not in row for row in free), sum(t in row[:6] for row in free)))
    model.generation_config.eos_token_id = eos
    generator = HFGenerator(model, tokenizer, batch_size=8, max_new_tokens=12, stop=(), progress=False)
    sizes = []
    forward = generator._forward
    generator._forward = lambda ids, *rest: sizes.append(ids.shape[0]) or forward(ids, *rest)
    batched = generator.generate(TEMPLATED)
    expected = []  # transformers' own greedy `generate`, one unpadded prompt at a time: (text, new-token count)
    for prompt in TEMPLATED:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            row = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=eos,
                                 pad_token_id=tokenizer.pad_token_id)[0, ids.shape[1]:].tolist()
        if eos in row:
            row = row[: row.index(eos) + 1]
        expected.append((tokenizer.decode(row, skip_special_tokens=True), len(row)))
    assert [(g.text, g.new_tokens) for g in batched] == expected
    lengths = sorted(n for _, n in expected)
    assert lengths[0] < 12 and lengths[-1] == 12  # some rows ended early, some ran to the limit
    assert sizes[0] == 1 and sizes[1] == len(TEMPLATED)  # the shared prefix once, then every row
    assert sizes[-1] < len(TEMPLATED) and sizes == sizes[:2] + sorted(sizes[2:], reverse=True)
    assert generator.tokens == sum(lengths)
    # the cache is roomy_layer_class's, checked here against transformers' own: the prefix's room
    # (twice its 18 tokens) grows for the tails, rows repeat from the prefix and leave at EOS
    assert all(type(layer) is roomy_layer_class() for layer in new_cache(model).layers)


def test_a_row_stops_at_its_stop_string_like_one_by_one_and_time_and_tokens_are_counted():
    model, tokenizer = scrambled_tiny_model()
    generator = HFGenerator(model, tokenizer, batch_size=4, max_new_tokens=10, stop=(), progress=False)
    free = generator.generate(PROMPTS)
    assert generator.tokens == sum(g.new_tokens for g in free) > 0 and generator.seconds > 0
    assert generator._bar.total == len(PROMPTS)  # without `expect`, each call adds its prompts to the bar
    stop = free[1].text[3:5]
    ends = free[1].text.find(stop) + len(stop)  # one token per character
    kwargs = dict(max_new_tokens=10, stop=(stop,), progress=False)
    one = [HFGenerator(model, tokenizer, batch_size=1, **kwargs).generate([p])[0] for p in PROMPTS]
    batched = HFGenerator(model, tokenizer, batch_size=4, **kwargs).generate(PROMPTS)
    assert batched == one
    assert batched[1] == Generation(cut_at_stop(free[1].text, (stop,)), ends)  # stopped once the stop string was out
    assert any(g.new_tokens == 10 for g in batched)
    for bad in ("batch_size", "max_new_tokens"):
        with pytest.raises(ValueError, match=bad):
            HFGenerator(model, tokenizer, **{bad: 0})


def test_generation_ends_at_the_evaluated_models_own_end_of_turn_tokens():
    """A model's turn ends at its generation config's eos ids and its tokenizer's eos, not at a list
    of every family's tokens (a token of another family is text to this model)."""
    model, tokenizer = scrambled_tiny_model()
    model.generation_config.eos_token_id = [5, 7]
    assert HFGenerator(model, tokenizer, progress=False).eos_ids == {5, 7, tokenizer.eos_token_id}
    model.generation_config.eos_token_id = None
    assert HFGenerator(model, tokenizer, progress=False).eos_ids == {tokenizer.eos_token_id}


def test_vllm_guard_says_what_to_do(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(BackendUnavailable, match=r"--backend hf"):
        import_vllm()
