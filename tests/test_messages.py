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
