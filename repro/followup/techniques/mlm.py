"""Multitask masked-token denoising for text and retrieval (the follow-up study, section 3, appendix A.4).

"We mask 30% of the tokens in the input sequence, of which a third are replaced by random
tokens, and the rest are replaced by a special mask token"; a token-level head predicts
the original tokens; "the total loss is the (unweighted) sum of the denoising loss and the
task-specific loss" (weight 1 each, A.4). Masks are drawn afresh at every step, from the
step's generator; evaluation never masks (``repro.training.evaluate`` never calls this).

Choices the paper leaves open (ours): each non-padding token is selected independently
with probability ``rate`` (so 30% in expectation); a random replacement is uniform over
the real tokens (ids 1 .. vocab_size - 1, never padding or the mask token, possibly the
original, as in BERT); the mask token is a new id, ``vocab_size`` (the model is built with
one more embedding row); the head is one ``Linear(d_model, vocab_size)`` on the encoder's
final token states, shared by both documents of a retrieval pair. Which positions the
denoising loss covers is ``loss_on``: ``all`` (the follow-up's code, src/tasks/denoise_task.py:
the cross-entropy over every non-padding token, reconstructing the whole input) or
``corrupted`` (over the selected positions only, as BERT).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

HEAD_NAME = "mlm_head"
LOSS_ON = ("all", "corrupted")


def corrupt_tokens(
    ids: Tensor,
    pad_id: int,
    vocab_size: int,
    mask_id: int,
    rate: float,
    random_fraction: float,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """``(corrupted ids, selected)``: ``selected`` marks the positions whose originals are to be predicted."""
    real = ids != pad_id
    pick = torch.rand(ids.shape, device=ids.device, generator=generator) < rate
    use_random = torch.rand(ids.shape, device=ids.device, generator=generator) < random_fraction
    random_ids = torch.randint(1, vocab_size, ids.shape, device=ids.device, generator=generator, dtype=ids.dtype)
    selected = real & pick
    corrupted = torch.where(selected & use_random, random_ids, ids)
    corrupted = torch.where(selected & ~use_random, torch.full_like(ids, mask_id), corrupted)
    return corrupted, selected


class MaskedTokenObjective:
    """Task loss + masked-token loss from one encoder pass (the training loss of the multitask setting)."""

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        rate: float = 0.3,
        random_fraction: float = 1 / 3,
        weight: float = 1.0,
        loss_on: str = "corrupted",
    ):
        if loss_on not in LOSS_ON:
            raise ValueError(f"techniques mlm.loss_on={loss_on!r}: choose one of {', '.join(LOSS_ON)}")
        self.loss_on = loss_on
        if not 0.0 < rate < 1.0:
            raise ValueError(f"techniques mlm.rate={rate}: a fraction in (0, 1) (the follow-up: 0.3)")
        if not 0.0 <= random_fraction <= 1.0:
            raise ValueError(
                f"techniques mlm.random_fraction={random_fraction}: a fraction in [0, 1] (the follow-up: 1/3)"
            )
        self.vocab_size = int(vocab_size)  # the task's, padding included; the mask token is the next id
        self.mask_id = self.vocab_size
        self.pad_id = int(pad_id)
        self.rate, self.random_fraction, self.weight = float(rate), float(random_fraction), float(weight)

    extra_tokens = 1  # the mask token

    def attach(self, model: nn.Module) -> None:
        """Give ``model`` its token-level head (so the optimiser and checkpoints include it)."""
        model.add_module(HEAD_NAME, nn.Linear(model.encoder.embed.d_model, self.vocab_size))

    def corrupt(self, ids: Tensor, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        return corrupt_tokens(
            ids, self.pad_id, self.vocab_size, self.mask_id, self.rate, self.random_fraction, generator
        )

    def loss_inputs(self, ids: Tensor, generator: torch.Generator | None) -> tuple[Tensor, Tensor, Tensor]:
        """The step's random part, drawn outside any compiled code: ``(corrupted ids, positions the
        denoising loss covers, original ids)`` for ``loss_of``."""
        corrupted, selected = self.corrupt(ids, generator)
        if self.loss_on == "all":
            selected = ids != self.pad_id
        return corrupted, selected, ids

    def loss_of(self, model: nn.Module, corrupted: Tensor, selected: Tensor, ids: Tensor, labels: Tensor) -> Tensor:
        """Cross-entropy of the task on ``corrupted`` plus ``weight`` x the mean cross-entropy of the originals
        over ``selected``. The head scores every position and the mean is weighted by ``selected``: the
        same value as scoring the selected positions alone, with no shape that depends on the draw (a
        boolean index would read its size on the host at every step, and cannot be compiled whole)."""
        logits, states = model.forward_with_states(corrupted)
        if model.encoder.cls is not None:
            states = states[:, 1:]  # the CLS state predicts no token
        length = ids.shape[-1]
        predicted = getattr(model, HEAD_NAME)(states.reshape(-1, length, states.shape[-1]))
        token_loss = F.cross_entropy(predicted.float().flatten(0, 1), ids.reshape(-1).long(), reduction="none")
        weights = selected.reshape(-1).to(token_loss.dtype)
        denoise = (token_loss * weights).sum() / weights.sum().clamp_min(1.0)  # 0 when nothing is selected
        return F.cross_entropy(logits.float(), labels) + self.weight * denoise

    def loss(self, model: nn.Module, ids: Tensor, labels: Tensor, generator: torch.Generator | None) -> Tensor:
        """Cross-entropy of the task on the corrupted input plus ``weight`` x that of the originals at the
        selected positions (``loss_on: all``: at every non-padding position)."""
        return self.loss_of(model, *self.loss_inputs(ids, generator), labels)

    def __repr__(self) -> str:
        return (
            f"MaskedTokenObjective(rate={self.rate}, random_fraction={self.random_fraction:.4f}, "
            f"mask_id={self.mask_id}, loss_on={self.loss_on!r})"
        )
