# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Loss maths of SlimSpec distillation, as plain functions (the trainer only gathers their inputs).

Training-time test (TTT) bookkeeping: the drafter's step k at position t reads the embedding of token x_{t+k+1}
and predicts x_{t+k+2}; its teacher is the target's next-token distribution at position s = t + k + 1.

The loss is the forward KL(p_target ‖ q_drafter) over the full vocabulary, averaged over the valid positions of
each step and weighted by `decay**k`. Full-vocabulary logits are the classic memory trap (steps × T × V floats), so
[`ttt_kl_loss`] walks the positions in chunks: each chunk's teacher logits are computed once and shared by all
steps, and the gradient of each chunk is computed right away (a fused "head + KL" step), so that nothing of size
V is kept for the backward pass. Shapes: S steps, N rows (positions), d width, V vocabulary, K kept tokens.

`Objective` chooses what each (step, row) minimises: the KL, or one of the LK losses (Samarin et al., "LK losses",
arXiv 2602.23881), which train on the acceptance rate itself. Speculative sampling accepts a draft from q with
probability α = Σ_v min(p_v, q_v); `lk_alpha` minimises −log α, `lk_lambda` the adaptive mix
λ·KL + (1 − λ)·(1 − α) with λ = exp(−η·α) per row (KL while the drafter is far, total variation once it is close), and
`lk_greedy` −log q(argmax p), the probability that the drafter proposes the target's greedy token.
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


LOSS_TYPES = ("kl", "lk_alpha", "lk_lambda", "lk_greedy")


@dataclass(frozen=True)
class Objective:
    """What every (step, row) minimises: `loss_type` (one of `LOSS_TYPES`); for the LK losses, `kl_weight` w mixes in
    the KL as (1 − w)·LK + w·KL, and `eta` is λ's rate in `lk_lambda`. Checked here and by `SlimSpecConfig`."""

    loss_type: str = "kl"
    kl_weight: float = 0.0
    eta: float = 3.0

    def __post_init__(self):
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"`loss_type` must be one of {list(LOSS_TYPES)}, got {self.loss_type!r}.")
        if not 0.0 <= self.kl_weight <= 1.0:
            raise ValueError(f"`lk_kl_weight` ({self.kl_weight}) must lie in [0, 1] (0: the LK loss alone).")
        if not self.eta > 0:
            raise ValueError(f"`lk_eta` ({self.eta}) must be > 0.")


KL_OBJECTIVE = Objective()
# −log α of a row whose draft distribution misses the target's entirely is capped at −log(this)
_ALPHA_FLOOR = 1e-6


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


def _float_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the softmax maths runs in: fp32, or fp64 for fp64 inputs (tests)."""
    return torch.promote_types(dtype, torch.float32)


def _as_float(x: torch.Tensor) -> torch.Tensor:
    """`x` in its float dtype (one cheap cast for bf16/fp16: elementwise bf16 kernels are much slower on CPU)."""
    return x.to(_float_dtype(x.dtype))


# On CPU, an (n, V) fp32 tensor above glibc's largest mmap threshold (32 MiB) is mapped afresh at every allocation
# and page-faulted in, which makes the softmax maths of large chunks several times slower per row than of small ones:
# the chunk's row count is capped so that one (n, V) fp32 tensor stays under 16 MiB. With a vocabulary so large that
# the cap leaves few rows (Gemma-3's 262,144 tokens: 16), the heads' matrix products of so few rows cost more than
# the page faults save, so a chunk keeps at least 64 rows (measured on Gemma-3-270M, 1 thread: the forward of a TTT
# step 1.35x faster with 64 rows than with 16). The trainer also serves such tensors from the heap, reused
# (`cpu_reuse_memory`, `reuse_freed_memory`): no page faults at any size (Gemma-3-270M's training then 2.0x the
# tokens/s; 64 rows 1.18x as fast as 32 there, 128 rows 1.07x as fast as 64 for 0.6 GB more).
_CPU_CHUNK_BYTES = 16 * 2**20
_CPU_MIN_ROWS = 64


def effective_chunk_size(chunk_size: int, vocab_size: int, device: torch.device) -> int:
    """Rows per chunk: `chunk_size`, capped on CPU so that one (rows, V) fp32 tensor is at most 16 MiB, but never below
    64 rows (or `chunk_size`, if smaller)."""
    if device.type != "cpu":
        return chunk_size
    capped = _CPU_CHUNK_BYTES // (4 * max(vocab_size, 1))
    return max(1, min(chunk_size, max(capped, _CPU_MIN_ROWS)))


@dataclass
class _TeacherChunk:
    """What every TTT step of a chunk of rows shares, computed once: the teacher's probabilities over the (kept)
    vocabulary `probs` (n, V|K), its negative entropy Σ p·log p (n,) and where its full-vocabulary top-1 sits in the
    student's vocabulary `top1_local` (n,), -1 when a trimmed head does not keep it. With a top-k term (HASS): the
    teacher's k most probable tokens `top_ids` (n, k), their probabilities `top_probs` (n, k) and total `top_mass`."""

    probs: torch.Tensor
    neg_entropy: torch.Tensor
    top1_local: torch.Tensor
    top_ids: torch.Tensor | None = None
    top_probs: torch.Tensor | None = None
    top_mass: torch.Tensor | None = None


