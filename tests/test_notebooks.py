"""Every notebook in notebooks/ runs top to bottom without error or library noise."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.system]  # each notebook runs in a kernel

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


# Run first in the kernel of the notebooks named: every run the notebook composes trains on a share
# of each epoch (its own cells, and what they show, are unchanged). The quickstart keeps its whole
# epoch: on half of it, MiniLM tags none of the new sentences' names.
SHARE_OF_EPOCH = {"02_multitask.ipynb": 0.5}
FEWER_BATCHES = """
import bertkit

_compose = bertkit.compose


def _fewer_batches(*recipes, overrides=None):
    return _compose(*recipes, overrides={{**(overrides or {{}}), "trainer.limit_train_batches": {share}}})


bertkit.compose = _fewer_batches
"""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    if path.name in SHARE_OF_EPOCH:
        notebook.cells.insert(0, nbformat.v4.new_code_cell(FEWER_BATCHES.format(share=SHARE_OF_EPOCH[path.name])))
    work = tmp_path / "notebooks"
    work.mkdir()
    (tmp_path / "recipes").symlink_to(ROOT / "recipes")
    client = nbclient.NotebookClient(
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(work)}}
    )
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "(PER)" in text or "(ORG)" in text or "(LOC)" in text  # the model tagged something in new text
    noise = (
        "Tip:",
        "LightningCLI's args parameter",
        "FLOPs",
        "MissingIDFieldWarning",
        "TqdmWarning",
        "IProgress not found",
    )
    assert not [n for n in noise if n in text], text
