"""Encoder: numerical parity with transformers.BertModel, loading errors, export, features."""

from __future__ import annotations

import shutil

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from bertkit import BertConfig, BertModel, token_features
from tests.conftest import CONLL, need

transformers = pytest.importorskip("transformers")

PAIRS = [
    ("The cat sat on the mat .", "It was warm there ."),
    ("Peter Blackburn", "BRUSSELS 1996-08-22"),
]


def _conll_sentences(n: int) -> list[str]:
    from bertkit_plugins.token_tagging.conll import read_conll

    return [" ".join(s.words) for s in read_conll(need(CONLL / "eng.testa"))[:n]]


@pytest.fixture(scope="module")
def pair(minilm_dir):
    hf = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()
    ours = BertModel.from_pretrained(minilm_dir).eval()
    tok = transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))
    return hf, ours, tok


def _max_diff(pair, batch, unpad: bool = True) -> float:
    hf, ours, _ = pair
    with torch.no_grad():
        a = hf(**batch).last_hidden_state
        b = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], unpad=unpad).last_hidden_state
    mask = batch["attention_mask"].bool()
    return (a - b)[mask].abs().max().item()


@pytest.mark.parametrize("unpad", [True, False])
def test_parity_padded_batch_of_real_sentences(pair, unpad):
    sentences = _conll_sentences(64)
    batch = pair[2](sentences, padding=True, return_tensors="pt")
    assert batch["attention_mask"].float().mean() < 0.9  # the batch really is padded
    assert _max_diff(pair, batch, unpad) <= 1e-4


@pytest.mark.parametrize("unpad", [True, False])
def test_parity_sentence_pairs_and_single(pair, unpad):
    tok = pair[2]
    batch = tok([a for a, _ in PAIRS], [b for _, b in PAIRS], padding=True, return_tensors="pt")
    assert batch["token_type_ids"].max() == 1
    assert _max_diff(pair, batch, unpad) <= 1e-4
    single = tok(["EU rejects German call to boycott British lamb ."], return_tensors="pt")
    assert _max_diff(pair, single, unpad) <= 1e-4


def _both_paths(ours, batch, **kwargs):
    args = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    return ours(*args, unpad=True, **kwargs), ours(*args, unpad=False, **kwargs)


def test_unpadded_equals_padded_outputs_and_gradients(pair):
    """Same parameters, same results: hidden states, pooler, cls_only, and the gradients of a
    loss on the real tokens (fp32, CPU; the unpadded path never computes on padding)."""
    _, ours, tok = pair
    batch = tok([a for a, _ in PAIRS] + ["Short ."], [b for _, b in PAIRS] + ["x"], padding=True, return_tensors="pt")
    mask = batch["attention_mask"].bool()
    assert not mask.all()
    with torch.no_grad():
        packed, padded = _both_paths(ours, batch, output_hidden_states=True)
        assert packed.layout is not None and packed.unpadded.shape == (int(mask.sum()), ours.config.hidden_size)
        assert (packed.pooler_output - padded.pooler_output).abs().max() <= 1e-5
        for x, y in zip(packed.hidden_states, padded.hidden_states, strict=True):
            assert (x - y)[mask].abs().max() <= 1e-5
            assert (x[~mask] == 0).all()  # re-padded with zeros
        assert (packed.select(mask) - padded.last_hidden_state[mask]).abs().max() <= 1e-5
        head = torch.nn.Linear(ours.config.hidden_size, 3)
        assert (packed.map_tokens(head) - padded.map_tokens(head))[mask].abs().max() <= 1e-5
        cls_packed, cls_padded = _both_paths(ours, batch, cls_only=True)
        assert cls_packed.last_hidden_state.shape == cls_padded.last_hidden_state.shape == (3, 1, 384)
        assert (cls_packed.pooler_output - cls_padded.pooler_output).abs().max() <= 1e-5
    grads = []
    for unpad in (True, False):
        ours.zero_grad()
        out = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], unpad=unpad)
        (out.last_hidden_state[mask].pow(2).mean() + out.pooler_output.sum()).backward()
        grads.append({n: p.grad.clone() for n, p in ours.named_parameters() if p.grad is not None})
    ours.zero_grad()
    assert grads[0].keys() == grads[1].keys()
    assert max((grads[0][n] - grads[1][n]).abs().max().item() for n in grads[0]) <= 1e-5


