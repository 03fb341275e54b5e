# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Draft shapes fitted to the machine: the expected speed of each candidate shape from measured costs and the
drafter's per-depth acceptance, and the choice among them (`draft_shape="auto"`).

A round of shape s (a tree of `size` nodes, `depth` levels, `top_k` children per expanded node; a chain of k is
k/k/1) over a batch of B rows costs

    T(s) = T_verify(B, size + 1) + T_draft(B, E(s)) + (depth - 1) · T_draft(B, top_k)

(the target verifying size + 1 tokens per row; the drafter's first step over the accepted tokens, then one step per
further level over `top_k` nodes per row) and yields, per row,

    E(s) = 1 + Σ_{i=1..depth} Π_{j≤i} c_j(m_j)

tokens, where c_j(m) is the probability that the target's token at depth j is among the drafter's m likeliest there
(the path before it held) and m_j the children of the true path's node at depth j that the tree keeps (its `size`
nodes spread over the depths where they add most). Plain decoding yields one token per row for T_verify(B, 1). The
shape with the most tokens per second, B · E(s) / T(s), is used; plain decoding when none beats it.

Imports only the standard library: part of the remote-code unit.
"""

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DraftShape:
    """A round's draft: `size` nodes verified over `depth` levels with `top_k` children per expanded node (a chain of
    k is k/k/1); size 0 is plain decoding (no drafter)."""

    size: int = 0
    depth: int = 0
    top_k: int = 1

    @property
    def is_plain(self) -> bool:
        return self.size == 0

    @property
    def is_chain(self) -> bool:
        return self.size > 0 and self.top_k == 1

    def __str__(self) -> str:
        if self.is_plain:
            return "plain"
        return f"chain {self.size}" if self.is_chain else f"tree {self.size}/{self.depth}/{self.top_k}"

    def settings(self) -> dict:
        """The decoding settings (names of `DraftSettings`) that draft this shape; plain decoding has none."""
        if self.is_plain:
            return {}
        if self.is_chain:
            return {"num_assistant_tokens": self.size, "draft_tree_size": 0}
        return {"draft_tree_size": self.size, "draft_tree_depth": self.depth, "draft_tree_top_k": self.top_k}


def candidate_shapes(max_size: int, max_depth: int = 8, top_ks: tuple[int, ...] = (2, 4, 8)) -> list[DraftShape]:
    """Plain decoding, chains of 1..`max_depth`, and trees of every depth up to `max_depth` with `top_k` children
    and sizes doubling from `top_k` up to `max_size` nodes."""
    shapes = [DraftShape()]
    shapes += [DraftShape(k, k, 1) for k in range(1, min(max_depth, max_size) + 1)]
    for top_k in top_ks:
        for depth in range(1, max_depth + 1):
            size = top_k
            while size <= max_size:
                if size >= depth:  # every level holds a node
                    shapes.append(DraftShape(size, depth, top_k))
                size *= 2
    return shapes


@dataclass
class DepthAcceptance:
    """The drafter's per-depth acceptance: at depth j (1-based), how often the target's token was the drafter's
    m-th likeliest (m = 1..`max_rank`) or further down, counted over rounds whose path reached depth j. Starts from
    a `prior` worth `prior_weight` rounds per depth; `add` counts a round's observations."""

    max_rank: int = 8
    max_depth: int = 8
    prior: tuple[float, ...] = (0.6, 0.1, 0.05, 0.03, 0.02, 0.02, 0.01, 0.01)  # P(rank m) at any depth
    prior_weight: float = 4.0
    counts: list[list[float]] = field(default_factory=list)  # [depth][rank], rank max_rank = not among them

    def __post_init__(self):
        if not self.counts:
            self.counts = [[0.0] * (self.max_rank + 1) for _ in range(self.max_depth)]

    def add(self, depth: int, rank: int | None) -> None:
        """One observation: the target's token at `depth` was the drafter's `rank`-th likeliest (1-based; None or
        beyond `max_rank`: not among them). Depths past `max_depth` are not kept."""
        if 1 <= depth <= self.max_depth:
            slot = self.max_rank if rank is None or rank > self.max_rank else rank - 1
            self.counts[depth - 1][slot] += 1.0

    def observed(self, depth: int) -> float:
        return sum(self.counts[depth - 1]) if 1 <= depth <= self.max_depth else 0.0

    def coverage(self, depth: int, m: int) -> float:
        """c_depth(m): the probability that the target's token at `depth` is among the drafter's m likeliest."""
        if m <= 0:
            return 0.0
        row = self.counts[min(depth, self.max_depth) - 1]
        m = min(m, self.max_rank)
        prior = list(self.prior[: self.max_rank]) + [0.0] * (self.max_rank - len(self.prior))
        hits = sum(row[:m]) + self.prior_weight * sum(prior[:m])
        return hits / (sum(row) + self.prior_weight * 1.0)

    def as_dict(self) -> dict:
        return {"max_rank": self.max_rank, "counts": [list(map(float, row)) for row in self.counts]}

    @classmethod
    def from_dict(cls, values: dict, **kwargs) -> "DepthAcceptance":
        counts = [list(map(float, row)) for row in values["counts"]]
        return cls(max_rank=int(values["max_rank"]), max_depth=len(counts), counts=counts, **kwargs)


