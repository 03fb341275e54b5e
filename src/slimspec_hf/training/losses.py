# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Loss maths of SlimSpec distillation, as plain functions (the trainer only gathers their inputs).

Training-time test (TTT) bookkeeping: the drafter's step k at position t reads the embedding of token x_{t+k+1}
and predicts x_{t+k+2}; its teacher is the target's next-token distribution at position s = t + k + 1.

The loss is the forward KL(p_target ‖ q_drafter) over the full vocabulary, averaged over the valid positions of
each step and weighted by `decay**k`. Full-vocabulary logits are the classic memory trap (steps × T × V floats), so
[`ttt_kl_loss`] walks the positions in chunks: each chunk's teacher logits are computed once and shared by all
steps, and the gradient of each chunk is computed right away (a fused "head + KL" step), so that nothing of size
V is kept for the backward pass. Shapes: S steps, N rows (positions), d width, V vocabulary, K kept tokens.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def forward_kl(teacher_logits: torch.Tensor, student_logits: torch.Tensor) -> torch.Tensor:
    """Row-wise KL(softmax(teacher) ‖ softmax(student)) over the last dimension, in fp32 (…, V) → (…)."""
    teacher_logp = F.log_softmax(teacher_logits.float(), dim=-1)
    student_logp = F.log_softmax(student_logits.float(), dim=-1)
    return (teacher_logp.exp() * (teacher_logp - student_logp)).sum(-1)


def step_weights(num_steps: int, decay: float) -> torch.Tensor:
    """Weights `decay**k` of the TTT steps k = 0..num_steps-1 (fp32, (S,)); both are checked by `SlimSpecConfig`."""
    return decay ** torch.arange(num_steps, dtype=torch.float32)


