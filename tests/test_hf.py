"""NumericTrainer: the shift, step-wide counts (batch 8 == 2 x 4 accumulation) and logging."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from faultrun import ENV, free_port
from numloss import DigitVocab, build_loss
from numloss.data import CompletionCollator
from numloss.diagnostics import DigitDiagnosticsCallback, PushdownWarning
from numloss.digits import find_digits
from numloss.hf import NumericTrainer, compute_loss_func, shift_labels

VOCAB = DigitVocab(list(range(10)), decimal_point_id=10)
OBJECTIVES = ["mle", "del", "ntl-was", "ntl-mse", "dist2", "mixce", "emo"]
PAD = 39


#: the tiny models' shape: 2 layers, hidden 32, a 40-token vocabulary, dropout off
SHAPE = dict(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, attention_dropout=0.0, tie_word_embeddings=False)


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**SHAPE)).float()


def rows() -> list[dict[str, list[int]]]:
    """8 rows of different lengths and digit counts; the prompt part is ignored (-100)."""
    generator = torch.Generator().manual_seed(1)
    examples = []
    for i in range(8):
        length = 6 + (5 * i) % 13
        prompt = 2 + i % 3
        # digits and points, with some letters (ids 11..38) mixed in; row 3 has no digit at all
        ids = torch.randint(*((11, 39) if i == 3 else (0, 20 + 2 * i)), (length,), generator=generator)
        labels = ids.clone()
        labels[:prompt] = -100
        examples.append({"input_ids": ids.tolist(), "labels": labels.tolist()})
    return examples


collate = CompletionCollator(PAD)  # right-padded, -100 labels, an attention mask


class PerMicroBatchTrainer(NumericTrainer):
    """The naive glue: every micro-batch normalised by itself, then divided by the GA steps."""

    loss_is_scaled_for_ga = False

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batches, _ = super().get_batch_samples(epoch_iterator, num_batches, device)
        self._step_digits = None
        return batches, None


def make_loss(name: str, model: LlamaForCausalLM | None = None, **options):
    if name == "emo":
        return build_loss(name, VOCAB, embedding=model.get_output_embeddings().weight)
    if name == "dist2-author":  # divided by the sum of place weights: the step's, not a micro-batch's
        return build_loss("dist2", VOCAB, alpha=1.0, place_weight=True, point_ends_run=True, normalize="weights")
    # alphas large enough that the digit term moves the update visibly
    return build_loss(name, VOCAB, **({} if name in ("mixce", "mle") else {"alpha": 1.0}), **options)


def train_args(tmp_path, batch: int, accumulation: int, steps: int = 1, lr: float = 0.5):
    return TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation,
        max_steps=steps, learning_rate=lr, optim="sgd", lr_scheduler_type="constant", weight_decay=0.0,
        max_grad_norm=0.0, train_sampling_strategy="sequential", report_to="none", save_strategy="no",
        logging_steps=1, use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0,
    )


def params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def trained(model, tmp_path, batch: int = 8, accumulation: int = 1, steps: int = 1, lr: float = 0.5,
            trainer_class=NumericTrainer, **kw):
    """`trainer_class` (`kw`: loss_fn, fused, compute_loss_func, ...) after training `model` on rows()."""
    trainer = trainer_class(model=model, args=train_args(tmp_path, batch, accumulation, steps, lr),
                            train_dataset=rows(), data_collator=collate, **kw)
    trainer.train()
    return trainer


def full_batch(model, loss_fn, data: list | None = None):
    """`loss_fn` on one forward pass of `model` over `data` (all rows) at once."""
    batch = collate(data or rows())
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return loss_fn(logits, shift_labels(batch))


_UPDATES: dict = {}


def numeric_trainer_update(name: str, tmp_path, batch: int, accumulation: int, trainer_class=NumericTrainer,
                           **options) -> dict[str, torch.Tensor]:
    """Parameters after the first step of `trainer_class` (a plain Trainer: through
    compute_loss_func) with make_loss(name, **options); cached, as several tests compare with it."""
    key = (name, batch, accumulation, trainer_class, tuple(sorted(options.items())))
    if key not in _UPDATES:
        model = tiny_llama()
        loss_fn = make_loss(name, model, **options)
        hooked = {"compute_loss_func": compute_loss_func(loss_fn)} if trainer_class is Trainer else {"loss_fn": loss_fn}
        trained(model, tmp_path, batch, accumulation, trainer_class=trainer_class, **hooked)
        _UPDATES[key] = params(model)
    return {k: v.clone() for k, v in _UPDATES[key].items()}


def max_update_difference(a: dict, b: dict, start: dict) -> tuple[float, float]:
    """(largest |a - b| over all parameters, largest |a - start|)."""
    diff = max(float((a[k] - b[k]).abs().max()) for k in a)
    size = max(float((a[k] - start[k]).abs().max()) for k in a)
    return diff, size


@pytest.mark.parametrize("name, options, trainer_class, batch, accumulation", [
    *((name, {}, NumericTrainer, 2, 4) for name in [*OBJECTIVES, "dist2-author"]),
    # compute_loss_func: the hook of a plain transformers.Trainer
    ("del", {"normalize": "tokens"}, Trainer, 2, 4), ("mle", {}, Trainer, 2, 4),
    ("del", {}, Trainer, 8, 1),  # digit normalisation: exact with one micro-batch per step on one rank
], ids=lambda v: v.__name__ if isinstance(v, type) else None)
def test_an_update_at_batch_x_accumulation_is_numeric_trainers_at_batch_8(name, options, trainer_class, batch,
                                                                          accumulation, tmp_path):
    start = params(tiny_llama())
    full = numeric_trainer_update(name, tmp_path / "full", 8, 1, **options)
    update = numeric_trainer_update(name, tmp_path / "u", batch, accumulation, trainer_class=trainer_class, **options)
    diff, size = max_update_difference(full, update, start)
    assert size > 1e-3, "the update is too small for the comparison to mean anything"
    assert diff <= 1e-5 * size + 1e-7, f"{name}: the update differs by {diff:g} (update {size:g})"
    # the test has teeth: per-micro-batch means, and the digit-normalised objective, move differently
    other = (numeric_trainer_update(name, tmp_path / "other", 8, 1) if options else
             numeric_trainer_update(name, tmp_path / "naive", 2, 4, trainer_class=PerMicroBatchTrainer))
    assert max_update_difference(full, other, start)[0] > 1e-3 * size, f"{name}: the other update did not differ"


@pytest.mark.parametrize("plain", [False, True], ids=["NumericTrainer", "Trainer-with-the-callback"])
def test_logged_terms_are_the_step_means(plain, tmp_path):
    """With lr = 0 (every step sees the same model), the logged terms equal one full-batch call of
    the loss: NumericTrainer's loss/ce/aux and digit diagnostics at 2 x 4 accumulation, and a plain
    Trainer's digit diagnostics through compute_loss_func and `DigitDiagnosticsCallback`.
    NumericTrainer's digit_share: a letter token of the labels stands for a token holding 2 digits
    that no number slot scores (a merged "3,"), so the share is the scored digit slots over all
    digits written (every digit label, 2 per such letter; a number the letter is part of is not
    scored)."""
    per_row = [collate([r])["labels"][:, 1:].reshape(-1) for r in rows()]
    labels = torch.cat(per_row)
    letter = int(torch.mode(labels[labels > 10]).values)
    vocab = DigitVocab(list(range(10)), decimal_point_id=10, unscored_digit_tokens=[(letter, 2)])
    scored, unscored = sum(find_digits(row, vocab).count for row in per_row), 2 * int((labels == letter).sum())
    assert scored and unscored, "the rows must hold both kinds for the test to mean anything (a share < 1)"
    digits = int(((labels >= 0) & (labels < 10)).sum())
    model = tiny_llama()
    loss_fn = build_loss("del", vocab, alpha=1.0, **({"normalize": "tokens"} if plain else {}))
    expected = full_batch(copy.deepcopy(model), loss_fn)
    names = ["digit_entropy", "digit_logit_mean", "pushdown_share", "digit_target_prob"]
    if plain:
        hook = compute_loss_func(loss_fn)
        trainer = trained(model, tmp_path, steps=2, lr=0.0, trainer_class=Trainer, compute_loss_func=hook,
                          callbacks=[DigitDiagnosticsCallback(hook)])
        with pytest.raises(TypeError, match="compute_loss_func"):
            DigitDiagnosticsCallback(loss_fn)
    else:
        trainer = trained(model, tmp_path, batch=2, accumulation=4, steps=2, lr=0.0, loss_fn=loss_fn)
        names += ["loss", "ce", "aux"]
    logs = [entry for entry in trainer.state.log_history if "loss" in entry and "train_runtime" not in entry]
    assert len(logs) == 2  # the dataset of 8 rows is seen twice
    for entry in logs:
        for name in names:
            assert entry[name] == pytest.approx(float(getattr(expected, name)), rel=1e-5, abs=1e-7), name
        assert plain or entry["digit_share"] == pytest.approx(scored / (digits + unscored)), entry["digit_share"]


def test_pushdown_warning_says_once_after_three_logs_above_half(caplog):
    raw = PushdownWarning(build_loss("del", VOCAB, alpha=0.3))
    shares = [0.9, 0.8, 0.2, 0.7, 0.6, 0.9, 0.95, 0.99]  # the streak breaks at 0.2, restarts at 0.7
    with caplog.at_level("WARNING", logger="numloss.diagnostics"):
        for step, share in enumerate(shares):
            raw.on_log(None, None, None, logs={"loss": 1.0, "pushdown_share": share, "digit_logit_mean": -2.5})
            assert raw.warned == (step >= 5), step
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "\n" not in messages[0]
    assert "sigmoid_input='centered'" in messages[0] and "90% of digit positions for 3 logging steps" in messages[0]
    assert "-2.5" in messages[0]
    # objectives without DEL's term log the share for comparison only: no warning
    caplog.clear()
    quiet = PushdownWarning(build_loss("mle", VOCAB))
    with caplog.at_level("WARNING", logger="numloss.diagnostics"):
        for share in shares:
            quiet.on_log(None, None, None, logs={"loss": 1.0, "pushdown_share": share})
    assert not caplog.records and not quiet.warned


@pytest.mark.parametrize("fused", [False, True])
def test_evaluation_after_training_normalises_each_batch_by_itself(tmp_path, fused):
    """Trainer.evaluate passes a token count too; the digit count beside it must not be the last
    training step's (it was: eval_loss then divided the digit term by another batch's digits)."""
    model = tiny_llama()
    loss_fn = make_loss("del", model)
    trainer = trained(model, tmp_path, batch=2, accumulation=4, loss_fn=loss_fn, fused=fused, eval_dataset=rows()[:2])
    model.eval()
    assert trainer.evaluate()["eval_loss"] == pytest.approx(float(full_batch(model, loss_fn, rows()[:2]).loss), rel=1e-5)


# -- the fused path inside the trainer ------------------------------------------------------------


def tiny_model(architecture: str, seed: int = 0):
    """A 2-layer, hidden-32 causal LM of `architecture` with a 40-token vocabulary, dropout off
    (llama-lora: peft's LoRA on the tiny Llama's q_proj and v_proj)."""
    import transformers as tf

    if architecture.startswith("llama"):
        model = tiny_llama(seed)
        if architecture == "llama-lora":  # adapters initialised at random: the update moves the curve at once
            from peft import LoraConfig, get_peft_model

            lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
            model = get_peft_model(model, lora)
        return model
    torch.manual_seed(seed)
    if architecture == "qwen2":
        return tf.Qwen2ForCausalLM(tf.Qwen2Config(**SHAPE)).float()
    if architecture == "mistral":
        return tf.MistralForCausalLM(tf.MistralConfig(**SHAPE, sliding_window=None)).float()
    if architecture == "gpt2":
        config = tf.GPT2Config(vocab_size=40, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return tf.GPT2LMHeadModel(config).float()  # ties lm_head to the input embedding
    raise ValueError(architecture)


def loss_curve(model, name: str, tmp_path, fused: bool, steps: int = 3):
    trainer = trained(model, tmp_path, batch=2, accumulation=2, steps=steps, lr=0.2, loss_fn=make_loss(name, model),
                      fused=fused)
    logs = [entry for entry in trainer.state.log_history if "ce" in entry]
    assert len(logs) == steps
    return [entry[key] for entry in logs for key in ("loss", "ce", "aux")], model


@pytest.mark.parametrize("architecture,name", [("llama", "del"), ("qwen2", "mixce"), ("mistral", "ntl-was"), ("gpt2", "emo"),
                                               ("llama-lora", "del")])
def test_fused_training_follows_the_unfused_loss_curve(architecture, name, tmp_path):
    unfused_curve, unfused_model = loss_curve(tiny_model(architecture), name, tmp_path / "u", fused=False)
    fused_curve, fused_model = loss_curve(tiny_model(architecture), name, tmp_path / "f", fused=True)
    assert unfused_curve[0] != pytest.approx(unfused_curve[-3], rel=1e-3), "training did not move the loss"
    assert fused_curve == pytest.approx(unfused_curve, rel=1e-5, abs=1e-6)
    for (key, a), b in zip(unfused_model.named_parameters(), fused_model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=key)


def test_refuses_a_loss_that_is_not_numeric_and_fused_an_adapted_lm_head(tmp_path):
    from peft import LoraConfig, get_peft_model

    with pytest.raises(TypeError, match="numloss objective"):
        NumericTrainer(loss_fn=torch.nn.CrossEntropyLoss(), model=tiny_llama(), args=train_args(tmp_path, 2, 1))
    model = get_peft_model(tiny_llama(), LoraConfig(r=2, target_modules=["q_proj", "lm_head"]))
    with pytest.raises(ValueError, match="lm_head"):
        trained(model, tmp_path, batch=2, loss_fn=make_loss("del", model), fused=True)


# -- compute_loss_func: the hook of a plain transformers.Trainer ------------------------------------


#: the step-count refusal (a step wider than the micro-batch without a digit count) names the
#: option the loss was built with
REFUSALS = [(build_loss("del", VOCAB), 'del with normalize="digits" divides by the digit count'),
            (build_loss("dist2", VOCAB, place_weight=True, normalize="weights"),
             'dist2 with normalize="weights" divides by the sum of the place weights')]


def test_compute_loss_func_reads_model_outputs_shifts_and_refuses_a_step_wider_than_its_counts():
    """The hook takes what the Trainer hands it: a ModelOutput (or tuple) and unshifted labels
    (shift_labels pads instead of slicing); without a digit count for a step wider than the
    micro-batch (num_items_in_batch above its tokens) it refuses in one line, naming the loss's
    own normalisation and both ways out."""
    labels = torch.tensor([[-100, 5, 6, 7]])
    assert shift_labels({"labels": labels}).tolist() == [[5, 6, 7, -100]]
    given = torch.tensor([[1, 2, -100, -100]])
    assert shift_labels({"labels": labels, "shift_labels": given}) is given
    with pytest.raises(ValueError, match="labels"):
        shift_labels({"input_ids": labels})
    model = tiny_llama()
    loss_fn = build_loss("del", VOCAB)
    hook = compute_loss_func(loss_fn)
    batch = collate(rows())
    outputs = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    expected = loss_fn(outputs.logits, shift_labels(batch))
    assert hook(outputs, batch["labels"]).item() == pytest.approx(expected.loss.item(), rel=1e-6)
    assert hook(outputs.to_tuple(), batch["labels"]).item() == pytest.approx(expected.loss.item(), rel=1e-6)
    assert hook.last.aux.item() == pytest.approx(expected.aux.item(), rel=1e-6)
    with pytest.raises(ValueError, match="no labels"):
        hook(outputs, None)
    for refused, says in REFUSALS:
        with pytest.raises(ValueError) as error:
            compute_loss_func(refused)(outputs, batch["labels"], num_items_in_batch=10_000)
        message = str(error.value)
        assert says in message and 'normalize="tokens" or train with numloss.hf.NumericTrainer' in message
        assert "\n" not in message and ('normalize="digits"' in message) == ('"digits"' in says)
    with pytest.raises(AttributeError, match=r"numloss\.hf\.compute_loss_func\(loss_fn\)"):
        loss_fn.as_compute_loss_func()  # the old method points to the hook


_TWO_RANKS_SCRIPT = """
import sys, torch
sys.path.insert(0, {tests!r})
from transformers import Trainer
from test_hf import VOCAB, collate, rows, tiny_llama, train_args
from numloss import build_loss
from numloss.hf import compute_loss_func