def _teacher_chunk(teacher_head, teacher_hidden, compact_ids, top_k: int = 0) -> _TeacherChunk:
    logits = _as_float(teacher_head(teacher_hidden))  # (n, V), fp32: the KL is sensitive to the tail
    top1 = logits.argmax(-1)
    if compact_ids is not None:
        logits = logits.index_select(-1, compact_ids)  # (n, K): the teacher renormalised over the kept tokens
        kept = compact_ids[None, :] == top1[:, None]  # (n, K)
        top1 = torch.where(kept.any(-1), kept.int().argmax(-1), -1)
    logp = torch.log_softmax(logits, dim=-1)
    probs = logp.exp()
    chunk = _TeacherChunk(probs, torch.linalg.vecdot(probs, logp), top1)
    if top_k:
        chunk.top_probs, chunk.top_ids = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
        chunk.top_mass = chunk.top_probs.sum(-1)
    return chunk


def _acceptance_step(objective: Objective, z, q, lse, kl, teacher: _TeacherChunk):
    """Per row: an LK objective and its gradient w.r.t. the logits z (n, V|K), with q = softmax(z).

    α = Σ_v min(p_v, q_v) and, with S = Σ_{v: q_v < p_v} q_v, dα/dz_j = q_j·(1[q_j < p_j] − S). −log α has gradient
    −(dα/dz)/α; λ·KL + (1 − λ)·(1 − α), λ = exp(−η·α) held constant, has λ·(q − p) − (1 − λ)·dα/dz. With p one-hot
    at the target's top-1 y (`lk_greedy`), −log α = logsumexp(z) − z_y, gradient q − e_y; a trimmed head that does
    not keep y has no such row (objective and gradient 0)."""
    p = teacher.probs
    if objective.loss_type == "lk_greedy":
        scored = teacher.top1_local >= 0
        y = teacher.top1_local.clamp(min=0)[:, None]  # (n, 1)
        value = torch.where(scored, lse - z.gather(-1, y).squeeze(-1), 0.0)
        grad = q.clone().scatter_add_(-1, y, -torch.ones_like(z[:, :1]))
        grad.mul_(scored[:, None])
    else:
        below = q < p  # (n, V|K)
        alpha = torch.minimum(p, q).sum(-1)  # (n,)
        d_alpha = q * (below.to(q.dtype) - (q * below).sum(-1, keepdim=True))
        if objective.loss_type == "lk_alpha":
            alpha = alpha.clamp(min=_ALPHA_FLOOR)
            value, grad = -alpha.log(), d_alpha.div_(-alpha[:, None])
        else:  # lk_lambda
            lam = torch.exp(-objective.eta * alpha)[:, None]  # (n, 1), no gradient through λ
            value = lam[:, 0] * kl + (1 - lam[:, 0]) * (1 - alpha)
            grad = (q - p).mul_(lam).sub_(d_alpha.mul_(1 - lam))
    w = objective.kl_weight
    if w:
        value = (1 - w) * value + w * kl
        grad = grad.mul_(1 - w).add_(q - p, alpha=w)
    return value, grad


