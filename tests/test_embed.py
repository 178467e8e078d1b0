"""``bertkit embed``: BERT's feature-based use (§5.3, Table 7) from the command line, checked
against transformers' hidden states of the same model."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
import torch
import transformers
from hypothesis import given
from hypothesis import strategies as st
from safetensors import safe_open

from bertkit.cli import main
from bertkit.model.pretrained import SENTENCE_CONFIG, declared_max_length

TEXTS = ["Peter Blackburn flew to Oslo.", "", "EU rejects German call to boycott British lamb ."]


@pytest.fixture(scope="module")
def reference(minilm_dir):
    model = transformers.BertModel.from_pretrained(str(minilm_dir), attn_implementation="eager").eval()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))
    with torch.no_grad():
        states = [
            model(**tokenizer(t, return_tensors="pt"), output_hidden_states=True).hidden_states for t in TEXTS if t
        ]
    return tokenizer, states


def test_pooled_features_to_safetensors(tmp_path, reference, capsys):
    _, states = reference
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
    assert (
        main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.safetensors"), "--features", "sum_last_four"]) == 0
    )
    assert "wrote 2 sum_last_four/mean features (384 dims)" in capsys.readouterr().out
    with safe_open(tmp_path / "out.safetensors", "pt") as f:
        features, meta = f.get_tensor("features"), f.metadata()
    assert meta["sources"].splitlines() == [f"{tmp_path / 'in.txt'}:1", f"{tmp_path / 'in.txt'}:3"]
    want = torch.stack([torch.stack(s[-4:]).sum(0)[0].mean(0) for s in states])
    torch.testing.assert_close(features, want, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_int8_features_stay_close_to_float32(tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
    got = {}
    for int8 in ("false", "true"):
        assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / f"{int8}.safetensors"), "--int8", int8]) == 0
        with safe_open(tmp_path / f"{int8}.safetensors", "pt") as f:
            got[int8], meta = f.get_tensor("features"), f.metadata()
        assert meta["int8"] == int8.title()
    similarity = torch.nn.functional.cosine_similarity(got["true"], got["false"])
    assert similarity.min() > 0.99 and not torch.equal(got["true"], got["false"])


def test_token_features_to_jsonl(tmp_path, reference):
    tokenizer, states = reference
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
    args = ["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.jsonl"), "--features", "concat_last_four"]
    assert main([*args, "--pooling", "tokens"]) == 0
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["text"] for r in records] == [t for t in TEXTS if t]
    for record, s in zip(records, states, strict=True):
        want = torch.cat(s[-4:], dim=-1)[0]  # (T, 4H)
        assert record["tokens"] == tokenizer.convert_ids_to_tokens(tokenizer(record["text"])["input_ids"])
        torch.testing.assert_close(torch.tensor(record["features"]), want, atol=1e-4, rtol=1e-4)


def test_long_lines_are_truncated_with_a_warning(tmp_path, caplog):
    (tmp_path / "in.txt").write_text("word " * 50 + "\nshort\n")
    assert (
        main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "o.jsonl"), "--max_length", "16", "--pooling", "cls"])
        == 0
    )
    assert "1 of 2 lines" in caplog.text and "truncated" in caplog.text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--pooling", "tokens"], "out.safetensors: --pooling tokens gives a matrix per line"),
        (["--features", "third"], "features"),
    ],
)
def test_bad_embed_options_are_one_line_errors(tmp_path, capsys, extra, message):
    (tmp_path / "in.txt").write_text("text\n")
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.safetensors"), *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("pooling", ["mean", "cls", "tokens"])
def test_batches_run_longest_first_and_outputs_keep_the_input_order(pooling):
    from bertkit_plugins.sequence_classification import SequenceClassification

    from bertkit.inference.embeddings import embed_texts
    from tests.test_export import tiny

    model = tiny(SequenceClassification(labels=["a", "b"]))
    texts = ["Oslo .", "EU rejects German call to boycott British lamb .", "Peter flew .", "A much longer line here ."]
    alone = [embed_texts(model.encoder, model.tokenizer, [t], 128, pooling=pooling)[0][0] for t in texts]
    vectors, tokens, _ = embed_texts(model.encoder, model.tokenizer, texts, 128, pooling=pooling, batch_size=2)
    assert [len(t) for t in tokens] == [len(model.tokenizer.encode_batch([t])[0].input_ids) for t in texts]
    for got, want in zip(vectors, alone, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_a_checkpoints_features_are_cut_at_the_length_its_run_read(sample_run, tmp_path, caplog):
    """``--checkpoint`` (a checkpoint or its export folder) without ``--max_length``: lines are
    cut at the checkpoint's own ``model.max_length`` (not a default of the command's); without a
    checkpoint, at the length the pretrained directory declares (all-MiniLM-L6-v2's 256, where
    sentence-transformers cuts it)."""
    stored = torch.load(sample_run / "runs/ner/checkpoints/last.ckpt", map_location="cpu", weights_only=False)
    stored["hyper_parameters"]["max_length"] = 24
    torch.save(stored, tmp_path / "short.ckpt")
    (tmp_path / "in.txt").write_text("word " * 300 + "\nshort\n")
    args = ["embed", str(tmp_path / "in.txt"), str(tmp_path / "o.safetensors")]
    assert main([*args, "--checkpoint", str(tmp_path / "short.ckpt")]) == 0
    assert "longer than 24 tokens" in caplog.text
    caplog.clear()
    assert main(["export", str(tmp_path / "short.ckpt"), str(tmp_path / "export"), "--onnx", "false"]) == 0
    assert main([*args, "--checkpoint", str(tmp_path / "export")]) == 0  # an export folder records it too
    assert "longer than 24 tokens" in caplog.text
    caplog.clear()
    assert main(args) == 0
    assert "longer than 256 tokens" in caplog.text


@given(
    value=st.one_of(
        st.integers(-3, 600),
        st.booleans(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=4),
        st.none(),
    )
)
def test_a_directorys_declared_length_is_a_positive_integer_or_an_error_naming_its_file(value):
    """``sentence_bert_config.json``'s ``max_seq_length``: a positive integer is the length; any
    other value (a bool, a float, a string, zero …) is an error naming the file and the key."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / SENTENCE_CONFIG
        path.write_text(json.dumps({"max_seq_length": value, "do_lower_case": False}))
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            assert declared_max_length(folder) == value
        else:
            with pytest.raises(ValueError, match=f"{re.escape(str(path))}: max_seq_length"):
                declared_max_length(folder)


def test_a_directory_without_a_declared_length_says_none_and_a_malformed_file_is_named(tmp_path):
    assert declared_max_length(tmp_path) is None  # no sentence-transformers settings
    (tmp_path / SENTENCE_CONFIG).write_text('{"do_lower_case": false}')
    assert declared_max_length(tmp_path) is None
    for text, message in (("[256]", "expected a JSON object"), ("{max_seq_length: 256", "")):
        (tmp_path / SENTENCE_CONFIG).write_text(text)
        with pytest.raises(ValueError, match=re.escape(str(tmp_path / SENTENCE_CONFIG)) + ".*" + message):
            declared_max_length(tmp_path)
