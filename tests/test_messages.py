"""Messages that point the right way: a file in UTF-16 without a byte-order mark names the
encoding (not "unacceptable character #x0000"), a command-line setting under release 0.1's
``model.head`` on a recipe that says ``model.task`` names the flag to pass (not "bertkit.Task is
abstract"). Members are generated; nothing trains."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.cli.guide import check_task_flags, load_yaml
from bertkit.utils.io import text_lines
from tests.conftest import RECIPE

TEXT = st.text(alphabet="abcdefghij klmnop:-\n0123", min_size=1, max_size=60).filter(lambda t: t.strip())


@settings(max_examples=40, deadline=None)
@given(text=TEXT, encoding=st.sampled_from(["utf-16-le", "utf-16-be"]), kind=st.sampled_from(["recipe", "data"]))
def test_a_file_in_utf16_without_a_bom_names_the_encoding(tmp_path_factory, text, encoding, kind):
    path = tmp_path_factory.mktemp("enc") / ("recipe.yaml" if kind == "recipe" else "train.txt")
    path.write_bytes(text.encode(encoding))
    with pytest.raises(ValueError, match=r"a NUL character .* looks like UTF-16 .* re-save it as UTF-8") as err:
        load_yaml(path) if kind == "recipe" else list(text_lines(path))
    assert str(path) in str(err.value)


@settings(max_examples=30, deadline=None)
@given(setting=st.from_regex(r"[a-z_]{1,12}", fullmatch=True), inside=st.booleans())
def test_an_old_task_flag_on_a_new_recipe_names_the_new_flag(setting, inside):
    flag = f"--model.head.init_args.{setting}" if inside else f"--model.head.{setting}"
    with pytest.raises(ValueError, match=rf"{flag}: the recipe names its task model.task .* pass --model.task\."):
        check_task_flags(["fit", "--config", str(RECIPE), f"{flag}=1"])
    check_task_flags(["fit", "--config", str(RECIPE), flag.replace("head", "task") + "=1"])  # the new name passes


RUNS = {"Thai": "ภาษาไทย", "Japanese kana": "タワーは", "Khmer": "ភាសាខ្មែរ", "Lao": "ພາສາລາວ"}


@settings(max_examples=30, deadline=None)
@given(
    spaced=st.lists(st.sampled_from(["Oslo", "東京", "flew", ",", "2024", "한국어"]), max_size=6),
    script=st.sampled_from(sorted(RUNS)) | st.none(),
)
def test_plain_text_in_a_script_without_spaces_warns_once_naming_it(spaced, script):
    import warnings

    from bertkit_plugins.token_tagging import TokenClassification, task

    line = " ".join([*spaced, *([RUNS[script]] if script else [])]) or "Oslo"
    task._warned_scripts.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reader = TokenClassification(["LOC"])
        sentences = reader.read_text_lines("inputs", [(1, line), (2, line)])
    said = [str(w.message) for w in caught if "written without spaces" in str(w.message)]
    assert len(said) == (1 if script else 0)  # once, though both lines hold the run
    if script:
        assert said[0].startswith(f"inputs:1: {RUNS[script][:12]!r}…: {script} is written without spaces")
        assert sentences[0].words[-1] == RUNS[script]  # read whole, as the warning says


@settings(max_examples=20, deadline=None)
@given(
    failure=st.sampled_from(["missing-dependency", "runtime", "absent"]),
    name=st.from_regex(r"bk_fake_[a-z]{3,8}", fullmatch=True),
)
def test_an_optional_import_names_the_module_that_really_failed(tmp_path_factory, failure, name):
    import sys

    from bertkit.utils.optional import require_module

    folder = tmp_path_factory.mktemp("site")
    body = {
        "missing-dependency": f"import {name}_dependency\n",
        "runtime": "raise RuntimeError('operator torchvision::nms does not exist')\n",
        "absent": None,
    }[failure]
    if body is not None:
        (folder / f"{name}.py").write_text(body, encoding="utf-8")
    sys.path.insert(0, str(folder))
    try:
        with pytest.raises(ImportError) as err:
            require_module(name, "streamed data", "pip install 'bertkit[stream]'")
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)
    said = str(err.value)
    if failure == "absent":
        assert said == f"streamed data needs {name}, which is not installed: pip install 'bertkit[stream]'"
    elif failure == "missing-dependency":
        assert f"{name}, which is installed, but the module '{name}_dependency' it imports is not" in said
    else:
        assert "installed but fails to import (RuntimeError: operator torchvision::nms" in said
        assert "pip uninstall -y torchvision" in said


@settings(max_examples=20, deadline=None)
@given(
    model=st.sampled_from([None, {}, {"max_length": None}, {"max_length": "64"}]),
    data=st.sampled_from([None, {}, {"max_length": None}, {"max_length": 64.0}]),
)
def test_a_checkpoint_that_records_no_max_length_is_refused_not_read_as_128(model, data):
    from bertkit.training.trained import stored_max_length

    stored = {
        key: value for key, value in (("hyper_parameters", model), ("datamodule_hyper_parameters", data)) if value
    }
    with pytest.raises(ValueError, match=r"run.ckpt: records no max_length"):
        stored_max_length(stored, "run.ckpt")
    assert stored_max_length({**stored, "datamodule_hyper_parameters": {"max_length": 64}}, "run.ckpt") == 64
    assert stored_max_length({**stored, "hyper_parameters": {"max_length": 40}}, "run.ckpt") == 40  # the model's
    both = {"hyper_parameters": {"max_length": 40}, "datamodule_hyper_parameters": {"max_length": 64}}
    assert stored_max_length(both, "run.ckpt") == 40