def _student_step(
    logits: torch.Tensor, teacher: _TeacherChunk, top_k_weight: float = 0.0, objective: Objective = KL_OBJECTIVE
):
    """Per row: KL(p ‖ q), the objective (KL or an LK loss, + the top-k term), whether the student's top-1 is the
    teacher's, and d objective / d logits, from the student's logits alone (no autograd graph over the (n, V) logits).

    With q = softmax(z) and m = max z: KL = Σ p·log p − Σ p·z + logsumexp(z), and logsumexp(z) = m − log max q
    exactly; dKL/dz = q − p (the LK losses: `_acceptance_step`). HASS's top-k distillation adds
    w · (−Σ_{j ∈ top-k(p)} p_j log q_j), whose gradient is w · (P_k·q − p restricted to the top k), P_k their total
    probability. Top-1 agreement: the student's logit at the teacher's top-1 is its maximum."""
    z = _as_float(logits.detach())
    q = torch.softmax(z, dim=-1)  # (n, V|K)
    top = z.amax(-1)
    lse = top - q.amax(-1).log()
    kl = teacher.neg_entropy - torch.linalg.vecdot(teacher.probs, z) + lse
    at_teacher = z.gather(-1, teacher.top1_local.clamp(min=0)[:, None]).squeeze(-1)
    hit = (teacher.top1_local >= 0) & (at_teacher >= top)
    with_top_k = bool(top_k_weight) and teacher.top_ids is not None
    if objective.loss_type != "kl":
        value, grad = _acceptance_step(objective, z, q, lse, kl, teacher)
        if with_top_k:  # `grad` is a fresh tensor and q is intact: the top-k term's P_k·q part
            grad.add_(q * (top_k_weight * teacher.top_mass[:, None]))
    elif with_top_k:
        value, grad = kl, q.mul_(1 + top_k_weight * teacher.top_mass[:, None]).sub_(teacher.probs)
    else:
        return kl, kl, hit, q.sub_(teacher.probs)
    if with_top_k:
        top_logq = z.gather(-1, teacher.top_ids) - lse[:, None]  # (n, k)
        value = value - top_k_weight * (teacher.top_probs * top_logq).sum(-1)
        grad.scatter_add_(-1, teacher.top_ids, teacher.top_probs * -top_k_weight)
    return kl, value, hit, grad


class _FusedHeadKL(torch.autograd.Function):
    """Runs head + KL chunk by chunk and computes each chunk's gradient at once, keeping only (S, N, d) grads.

    Per chunk of rows: the teacher's probabilities once (`_teacher_chunk`); per step: the student's logits, the KL
    and its closed-form gradient q − p (`_student_step`), pushed back through the head only. All rows of a chunk are
    computed at every step and the rows without a loss at that step are masked (they are few: only near sequence
    starts), so no (n, V) tensor is ever gathered."""

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
        top_k,
        top_k_weight,
        objective,
        *params,
    ):
        num_steps, num_rows = valid.shape
        counts = valid.sum(-1)  # (S,)
        scale = weights.to(student_hidden.device) / counts.clamp(min=1)  # (S,): mean over rows, weighted per step
        grad_hidden = torch.zeros_like(student_hidden)
        grad_params = [torch.zeros_like(p) for p in params]
        kl_sum = torch.zeros(num_steps, dtype=torch.float32, device=student_hidden.device)
        objective_sum = torch.zeros_like(kl_sum)
        correct = torch.zeros(num_steps, dtype=torch.long, device=student_hidden.device)
        for start in range(0, num_rows, chunk_size):
            rows = slice(start, start + chunk_size)
            if not valid[:, rows].any():
                continue
            teacher = _teacher_chunk(teacher_head, teacher_hidden[rows], compact_ids, top_k)
            for k in range(num_steps):
                keep = valid[k, rows]  # (n,) rows of this chunk with a loss at step k
                if not keep.any():
                    continue
                with torch.enable_grad():
                    hidden = student_hidden[k, rows].detach().requires_grad_(True)  # (n, d)
                    logits = student_head(hidden)  # (n, V|K)
                kl, value, hit, grad = _student_step(logits, teacher, top_k_weight, objective)
                if not keep.all():
                    grad[~keep] = 0
                grads = torch.autograd.grad(logits, [hidden, *params], grad.to(logits.dtype), allow_unused=True)
                grad_hidden[k, rows] = grads[0].to(grad_hidden.dtype) * scale[k]
                for acc, g in zip(grad_params, grads[1:]):
                    if g is not None:
                        acc.add_(g, alpha=float(scale[k]))
                kl_sum[k] += kl.detach().float().masked_fill(~keep, 0).sum()
                objective_sum[k] += value.detach().float().masked_fill(~keep, 0).sum()
                correct[k] += (hit & keep).sum()
        ctx.save_for_backward(grad_hidden, *grad_params)
        step_kl = kl_sum / counts.clamp(min=1)
        loss = (objective_sum / counts.clamp(min=1) * weights.to(step_kl.device)).sum()
        ctx.mark_non_differentiable(step_kl, correct, counts)
        return loss, step_kl, correct, counts

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        grad_hidden, *grad_params = ctx.saved_tensors
        return (
            grad_hidden * grad_loss.to(grad_hidden.dtype),
            *[None]
            * 10,  # teacher_hidden, valid, weights, student_head, teacher_head, compact_ids, chunk_size, top_k…
            *[g * grad_loss.to(g.dtype) for g in grad_params],
        )


