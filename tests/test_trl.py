"""numloss.trl.NumericSFTTrainer: TRL's own CE and metrics, NumericTrainer's step-wide update."""

from __future__ import annotations

import contextlib
import copy

import pytest

pytest.importorskip("trl")  # the `trl` extra; `make test` installs it (pyproject test extra)

from datasets import Dataset  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

from numloss import DigitVocab, build_loss  # noqa: E402
from numloss.data import CompletionCollator  # noqa: E402
from numloss.hf import NumericTrainer, compute_loss_func  # noqa: E402
from numloss.models import build_char_tokenizer, build_tiny_model  # noqa: E402
from numloss.trl import NumericSFTTrainer  # noqa: E402
from test_hf import max_update_difference, params  # noqa: E402

TOKENIZER = build_char_tokenizer()
VOCAB = DigitVocab.from_tokenizer(TOKENIZER)


def model():
    return build_tiny_model(TOKENIZER, num_layers=2, hidden_size=32, num_heads=2, seed=0)


def dataset() -> Dataset:
    """Prompt/completion records with numbers of different lengths (8 of them: one step of 8)."""
    items = [(12, 7), (305, 41), (9, 9), (1234, 5), (66, 77), (8, 150), (41, 2), (700, 300)]
    return Dataset.from_list([{"prompt": f"{a}+{b}=", "completion": f"{a + b}"} for a, b in items])


def config(tmp_path, batch: int, accumulation: int, **extra) -> SFTConfig:
    # padding-free without packing leaves truncation to the caller (the records are short)
    extra.setdefault("max_length", None if extra.get("padding_free") else 64)
    return SFTConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation,
        max_steps=1, learning_rate=0.5, optim="sgd", lr_scheduler_type="constant", weight_decay=0.0,
        max_grad_norm=0.0, train_sampling_strategy="sequential", report_to="none", save_strategy="no",
        logging_steps=1, use_cpu=True, bf16=False, disable_tqdm=True, seed=0, **extra,
    )


def train(trainer_class, tmp_path, batch, accumulation, loss_fn=None, fused=False, hook=None, **extra):
    m = model()
    kwargs = {"compute_loss_func": hook} if hook else {} if loss_fn is None else {"loss_fn": loss_fn, "fused": fused}
    trainer = trainer_class(model=m, args=config(tmp_path, batch, accumulation, **extra), train_dataset=dataset(),
                            processing_class=TOKENIZER, **kwargs)
    trainer.train()
    logs = next(entry for entry in trainer.state.log_history if "loss" in entry)
    return params(m), logs, trainer


@pytest.mark.parametrize("reference, padding_free, fused", [
    ("SFTTrainer", False, False), ("SFTTrainer", True, False), ("compute_loss_func", False, False),
    ("NumericTrainer", False, False), ("NumericTrainer", True, False), ("NumericTrainer", False, True),
])
def test_numeric_sfttrainers_update_is_each_entry_points(reference, padding_free, fused, tmp_path):
    """NumericSFTTrainer at 2 x 4 accumulation makes the update, and logs TRL's metrics, of:
    SFTTrainer's own MLE; SFTTrainer(compute_loss_func=compute_loss_func(loss_fn)) with DEL and
    normalize="tokens"; NumericTrainer with DEL at batch 8 on the same tokens."""
    hooked = reference == "compute_loss_func"
    loss_fn = (build_loss("mle", VOCAB) if reference == "SFTTrainer" else
               build_loss("del", VOCAB, alpha=1.0, **({"normalize": "tokens"} if hooked else {})))
    start = params(model())
    ours, logs, trainer = train(NumericSFTTrainer, tmp_path / "n", 2, 4, loss_fn, fused=fused, padding_free=padding_free)
    assert trainer.completion_only_loss and trainer.padding_free == padding_free
    assert {"entropy", "mean_token_accuracy", "num_tokens", "ce", "aux", "digit_entropy"} <= set(logs)
    if reference == "NumericTrainer":
        features = [{"input_ids": r["input_ids"], "labels": r["labels"]} for r in trainer.train_dataset]
        assert all(-100 in f["labels"] for f in features)  # completion-only labels
        reference_model = model()
        NumericTrainer(loss_fn=loss_fn, model=reference_model, args=config(tmp_path / "r", 8, 1), train_dataset=features,
                       data_collator=CompletionCollator(TOKENIZER.pad_token_id)).train()
        theirs = params(reference_model)
    else:
        with pytest.warns(FutureWarning, match="compute_loss_func") if hooked else contextlib.nullcontext():
            theirs, their_logs, _ = train(SFTTrainer, tmp_path / "t", 2, 4, hook=compute_loss_func(loss_fn) if hooked else None,
                                          padding_free=padding_free)
        for key in ("loss", "entropy", "mean_token_accuracy", "num_tokens"):
            assert logs[key] == pytest.approx(their_logs[key], rel=1e-5), key
        assert hooked or logs["ce"] == pytest.approx(their_logs["loss"], rel=1e-5)  # MLE: ce is the loss
    diff, size = max_update_difference(ours, theirs, start)
    assert size > 1e-3 and diff <= 1e-5 * size + 1e-6, (diff, size)


