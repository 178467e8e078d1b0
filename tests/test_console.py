"""What a run prints: Rich's bar names step-limited epochs without Lightning's negative total
(plain progress lines, the one-line summary and the absence of Lightning's noise are checked on a
real run in ``test_cli.test_print_config_reruns_unchanged``)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("max_epochs, says", [(-1, "Epoch 2"), (None, "Epoch 2"), (3, "Epoch 2/2")])
def test_rich_bar_names_the_epoch_without_a_negative_total(max_epochs, says) -> None:
    from types import SimpleNamespace

    from bertkit.progress import EpochRichProgressBar

    bar = EpochRichProgressBar()
    bar._trainer = SimpleNamespace(max_epochs=max_epochs)
    assert bar._get_train_description(2).strip() == says