def test_pooler_and_all_hidden_states(pair):
    hf, ours, tok = pair
    batch = tok([a for a, _ in PAIRS], padding=True, return_tensors="pt")
    with torch.no_grad():
        a = hf(**batch, output_hidden_states=True)
        b = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], output_hidden_states=True)
    assert len(b.hidden_states) == ours.config.num_hidden_layers + 1
    assert (a.pooler_output - b.pooler_output).abs().max() <= 1e-4
    mask = batch["attention_mask"].bool()
    for x, y in zip(a.hidden_states, b.hidden_states, strict=True):
        assert (x - y)[mask].abs().max() <= 1e-4


def test_cls_only_last_block_gives_the_same_pooled_output(pair):
    hf, ours, tok = pair
    batch = tok([a for a, _ in PAIRS], [b for _, b in PAIRS], padding=True, return_tensors="pt")
    args = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    with torch.no_grad():
        full, cls = ours(*args), ours(*args, cls_only=True)
        reference = hf(**batch).pooler_output
    assert cls.last_hidden_state.shape == (len(PAIRS), 1, ours.config.hidden_size)
    assert (cls.last_hidden_state[:, 0] - full.last_hidden_state[:, 0]).abs().max() <= 1e-5
    assert (cls.pooler_output - reference).abs().max() <= 1e-4


def test_state_dict_keys_match_hf(pair):
    hf, ours, _ = pair
    assert set(ours.state_dict()) == set(hf.state_dict()) - {"embeddings.position_ids"}


def test_export_loads_in_transformers(pair, tmp_path):
    _, ours, tok = pair
    ours.save_pretrained(tmp_path)
    reloaded = transformers.BertModel.from_pretrained(str(tmp_path)).eval()
    batch = tok(["Export round trip ."], return_tensors="pt")
    assert _max_diff((reloaded, ours, tok), batch) <= 1e-6


def test_pytorch_model_bin_and_bert_prefix(minilm_dir, tmp_path):
    state = {f"bert.{k}": v for k, v in load_file(str(minilm_dir / "model.safetensors")).items()}
    state["cls.predictions.bias"] = torch.zeros(30522)
    torch.save(state, tmp_path / "pytorch_model.bin")
    shutil.copy(minilm_dir / "config.json", tmp_path)
    enc = BertModel.from_pretrained(tmp_path)
    ref = BertModel.from_pretrained(minilm_dir)
    assert torch.equal(enc.embeddings.word_embeddings.weight, ref.embeddings.word_embeddings.weight)


def test_missing_files_are_named(minilm_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        BertModel.from_pretrained(tmp_path)
    shutil.copy(minilm_dir / "config.json", tmp_path)
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        BertModel.from_pretrained(tmp_path)


def test_shape_mismatch_and_unexpected_keys_are_named(minilm_dir, tmp_path):
    config = BertConfig.from_pretrained(minilm_dir).to_dict()
    config["intermediate_size"] = 1024
    import json

    (tmp_path / "config.json").write_text(json.dumps(config))
    shutil.copy(minilm_dir / "model.safetensors", tmp_path)
    with pytest.raises(
        ValueError, match=r"encoder.layer.0.intermediate.dense.weight \(1536, 384\) vs config \(1024, 384\)"
    ):
        BertModel.from_pretrained(tmp_path)
    shutil.copy(minilm_dir / "config.json", tmp_path)
    state = load_file(str(minilm_dir / "model.safetensors"))
    state["encoder.layer.0.adapter.weight"] = torch.zeros(2)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="unexpected keys.*encoder.layer.0.adapter.weight"):
        BertModel.from_pretrained(tmp_path)


