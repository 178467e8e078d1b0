"""Documents -> sentence-pair training instances: google-research/bert ``create_pretraining_data.py``.

``create_instances`` is ``create_instances_from_document`` (Devlin et al. 2019, §3.1 and A.1):
fill a chunk of whole sentences up to a target length (``max_seq_length`` less the pair template's
special tokens: 3 for ``[CLS] A [SEP] B [SEP]``, 4 for RoBERTa's ``<s> A </s></s> B </s>``, or with
probability ``short_seq_prob`` a random shorter one, fixed per document as in Google's code);
segment A = a random number of its leading sentences; B = the rest (the real continuation) or,
for NSP with probability 0.5 and always for a one-sentence chunk, a span from a random *other*
document, the chunk's unused sentences being put back. ``truncate_seq_pair`` then trims the
longer side from a random end. For SOP (Lan et al. 2020, ALBERT) B is always the continuation
and A/B are swapped with probability 0.5; a one-sentence chunk is split at a random token
(ALBERT draws a random document there, which would mix NSP into SOP's labels).

Deliberate difference: Google retries 10 times to draw another document and can still reuse the
same one; here the negative document is drawn among the others only, so an NSP negative always
comes from another document.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from bertkit.api.task import Inputs, check_choice

Sentence = tuple[list[int], list[bool]]  # WordPiece ids, and whether each id starts a word
Document = list[Sentence]
SentenceTask = Literal["nsp", "sop", "none"]
PairTemplate = Callable[[list[int], list[int]], Inputs]
"""The tokenizer's pair template (``BertTokenizer.build_inputs``): ids of A and B -> the model input."""


@dataclass
class Instance:
    """One training sequence, A and B in the tokenizer's pair template (``[CLS] A [SEP] B [SEP]``),
    before masking.

    Attributes:
        input_ids: T ids, specials included.
        word_starts: T flags, True where a word begins (specials count as words).
        segment_a_length: tokens of token type 0 (``[CLS] A [SEP]``), which come first; 1 after.
        sentence_label: NSP: 1 = B is a random span from another document; SOP: 1 = A and B
            swapped; 0 otherwise (also without a sentence task).
    """

    input_ids: list[int]
    word_starts: list[bool]
    segment_a_length: int
    sentence_label: int


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_num_tokens: int, rng: random.Random) -> None:
    """Trim in place until ``len(a) + len(b) <= max_num_tokens``: one token at a time from the
    longer side (B on ties), from its front or back with equal probability (Google's
    ``truncate_seq_pair``, which adds randomness to avoid biases)."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()


def _tokens(sentences: list[Sentence]) -> list[tuple[int, bool]]:
    return [pair for ids, starts in sentences for pair in zip(ids, starts, strict=True)]


def _pack(a: list[tuple[int, bool]], b: list[tuple[int, bool]], template: PairTemplate, label: int) -> Instance:
    inputs = template([t for t, _ in a], [t for t, _ in b])
    # a segment cut at its front by truncation starts a word there; specials count as words
    starts = {0: iter([True] + [s for _, s in a[1:]]), 1: iter([True] + [s for _, s in b[1:]])}
    word_starts = [True if sequence is None else next(starts[sequence]) for sequence in inputs.sequence_ids]
    return Instance(inputs.input_ids, word_starts, inputs.token_type_ids.count(0), label)


def create_instances(
    documents: list[Document],
    index: int,
    max_seq_length: int,
    short_seq_prob: float,
    sentence_task: SentenceTask,
    rng: random.Random,
    template: PairTemplate,
) -> list[Instance]:
    """Instances from ``documents[index]``, each ``template(A, B)``; NSP negatives come from the
    other documents.

    Raises:
        ValueError: ``sentence_task`` is not nsp, sop or none; NSP with a single document.
    """
    check_choice("sentence_task", sentence_task, SentenceTask)
    if sentence_task == "nsp" and len(documents) < 2:
        raise ValueError("next-sentence prediction needs at least two documents (negatives come from another one)")
    document = documents[index]
    max_num_tokens = max_seq_length - len(template([], []).input_ids)
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    instances: list[Instance] = []
    chunk: list[Sentence] = []
    length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i][0])
        if i == len(document) - 1 or length >= target_seq_length:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a, label = _tokens(chunk[:a_end]), 0
            if sentence_task == "nsp" and (len(chunk) == 1 or rng.random() < 0.5):
                label = 1
                tokens_b = _random_span(documents, index, target_seq_length - len(tokens_a), rng)
                i -= len(chunk) - a_end  # put the unused sentences back
            elif len(chunk) == 1:  # SOP or MLM only: split the lone sentence
                tokens = _tokens(chunk)
                cut = rng.randint(1, len(tokens) - 1) if len(tokens) >= 2 else 1
                tokens_a, tokens_b = tokens[:cut], tokens[cut:]
            else:
                tokens_b = _tokens(chunk[a_end:])
            if sentence_task == "sop" and rng.random() < 0.5:
                tokens_a, tokens_b, label = tokens_b, tokens_a, 1
            truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
            if tokens_a and tokens_b:  # a one-token lone sentence cannot make a pair
                instances.append(_pack(tokens_a, tokens_b, template, label))
            chunk, length = [], 0
        i += 1
    return instances


def _random_span(documents: list[Document], index: int, target_length: int, rng: random.Random) -> list:
    """Sentences from a random start in a random other document, until ``target_length`` tokens."""
    other = rng.randint(0, len(documents) - 2)
    other += other >= index  # any document but ``index``
    document = documents[other]
    tokens: list[tuple[int, bool]] = []
    for j in range(rng.randint(0, len(document) - 1), len(document)):
        tokens += _tokens([document[j]])
        if len(tokens) >= target_length:
            break
    return tokens
