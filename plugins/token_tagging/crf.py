"""A linear-chain CRF over word-level tag scores, its moves constrained to a tag scheme.

Lafferty et al. 2001; on top of a neural tagger as in Lample et al. 2016 (BiLSTM-CRF) and Flair's
default sequence tagger. The negative log-likelihood uses the log-space forward algorithm; decoding
is batched Viterbi. Both loop over positions (words), never over the batch.

Moves a scheme forbids (IOB2: ``O`` → ``I-PER``, ``B-LOC`` → ``I-PER``, a sentence starting with
``I-``; BIOES also: ``B-PER`` → ``O``, ending on ``B-``/``I-`` …) get a score of ``FORBIDDEN``, so
neither the likelihood nor Viterbi ever takes them. An export holds the learned scores
(``crf.transitions``, ``crf.start_transitions``, ``crf.end_transitions`` in ``model.safetensors``,
the tags in ``config.json``'s ``id2label``); ``CRF.from_export`` reads them back so that a user of
``transformers`` or of the ONNX graph decodes its logits as bertkit does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import torch
from torch import nn

FORBIDDEN = -1e4  # the score of a move the scheme forbids (AllenNLP's constrained CRF uses the same)

Scheme = Literal["IOB2", "BIOES"]


def allowed_moves(tags: list[str], scheme: Scheme = "IOB2") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which moves ``scheme`` allows between ``tags`` (``O``, ``B-X``, ``I-X`` and, for BIOES,
    ``E-X``, ``S-X``).

    Returns:
        ``(moves, start, end)``: bool tensors of shape (num_tags, num_tags) (``moves[i, j]``: tag
        ``j`` may follow tag ``i``), (num_tags,) (may start a sentence) and (num_tags,) (may end
        it).

    Raises:
        ValueError: a tag that is not ``O`` or prefix-type of the scheme.
    """
    prefixes = "BI" if scheme == "IOB2" else "BIES"
    parts = []
    for tag in tags:
        if tag != "O" and (len(tag) < 3 or tag[0] not in prefixes or tag[1] != "-"):
            raise ValueError(f"tag {tag!r}: expected O or {'/'.join(prefixes)}-TYPE ({scheme})")
        parts.append(("O", "") if tag == "O" else (tag[0], tag[2:]))
    inside = {"B", "I"}  # an entity is open after these (BIOES); IOB2 closes nothing explicitly

    def may_follow(a: tuple[str, str], b: tuple[str, str]) -> bool:
        if scheme == "IOB2":
            return b[0] != "I" or (a[0] in inside and a[1] == b[1])
        if a[0] in inside:  # an open entity goes on (I) or closes (E) with its own type
            return b[0] in ("I", "E") and a[1] == b[1]
        return b[0] in ("O", "B", "S")

    moves = torch.tensor([[may_follow(a, b) for b in parts] for a in parts], dtype=torch.bool)
    start = torch.tensor([p[0] in ("O", "B", "S") for p in parts], dtype=torch.bool)
    end = torch.tensor([scheme == "IOB2" or p[0] in ("O", "E", "S") for p in parts], dtype=torch.bool)
    return moves, start, end


def log_partition(
    emissions: torch.Tensor, mask: torch.Tensor, transitions: torch.Tensor, start: torch.Tensor, end: torch.Tensor
) -> torch.Tensor:
    """log Z of each sequence by the forward algorithm in log space.

    Args:
        emissions: (B, L, num_tags) tag scores per position.
        mask: (B, L) bool, True on each sequence's positions, which come first (a prefix).
        transitions: (num_tags, num_tags) score of moving from tag i to tag j.
        start, end: (num_tags,) or (B, num_tags) scores of starting and ending on a tag.

    Returns:
        (B,) log Z; 0 for an empty sequence.
    """
    alpha = forward_scores(emissions, mask, transitions, start)[-1]
    return torch.where(mask[:, 0], torch.logsumexp(alpha + end, dim=1), torch.zeros_like(alpha[:, 0]))


