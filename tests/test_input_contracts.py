"""Input contracts by class, each with generated members (hypothesis) rather than one example:

- a value of another JSON type than a field declares is refused by every JSON reader and request
  decoder, never converted (``"false"`` as a flag, ``"12"`` as an offset, ``1`` as a text);
- JSON outside RFC 8259 (NaN, a key given twice, nesting too deep) is refused;
- degenerate values (blank spans, answers and labels, negative or all-zero class weights, sizes
  below one, a vocabulary larger than the embeddings, non-float weights) are refused;
- plain text is split into words by BERT's basic-tokenizer rules (each CJK ideograph a word);
- recipes expand no YAML alias and name the file of a recipe that is not UTF-8;
- outputs keep the mode of the file they replace, a folder is replaced whole, a full disk is
  one error naming the output;
- a storage URL's password never shows; a misspelt data-set split is not replaced by another.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import torch
from bertkit_plugins.question_answering.readers import read_qa
from bertkit_plugins.sequence_classification import SequenceClassification
from bertkit_plugins.token_tagging import SpanClassification, TokenClassification
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from bertkit.cli.guide import load_yaml
from bertkit.commands.serving import EmbedRequest, PredictRequest
from bertkit.data.hf_datasets import HFSplits
from bertkit.model.config import BertConfig
from bertkit.model.families import EncoderFamily
from bertkit.model.tokenizer import CJK, WEB_TOKEN, WEB_WORDS, split_words
from bertkit.model.weights import read_state_dict
from bertkit.utils.io import atomic_dir, atomic_path
from bertkit.utils.schema import parse, parse_json

TMP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

KINDS = {
    "null": st.none(),
    "boolean": st.booleans(),
    "integer": st.integers(-(10**6), 10**6),
    "number": st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not x.is_integer()),
    "string": st.text(max_size=8),
    "array": st.lists(st.integers(0, 3), max_size=3),
    "object": st.dictionaries(st.sampled_from("abc"), st.integers(0, 3), max_size=2),
}
"""A strategy per JSON type."""


def other_value(accepted: set[str]) -> st.SearchStrategy[Any]:
    """A JSON value of a type outside ``accepted``."""
    return st.sampled_from(sorted(set(KINDS) - accepted)).flatmap(lambda kind: KINDS[kind])


def replaced(record: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A deep copy of ``record`` with the value at ``path`` replaced."""
    record = json.loads(json.dumps(record))
    *parents, last = path
    inner = record
    for key in parents:
        inner = inner[key]
    inner[last] = value
    return record


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


QA_LINE = {"id": "q1", "question": "Where?", "context": "Ann met Bob.", "answers": [{"text": "Bob", "answer_start": 8}]}
QUESTION = {k: v for k, v in QA_LINE.items() if k != "context"}
SQUAD = {"data": [{"title": "t", "paragraphs": [{"context": "Ann met Bob.", "qas": [QUESTION]}]}]}
SPAN_LINE = {"tokens": ["Ann", "met", "Bob"], "entities": [{"start": 0, "end": 1, "type": "PER"}]}
TAG_LINE = {"tokens": ["Ann", "met", "Bob"], "ner_tags": ["B-PER", "O", "B-PER"]}
CLS_LINE = {"text": "a fine film", "label": "pos"}

