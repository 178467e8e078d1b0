"""The teacher's targets computed once (``model.teacher.cache``): before the first training step,
the teacher runs over every training feature once, and each feature's distillation targets
(``Head.distillation_targets``' logits, every row of them at the feature's own length) are
kept, keyed by what the teacher reads of it (its ``input_ids`` and ``token_type_ids``). Each
training step then looks them up instead of running the teacher, whatever order and padding the
batches come in, and the student's rows pick the ones that count (the same ids may be scored
at other tokens: "1-0" is one word and "1 - 0" three, with the same word pieces). The targets are written to ``$BERTKIT_CACHE/teacher`` (safetensors), named by
the teacher's files and the features: a later run of the same teacher on the same data (another
seed, alpha, temperature or student) reads them instead.

The pass runs features of one length together (no padding), so a feature's targets do not
depend on the batch it happened to be in. Its rows and classes are placed first in the batch's
(padded) row of the target: positions past the feature's length (a token's rows; question
answering's classes, which run over the positions) hold the lowest value, as
``Head.distillation_targets`` requires of padding.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from bertkit.data.samples import cache_dir
from bertkit.tasks.head import DistillationTarget
from bertkit.tasks.task import Batch, Feature
from bertkit.utils.io import atomic_path

if TYPE_CHECKING:
    from bertkit.training.module import BertModule

PASS_BATCH = 64
"""Features of one length run together in the teacher's pass."""


def feature_key(
    input_ids: Sequence[int] | torch.Tensor,
    token_type_ids: Sequence[int] | torch.Tensor | None,
    word_index: Sequence[int] | torch.Tensor | None = None,
) -> bytes:
    """16 bytes naming what the teacher reads of a feature: its ids and segment ids (no padding),
    and its words (``word_index``) where it has them: a CRF's targets depend on which sub-words
    start a word ("1-0" is one word and "1 - 0" three, with the same ids)."""
    digest = hashlib.blake2b(np.asarray(input_ids, dtype=np.int64).tobytes(), digest_size=16)
    for part in (token_type_ids, word_index):
        if part is not None:
            digest.update(b"|" + np.asarray(part, dtype=np.int64).tobytes())
    return digest.digest()


def feature_keys(features: Sequence[Feature]) -> list[bytes]:
    """The ``feature_key`` of each of ``features``."""
    return [feature_key(f["input_ids"], f.get("token_type_ids"), f.get("word_index")) for f in features]


