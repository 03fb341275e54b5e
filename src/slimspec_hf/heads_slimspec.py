# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The LM heads of SlimSpec drafters: the low-rank SlimSpec head and the baselines (full, trimmed, the target's).

Each maps (..., d) hidden states to full-vocabulary logits (..., V). Part of the remote-code unit (imported by
`modeling_slimspec.py`; only `torch`, `transformers` and the configuration sibling).

Shapes: d drafter width, V vocabulary, r head rank, K trimmed vocabulary.
"""

import time

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_slimspec import HEAD_TYPES, SlimSpecDrafterConfig


class LowRankHead(nn.Module):
    """SlimSpec head `z = W_up · W_down · h`: W_down (r×d), W_up (V×r), no bias, no nonlinearity."""

    def __init__(self, hidden_size: int, vocab_size: int, rank: int):
        super().__init__()
        self.down = nn.Linear(hidden_size, rank, bias=False)
        self.up = nn.Linear(rank, vocab_size, bias=False)
        self.store_column_major()

    def store_column_major(self) -> None:
        store_column_major(self.up.weight)

    def fit_layout(self) -> None:
        fit_layout(self.up.weight)  # W_down (r×d) is too small for its layout to matter

    @property
    def rank(self) -> int:
        return self.down.out_features

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return head_logits(self.down(hidden_states), self.up.weight)

    def merged_weight(self) -> torch.Tensor:
        """The dense V×d matrix W_up·W_down (computed in fp32)."""
        return self.up.weight.float() @ self.down.weight.float()

    @torch.no_grad()
    def init_from_dense(self, weight: torch.Tensor) -> None:
        """Sets the factors to the best rank-r approximation of `weight` (V×d) in Frobenius norm."""
        down, up = low_rank_factors(weight, self.rank)
        if up.shape != self.up.weight.shape or down.shape != self.down.weight.shape:
            raise ValueError(
                f"`weight` of shape {tuple(weight.shape)} does not fit a head with up {tuple(self.up.weight.shape)} "
                f"and down {tuple(self.down.weight.shape)}."
            )
        self.down.weight.copy_(down)
        self.up.weight.copy_(up)

    @classmethod
    def from_dense(cls, weight: torch.Tensor, rank: int) -> "LowRankHead":
        """A low-rank head initialised by truncated SVD of a dense head `weight` (V×d)."""
        vocab_size, hidden_size = weight.shape
        head = cls(hidden_size, vocab_size, rank).to(device=weight.device, dtype=weight.dtype)
        head.init_from_dense(weight)
        return head


@torch.no_grad()
def store_column_major(weight: nn.Parameter) -> None:
    """Keeps a head's (out×in) weight in column-major memory order: same values, name and checkpoint.

    `F.linear` then runs (…, in) @ (in, out), streaming the weight at memory bandwidth. With the row-major layout
    of `nn.Linear`, each logit of a rank-r head is an r-long dot product, which CPU BLAS runs far below the MAC
    limit at batch 1; column-major, W_up gets close to it and the fp32 full head gets faster too (figures:
    docs/head_benchmark.md). Every head gets the same treatment so that head comparisons stay fair.
    """
    if weight.dim() == 2 and weight.stride() != (1, weight.shape[0]):
        weight.data = weight.data.t().contiguous().t()
        weight._fitted_layout = weight._weight_first = None  # timed again (`fit_layout`) in this order


LAYOUT_ROWS = (1, 4)  # a draft step scores one row (a chain's, a tree's root) or a few (a tree level, a batch)
HALF_DTYPES = (torch.bfloat16, torch.float16)
WEIGHT_GROUP = 16  # weight rows side by side in one row's grouped product (`weight_first`)


def head_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`F.linear(hidden, weight)`: (..., in) -> (..., out); with the weight first where `fit_layout` found that
    faster here (`weight_first`, its group of rows fitted too)."""
    if getattr(weight, "_weight_first", None) != weight.dtype or weight.device.type != "cpu":
        return F.linear(hidden, weight)
    return weight_first(hidden, weight, weight._weight_group)