# (reader name, file name, the valid record, field path, JSON types the field accepts)
FIELDS = [
    ("qa", "d.jsonl", QA_LINE, ("question",), {"string"}),
    ("qa", "d.jsonl", QA_LINE, ("context",), {"string"}),
    ("qa", "d.jsonl", QA_LINE, ("id",), {"string", "integer", "null"}),
    ("qa", "d.jsonl", QA_LINE, ("is_impossible",), {"boolean"}),
    ("qa", "d.jsonl", QA_LINE, ("answers", 0, "text"), {"string"}),
    ("qa", "d.jsonl", QA_LINE, ("answers", 0, "answer_start"), {"integer"}),
    ("qa", "d.jsonl", QA_LINE, ("answers",), {"array", "object", "null"}),
    ("qa", "d.json", SQUAD, ("data", 0, "paragraphs", 0, "context"), {"string"}),
    ("qa", "d.json", SQUAD, ("data", 0, "paragraphs", 0, "qas", 0, "is_impossible"), {"boolean"}),
    ("qa", "d.json", SQUAD, ("data", 0, "paragraphs", 0, "qas", 0, "answers", 0, "answer_start"), {"integer"}),
    ("qa", "d.json", SQUAD, ("data", 0, "paragraphs"), {"array"}),
    ("span", "d.jsonl", SPAN_LINE, ("tokens", 1), {"string"}),
    ("span", "d.jsonl", SPAN_LINE, ("entities", 0, "start"), {"integer"}),
    ("span", "d.jsonl", SPAN_LINE, ("entities", 0, "end"), {"integer"}),
    ("span", "d.jsonl", SPAN_LINE, ("entities", 0, "type"), {"string"}),
    ("tags", "d.jsonl", TAG_LINE, ("tokens", 0), {"string"}),
    ("tags", "d.jsonl", TAG_LINE, ("ner_tags", 2), {"string"}),
    ("tags", "d.jsonl", TAG_LINE, ("ner_tags",), {"array"}),
    ("classification", "d.jsonl", CLS_LINE, ("text",), {"string"}),
    ("classification", "d.jsonl", CLS_LINE, ("label",), {"string", "integer"}),
]


def read(reader: str, path: Path) -> list[Any]:
    if reader == "qa":
        return read_qa(path)
    if reader == "span":
        return SpanClassification(entity_types=["PER"], nested=True).read(path)
    if reader == "tags":
        return TokenClassification(entity_types=["PER"], tag_scheme="IOB2").read(path)
    return SequenceClassification(text_column="text").read(path)


def test_the_valid_records_are_read(tmp_path: Path) -> None:
    for reader, name, record, _, _ in FIELDS:
        path = tmp_path / name
        path.write_text(json.dumps(record) + ("\n" if name.endswith("jsonl") else ""), encoding="utf-8")
        assert len(read(reader, path)) == 1


@TMP
@given(data=st.data(), field=st.sampled_from(FIELDS))
def test_a_value_of_another_json_type_is_refused_naming_the_field(tmp_path: Path, data, field) -> None:
    reader, name, record, path, accepted = field
    value = data.draw(other_value(accepted), label="value")
    if path[-1] == "text" and reader == "qa" and isinstance(value, list):
        assume(False)  # datasets' answer layout {"text": [...]} is another accepted form, tested apart
    file = tmp_path / name
    file.write_text(json.dumps(replaced(record, path, value)) + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as err:
        read(reader, file)
    message = str(err.value)
    assert str(file) in message and str(path[-1]) in message, message


@TMP
@given(blank=st.text(alphabet=" \t\u00a0\u3000\u2003", max_size=4))
def test_blank_answers_spans_types_and_labels_are_refused(tmp_path: Path, blank) -> None:
    cases = [
        ("qa", "d.jsonl", replaced(QA_LINE, ("answers", 0, "text"), blank)),
        ("qa", "d.jsonl", replaced(QA_LINE, ("question",), blank)),
        ("span", "d.jsonl", replaced(SPAN_LINE, ("entities", 0, "type"), blank)),
        ("tags", "d.jsonl", replaced(TAG_LINE, ("ner_tags", 0), blank)),
        ("classification", "d.jsonl", replaced(CLS_LINE, ("label",), blank)),
    ]
    for reader, name, record in cases:
        with pytest.raises(ValueError, match="white space|empty"):
            read(reader, write_jsonl(tmp_path / name, [record]))


@TMP
@given(start=st.integers(0, 5), width=st.integers(-5, 0))
def test_an_empty_or_reversed_span_is_refused(tmp_path: Path, start, width) -> None:
    record = replaced(SPAN_LINE, ("entities", 0), {"start": start, "end": start + width, "type": "PER"})
    with pytest.raises(ValueError, match="start < end"):
        read("span", write_jsonl(tmp_path / "d.jsonl", [record]))


@TMP
@given(first=st.sampled_from([1, "1", ["a"], 2]), second=st.sampled_from([1, "1", ["a"], 2]))
def test_labels_of_one_file_have_one_json_type(tmp_path: Path, first, second) -> None:
    problem = "multi_label" if isinstance(first, list) or isinstance(second, list) else "single_label"
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "label": first}, {"text": "b", "label": second}])
    task = SequenceClassification(text_column="text", problem_type=problem)
    if type(first) is type(second):
        assert len(task.read(path)) == 2
    else:
        with pytest.raises(ValueError, match="one JSON type|expected"):
            task.read(path)


