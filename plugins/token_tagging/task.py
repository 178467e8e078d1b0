"""``TokenClassification``: a tag per word, for NER (Devlin et al. 2019, §5.3).

Each word is labelled on its first sub-word token (the paper's choice; ``label_all_subwords``
labels the rest with the word's tag, B- turned into I-, as Hugging Face ``run_ner.py``). Long
sentences become overlapping word-aligned windows; predictions are re-joined at word level. The
head (``TokenClassificationHead``) is a linear tagger on every token, optionally with a CRF.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from bertkit_plugins.token_tagging.conll import Sentence, TagScheme, entities, read_tagged
from bertkit_plugins.token_tagging.windows import Window, make_windows, owners

from bertkit.api.task import (
    BertConfig,
    BertTokenizer,
    Feature,
    Head,
    Task,
    by_example,
    check_choice,
    check_float32,
    deprecated_alias,
    split_words,
    unspaced_script,
)

SAMPLE_DIR = Path(__file__).parent / "sample"
SAMPLE_FILES = {split: SAMPLE_DIR / f"{split}.conll" for split in ("train", "validation", "test")}


_warned_scripts: set[str] = set()


def _warn_unspaced(pieces: list[tuple[str, tuple[int, int]]], source: str) -> None:
    for word, _ in pieces:
        script = unspaced_script(word)
        if script is not None and script not in _warned_scripts:
            _warned_scripts.add(script)
            warnings.warn(
                f"{source}: {word[:12]!r}…: {script} is written without spaces between words, and plain text is "
                "split at spaces and punctuation (BERT's rules), so each run is read and tagged as one word; for a "
                "tag per word, give the words pre-split (JSON Lines tokens)",
                UserWarning,
                stacklevel=2,
            )


EmissionTarget = Literal["labels", "crf", "viterbi"]
"""What the emissions' own cross-entropy learns beside a CRF: the gold tags, the CRF's posterior
or its Viterbi path."""


class TokenClassification(Task):
    """Token classification (NER): a tag per word, in IOB2 inside.

    Args:
        entity_types: entity types, e.g. ``[PER, LOC, ORG, MISC]``; tags are O, B-X, I-X. A tag
            of another type in any file is an error naming the file and line.
        tag_scheme: scheme of the input files: IOB1 (CoNLL-2003), IOB2 or BIOES.
        tag_column: column of the tag in CoNLL files (-1 = last).
        tokens_field: the token list's field in JSON Lines files (``.jsonl``; Hugging Face's name).
        tags_field: the tag list's field in JSON Lines files (tags as strings in ``tag_scheme``).
        label_all_subwords: also train on non-first sub-words (predictions always use the first).
        stride: tokens of overlap between windows of a sentence longer than ``max_length``.
        classifier_dropout: dropout before the linear tagger.
        crf: decode with a linear-chain CRF over the words' first sub-words (``crf.CRF``: IOB2
            moves only, Viterbi) and train it on their negative log-likelihood, per word, instead
            of each token's cross-entropy (``TokenClassificationHead``).
        crf_learning_rate: the CRF's learning rate (its scores start at 0 and would hardly move at
            an encoder's); warm-up and decay apply as to the rest.
        emission_loss_weight: with ``crf``, also train the emissions (the logits an export gives
            ``transformers``) as a tagger of their own: this weight times their cross-entropy at
            the words' first sub-words is added to the CRF's loss, so that the argmax of the
            logits (``transformers``' token-classification pipeline) finds the entities the CRF's
            Viterbi path finds. 0: the CRF's loss alone.
        emission_target: that cross-entropy's target: ``labels`` (the gold tags), ``crf`` (the
            CRF's own posterior of each word's tag) or ``viterbi`` (its Viterbi path), held
            constant: the emissions also learn what the transitions decide
            (``benchmarks/crf_export.py`` measures each).
        crf_trains_encoder: whether the CRF's loss trains the emissions and the encoder under
            them. False: it trains the CRF's transition, start and end scores alone, and the
            emissions learn from their own cross-entropy (``emission_loss_weight``, which must
            then be > 0) as a softmax tagger does: the logits' arg-max (``transformers``' plain
            pipeline) is then that tagger's, and the CRF's Viterbi path adds only what the
            transitions decide (the forbidden IOB2 moves, an entity's type kept across its words).
        context: document context (FLERT, Schweter & Akbik 2020): up to this many sub-word tokens
            of the text before and after each window, from the same sentence and its neighbours
            in the same document, are encoded with it (as room in ``max_length`` allows, the
            window's own tokens first); labels, scores and predictions stay on the window's own
            words. 0: none. FLERT uses 64.
    """

    data_settings = ("tag_scheme", "tag_column", "tokens_field", "tags_field")
    token_keys = frozenset({"labels", "word_index"})
    windowed = True  # a sentence longer than max_length is read in windows of stride overlap

    def __init__(
        self,
        entity_types: list[str],
        tag_scheme: TagScheme = "IOB1",
        tag_column: int = -1,
        tokens_field: str = "tokens",
        tags_field: str = "ner_tags",
        label_all_subwords: bool = False,
        stride: int = 32,
        classifier_dropout: float = 0.1,
        crf: bool = False,
        crf_learning_rate: float = 1e-3,
        emission_loss_weight: float = 0.0,
        emission_target: EmissionTarget = "labels",
        crf_trains_encoder: bool = True,
        context: int = 0,
    ) -> None:
        super().__init__()
        check_choice("model.task.tag_scheme", tag_scheme, TagScheme)
        if context < 0:
            raise ValueError(f"model.task.context={context}: expected a number of tokens >= 0")
        check_float32(emission_loss_weight, "model.task.emission_loss_weight", low=0.0)
        check_float32(crf_learning_rate, "model.task.crf_learning_rate", low=0.0, low_open=True)
        check_float32(classifier_dropout, "model.task.classifier_dropout", low=0.0, high=1.0, high_open=True)
        check_choice("model.task.emission_target", emission_target, EmissionTarget)
        if emission_loss_weight and not crf:
            raise ValueError("model.task.emission_loss_weight: weighs a loss beside the CRF's; set crf: true")
        if not crf_trains_encoder and not (crf and emission_loss_weight):
            raise ValueError(
                "model.task.crf_trains_encoder false: then the emissions' own cross-entropy trains the encoder; "
                "set crf: true and emission_loss_weight > 0"
            )
        if crf and label_all_subwords:
            raise ValueError(
                "model.task.crf: the CRF scores the first sub-word of each word; set label_all_subwords: false"
            )
        if not entity_types or len(set(entity_types)) != len(entity_types):
            raise ValueError(f"model.task.entity_types={entity_types!r}: expected a non-empty list of distinct types")
        self.save_hyperparameters()
        self.tags = ["O"] + [f"{p}-{t}" for t in entity_types for p in ("B", "I")]
        self.tag_ids = {t: i for i, t in enumerate(self.tags)}

    def build_head(self, config: BertConfig, tokenizer: BertTokenizer) -> Head:
        from bertkit_plugins.token_tagging.head import TokenClassificationHead

        hp = self.hparams
        return TokenClassificationHead(
            self.tags, config, hp.classifier_dropout, hp.crf, hp.crf_learning_rate,
            hp.get("emission_loss_weight", 0.0), hp.get("emission_target", "labels"), hp.get("crf_trains_encoder", True),
        )  # fmt: skip

    # ----- data -----
    def _check_types(self, sentences: list[Sentence]) -> None:
        for s in (s for s in sentences if s.tags is not None):
            for tag, line in zip(s.tags, s.lines, strict=True):
                if tag not in self.tag_ids:
                    raise ValueError(
                        f"{s.source.rsplit(':', 1)[0]}:{line}: tag {tag} has an entity type not in "
                        f"model.task.entity_types {list(self.hparams.entity_types)}; add it to the recipe"
                    )

    def read(self, path: Path, labelled: bool = True) -> list[Sentence]:
        """A CoNLL column file, or JSON Lines of tokenized sentences (``.jsonl``)."""
        hp = self.hparams
        sentences = read_tagged(path, hp.tag_scheme, hp.tag_column, hp.tokens_field, hp.tags_field, labelled)
        self._check_types(sentences)
        return sentences

    def read_text_lines(self, path: Path, lines: Iterable[tuple[int, str]]) -> list[Sentence]:
        """One sentence per non-blank line, its words by BERT's basic-tokenizer rules
        (``split_words``: white space, punctuation, each CJK ideograph); offsets into the line.
        Blank lines separate documents (paragraphs). A script written without spaces that these
        rules do not split (Thai, Japanese kana …: ``UNSPACED_SCRIPTS``) gives one word per run,
        tagged as one: a warning names the script once per process (send such text as
        pre-split words, JSON Lines ``tokens``, for a tag per word)."""
        sentences: list[Sentence] = []
        document = 0
        for number, line in lines:
            pieces = split_words(line)
            _warn_unspaced(pieces, f"{path}:{number}")
            if pieces:
                words = [w for w, _ in pieces]
                offsets = [o for _, o in pieces]
                numbers = [number] * len(words)
                sentences.append(Sentence(words, None, f"{path}:{number}", numbers, line, offsets, document))
            elif sentences and sentences[-1].document == document:
                document += 1
        return sentences

    def _word_tokens(
        self, sentence: Sentence, ids: list[int], word_ids: list[int | None], unk: int
    ) -> tuple[list[int], list[int]]:
        """Tokens and their word index; a word the tokenizer drops entirely becomes ``[UNK]``."""
        out_ids, out_words = [], []
        pos = 0
        for w in range(len(sentence.words)):
            if pos < len(ids) and word_ids[pos] == w:
                while pos < len(ids) and word_ids[pos] == w:
                    out_ids.append(ids[pos]), out_words.append(w)
                    pos += 1
            else:
                out_ids.append(unk), out_words.append(w)
        return out_ids, out_words

    def windows(self, examples: list[Sentence], tokenizer: BertTokenizer, max_length: int) -> Iterator[Window]:
        """Every window of every sentence, in order, with its context (``context``)."""
        hp = self.hparams
        encodings = tokenizer.tokenize([s.words for s in examples], is_pretokenized=True)
        budget = max_length - tokenizer.num_special_tokens()
        tokens = [
            self._word_tokens(sentence, enc.input_ids, enc.word_ids, tokenizer.unk_token_id)
            for sentence, enc in zip(examples, encodings, strict=True)
        ]
        for index, (ids, word_ids) in enumerate(tokens):
            spans = make_windows(word_ids, budget, min(hp.stride, budget - 1))
            owner = owners(word_ids, spans)
            for k, (s, e) in enumerate(spans):
                left, right = self._context(examples, tokens, index, s, e, budget) if hp.context else ([], [])
                inputs = tokenizer.build_inputs(left + ids[s:e] + right)
                yield Window(index, k, word_ids, s, e, owner, len(left), len(right), inputs)

    def featurize(self, examples: list[Sentence], tokenizer: BertTokenizer, max_length: int) -> list[Feature]:
        features = []
        for window in self.windows(examples, tokenizer, max_length):
            sentence, word_ids = examples[window.example], window.word_ids
            tag_ids = [self.tag_ids[t] for t in sentence.tags] if sentence.tags is not None else None
            word_index, labels = [], []  # per token of the window
            for pos in range(window.start, window.end):
                w = word_ids[pos]
                first = pos == 0 or word_ids[pos - 1] != w
                mine = window.owner[w] == window.index
                word_index.append(w if first and mine else -1)
                if tag_ids is None or not mine or not (first or self.hparams.label_all_subwords):
                    labels.append(-100)
                else:
                    tag = self.tags[tag_ids[w]]
                    labels.append(tag_ids[w] if first else self.tag_ids.get("I-" + tag[2:], tag_ids[w]))
            feature = {
                "input_ids": window.inputs.input_ids,
                "token_type_ids": window.inputs.token_type_ids,
                "word_index": window.spread(-1, word_index),
                "example_index": window.example,
            }
            # where word_index marks a word, in order: the CRF's sequence, collated by the loader
            feature["word_positions"] = [p for p, w in enumerate(feature["word_index"]) if w >= 0]
            if tag_ids is not None:
                feature["labels"] = window.spread(-100, labels)
            features.append(feature)
        return features

    def _context(
        self, examples: list[Sentence], tokens: list[tuple[list[int], list[int]]], index: int, start: int, end: int,
        budget: int,
    ) -> tuple[list[int], list[int]]:  # fmt: skip
        """Token ids before and after the window ``[start, end)`` of sentence ``index``: up to
        ``context`` each, from the sentence and its neighbours of the same document, within the
        room ``budget`` leaves (shared evenly when both sides have more than their half)."""
        document, want = examples[index].document, self.hparams.context

        def gather(step: int) -> list[int]:
            ids = tokens[index][0]
            found = list(reversed(ids[:start])) if step < 0 else list(ids[end:])
            other = index + step
            while len(found) < want and document is not None and 0 <= other < len(examples):
                if examples[other].document != document:
                    break
                found += reversed(tokens[other][0]) if step < 0 else tokens[other][0]
                other += step
            return found[:want]  # nearest first

        before, after = gather(-1), gather(1)
        room = budget - (end - start)
        left = min(len(before), max(room // 2, room - len(after)))
        right = min(len(after), room - left)
        return list(reversed(before[:left])), after[:right]

    # ----- predictions: the head's word tags (TokenClassificationHead.feature_predictions) as records -----
    def format_predictions(self, examples: list[Sentence], predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        records = []
        for sentence, words in zip(examples, by_example(predictions, len(examples), self), strict=True):
            sentence_tags = ["O"] * len(sentence.words)
            for p in words:
                sentence_tags[p["word_index"]] = p["tag"]
            spans = []
            for kind, first, last in entities(sentence_tags):
                start, end = sentence.offsets[first][0], sentence.offsets[last - 1][1]
                spans.append(
                    {"type": kind, "text": sentence.text[start:end], "start": start, "end": end, "words": [first, last]}
                )
            records.append(
                {
                    "source": sentence.source,
                    "text": sentence.text,
                    "words": sentence.words,
                    "tags": sentence_tags,
                    "entities": spans,
                }
            )
        return records

    def sample_files(self) -> dict[str, Path]:
        return dict(SAMPLE_FILES)


TokenTaggingHead = deprecated_alias(TokenClassification, "TokenTaggingHead", "bertkit_plugins.token_tagging.head")