@pytest.mark.parametrize("extra, kwargs, refusal", [
    ({"loss_type": "dft"}, {}, "loss_type"),
    ({}, {"assistant_only": "yes"}, "assistant_only must be True or False"),
    ({}, {"compute_loss_func": compute_loss_func(build_loss("del", VOCAB))}, "do not pass compute_loss_func"),
])
def test_options_that_replace_the_loss_are_refused(tmp_path, extra, kwargs, refusal):
    with pytest.raises((ValueError, TypeError), match=refusal):
        NumericSFTTrainer(loss_fn=build_loss("del", VOCAB), model=model(), train_dataset=dataset(),
                          args=config(tmp_path, 2, 1, **extra), processing_class=TOKENIZER, **kwargs)


# -- chat data: the assistant turns only, as numloss train learns them --------------------------------

# SmolLM2-135M-Instruct's chat template: ChatML, no {% generation %} markers (TRL's
# assistant_only_loss cannot use it), a default system turn when the data has none
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def chat_dataset() -> Dataset:
    rows = []
    for a, b in [(12, 7), (305, 41), (9, 9), (66, 77)]:
        messages = [{"role": "user", "content": f"What is {a}+{b}?"}, {"role": "assistant", "content": f"{a + b}"}]
        if a == 305:  # a system turn and two exchanges
            messages = [{"role": "system", "content": "Be brief."}, *messages,
                        {"role": "user", "content": "And doubled?"}, {"role": "assistant", "content": f"{2 * (a + b)}"}]
        rows.append({"messages": messages})
    return Dataset.from_list(rows)


def learnt_text(tok, record) -> list[str]:
    """The labelled stretches of a record, decoded."""
    pieces, current = [], []
    for token, label in zip(record["input_ids"], record["labels"], strict=True):
        if label == -100:
            if current:
                pieces.append(tok.decode(current))
            current = []
        else:
            assert label == token  # a learnt position's label is its own token
            current.append(token)
    return pieces + ([tok.decode(current)] if current else [])


def test_chat_data_learns_the_assistant_turns_only_for_every_objective(tmp_path):
    """The default, and SFTConfig(assistant_only_loss=True) on SmolLM2's template (which TRL's own
    path refuses): only each assistant reply and its end-of-turn marker are learnt, for DEL and for
    MLE (docs/integration.md's A/B baseline: the arms compare losses, not maskings). A plain
    SFTTrainer arm would learn every token of the conversation (TRL's default), which is
    NumericSFTTrainer(assistant_only=False), not the numloss arm's masking."""
    tok = copy.deepcopy(TOKENIZER)
    tok.chat_template = SMOLLM2_TEMPLATE

    def arm(trainer_class, sft=(), **kwargs):
        return trainer_class(model=model(), train_dataset=chat_dataset(), processing_class=tok,
                             args=config(tmp_path, 2, 1, max_length=512, **dict(sft)), **kwargs)

    replies = [[m["content"] for m in r["messages"] if m["role"] == "assistant"] for r in chat_dataset()]
    for name, sft in [("mle", ()), ("del", ()), ("del", {"assistant_only_loss": True})]:
        trainer = arm(NumericSFTTrainer, sft, loss_fn=build_loss(name, VOCAB))
        for record, expected in zip(trainer.train_dataset, replies, strict=True):
            assert learnt_text(tok, record) == [f"{reply}<|im_end|>\n" for reply in expected], (name, sft)
    trainer.train()
    assert any("aux" in entry for entry in trainer.state.log_history)
    plain = arm(SFTTrainer).train_dataset
    every = arm(NumericSFTTrainer, loss_fn=build_loss("mle", VOCAB), assistant_only=False).train_dataset
    assert [r["input_ids"] for r in plain] == [r["input_ids"] for r in every]
    assert [r["labels"] for r in plain] == [r["labels"] for r in every]  # every token learnt: nothing masked
    assert all(-100 not in r["labels"] for r in every) and "assistant_masks" not in plain.column_names