@settings(deadline=None)
@given(weights=st.lists(st.floats(-10, 10, allow_nan=False), min_size=2, max_size=4))
def test_class_weights_are_finite_not_negative_and_not_all_zero(weights) -> None:
    underflow = any(0 < abs(w) <= 2.0**-150 for w in weights)  # 0 in float32, in which the loss weighs
    if min(weights) < 0 or not any(weights) or underflow:
        with pytest.raises(ValueError, match="class_weights"):
            SequenceClassification(labels=[str(i) for i in range(len(weights))], class_weights=weights)
    else:
        SequenceClassification(labels=[str(i) for i in range(len(weights))], class_weights=weights)


@settings(deadline=None)
@given(text=st.text(alphabet="0123456789.eE+-_ natifyNAIF", min_size=1, max_size=8))
def test_a_regression_label_in_a_table_is_a_decimal_number(tmp_path_factory, text) -> None:
    path = tmp_path_factory.mktemp("t") / "d.tsv"
    path.write_text(f"sentence\tlabel\na\t{text}\n", encoding="utf-8")
    task = SequenceClassification(problem_type="regression")
    try:
        value = float(text)
        plain = math.isfinite(value) and set(text.strip()) <= set("0123456789.eE+-")  # no _, nan, inf
    except ValueError:
        plain = False
    if plain and text.strip():
        assert task.read(path)[0].label == value
    else:
        with pytest.raises(ValueError, match="label"):
            task.read(path)


# --- JSON itself ---


@settings(deadline=None)
@given(key=st.text(min_size=1, max_size=5), a=st.integers(), b=st.integers())
def test_a_key_given_twice_is_refused(key, a, b) -> None:
    with pytest.raises(ValueError, match="given twice"):
        parse_json(f"{{{json.dumps(key)}: {a}, {json.dumps(key)}: {b}}}", "x")


@settings(deadline=None)
@given(constant=st.sampled_from(["NaN", "Infinity", "-Infinity"]), depth=st.integers(0, 3))
def test_nan_and_infinity_are_not_json(constant, depth) -> None:
    with pytest.raises(ValueError, match="not a JSON number"):
        parse_json("[" * depth + constant + "]" * depth, "x")


@given(depth=st.integers(5_000, 200_000))
@settings(max_examples=5, deadline=None)
def test_json_nested_too_deep_is_an_error_not_a_crash(depth) -> None:
    with pytest.raises(ValueError, match="nested too deep"):
        parse_json("[" * depth + "]" * depth, "body")


@settings(deadline=None)
@given(surrogate=st.integers(0xD800, 0xDFFF), at=st.integers(0, 3))
def test_a_lone_surrogate_is_not_text_in_any_request(surrogate, at) -> None:
    text = "abc"[:at] + chr(surrogate) + "abc"[at:]
    for schema, body in (
        (PredictRequest, {"inputs": text}),
        (PredictRequest, {"inputs": ["ok", text]}),
        (EmbedRequest, {"inputs": [text]}),
    ):
        with pytest.raises(ValueError, match="surrogate"):
            parse(schema, body, "the request body")


@settings(deadline=None)
@given(value=other_value({"boolean"}))
def test_embed_normalize_is_a_boolean(value) -> None:
    with pytest.raises(ValueError, match="normalize: expected true or false"):
        parse(EmbedRequest, {"inputs": "a", "normalize": value}, "the request body")


