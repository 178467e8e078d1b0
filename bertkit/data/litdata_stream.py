"""litdata's ``StreamingDataset`` turning each stored item into a feature (imported only when
litdata is installed: ``bertkit.data.streaming.require_litdata``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from litdata import StreamingDataset
from litdata.streaming.resolver import Dir

from bertkit.data.streaming import digest, is_remote
from bertkit.tasks.task import Feature


class FeatureStream(StreamingDataset):
    """``StreamingDataset`` whose items pass through ``to_feature(item, epoch, seed)``: ``epoch``
    counts from 0 (litdata's ``current_epoch`` counts from 1) in training, None in evaluation;
    ``seed`` is the shuffling seed.

    Args:
        location: the chunks' folder or URL.
        to_feature: see ``StreamedFeatures``.
        training: pass the epoch to ``to_feature`` (else None).
        cache: the local cache of a URL's chunks.
        **kwargs: ``StreamingDataset``'s (``shuffle``, ``seed`` …).
    """

    def __init__(
        self,
        location: str | Path,
        to_feature: Callable[[dict[str, Any], int | None, int], Feature],
        training: bool,
        cache: Path,
        **kwargs: Any,
    ) -> None:
        where = Dir(path=str(cache / digest(location)), url=str(location)) if is_remote(location) else str(location)
        super().__init__(where, **kwargs)
        self.to_feature, self.training = to_feature, training

    def __getitem__(self, index: Any) -> Feature | list[Feature]:
        epoch = self.current_epoch - 1 if self.training else None
        if isinstance(index, slice):
            return [self.to_feature(item, epoch, self.seed) for item in super().__getitem__(index)]
        return self.to_feature(super().__getitem__(index), epoch, self.seed)
