"""``bertkit embed``: contextual features of every line of a text file, the feature-based use of
BERT (Devlin et al. 2019, §5.3 and Table 7: the last layer, the second-to-last, the sum or the
concatenation of the last four), per token or pooled per line."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from bertkit.model.bert import BertModel, token_features
from bertkit.model.tokenizer import BertTokenizer
from bertkit.utils.choices import Features, Pooling
from bertkit.utils.io import text_lines


@torch.inference_mode()
def embed_texts(
    encoder: BertModel,
    tokenizer: BertTokenizer,
    texts: list[str],
    max_length: int,
    features: Features = "last",
    pooling: Pooling = "mean",
    batch_size: int = 32,
) -> tuple[list[torch.Tensor], list[list[str]], int]:
    """Features of ``texts``, each encoded as ``[CLS] text [SEP]``. Texts are run longest first,
    ``batch_size`` at a time (little padding in a batch); the outputs keep the inputs' order.

    Args:
        max_length: tokens per line, specials included; longer lines are truncated and counted.
        features: which layers (``bertkit.token_features``).
        pooling: ``mean`` over the line's tokens, ``[CLS]`` included (sentence-transformers'
            mean pooling), ``cls`` (the ``[CLS]`` vector), or ``tokens`` (no pooling).

    Returns:
        (one (D,) tensor per text, or (T, D) with ``tokens``; the word pieces of each text; how
        many texts were truncated). D is the hidden size, 4x for ``concat_last_four``.
    """
    encoder.eval()
    full = tokenizer.encode_batch(texts)
    truncated = sum(len(e.input_ids) > max_length for e in full)
    encoded = tokenizer.encode_batch(texts, max_length=max_length) if truncated else full
    lengths = [len(e.input_ids) for e in encoded]
    longest_first = sorted(range(len(encoded)), key=lambda i: -lengths[i])
    vectors: list[torch.Tensor] = [torch.empty(0)] * len(encoded)
    for start in range(0, len(encoded), batch_size):
        rows = longest_first[start : start + batch_size]
        T = lengths[rows[0]]
        ids = torch.tensor([encoded[i].input_ids + [tokenizer.pad_token_id] * (T - lengths[i]) for i in rows])
        mask = torch.tensor([[1] * lengths[i] + [0] * (T - lengths[i]) for i in rows])
        out = encoder(ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids), output_hidden_states=True)
        x = token_features(out.hidden_states, features).float()  # (B, T, D)
        for i, row in zip(rows, x, strict=True):
            n = lengths[i]
            vectors[i] = row[:n] if pooling == "tokens" else row[0] if pooling == "cls" else row[:n].mean(0)
    to_token = tokenizer.backend.id_to_token
    return vectors, [[to_token(i) for i in e.input_ids] for e in encoded], truncated


PART_LINES = 4096
"""Lines embedded and written at a time: memory does not grow with the input file."""


def read_parts(path: str, size: int) -> Iterator[list[tuple[int, str]]]:
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