@settings(deadline=None)
@given(
    inputs=st.one_of(
        KINDS["null"], KINDS["boolean"], KINDS["integer"], KINDS["number"], st.lists(KINDS["integer"], min_size=1)
    )
)
def test_predict_inputs_are_texts_or_records(inputs) -> None:
    with pytest.raises(ValueError, match="inputs"):
        parse(PredictRequest, {"inputs": inputs}, "the request body")


# --- model directories ---

CONFIG_FIELDS = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"]


@given(field=st.sampled_from(CONFIG_FIELDS), value=other_value({"integer"}))
@settings(max_examples=40, deadline=None)
def test_config_json_fields_keep_their_types(tmp_path_factory, field, value) -> None:
    folder = tmp_path_factory.mktemp("m")
    config = {**BertConfig(vocab_size=100, hidden_size=32, num_attention_heads=2).to_dict(), field: value}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match=f"config.json: {field}: expected an integer"):
        BertConfig.from_pretrained(folder)


@settings(deadline=None)
@given(field=st.sampled_from(CONFIG_FIELDS), value=st.integers(-3, 0))
def test_sizes_below_one_are_refused(field, value) -> None:
    with pytest.raises(ValueError, match=f"{field}={value}: expected an integer >= 1"):
        BertConfig(**{field: value})


def test_a_vocabulary_larger_than_the_embeddings_is_refused(tmp_path: Path, minilm_dir: Path) -> None:
    from bertkit.model.bert import BertModel
    from bertkit.model.weights import save_encoder

    save_encoder(BertModel(BertConfig(vocab_size=1000, hidden_size=32, num_attention_heads=2)), tmp_path)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (minilm_dir / name).is_file():
            (tmp_path / name).symlink_to(minilm_dir / name)
    with pytest.raises(ValueError, match="vocab_size 1000 is smaller than the tokenizer's 30522"):
        EncoderFamily.from_pretrained(tmp_path)


@given(dtype=st.sampled_from([torch.int64, torch.int32, torch.int8, torch.bool, torch.uint8]))
@settings(max_examples=5, deadline=None)
def test_weights_that_are_not_floats_are_refused(tmp_path_factory, dtype) -> None:
    from bertkit.model.bert import BertModel
    from bertkit.model.weights import pretrained_encoder

    folder = tmp_path_factory.mktemp("w")
    encoder = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2))
    state = {k: v.clone() for k, v in encoder.state_dict().items()}
    state["embeddings.word_embeddings.weight"] = state["embeddings.word_embeddings.weight"].to(dtype)
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match="not floating-point"):
        pretrained_encoder(lambda: encoder, folder)