def weight_first(hidden: torch.Tensor, weight: torch.Tensor, group: int = 1) -> torch.Tensor:
    """`F.linear(hidden, weight)` with the weight first: `weight @ hidden.T` over several rows; one row a
    matrix-vector product, or with `group` > 1 (out % group = 0) one matmul over the row-major weight viewed as
    out/group rows of `group` weight rows side by side, against `group` copies of the row on a block diagonal: a
    rank-80 factor's rows are 80 numbers, too short for a vector kernel to stream them at memory speed; grouped they
    are 1,280 (the same products and sums, group-fold multiply-adds by zero that the matmul kernel absorbs)."""
    flat = hidden.reshape(-1, hidden.shape[-1])
    if flat.shape[0] != 1:
        out = (weight @ flat.T).T.contiguous()
    elif group > 1:
        blocks = torch.block_diag(*[flat[0, :, None]] * group)  # (group · in, group)
        out = (weight.view(-1, group * weight.shape[1]) @ blocks).reshape(1, -1)
    else:
        out = torch.mv(weight, flat[0])[None]
    return out.reshape(*hidden.shape[:-1], weight.shape[0])


@torch.no_grad()
def fit_layout(weight: nn.Parameter, repeats: int = 5) -> None:
    """Keeps a head's (out×in) weight in the memory order and kernel that run fastest on this CPU over `LAYOUT_ROWS`
    rows, timed once per dtype (the same values, name and checkpoint): `F.linear` over the column-major weight
    (fastest in fp32: `store_column_major`) or the row-major one, and in half precision the weight first
    (`head_logits`): on a Xeon with AMX, one row, cache cold, oneDNN's bf16 `F.linear` runs a 262,144 × 640 head in
    42.8 ms and its rank-80 factor in 8.3, a matrix-vector product in 27.5 and 5.6, 16 rows grouped in 23.7 and 4.1
    (docs/results.md). Not timed on accelerators, nor while training."""
    if weight.device.type != "cpu" or weight.dim() != 2 or getattr(weight, "_fitted_layout", None) == weight.dtype:
        return
    data = weight.data  # one copy at most: the order it is not already in
    column = data if data.stride() == (1, data.shape[0]) else data.t().contiguous().t()
    row = data.contiguous()
    kernels = [(column, F.linear, 0), (row, F.linear, 0)]  # column-major first: the default
    if data.dtype in HALF_DTYPES:
        groups = (1, WEIGHT_GROUP) if data.shape[0] % WEIGHT_GROUP == 0 else (1,)
        kernels += [(row, weight_first, group) for group in groups]

    def seconds(w: torch.Tensor, kernel, group: int) -> float:
        total = 0.0
        for rows in LAYOUT_ROWS:
            x = torch.ones(rows, w.shape[1], dtype=w.dtype)
            args = (x, w, group) if group else (x, w)
            kernel(*args)  # warm-up
            runs = []
            for _ in range(repeats):
                start = time.perf_counter()
                kernel(*args)
                runs.append(time.perf_counter() - start)
            total += sorted(runs)[len(runs) // 2]  # the median: one call in a few runs far slower or faster
        return total

    times = [seconds(*way) for way in kernels]
    weight.data, kernel, weight._weight_group = kernels[min(range(len(kernels)), key=times.__getitem__)]
    weight._weight_first = weight.dtype if kernel is weight_first else None
    weight._fitted_layout = weight.dtype


def low_rank_factors(weight: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncated SVD `weight ≈ up @ down` with `down` (r×d) and `up` (V×r), singular values split evenly.

    Computed in fp32: the SVD of a bf16/fp16 matrix loses the small singular values the error depends on.
    """
    if weight.dim() != 2:
        raise ValueError(f"`weight` must be a 2-D (V×d) matrix, got shape {tuple(weight.shape)}.")
    if not 0 < rank < min(weight.shape):
        raise ValueError(f"`rank` ({rank}) must satisfy 0 < rank < min(V, d) = {min(weight.shape)}.")
    u, s, vh = torch.linalg.svd(weight.detach().float(), full_matrices=False)  # (V, d), (d,), (d, d)
    root = s[:rank].sqrt()
    down = root[:, None] * vh[:rank]  # (r, d)
    up = u[:, :rank] * root[None, :]  # (V, r)
    return down.to(weight.dtype), up.to(weight.dtype)


class FullHead(nn.Linear):
    """The usual dense V×d head, trained with the drafter."""

    def __init__(self, hidden_size: int, vocab_size: int, **factory):
        super().__init__(hidden_size, vocab_size, bias=False, **factory)  # factory: device, dtype
        self.store_column_major()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return head_logits(hidden_states, self.weight)

    def store_column_major(self) -> None:
        store_column_major(self.weight)

    def fit_layout(self) -> None:
        fit_layout(self.weight)


class TrimmedHead(nn.Module):
    """VocabTrim-T baseline: a K×d head over the K most frequent tokens; other logits are -inf."""

    def __init__(self, hidden_size: int, vocab_size: int, draft_vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.weight = nn.Parameter(torch.empty(draft_vocab_size, hidden_size))
        # -1 marks "no token set yet"; set_token_ids() or loading a checkpoint fills it.
        self.register_buffer("token_ids", torch.full((draft_vocab_size,), -1, dtype=torch.long))
        self.store_column_major()

    def store_column_major(self) -> None:
        store_column_major(self.weight)

    def fit_layout(self) -> None:
        fit_layout(self.weight)

    @property
    def has_token_set(self) -> bool:
        return bool(self.token_ids.numel()) and int(self.token_ids[0]) >= 0

    @torch.no_grad()
    def set_token_ids(self, token_ids: torch.Tensor, dense_weight: torch.Tensor | None = None) -> None:
        token_ids = torch.as_tensor(token_ids, dtype=torch.long).flatten()
        if token_ids.numel() != self.token_ids.numel():
            raise ValueError(f"`token_ids` must hold {self.token_ids.numel()} ids, got {token_ids.numel()}.")
        if int(token_ids.min()) < 0 or int(token_ids.max()) >= self.vocab_size:
            raise ValueError(f"`token_ids` must lie in [0, {self.vocab_size}).")
        if token_ids.unique().numel() != token_ids.numel():
            raise ValueError("`token_ids` must not repeat a token.")
        self.token_ids.copy_(token_ids.to(self.token_ids.device))
        if dense_weight is not None:
            self.weight.copy_(dense_weight[self.token_ids.to(dense_weight.device)].to(self.weight))

    def compact_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Logits over the K kept tokens only (..., K)."""
        return head_logits(hidden_states, self.weight)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if not self.has_token_set:
            raise ValueError(
                "The trimmed head has no token set: call `drafter.lm_head.set_token_ids(ids)` with the "
                "`draft_vocab_size` most frequent tokens, or load a checkpoint that holds `lm_head.token_ids`."
            )
        compact = self.compact_logits(hidden_states)  # (..., K)
        logits = compact.new_full((*compact.shape[:-1], self.vocab_size), float("-inf"))
        return logits.index_copy_(-1, self.token_ids, compact)


class TargetHead(nn.Module):
    """The target's own LM head, frozen and borrowed at run time (never stored in the drafter's checkpoint)."""

    def __init__(self):
        super().__init__()
        self._target_head = None  # kept out of the module tree so it is never saved nor trained

    def set_target_head(self, head: nn.Module) -> None:
        object.__setattr__(self, "_target_head", head)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self._target_head is None:
            raise ValueError(
                "head_type='target' borrows the target's LM head: call `drafter.attach_target(target)` first "
                "(`generate(assistant_model=drafter)` does it for you)."
            )
        weight = self._target_head.weight
        return F.linear(hidden_states.to(weight.dtype), weight)


def build_head(config: SlimSpecDrafterConfig) -> nn.Module:
    if config.head_type == "low_rank":
        return LowRankHead(config.hidden_size, config.vocab_size, config.head_rank)
    if config.head_type == "full":
        return FullHead(config.hidden_size, config.vocab_size)
    if config.head_type == "trimmed":
        return TrimmedHead(config.hidden_size, config.vocab_size, config.draft_vocab_size)
    if config.head_type == "target":
        return TargetHead()
    raise ValueError(f"`head_type` must be one of {list(HEAD_TYPES)}, got {config.head_type!r}.")


@torch.no_grad()
def with_merged_head(drafter):
    """A copy of a low-rank drafter whose head is W_up·W_down multiplied out into one dense V×d head: the same
    drafts (up to rounding), a full head's cost — the baseline that isolates what the low-rank head saves. The copy
    shares the borrowed target embedding; its head is in the drafter's dtype and on its device."""
    import copy

    head = drafter.lm_head
    if not isinstance(head, LowRankHead):
        raise ValueError(f"`drafter` must have a low-rank head to merge, got head_type={drafter.config.head_type!r}.")
    embedding = drafter.get_input_embeddings()
    merged = copy.deepcopy(drafter, memo={id(embedding): embedding} if embedding is not None else None)
    weight = head.merged_weight().to(head.up.weight.dtype)  # (V, d), computed in fp32
    dense = FullHead(weight.shape[1], weight.shape[0]).to(device=weight.device, dtype=weight.dtype)
    dense.weight.copy_(weight)
    dense.store_column_major()
    merged.lm_head = dense
    merged.config.head_type, merged.config.head_rank = "full", None
    return merged


__all__ = [
    "with_merged_head",
    "LowRankHead",
    "FullHead",
    "TrimmedHead",
    "TargetHead",
    "build_head",
    "low_rank_factors",
    "store_column_major",
    "fit_layout",
    "head_logits",
]
