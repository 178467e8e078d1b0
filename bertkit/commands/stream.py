"""``bertkit stream``: a recipe's split file -> litdata chunks of its features, which a recipe then
streams (``bertkit.data.streaming``; the ``stream`` extra)."""

from __future__ import annotations

import logging
from typing import Literal

from jsonargparse.typing import PositiveInt

log = logging.getLogger(__name__)
Split = Literal["train", "validation", "test"]


def stream(
    recipe: str | None = None,
    output: str | None = None,
    split: Split = "train",
    file: str | None = None,
    part_size: PositiveInt = 4096,
    chunk_bytes: str = "64MB",
    workers: PositiveInt = 1,
) -> None:
    """Featurize a recipe's split file (JSONL, CoNLL, Parquet … whatever its task reads) into
    litdata chunks of features, for data sets whose features outgrow memory or the local disk.
    ``--data.train_file OUTPUT`` (or the folder's ``s3://…`` URL once copied there) then streams
    them: each process reads its own chunks, and a run resumes inside an epoch. The examples are
    read whole; features are made and written ``part_size`` examples at a time. The task's labels,
    learned from the training split, are stored with the chunks (``manifest.json``).

    Args:
        recipe: the recipe (required; ``--config RECIPE`` says the same, as for ``bertkit fit``).
        output: (required) the folder to write (replaced).
        split: the split whose file is written.
        file: the file instead of the recipe's ``data.{split}_file``.
        part_size: examples featurized at a time.
        chunk_bytes: the size of a chunk (litdata's ``chunk_bytes``).
        workers: processes that featurize and write.
    """
    from bertkit.api.app import require_litdata

    if recipe is None or output is None:
        raise ValueError("bertkit stream: give the recipe and the output folder: --config RECIPE --output DIR")
    require_litdata()
    from bertkit.api.app import compose

    composed = compose(recipe, overrides={f"data.{split}_file": file} if file else None)
    manifest = composed.datamodule.write_stream(split, output, part_size, chunk_bytes, workers)
    log.warning(
        "%s: %d examples -> %d features of %s in litdata chunks; train on them with --data.%s_file %s",
        output, manifest["examples"], manifest["features"], manifest["task"]["class_path"], split, output,
    )  # fmt: skip


stream.config_argument = "recipe"  # type: ignore[attr-defined]  # --config names the recipe, as for fit