def test_presets_and_features():
    config = BertConfig.preset("tiny", vocab_size=100)
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (2, 128, 2)
    assert BertConfig.preset("large").intermediate_size == 4096
    with pytest.raises(ValueError, match="preset='huge': expected one of tiny"):
        BertConfig.preset("huge")
    enc = BertModel(BertConfig.preset("mini", vocab_size=100)).eval()
    out = enc(torch.randint(0, 100, (2, 7)), output_hidden_states=True)
    assert token_features(out.hidden_states, "concat_last_four").shape == (2, 7, 4 * 256)
    assert torch.allclose(
        token_features(out.hidden_states, "sum_last_four"), torch.stack(out.hidden_states[-4:]).sum(0)
    )
    with pytest.raises(ValueError, match="how='mean'"):
        token_features(out.hidden_states, "mean")


def _families() -> list[str]:
    from bertkit.model.families import encoder_families

    return sorted(encoder_families())


@pytest.mark.parametrize("name", _families())
@pytest.mark.parametrize("whole", [True, False], ids=["whole", "without-optional"])
def test_a_pretrained_encoder_holds_the_files_weights_and_initialises_only_what_it_lacks(tmp_path, name, whole):
    from bertkit.model.families import encoder_families
    from bertkit.model.weights import pretrained_encoder

    family = encoder_families()[name]
    config = family.config_class.preset("tiny", vocab_size=64, pad_token_id=0)
    saved = family.encoder_class(config)
    state = {k: v for k, v in saved.state_dict().items() if whole or not k.startswith(saved.optional_weights)}
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "model.safetensors"))
    torch.manual_seed(3)
    encoder, heads = pretrained_encoder(lambda: family.encoder_class(config), tmp_path, family.hf_prefix)
    drawn = torch.randn(4)
    torch.manual_seed(3)
    reference = family.encoder_class(config)  # what an initialised build draws from the same generator
    assert heads == {} and encoder.state_dict().keys() == saved.state_dict().keys()
    for key, value in encoder.state_dict().items():
        assert torch.equal(value, state[key] if key in state else reference.state_dict()[key]), key
    if len(state) == len(saved.state_dict()):  # every weight read: nothing initialised, nothing drawn
        torch.manual_seed(3)
        assert torch.equal(drawn, torch.randn(4))


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(1, 64), min_size=1, max_size=3),  # up to 262,144 values
    std=st.floats(1e-3, 10.0),
    cutoff=st.floats(0.5, 4.0),
    transposed=st.booleans(),
)
def test_truncated_normal_fills_every_value_inside_the_cutoff(shape, std, cutoff, transposed):
    """BERT's initialisation (``truncated_normal_``): every value of any shape, contiguous or not,
    within ``cutoff`` std, none left as it was; nothing drawn while initialisation is skipped."""
    from bertkit.model.weights import initialisation_skipped, truncated_normal_

    base = torch.full(shape if len(shape) > 1 or not transposed else [*shape, 2], float("nan"))
    tensor = base.transpose(0, -1) if transposed else base  # a view: the values land in base
    assert truncated_normal_(tensor, std, cutoff) is tensor
    assert torch.isfinite(base).all() and (base.abs() <= cutoff * std).all()
    untouched = torch.full((3,), float("nan"))
    with initialisation_skipped():
        truncated_normal_(untouched, std, cutoff)
    assert torch.isnan(untouched).all()


def test_truncated_normal_has_the_truncated_distributions_spread():
    """At 2 std the truncated normal's standard deviation is 0.8796 std (mean 0): drawn again
    outside the cutoff, not clipped onto it (clipping would pile 4.6 % of the values at +-2 std)."""
    from bertkit.model.weights import truncated_normal_

    torch.manual_seed(0)
    values = truncated_normal_(torch.empty(400_000), 0.02)
    assert abs(values.mean().item()) < 1e-4 and values.std().item() == pytest.approx(0.8796 * 0.02, rel=5e-3)
    assert (values.abs() > 0.0399).float().mean() < 0.005