class TeacherTargets:
    """Every training feature's distillation targets, by ``feature_key``.

    Args:
        keys: (F, 16) uint8, one row per feature.
        values: target name -> the features' rows, flattened and concatenated (float32).
        shapes: target name -> (F, 2) int64, each feature's (rows, classes).
    """

    def __init__(self, keys: torch.Tensor, values: dict[str, torch.Tensor], shapes: dict[str, torch.Tensor]) -> None:
        self.keys, self.values, self.shapes = keys, values, shapes
        self.index = {bytes(row.tolist()): i for i, row in enumerate(keys)}
        self.offsets = {name: _starts(s[:, 0] * s[:, 1]) for name, s in shapes.items()}

    def __len__(self) -> int:
        return len(self.index)

    @classmethod
    @torch.no_grad()
    def compute(
        cls,
        teacher: BertModule,
        features: Sequence[Feature],
        collate: Callable[[list[Feature]], Batch],
        keys: Sequence[bytes] | None = None,
    ) -> TeacherTargets:
        """Run ``teacher`` (evaluation mode) over ``features``, those of one length together
        (``keys``: their ``feature_key``s, when already computed).

        Raises:
            ValueError: the teacher's head names no targets.
        """
        if keys is None:
            keys = feature_keys(features)
        by_length: dict[int, list[int]] = defaultdict(list)
        for i, feature in enumerate(features):
            by_length[len(feature["input_ids"])].append(i)
        stored: dict[bytes, int] = {}
        rows: dict[str, list[torch.Tensor]] = defaultdict(list)
        for length in sorted(by_length):
            chosen = by_length[length]
            for start in range(0, len(chosen), PASS_BATCH):
                rows_of = chosen[start : start + PASS_BATCH]
                part = [features[i] for i in rows_of]
                batch = {
                    k: v.to(teacher.device) if isinstance(v, torch.Tensor) else v for k, v in collate(part).items()
                }
                targets = teacher.head.distillation_targets(teacher(batch), batch)
                if not targets:
                    raise ValueError(
                        f"model.teacher.cache: {type(teacher.head).__name__} names no distillation_targets"
                    )
                for j, i in enumerate(rows_of):
                    if keys[i] in stored:
                        continue
                    stored[keys[i]] = len(stored)
                    for name, (logits, _) in targets.items():
                        rows[name].append(logits[j].reshape(-1, logits.shape[-1]).float().cpu())
        names = sorted(rows)
        return cls(
            torch.tensor(np.frombuffer(b"".join(stored), dtype=np.uint8).reshape(-1, 16).copy()),
            {name: torch.cat([r.reshape(-1) for r in rows[name]]) for name in names},
            {name: torch.tensor([list(r.shape) for r in rows[name]], dtype=torch.int64) for name in names},
        )

    def targets(self, mine: dict[str, DistillationTarget], batch: Batch) -> dict[str, DistillationTarget]:
        """The teacher's targets for a training batch, shaped as the student's ``mine``
        (``Head.distillation_targets``; its rows say which count), from the stored rows of each
        of its features.

        Raises:
            ValueError: a feature the teacher's pass did not see (the training data changed), or
                stored targets larger than the batch's.
        """
        ids, mask = batch["input_ids"].cpu(), batch["attention_mask"].cpu()
        types, words = (batch[k].cpu() if k in batch else None for k in ("token_type_ids", "word_index"))
        found = []
        for b, n in enumerate(mask.sum(1).tolist()):
            i = self.index.get(
                feature_key(ids[b, :n], *(None if part is None else part[b, :n] for part in (types, words)))
            )
            if i is None:
                raise ValueError(
                    f"model.teacher.cache: training row {b} of a batch is no feature the teacher's pass saw: the "
                    "training data changed after the pass; run again to compute the targets anew"
                )
            found.append(i)
        out = {}
        for name, (logits, rows) in mine.items():
            theirs = torch.full(logits.shape, torch.finfo(torch.float32).min)
            for b, i in enumerate(found):
                k, classes = self.shapes[name][i].tolist()
                place = theirs[b].reshape(-1, logits.shape[-1])
                if k > place.shape[0] or classes > place.shape[1]:
                    raise ValueError(
                        f"model.teacher.cache: {name} of training row {b}: stored {k} x {classes}, larger than the "
                        f"batch's {place.shape[0]} x {place.shape[1]}"
                    )
                start = int(self.offsets[name][i])
                place[:k, :classes] = self.values[name][start : start + k * classes].view(k, classes)
            out[name] = (theirs.to(logits.device, non_blocking=True), rows)
        return out

    def save(self, path: Path) -> None:
        """Write the targets to ``path`` (safetensors), atomically."""
        from safetensors.torch import save_file

        tensors = {"keys": self.keys}
        for name in self.values:
            tensors[f"values.{name}"], tensors[f"shapes.{name}"] = self.values[name], self.shapes[name]
        with atomic_path(path) as tmp:
            save_file(tensors, str(tmp))

    @classmethod
    def load(cls, path: Path) -> TeacherTargets:
        from safetensors.torch import load_file

        tensors = load_file(str(path))
        names = [k.partition(".")[2] for k in tensors if k.startswith("values.")]
        return cls(
            tensors["keys"], {n: tensors[f"values.{n}"] for n in names}, {n: tensors[f"shapes.{n}"] for n in names}
        )


def cached_targets(
    teacher: BertModule, teacher_path: str, features: Sequence[Feature], collate: Callable[[list[Feature]], Batch]
) -> tuple[TeacherTargets, Path, bool]:
    """The teacher's targets for ``features``: read from ``$BERTKIT_CACHE/teacher`` when a run of
    the same teacher files on the same features wrote them, else computed and written there.
    Returns (targets, file, whether it was read)."""
    keys = feature_keys(features)
    digest = hashlib.sha256(_files_identity(Path(teacher_path)))
    for key in keys:
        digest.update(key)
    path = cache_dir() / "teacher" / f"{digest.hexdigest()[:24]}.safetensors"
    if path.is_file():
        return TeacherTargets.load(path), path, True
    targets = TeacherTargets.compute(teacher, features, collate, keys)
    targets.save(path)
    return targets, path, False


def _files_identity(path: Path) -> bytes:
    """The resolved path, size and modification time of a checkpoint, or of every file of an
    export folder: a rewritten teacher is another teacher."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return "\n".join(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files).encode()


def _starts(sizes: torch.Tensor) -> torch.Tensor:
    """Where each of consecutive blocks of ``sizes`` starts."""
    return torch.cumsum(sizes, 0) - sizes