def _check_ttt_inputs(student_hidden, teacher_hidden, valid, chunk_size: int) -> None:
    """Raises on shapes that do not match ((S, N, d) states, (S, N) mask, N teacher rows) or a chunk size < 1."""
    if student_hidden.dim() != 3 or valid.shape != student_hidden.shape[:2]:
        raise ValueError(
            f"`student_hidden` must be (S, N, d) matching `valid` (S, N); got {tuple(student_hidden.shape)} and "
            f"{tuple(valid.shape)}."
        )
    if teacher_hidden.shape[0] != student_hidden.shape[1]:
        raise ValueError(f"`teacher_hidden` has {teacher_hidden.shape[0]} rows, expected {student_hidden.shape[1]}.")
    if chunk_size < 1:
        raise ValueError(f"`kl_chunk_size` ({chunk_size}) must be a positive number of positions.")


@torch.no_grad()
def _ttt_loss_without_grad(
    student_hidden,
    teacher_hidden,
    valid,
    weights,
    student_head,
    teacher_head,
    compact_ids,
    chunk_size,
    top_k,
    top_k_weight,
    objective,
) -> TTTLossOutput:
    """What `_FusedHeadKL.forward` returns (same arguments, no parameters), without computing any gradient."""
    num_steps, num_rows = valid.shape
    counts = valid.sum(-1)
    kl_sum = torch.zeros(num_steps, dtype=torch.float32, device=student_hidden.device)
    objective_sum = torch.zeros_like(kl_sum)
    correct = torch.zeros(num_steps, dtype=torch.long, device=student_hidden.device)
    for start in range(0, num_rows, chunk_size):
        rows = slice(start, start + chunk_size)
        if not valid[:, rows].any():
            continue
        teacher = _teacher_chunk(teacher_head, teacher_hidden[rows], compact_ids, top_k)
        for k in range(num_steps):
            keep = valid[k, rows]
            if not keep.any():
                continue
            logits = student_head(student_hidden[k, rows])
            kl, value, hit, _ = _student_step(logits, teacher, top_k_weight, objective)
            kl_sum[k] += kl.float().masked_fill(~keep, 0).sum()
            objective_sum[k] += value.float().masked_fill(~keep, 0).sum()
            correct[k] += (hit & keep).sum()
    step_kl = kl_sum / counts.clamp(min=1)
    loss = (objective_sum / counts.clamp(min=1) * weights.to(step_kl.device)).sum()
    return TTTLossOutput(loss, step_kl, correct, counts)


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
    top_k: int = 0,
    top_k_weight: float = 1.0,
    objective: Objective = KL_OBJECTIVE,
) -> TTTLossOutput:
    """Σ_k weights[k] · mean over valid rows of KL(p_teacher ‖ q_student) (or of the LK loss `objective` names),
    computed chunk by chunk.

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
        top_k, top_k_weight: with `top_k` > 0, HASS's top-k distillation term `top_k_weight · (−Σ_{j ∈ top-k(p)}
            p_j log q_j)` is added to each row's KL in the loss (`step_kl` still reports the KL alone).
        objective: the KL (default) or an LK loss (`Objective`); `step_kl` reports the KL whatever is minimised.
    """
    _check_ttt_inputs(student_hidden, teacher_hidden, valid, chunk_size)
    params = [p for p in params if p.requires_grad]
    inputs = (  # `_FusedHeadKL.forward`'s arguments, before the parameters
        student_hidden,
        teacher_hidden.detach(),
        valid,
        weights.float(),
        student_head,
        teacher_head,
        compact_ids,
        chunk_size,
        top_k,
        top_k_weight if top_k else 0.0,
        objective,
    )
    if torch.is_grad_enabled() and (student_hidden.requires_grad or bool(params)):
        return TTTLossOutput(*_FusedHeadKL.apply(*inputs, *params))
    return _ttt_loss_without_grad(*inputs)


__all__ = [
    "LOSS_TYPES",
    "Objective",
    "effective_chunk_size",
    "forward_kl",
    "step_weights",
    "ttt_targets",
    "ttt_kl_loss",
    "TTTLossOutput",
]