def forward_scores(
    emissions: torch.Tensor, mask: torch.Tensor, transitions: torch.Tensor, start: torch.Tensor
) -> list[torch.Tensor]:
    """The forward algorithm's alphas, one (B, num_tags) per position: the log-sum of the scores
    of the paths ending on each tag there (past a sequence's end, its last position's)."""
    alphas = [start + emissions[:, 0]]
    for t in range(1, emissions.shape[1]):
        step = torch.logsumexp(alphas[-1].unsqueeze(2) + transitions, dim=1) + emissions[:, t]
        alphas.append(torch.where(mask[:, t : t + 1], step, alphas[-1]))
    return alphas


def log_marginals(
    emissions: torch.Tensor, mask: torch.Tensor, transitions: torch.Tensor, start: torch.Tensor, end: torch.Tensor
) -> torch.Tensor:
    """log P(tag at position t = y | the sequence) by the forward-backward algorithm in log space,
    with the arguments of ``log_partition``; differentiable (the student's side of posterior
    distillation, Wang et al. 2020, "Structure-Level Knowledge Distillation For Multilingual
    Sequence Labeling", §3.3).

    Returns:
        (B, L, num_tags): each position's log-marginals (each row's logsumexp is 0 on its
        sequence's positions); 0 past a sequence's end.
    """
    alphas = forward_scores(emissions, mask, transitions, start)
    betas = [end.expand_as(alphas[-1])]  # log-sum of the scores of the rest of the path from a tag at t
    for t in range(emissions.shape[1] - 2, -1, -1):
        step = torch.logsumexp(transitions + (emissions[:, t + 1] + betas[0]).unsqueeze(1), dim=2)
        betas.insert(0, torch.where(mask[:, t + 1 : t + 2], step, end.expand_as(step)))
    forward, backward = torch.stack(alphas, 1), torch.stack(betas, 1)  # (B, L, num_tags)
    log_z = torch.logsumexp(alphas[-1] + end, dim=1)  # (B,)
    return torch.where(mask.unsqueeze(2), forward + backward - log_z[:, None, None], torch.zeros_like(forward))


def path_score(
    emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor, transitions: torch.Tensor,
    start: torch.Tensor, end: torch.Tensor,
) -> torch.Tensor:  # fmt: skip
    """Score of the tag sequences ``tags`` ((B, L) long; any value past a sequence's end), with
    the arguments of ``log_partition``: (B,)."""
    tags = tags.masked_fill(~mask, 0)
    lengths = mask.sum(1)
    start = start.expand(emissions.shape[0], -1)
    score = (start.gather(1, tags[:, :1]).squeeze(1) + emissions.gather(2, tags.unsqueeze(2)).squeeze(2)[:, 0]) * mask[
        :, 0
    ]
    if emissions.shape[1] > 1:
        steps = transitions[tags[:, :-1], tags[:, 1:]] + emissions[:, 1:].gather(2, tags[:, 1:].unsqueeze(2)).squeeze(2)
        score = score + (steps * mask[:, 1:]).sum(1)
    last = tags.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    return score + end[last] * mask[:, 0]


def viterbi(
    emissions: torch.Tensor, mask: torch.Tensor, transitions: torch.Tensor, start: torch.Tensor, end: torch.Tensor
) -> torch.Tensor:
    """The best tag sequence of each row, with the arguments of ``log_partition``.

    Returns:
        (B, L) long tag ids; -1 past each sequence's end.
    """
    batch, length, _ = emissions.shape
    score = start + emissions[:, 0]  # (B, num_tags): best score of a path ending on each tag
    back = []
    for t in range(1, length):
        best, previous = (score.unsqueeze(2) + transitions).max(dim=1)
        back.append(previous)
        score = torch.where(mask[:, t : t + 1], best + emissions[:, t], score)
    lengths = mask.sum(1)
    tag = (score + end).argmax(1)  # (B,) the last tag of each sequence
    path = torch.full((batch, length), -1, dtype=torch.long, device=emissions.device)
    rows = torch.arange(batch, device=emissions.device)
    for t in range(length - 1, -1, -1):
        here = t < lengths  # a sequence still being traced back at position t
        path[:, t] = torch.where(here, tag, path[:, t])
        if t > 0:
            before = back[t - 1][rows, tag]
            tag = torch.where(t < lengths, before, tag)  # positions past the end keep the last tag
    return path


