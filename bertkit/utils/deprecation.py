"""bertkit's one deprecation policy. A name, path or setting of an earlier release keeps working
for one more release and warns with ``BertkitDeprecationWarning``, whose message says what to use
instead and the release that removes it (``REMOVED_IN``). pytest's model (``_pytest/deprecated.py``,
``PytestRemovedIn9Warning``): one warning class per removal release, so a user can turn exactly
those into errors before upgrading (``warnings.filterwarnings("error", category=...)``, or
pytest's ``filterwarnings = error::bertkit.utils.deprecation.BertkitRemovedIn03Warning``; Python's
own ``-W`` takes only built-in classes: ``-W error::FutureWarning``), and bertkit's own suite does
(``pyproject.toml``), except in the tests that check them.

The class is a ``FutureWarning``, which Python shows by default: ``DeprecationWarning`` is hidden
outside ``__main__``, so a user running ``bertkit fit`` on an old recipe would never see it.

Every release-0.1 compatibility path calls ``warn_deprecated``:

- module paths (``bertkit.heads`` …) and renamed names: ``bertkit.utils.moved``;
- task classes under their old names (``TokenTaggingHead`` …): ``bertkit.tasks.task.deprecated_alias``;
- ``bertkit.Head`` subclasses: ``bertkit.tasks.legacy``; ``bertkit.<Task>`` and ``bertkit.BertEncoder``:
  ``bertkit/__init__.py``;
- a recipe's ``model.head``: ``bertkit.training.module``;
- a recipe's ``data.max_length`` (the model's ``model.max_length`` now): ``bertkit.cli.lightning``
  and ``BertDataModule``; its ``data.task_temperature`` (the multi-task task's ``temperature``):
  ``BertDataModule``;
- ``EncoderOutput.packed`` and ``BertModel._init_weights``: ``bertkit.model.bert``;
- the ``register_heads`` hook: ``bertkit.hookspecs``.

What an earlier release *wrote* (a checkpoint's or an export's stored class names and settings)
keeps loading, without a warning (``stored``): the user cannot edit it, and the next save stores
the current names.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

REMOVED_IN = "0.3"
"""The release that removes release 0.1's names, paths and settings."""


class BertkitDeprecationWarning(FutureWarning):
    """An earlier release's name, path or setting, still accepted: the message says what to use."""


class BertkitRemovedIn03Warning(BertkitDeprecationWarning):
    """Removed in bertkit 0.3 (``REMOVED_IN``): release 0.1's names, paths and settings."""


def deprecation(message: str) -> BertkitRemovedIn03Warning:
    """The warning for ``message`` (what is deprecated and what to use), with the removal release."""
    return BertkitRemovedIn03Warning(f"{message} (deprecated since 0.2; removed in {REMOVED_IN})")


def warn_deprecated(message: str, stacklevel: int = 2) -> None:
    """Warn that what ``message`` names is deprecated (``deprecation``), at the caller's caller
    (``stacklevel`` as ``warnings.warn``'s, counted from the function that calls this one)."""
    warnings.warn(deprecation(message), stacklevel=stacklevel + 1)


@contextmanager
def stored() -> Iterator[None]:
    """Read what an earlier release wrote (a checkpoint's task spec) without deprecation warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BertkitDeprecationWarning)
        yield
