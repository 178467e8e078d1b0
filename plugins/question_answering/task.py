"""``QuestionAnswering``: extractive QA, the answer a span of the passage (SQuAD v1.1/v2.0).

BERT packs ``[CLS] question [SEP] passage [SEP]`` (segment ids 0 / 1); the head
(``AnswerSpanHead``) is one linear layer over every final hidden state giving the start and end
logits, trained on the mean of the start and end cross-entropies (Devlin et al. 2019, §4.2-4.3;
google-research/bert run_squad.py, whose defaults are used: max_seq_length 384, doc_stride 128,
max_query_length 64, n_best_size 20, max_answer_length 30). Long passages become windows
(``windows.py``); answers are picked over all windows of a question and sliced from the passage
by character offsets (``postprocess.py``).
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from bertkit_plugins.question_answering.postprocess import answer
from bertkit_plugins.question_answering.readers import NOT_FOUND, RELOCATED, QAExample, read_qa
from bertkit_plugins.question_answering.sample import squad
from bertkit_plugins.question_answering.windows import doc_spans

from bertkit.api.task import (
    BertConfig,
    BertTokenizer,
    Encoded,
    Feature,
    Head,
    Task,
    by_example,
    deprecated_alias,
    max_context_window,
    sample_files,
)

log = logging.getLogger(__name__)


class QuestionAnswering(Task):
    """Extractive question answering: the answer is a span of the passage.

    Args:
        version_2_with_negative: SQuAD v2.0: questions may have no answer (``is_impossible`` or
            no answers); such windows are labelled ``[CLS]`` and the model may abstain.
        doc_stride: tokens between the starts of consecutive windows of a long passage
            (Google's meaning; Hugging Face's ``stride`` is the overlap instead).
        max_query_length: question tokens kept (the rest are cut off).
        n_best_size: start and end tokens considered per window, and alternatives reported.
        max_answer_length: longest answer in tokens.
        null_score_diff_threshold: v2.0: abstain when the null score minus the best span's score
            exceeds it.
        tune_threshold: v2.0: after each validation, adopt the threshold that maximises
            validation F1 (official ``find_best_thresh``; the head keeps it in checkpoints, so
            ``test`` and ``predict`` from a checkpoint use it).
        softmax_over_padding: let padding positions into the start/end softmax of the training
            loss, as transformers' ``BertForQuestionAnswering`` and google-research/bert (which
            pads every window to ``max_seq_length``) do; off by default: padding is masked out,
            so a window's loss does not depend on how much its batch pads it. Padding can never
            be predicted either way. It makes the encoder run padded (``Head.reads_padding``), so
            the padding logits are the reference's; for reproducing it (an ablation).

    Attributes:
        tuned_threshold: the threshold validation tuned (``tune_threshold``), None until then;
            set by the head, which keeps it in checkpoints.
    """

    def __init__(
        self,
        version_2_with_negative: bool = False,
        doc_stride: int = 128,
        max_query_length: int = 64,
        n_best_size: int = 20,
        max_answer_length: int = 30,
        null_score_diff_threshold: float = 0.0,
        tune_threshold: bool = False,
        softmax_over_padding: bool = False,
    ) -> None:
        super().__init__()
        for name, value in (
            ("doc_stride", doc_stride),
            ("max_query_length", max_query_length),
            ("n_best_size", n_best_size),
            ("max_answer_length", max_answer_length),
        ):
            if value < 1:
                raise ValueError(f"model.task.init_args.{name}={value}: expected at least 1")
        self.save_hyperparameters()
        self.tuned_threshold: float | None = None

    request_fields = ("question", "context")
    token_keys = frozenset({"may_start", "may_end", "char_start", "char_end"})
    # Padding may neither start nor end an answer; its character offsets are never read.
    pad_values: ClassVar[Mapping[str, int]] = {"may_start": 0, "may_end": 0, "char_start": 0, "char_end": 0}

    def build_head(self, config: BertConfig, tokenizer: BertTokenizer) -> Head:
        from bertkit_plugins.question_answering.head import AnswerSpanHead

        return AnswerSpanHead(self, config)

    @property
    def threshold(self) -> float:
        """The null-score difference threshold in use: the tuned one if tuning is on and done."""
        tuned = self.tuned_threshold
        return tuned if self.hparams.tune_threshold and tuned is not None else self.hparams.null_score_diff_threshold

    # ----- data -----
    def sample_files(self) -> dict[str, Path]:
        """A generated SQuAD-format sample: short biographies and questions about them, with
        unanswerable ones for SQuAD v2.0 (``bertkit_plugins.question_answering.sample``)."""
        version_2 = bool(self.hparams.version_2_with_negative)
        files = sample_files(f"squad-{'v2' if version_2 else 'v1'}", squad(version_2))
        return {**files, "test": files["validation"]}

    def read(self, path: Path, labelled: bool = True) -> list[QAExample]:
        """Read SQuAD JSON (or ``.jsonl``); report answers not found at ``answer_start``.

        Raises:
            ValueError: malformed file (names file and JSON path or line); in v1.1 mode, a
                labelled question without answers.
        """
        examples = read_qa(path, labelled)
        if labelled and not self.hparams.version_2_with_negative:
            for e in examples:
                if not e.answers or e.is_impossible:
                    raise ValueError(
                        f"{e.source}: question {e.id!r} has no answer; for unanswerable questions set "
                        "model.task.init_args.version_2_with_negative: true (SQuAD v2.0)"
                    )
        self._report_answers(path, examples)
        return examples

    @staticmethod
    def _report_answers(path: Path, examples: list[QAExample]) -> None:
        status = [(e, s) for e in examples for s in e.answer_status]
        moved = [e for e, s in status if s == RELOCATED]
        missing = [e for e, s in status if s == NOT_FOUND]
        if moved or missing:
            log.warning(
                "%s: %d of %d answers are not at their answer_start: %d moved to the nearest occurrence of "
                "their text, %d not in the passage (scored by text, never trained on). First: %s",
                path,
                len(moved) + len(missing),
                len(status),
                len(moved),
                len(missing),
                ", ".join(f"{e.id} ({e.source})" for e in (moved + missing)[:3]),
            )

    def featurize(self, examples: list[QAExample], tokenizer: BertTokenizer, max_length: int) -> list[Feature]:
        hp = self.hparams
        questions = tokenizer.tokenize([e.question for e in examples])
        passages = list(dict.fromkeys(e.context for e in examples))  # each passage tokenized once
        contexts = dict(zip(passages, tokenizer.tokenize(passages), strict=True))
        features = []
        for index, (example, question) in enumerate(zip(examples, questions, strict=True)):
            query = question.input_ids[: hp.max_query_length]
            room = max_length - len(query) - tokenizer.num_special_tokens(pair=True)
            if room < 1:
                raise ValueError(
                    f"model.max_length={max_length} leaves no room for the passage beside a question of "
                    f"{len(query)} tokens (model.task.init_args.max_query_length={hp.max_query_length})"
                )
            context = contexts[example.context]
            spans = doc_spans(len(context.input_ids), room, hp.doc_stride)
            target = self._token_span(example, context) if example.labelled else None
            for k, (start, length) in enumerate(spans):
                feature, offset = self._window(tokenizer, query, context, spans, k)
                feature |= {"example_index": index, "example": example}
                if example.labelled:
                    feature |= self._positions(target, start, length, offset)
                features.append(feature)
        return features

    @staticmethod
    def _token_span(example: QAExample, context: Encoded) -> tuple[int, int] | None:
        """Context-token span of the first answer found in the passage; (-1, -1) when there is no
        answer (v2.0); None when its text is not in the passage (no training signal)."""
        located = [a for a in example.answers if a.start is not None]
        if example.is_impossible or not example.answers:
            return (-1, -1)
        if not located:
            return None
        starts = [o[0] for o in context.offsets]
        ends = [o[1] for o in context.offsets]
        first = bisect_right(ends, located[0].start)  # first token ending after the answer starts
        last = bisect_left(starts, located[0].end) - 1  # last token starting before it ends
        return (first, last) if first <= last else None

    @staticmethod
    def _positions(target: tuple[int, int] | None, start: int, length: int, offset: int) -> dict[str, int]:
        """Start/end labels in one window: the answer's tokens, ``[CLS]`` (0) when it lies outside
        the window or there is none, -100 (ignored) when it is unknown."""
        if target is None:
            return {"start_positions": -100, "end_positions": -100}
        first, last = target
        if first < start or last >= start + length or first < 0:
            return {"start_positions": 0, "end_positions": 0}
        return {"start_positions": offset + first - start, "end_positions": offset + last - start}

    @staticmethod
    def _window(
        tokenizer: BertTokenizer, query: list[int], context: Encoded, spans: list[tuple[int, int]], k: int
    ) -> tuple[Feature, int]:
        """Window ``k`` as the template's pair (question, passage slice), and the position of its
        first passage token."""
        start, length = spans[k]
        ranges = [(s, s + n) for s, n in spans]
        inside = range(start, start + length)
        inputs = tokenizer.build_inputs(query, context.input_ids[start : start + length])
        feature = {
            "input_ids": inputs.input_ids,
            "token_type_ids": inputs.token_type_ids,
            "may_start": inputs.spread(0, [0] * len(query), [int(max_context_window(ranges, p) == k) for p in inside]),
            "may_end": inputs.spread(0, [0] * len(query), [1] * length),
            "char_start": inputs.spread(0, [0] * len(query), [context.offsets[p][0] for p in inside]),
            "char_end": inputs.spread(0, [0] * len(query), [context.offsets[p][1] for p in inside]),
        }
        return feature, inputs.start(1)

    # ----- predictions: each window's candidate spans (QuestionAnsweringHead.feature_predictions) as answers -----
    def answer_record(self, example: QAExample, windows: list[dict]) -> dict[str, Any]:
        """The answer record of a question from all of its windows (the head's
        ``feature_predictions``), with the
        threshold in use."""
        hp = self.hparams
        return answer(example.context, windows, hp.n_best_size, hp.version_2_with_negative, self.threshold)

    def format_predictions(self, examples: list[QAExample], predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per question: ``id``, ``question``, ``answer`` with its character ``start``/``end`` and
        ``score``; v2.0 adds ``abstained`` and ``null_score_diff``; ``n_best`` lists alternatives."""
        records = []
        for example, windows in zip(examples, by_example(predictions, len(examples), self), strict=True):
            record = self.answer_record(example, windows)
            record.pop("best_span")
            if not self.hparams.version_2_with_negative:
                record.pop("abstained")
            records.append({"id": example.id, "question": example.question} | record)
        return records


QuestionAnsweringHead = deprecated_alias(
    QuestionAnswering, "QuestionAnsweringHead", "bertkit_plugins.question_answering.head"
)