torch.set_num_threads(1)
model = tiny_llama()
hook = compute_loss_func(build_loss("del", VOCAB, alpha=1.0, normalize="tokens"))
t = Trainer(model=model, args=train_args({out!r}, 4, 1), train_dataset=rows(), data_collator=collate, compute_loss_func=hook)
t.train()
if t.is_world_process_zero():
    torch.save({{k: v.detach() for k, v in model.named_parameters()}}, {out!r} + "/params.pt")
# left to interpreter shutdown, gloo's threads can abort a finished rank (SIGABRT)
torch.distributed.barrier()
torch.distributed.destroy_process_group()
"""


def test_compute_loss_func_on_two_gloo_ranks_is_exact_with_token_normalisation(tmp_path):
    """2 processes x batch 4 through Trainer's hook == NumericTrainer at batch 8 (the refusal of
    "digits", whose step count is then wider than a rank's micro-batch: the REFUSALS test above)."""
    script = tmp_path / "two_ranks.py"
    script.write_text(_TWO_RANKS_SCRIPT.format(tests=str(Path(__file__).parent), out=str(tmp_path)))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()), str(script)]
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    two_ranks = torch.load(tmp_path / "params.pt")
    start = params(tiny_llama())
    reference = numeric_trainer_update("del", tmp_path / "ref", 8, 1, normalize="tokens")
    diff, size = max_update_difference(reference, two_ranks, start)
    assert size > 1e-3 and diff <= 1e-5 * size + 1e-6, (diff, size)