def ttt_targets(
    attention_mask: torch.Tensor, loss_mask: torch.Tensor, num_steps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which (step, position) pairs carry a loss, indexed by the teacher's position.

    `attention_mask` (B, T): 1 on real tokens. `loss_mask` (B, T): 1 on tokens the drafter should predict (assistant
    tokens). The teacher position s predicts token x_{s+1}, so it is used iff `loss_mask[s+1]`. Step k reads it from
    the drafter's position t = s - k - 1, which must exist and be a real token.

    Returns `batch_idx` (N,), `teacher_pos` (N,), `student_pos` (S, N) (clamped to ≥ 0) and `valid` (S, N), where N
    is the number of teacher positions with a label.
    """
    label = torch.zeros_like(loss_mask, dtype=torch.bool)
    label[:, :-1] = loss_mask[:, 1:].bool() & attention_mask[:, 1:].bool()  # (B, T): x_{s+1} is to be predicted
    batch_idx, teacher_pos = label.nonzero(as_tuple=True)  # (N,), (N,)
    offsets = torch.arange(1, num_steps + 1, device=teacher_pos.device)[:, None]  # (S, 1)
    student_pos = teacher_pos[None, :] - offsets  # (S, N)
    valid = student_pos >= 0
    student_pos = student_pos.clamp(min=0)
    valid &= attention_mask.bool()[batch_idx[None, :].expand_as(student_pos), student_pos]
    return batch_idx, teacher_pos, student_pos, valid


@dataclass
class TTTLossOutput:
    """`loss`: the weighted scalar loss; per step (S,): mean KL, top-1 agreement count, number of valid rows."""

    loss: torch.Tensor
    step_kl: torch.Tensor
    step_correct: torch.Tensor
    step_count: torch.Tensor


def _teacher_chunk(teacher_head, teacher_hidden, compact_ids):
    """Teacher log-probs over the (kept) vocabulary and the teacher's full-vocabulary top-1, (n, V|K) and (n,)."""
    logits = teacher_head(teacher_hidden).float()  # (n, V), fp32: the KL is sensitive to the tail
    top1 = logits.argmax(-1)
    if compact_ids is not None:
        logits = logits.index_select(-1, compact_ids)  # (n, K): the teacher renormalised over the kept tokens
    return F.log_softmax(logits, dim=-1), top1


def _chunk_kl(student_head, hidden, teacher_logp, teacher_top1, compact_ids):
    student_logits = student_head(hidden).float()  # (n, V|K)
    student_logp = F.log_softmax(student_logits, dim=-1)
    kl = (teacher_logp.exp() * (teacher_logp - student_logp)).sum(-1)  # (n,)
    top1 = student_logits.argmax(-1)
    if compact_ids is not None:
        top1 = compact_ids[top1]
    return kl, (top1 == teacher_top1)


class _FusedHeadKL(torch.autograd.Function):
    """Runs head + KL chunk by chunk and computes each chunk's gradient at once, keeping only (S, N, d) grads."""

    @staticmethod
    def forward(
        ctx,
        student_hidden,
        teacher_hidden,
        valid,
        weights,
        student_head,
        teacher_head,
        compact_ids,
        chunk_size,
        *params,
    ):
        num_steps, num_rows = valid.shape
        counts = valid.sum(-1)  # (S,)
        scale = weights.to(student_hidden.device) / counts.clamp(min=1)  # (S,): mean over rows, weighted per step
        grad_hidden = torch.zeros_like(student_hidden)
        grad_params = [torch.zeros_like(p) for p in params]
        kl_sum = torch.zeros(num_steps, dtype=torch.float32, device=student_hidden.device)
        correct = torch.zeros(num_steps, dtype=torch.long, device=student_hidden.device)
        for start in range(0, num_rows, chunk_size):
            rows = slice(start, start + chunk_size)
            if not valid[:, rows].any():
                continue
            teacher_logp, teacher_top1 = _teacher_chunk(teacher_head, teacher_hidden[rows], compact_ids)
            for k in range(num_steps):
                keep = valid[k, rows].nonzero(as_tuple=True)[0] + start  # rows of this chunk with a loss at step k
                if keep.numel() == 0:
                    continue
                local = keep - start
                with torch.enable_grad():
                    hidden = student_hidden[k, keep].detach().requires_grad_(True)  # (n, d)
                    kl, hit = _chunk_kl(student_head, hidden, teacher_logp[local], teacher_top1[local], compact_ids)
                    grads = torch.autograd.grad(kl.sum() * scale[k], [hidden, *params], allow_unused=True)
                grad_hidden[k, keep] = grads[0].to(grad_hidden.dtype)
                for acc, g in zip(grad_params, grads[1:]):
                    if g is not None:
                        acc.add_(g)
                kl_sum[k] += kl.detach().sum()
                correct[k] += hit.sum()
        ctx.save_for_backward(grad_hidden, *grad_params)
        step_kl = kl_sum / counts.clamp(min=1)
        loss = (step_kl * weights.to(step_kl.device)).sum()
        ctx.mark_non_differentiable(step_kl, correct, counts)
        return loss, step_kl, correct, counts

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        grad_hidden, *grad_params = ctx.saved_tensors
        return (
            grad_hidden * grad_loss.to(grad_hidden.dtype),
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            *[g * grad_loss.to(g.dtype) for g in grad_params],
        )


def ttt_kl_loss(
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    valid: torch.Tensor,
    student_head: Callable[[torch.Tensor], torch.Tensor],
    teacher_head: Callable[[torch.Tensor], torch.Tensor],
    weights: torch.Tensor,
    chunk_size: int = 256,
    params: Sequence[torch.Tensor] = (),
    compact_ids: torch.Tensor | None = None,
) -> TTTLossOutput:
    """Σ_k weights[k] · mean over valid rows of KL(p_teacher ‖ q_student), computed chunk by chunk.

    Args:
        student_hidden: (S, N, d) the drafter's states of step k for the teacher row n (differentiable).
        teacher_hidden: (N, d_t) what the teacher's head reads at row n (no gradient).
        valid: (S, N) bool, which (step, row) pairs carry a loss.
        student_head: maps (n, d) → (n, V) logits (or (n, K) for a trimmed head, with `compact_ids`).
        teacher_head: maps (n, d_t) → (n, V) logits.
        weights: (S,) step weights (`decay**k`).
        chunk_size: rows whose logits are held at once (memory ~ a few × chunk_size × V floats).
        params: the parameters `student_head` uses that should receive gradients.
        compact_ids: (K,) the kept token ids of a trimmed head; the teacher is renormalised over them and top-1
            agreement compares the student's kept token with the teacher's full-vocabulary top-1.
    """
    if student_hidden.dim() != 3 or valid.shape != student_hidden.shape[:2]:
        raise ValueError(
            f"`student_hidden` must be (S, N, d) matching `valid` (S, N); got {tuple(student_hidden.shape)} and "
            f"{tuple(valid.shape)}."
        )
    if teacher_hidden.shape[0] != student_hidden.shape[1]:
        raise ValueError(f"`teacher_hidden` has {teacher_hidden.shape[0]} rows, expected {student_hidden.shape[1]}.")
    if chunk_size < 1:
        raise ValueError(f"`kl_chunk_size` ({chunk_size}) must be a positive number of positions.")
    params = [p for p in params if p.requires_grad]
    weights = weights.float()
    needs_grad = torch.is_grad_enabled() and (student_hidden.requires_grad or bool(params))
    if needs_grad:
        loss, step_kl, correct, counts = _FusedHeadKL.apply(
            student_hidden,
            teacher_hidden.detach(),
            valid,
            weights,
            student_head,
            teacher_head,
            compact_ids,
            chunk_size,
            *params,
        )
        return TTTLossOutput(loss, step_kl, correct, counts)
    with torch.no_grad():
        num_steps, num_rows = valid.shape
        counts = valid.sum(-1)
        kl_sum = torch.zeros(num_steps, dtype=torch.float32, device=student_hidden.device)
        correct = torch.zeros(num_steps, dtype=torch.long, device=student_hidden.device)
        for start in range(0, num_rows, chunk_size):
            rows = slice(start, start + chunk_size)
            teacher_logp, teacher_top1 = _teacher_chunk(teacher_head, teacher_hidden[rows], compact_ids)
            for k in range(num_steps):
                local = valid[k, rows].nonzero(as_tuple=True)[0]
                if local.numel() == 0:
                    continue
                kl, hit = _chunk_kl(
                    student_head,
                    student_hidden[k, start + local],
                    teacher_logp[local],
                    teacher_top1[local],
                    compact_ids,
                )
                kl_sum[k] += kl.sum()
                correct[k] += hit.sum()
        step_kl = kl_sum / counts.clamp(min=1)
        return TTTLossOutput((step_kl * weights.to(step_kl.device)).sum(), step_kl, correct, counts)


__all__ = ["forward_kl", "step_weights", "ttt_targets", "ttt_kl_loss", "TTTLossOutput"]
