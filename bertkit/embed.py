"""``bertkit embed``: contextual features of every line of a text file, the feature-based use of
BERT (Devlin et al. 2019, §5.3 and Table 7: the last layer, the second-to-last, the sum or the
concatenation of the last four), per token or pooled per line."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import save_file

from bertkit.io import atomic_path, text_lines
from bertkit.model import BertEncoder, Features, token_features
from bertkit.tokenizer import BertTokenizer

log = logging.getLogger(__name__)

Pooling = Literal["mean", "cls", "tokens"]


@torch.no_grad()
def embed_texts(
    encoder: BertEncoder,
    tokenizer: BertTokenizer,
    texts: list[str],
    features: Features = "last",
    pooling: Pooling = "mean",
    max_length: int = 128,
    batch_size: int = 32,
) -> tuple[list[torch.Tensor], list[list[str]], int]:
    """Features of ``texts``, each encoded as ``[CLS] text [SEP]``.

    Args:
        features: which layers (``bertkit.token_features``).
        pooling: ``mean`` over the line's tokens, ``[CLS]`` included (sentence-transformers'
            mean pooling), ``cls`` (the ``[CLS]`` vector), or ``tokens`` (no pooling).
        max_length: tokens per line, specials included; longer lines are truncated and counted.

    Returns:
        (one (D,) tensor per text, or (T, D) with ``tokens``; the word pieces of each text; how
        many texts were truncated). D is the hidden size, 4x for ``concat_last_four``.
    """
    encoder.eval()
    full = tokenizer.encode_batch(texts)
    truncated = sum(len(e.input_ids) > max_length for e in full)
    encoded = tokenizer.encode_batch(texts, max_length=max_length) if truncated else full
    vectors: list[torch.Tensor] = []
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start : start + batch_size]
        T = max(len(e.input_ids) for e in chunk)
        ids = torch.tensor([e.input_ids + [tokenizer.pad_token_id] * (T - len(e.input_ids)) for e in chunk])
        mask = torch.tensor([[1] * len(e.input_ids) + [0] * (T - len(e.input_ids)) for e in chunk])
        out = encoder(ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids), output_hidden_states=True)
        x = token_features(out.hidden_states, features).float()  # (B, T, D)
        for row, n in zip(x, mask.sum(1).tolist()):
            vectors.append(row[:n] if pooling == "tokens" else row[0] if pooling == "cls" else row[:n].mean(0))
    to_token = tokenizer.backend.id_to_token
    return vectors, [[to_token(i) for i in e.input_ids] for e in encoded], truncated


def embed(
    input: str,
    output: str,
    pretrained: str = "all-MiniLM-L6-v2",
    checkpoint: str | None = None,
    features: Features = "last",
    pooling: Pooling = "mean",
    max_length: int = 128,
    batch_size: int = 32,
) -> None:
    """Write contextual features of each non-blank line of a UTF-8 text file (BERT §5.3).

    ``OUTPUT`` ending in ``.safetensors``: one tensor ``features`` (lines, D) (pooled only), with
    the settings and each row's ``file:line`` in its metadata; ``.jsonl``: one record per line with
    ``source`` (``file:line``), ``text`` and ``features`` (``tokens`` and a list of vectors with
    ``--pooling tokens``). Lines are read, embedded and (JSONL) written 4,096 at a time into
    ``OUTPUT.partial``, renamed to ``OUTPUT`` at the end: memory does not grow with the input,
    and an interrupted run keeps the lines it wrote.

    Args:
        input: the text file, one text per line (blank lines are skipped; sources keep numbers).
        output: ``.safetensors`` or ``.jsonl`` file to (over)write atomically.
        pretrained: a Hugging Face format directory or a registered model name.
        checkpoint: a ``bertkit fit`` checkpoint whose (fine-tuned) encoder to use instead.
        features: last, second_to_last, sum_last_four or concat_last_four (Table 7).
        pooling: mean, cls or tokens.
        max_length: tokens per line, specials included; longer lines are truncated (with a warning).
        batch_size: lines per forward pass.
    """
    from bertkit.encoders import family_of
    from bertkit.module import BertModule
    from bertkit.pretrained import resolve_pretrained

    target = Path(output)
    if target.suffix not in (".safetensors", ".jsonl"):
        raise ValueError(f"{output}: expected a .safetensors or .jsonl output file")
    if pooling == "tokens" and target.suffix == ".safetensors":
        raise ValueError(f"{output}: --pooling tokens gives a matrix per line; write it to a .jsonl file")
    if checkpoint is not None:
        model = BertModule.load_from_checkpoint(checkpoint, map_location="cpu")
        encoder, tokenizer = model.encoder, model.tokenizer
    else:
        directory = resolve_pretrained(pretrained)
        encoder, tokenizer = family_of(directory).from_pretrained(directory)
    count, truncated, dims, kept, sources = 0, 0, 0, [], []
    partial = target.with_name(target.name + ".partial")
    target.parent.mkdir(parents=True, exist_ok=True)
    with partial.open("w", encoding="utf-8") if target.suffix == ".jsonl" else nullcontext() as out:
        for part in _parts(input, PART_LINES):
            texts = [line for _, line in part]
            vectors, tokens, cut = embed_texts(encoder, tokenizer, texts, features, pooling, max_length, batch_size)
            count, truncated, dims = count + len(texts), truncated + cut, vectors[0].shape[-1]
            part_sources = [f"{input}:{number}" for number, _ in part]
            if out is None:  # safetensors: one matrix, written at the end
                kept += vectors
                sources += part_sources
                continue
            for source, text, words, vector in zip(part_sources, texts, tokens, vectors):
                record = {"source": source, "text": text}
                record |= (
                    {"tokens": words, "features": vector.tolist()}
                    if pooling == "tokens"
                    else {"features": vector.tolist()}
                )
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
    if not count:
        partial.unlink(missing_ok=True)
        raise ValueError(f"{input}: no text to embed (the file is empty or blank)")
    if truncated:
        log.warning(
            "%d of %d lines of %s were longer than %d tokens and truncated", truncated, count, input, max_length
        )
    if target.suffix == ".safetensors":
        settings = {"features": features, "pooling": pooling, "sources": "\n".join(sources)}
        with atomic_path(target) as tmp:
            save_file({"features": torch.stack(kept).contiguous()}, str(tmp), metadata=settings)
    else:
        os.replace(partial, target)
    print(f"wrote {count} {features}/{pooling} feature{'s' if count != 1 else ''} ({dims} dims) to {output}")


PART_LINES = 4096
"""Lines embedded and written at a time: memory does not grow with the input file."""


def _parts(path: str, size: int) -> Iterator[list[tuple[int, str]]]:
    """The non-blank ``(line number, line)`` pairs of ``path``, ``size`` at a time, as read."""
    part: list[tuple[int, str]] = []
    for number, line in text_lines(path):
        if line.strip():
            part.append((number, line))
        if len(part) == size:
            yield part
            part = []
    if part:
        yield part