class CRF(nn.Module):
    """A linear-chain CRF with learned transition, start and end scores (zeros at first) and the
    moves of ``scheme`` forbidden.

    Args:
        tags: tag names by id (``O``, ``B-PER``, ``I-PER`` …).
        scheme: ``IOB2`` or ``BIOES``: which moves are forbidden (``allowed_moves``).
    """

    def __init__(self, tags: list[str], scheme: Scheme = "IOB2") -> None:
        super().__init__()
        n = len(tags)
        self.transitions = nn.Parameter(torch.zeros(n, n))
        self.start_transitions = nn.Parameter(torch.zeros(n))
        self.end_transitions = nn.Parameter(torch.zeros(n))
        for name, allowed in zip(("moves", "start", "end"), allowed_moves(tags, scheme), strict=True):
            self.register_buffer(f"allowed_{name}", allowed, persistent=False)

    def scores(self, free_start: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Transition, start and end scores with forbidden moves at ``FORBIDDEN``; the start may
        be any tag in the rows where ``free_start`` ((B,) bool) is set (a window that begins in
        the middle of a sentence, where an entity may go on).

        Returns:
            (num_tags, num_tags), (num_tags,) or (B, num_tags) when ``free_start`` is given, (num_tags,).
        """

        def constrain(score: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
            return score.masked_fill(~allowed, FORBIDDEN)

        start = constrain(self.start_transitions, self.allowed_start)
        if free_start is not None:
            start = torch.where(free_start.unsqueeze(1), self.start_transitions, start)
        return constrain(self.transitions, self.allowed_moves), start, constrain(self.end_transitions, self.allowed_end)

    def nll(
        self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor, free_start: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Negative log-likelihood of ``tags`` ((B, L) long) per sequence: (B,); arguments as
        ``log_partition``'s and ``scores``'."""
        transitions, start, end = self.scores(free_start)
        return log_partition(emissions, mask, transitions, start, end) - path_score(
            emissions, tags, mask, transitions, start, end
        )

    def log_marginals(
        self, emissions: torch.Tensor, mask: torch.Tensor, free_start: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Each position's log-marginals (B, L, num_tags) (``log_marginals``); arguments as ``nll``'s."""
        return log_marginals(emissions, mask, *self.scores(free_start))

    def decode(
        self, emissions: torch.Tensor, mask: torch.Tensor, free_start: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Viterbi tags (B, L), -1 past each sequence's end; arguments as ``nll``'s."""
        return viterbi(emissions, mask, *self.scores(free_start))

    @torch.no_grad()
    def absorb_emission_bias(self, bias: torch.Tensor) -> None:
        """Take ``bias`` ((num_tags,)), added to every emission, back out of the transition scores
        into each tag and the start scores: every tag sequence then scores what it scored before
        the bias was added (in every row, ``free_start`` or not), so ``decode``, ``nll`` and
        ``log_marginals`` give what they gave (forbidden moves aside, which stay forbidden)."""
        self.transitions -= bias.to(self.transitions)  # transitions[i, j]: from tag i to tag j
        self.start_transitions -= bias.to(self.start_transitions)

    @classmethod
    def from_export(cls, folder: str | Path) -> CRF:
        """The CRF of a ``bertkit export`` folder of a ``TokenTaggingHead(crf=True)``: tags from
        ``config.json``'s ``id2label``, scores from ``model.safetensors`` (``crf.*``), so that
        logits from ``transformers``' ``BertForTokenClassification`` or from the ONNX graph,
        taken at each word's first sub-word, decode as bertkit decodes them::

            tags = CRF.from_export("export").decode(logits[:, first_subwords], mask)

        Raises:
            FileNotFoundError: a file is missing; KeyError: the export has no CRF.
        """
        from safetensors.torch import load_file

        folder = Path(folder)
        labels = json.loads((folder / "config.json").read_text(encoding="utf-8"))["id2label"]
        crf = cls([labels[str(i)] for i in range(len(labels))])
        weights = load_file(str(folder / "model.safetensors"))
        crf.load_state_dict({name: weights[f"crf.{name}"] for name, _ in crf.named_parameters()})
        return crf