def test_a_pickled_weights_file_is_an_error_naming_it(tmp_path: Path) -> None:
    torch.save({"weight": torch.zeros(2), "code": Path("x")}, tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pytorch_model.bin: cannot be read as weights"):
        read_state_dict(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x00" * 10)
    with pytest.raises(ValueError, match="cannot be read as weights"):
        read_state_dict(tmp_path)


# --- plain text ---

CJK_CHARS = st.sampled_from("北京东京大学中文字词語漢𠀀𪜀")


@settings(deadline=None)
@given(pieces=st.lists(st.one_of(st.text(alphabet="abcXYZ", min_size=1, max_size=5), CJK_CHARS), min_size=1, max_size=8),
       spaces=st.lists(st.sampled_from(["", " ", "\u3000"]), min_size=8, max_size=8))  # fmt: skip
def test_plain_text_words_follow_berts_basic_tokenizer(pieces, spaces) -> None:
    text = "".join(p + s for p, s in zip(pieces, spaces, strict=False))
    words = split_words(text)
    assert all(text[a:b] == w for w, (a, b) in words)  # offsets into the text
    import re

    cjk = re.compile(CJK)
    assert sum(len(w) for w, _ in words if cjk.search(w)) == sum(1 for w, _ in words if cjk.search(w))
    assert "".join(w for w, _ in words) == "".join(text.split())  # every character kept, spaces dropped


BERT_TEXT = st.text(
    alphabet="abXY09_ .,;:!?()[]-'\"/\\$%&*+<=>^`{|}~#@\u00ab\u00bb\u2014\u201c\u00bf\u20ac\u00e9\u3000", max_size=40
)
WEB_TOKENS = st.one_of(
    st.builds(
        "{}{}.{}/{}".format,
        st.sampled_from(["http://", "https://", "www.", "HTTPS://www."]),
        st.from_regex(r"[a-z0-9]{1,8}(\.[a-z0-9-]{1,6}){0,2}", fullmatch=True),
        st.sampled_from(["com", "co.uk", "lu"]),
        st.from_regex(r"([a-z0-9_]{1,6}[/?=&.-]){0,4}[a-z0-9]{1,4}", fullmatch=True),
    ),
    st.from_regex(r"[a-z0-9][a-z0-9.+-]{0,8}@[a-z0-9]{1,8}(\.[a-z]{2,4}){1,2}", fullmatch=True),
    st.from_regex(r"[#@][A-Za-z0-9_]{1,10}", fullmatch=True),
)


@settings(deadline=None)
@given(text=BERT_TEXT)
def test_text_words_are_berts_outside_web_tokens(text) -> None:
    """``WEB_WORDS`` splits as BERT's pre-tokenizer does, except that what ``WEB_TOKEN`` matches
    is one word made of exactly BERT's pieces there."""
    import re

    from tokenizers.pre_tokenizers import BertPreTokenizer

    ours, berts = WEB_WORDS.pre_tokenize_str(text), BertPreTokenizer().pre_tokenize_str(text)
    web = [(a, b) for w, (a, b) in ours if re.fullmatch(WEB_TOKEN, w)]
    inside = [(w, (a, b)) for w, (a, b) in berts if any(s <= a and b <= e for s, e in web)]
    assert [p for p in ours if p[1] not in web] == [p for p in berts if p not in inside]
    for s, e in web:
        assert "".join(w for w, (a, b) in inside if s <= a and b <= e) == text[s:e]


@settings(deadline=None)
@given(parts=st.lists(st.tuples(WEB_TOKENS, BERT_TEXT, st.sampled_from(["", "(", "\""]),
                                st.sampled_from(["", ")", ".", ",", "!", "\"", "),"])), min_size=1, max_size=4))  # fmt: skip
def test_a_url_email_hashtag_or_mention_in_text_is_one_word(parts) -> None:
    """Between spaces, with punctuation around it, each URL, e-mail address, hashtag and
    @-mention is one word of plain text (what a tagger tags, and what a gold corpus gives)."""
    text, spans = "", []
    for token, between, before, after in parts:
        text += f"{between} {before}"
        spans.append((len(text), len(text) + len(token)))
        text += f"{token}{after} "
    words = split_words(text)
    assert all(text[a:b] == w for w, (a, b) in words)
    for a, b in spans:
        assert (text[a:b], (a, b)) in words, (text, text[a:b])


def test_an_entity_inside_a_run_of_cjk_characters_can_be_tagged() -> None:
    (sentence,) = TokenClassification(entity_types=["LOC"]).read_text_lines(Path("t"), [(1, "我在北京工作。")])
    assert sentence.words == ["我", "在", "北", "京", "工", "作", "。"]
    assert sentence.offsets[2:4] == [(2, 3), (3, 4)]


# --- recipes ---


@given(name=st.text(alphabet="abcxyz", min_size=1, max_size=5), depth=st.integers(1, 4))
@settings(max_examples=30, deadline=None)
def test_a_recipe_with_an_alias_is_refused_before_it_expands(tmp_path_factory, name, depth) -> None:
    lines = [f"a0: &{name}0 [1, 2, 3]"]
    for level in range(1, depth + 1):
        lines.append(f"a{level}: &{name}{level} [" + ", ".join([f"*{name}{level - 1}"] * 9) + "]")
    path = tmp_path_factory.mktemp("r") / "r.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"r.yaml:2: not valid YAML \(an alias \(\*{name}0\)"):
        load_yaml(path)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "latin-1"])
def test_a_recipe_that_is_not_utf8_names_its_file(tmp_path: Path, encoding) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("model:\n  learning_rate: 1.0e-4  # é\n", encoding=encoding)
    with pytest.raises(ValueError, match=r"r.yaml: not UTF-8 text"):
        load_yaml(path)


# --- outputs ---


@given(mode=st.sampled_from([0o600, 0o640, 0o644, 0o660, 0o400]))
@settings(max_examples=10, deadline=None)
def test_a_replaced_output_keeps_its_mode(tmp_path_factory, mode) -> None:
    target = tmp_path_factory.mktemp("o") / "predictions.jsonl"
    target.write_text("old\n")
    target.chmod(mode)
    with atomic_path(target) as tmp:
        tmp.write_text("new\n")
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == mode


def test_a_folder_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    export = tmp_path / "export"
    export.mkdir()
    (export / "config.json").write_text("{}")
    (export / "model.onnx").write_text("an older model")
    with atomic_dir(export) as folder:
        (folder / "config.json").write_text('{"new": 1}')
    assert sorted(p.name for p in export.iterdir()) == ["config.json"]  # no model.onnx of another model
    with pytest.raises(RuntimeError), atomic_dir(export) as folder:
        (folder / "config.json").write_text("half")
        raise RuntimeError("interrupted")
    assert (export / "config.json").read_text() == '{"new": 1}'
    assert [p.name for p in tmp_path.iterdir()] == ["export"]  # nothing left beside it
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match="not a model folder"), atomic_dir(tmp_path / "mine"):
        pass
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