def expected_tokens(shape: DraftShape, acceptance: DepthAcceptance) -> float:
    """E(s): tokens a round of `shape` yields per row (accepted drafts + the target's own token).

    The tree's nodes go, one at a time, to the depth where one more child of the true path's node adds most to E
    (a node at depth j needs one at j - 1; at most `top_k` per depth) — the likeliest-first keep of a dynamic tree,
    seen along the path that the target takes."""
    if shape.is_plain:
        return 1.0
    children = [0] * shape.depth

    def tokens(ms: list[int]) -> float:
        total, reach = 1.0, 1.0
        for j, m in enumerate(ms, start=1):
            reach *= acceptance.coverage(j, m)
            total += reach
        return total

    for _ in range(shape.size):
        best, best_gain = None, -1.0
        for j in range(shape.depth):
            if children[j] >= shape.top_k or (j > 0 and children[j - 1] == 0):
                continue
            trial = children.copy()
            trial[j] += 1
            gain = tokens(trial) - tokens(children)
            if gain > best_gain + 1e-12:
                best, best_gain = j, gain
        if best is None:
            break
        children[best] += 1
    return tokens(children)


@dataclass(frozen=True)
class RoundCosts:
    """Measured costs at one batch size, in seconds: `verify[n - 1]` the target verifying n tokens per row,
    `draft[w - 1]` one drafter step over w nodes per row."""

    batch_size: int
    verify: tuple[float, ...]
    draft: tuple[float, ...]

    @staticmethod
    def _at(curve: tuple[float, ...], n: float) -> float:
        """`curve` at n (1-based), interpolated between measured points, extended linearly past the last two."""
        if n <= 1:
            return curve[0]
        if n <= len(curve):
            low = math.floor(n)
            high = min(low + 1, len(curve))
            return curve[low - 1] + (n - low) * (curve[high - 1] - curve[low - 1])
        slope = curve[-1] - curve[-2] if len(curve) > 1 else 0.0
        return curve[-1] + (n - len(curve)) * max(slope, 0.0)

    def verify_time(self, tokens: float) -> float:
        return self._at(self.verify, tokens)

    def draft_time(self, nodes: float) -> float:
        return self._at(self.draft, nodes)


def round_time(shape: DraftShape, costs: RoundCosts, tokens: float) -> float:
    """T(s): one round of `shape` at `costs` when a round yields `tokens` per row (the drafter's first step runs
    over them)."""
    if shape.is_plain:
        return costs.verify_time(1)
    return (
        costs.verify_time(shape.size + 1)
        + costs.draft_time(tokens)
        + (shape.depth - 1) * costs.draft_time(shape.top_k)
    )


@dataclass(frozen=True)
class ShapeChoice:
    """The chosen shape, its predicted tokens per second and speed-up over plain decoding, and every candidate's
    prediction (tokens/s by shape name) for reporting."""

    shape: DraftShape
    tokens_per_second: float
    speedup: float
    predictions: dict = field(default_factory=dict)


def choose_shape(
    candidates: list[DraftShape], costs: RoundCosts, acceptance: DepthAcceptance, calibration: float = 1.0
) -> ShapeChoice:
    """The candidate with the most predicted tokens per second (B · E / T); plain decoding when none beats it.
    `calibration` scales the predicted accepted tokens (measured / predicted, from the running call)."""
    plain_speed = costs.batch_size / costs.verify_time(1)
    predictions = {"plain": plain_speed}
    best, best_speed = DraftShape(), plain_speed
    for shape in candidates:
        if shape.is_plain or shape.size + 1 > len(costs.verify) or shape.top_k > len(costs.draft):
            continue  # only shapes whose costs were measured
        tokens = 1.0 + calibration * (expected_tokens(shape, acceptance) - 1.0)
        speed = costs.batch_size * tokens / round_time(shape, costs, tokens)
        predictions[str(shape)] = speed
        if speed > best_speed * (1 + 1e-9):
            best, best_speed = shape, speed
    return ShapeChoice(best, best_speed, best_speed / plain_speed, predictions)


__all__ = [
    "DraftShape",
    "candidate_shapes",
    "DepthAcceptance",
    "expected_tokens",
    "RoundCosts",
    "round_time",
    "ShapeChoice",
    "choose_shape",
]