@pytest.mark.parametrize(
    "failure", [OSError(28, "No space left on device"), RuntimeError("[enforce fail] file write failed")]
)
def test_a_full_disk_is_one_error_naming_the_output(tmp_path: Path, failure) -> None:
    target = tmp_path / "last.ckpt"
    target.write_text("the previous checkpoint")
    with pytest.raises(OSError, match="last.ckpt: not written") as err, atomic_path(target):
        raise failure
    assert err.value.errno == 28 and target.read_text() == "the previous checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


# --- settings ---


@settings(deadline=None)
@given(password=st.text(alphabet="abcdefXYZ0123456789", min_size=4, max_size=12))
def test_a_storage_password_never_shows(password) -> None:
    from bertkit.commands.tuning import masked, shown

    url = f"postgresql://user:{password}@db.example:5432/studies"
    assert password not in shown(url) and "***" in shown(url)
    assert password not in masked(ValueError(f"could not connect to {url} ({password})"), url)
    words = f"Failed to import x{password}y from {url}"  # the letters inside a word stay: masking them shows them
    assert masked(ValueError(words), url) == f"Failed to import x{password}y from {shown(url)}"


@settings(deadline=None)
@given(name=st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12))
def test_a_misspelt_split_is_never_replaced_by_another(name) -> None:
    splits = HFSplits("some/dataset", {s: Path(f"/cache/{s}.jsonl") for s in ("train", "validation", "test")})
    if name in splits.files:
        assert splits.path("validation", name, "data") == splits.files[name]
    else:
        with pytest.raises(FileNotFoundError, match=f"has no split {name!r}"):
            splits.path("validation", name, "data")
    assert splits.path("validation", "eng.testa", "data") == splits.files["validation"]  # a recipe's file name


def test_an_unreadable_checkpoint_is_passed_over_when_best_is_looked_for(tmp_path: Path) -> None:
    from bertkit.training.checkpoints import recorded_best

    class Folder:
        dirpath = str(tmp_path)

    torch.save({"x": Path("y")}, tmp_path / "pickled.ckpt")
    assert recorded_best(Folder()) is None


def test_the_api_key_file_and_environment(tmp_path: Path, monkeypatch) -> None:
    from bertkit.commands.serve import _api_key

    (tmp_path / "key").write_text("s3cret\n")
    assert _api_key(None, str(tmp_path / "key")) == "s3cret"
    monkeypatch.setenv("BERTKIT_API_KEY", "from-env")
    assert _api_key(None, None) == "from-env"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="first line is empty"):
        _api_key(None, str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="give one"):
        _api_key("a", str(tmp_path / "key"))
    assert os.environ["BERTKIT_API_KEY"] == "from-env"
