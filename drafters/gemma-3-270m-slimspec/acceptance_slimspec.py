# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The drafter's per-depth acceptance, what `draft_shape="auto"` prices a shape's tokens with: at depth j, how often
the target's token was among the drafter's m likeliest there (sampling: one of its first m draws was accepted),
counted from every verified round (`record_depths`), kept per drafter and mode for the process (`depth_acceptance`,
starting from what the drafter's generation config stores), and the tokens a tree of each size is expected to yield
from it (`tokens_by_size`; the formula is in `shapes_slimspec`); and what prompt lookup's drafts yield in the text
decoded (`LookupRate`, per drafter and mode for the process: `lookup_rate`).

Part of the remote-code unit: it imports only the standard library and `costs_slimspec`.
"""

import weakref
from dataclasses import dataclass, field

from .costs_slimspec import ACCEPTANCE_MODES


@dataclass
class DepthAcceptance:
    """The drafter's per-depth acceptance: at depth j (1-based), how often the target's token was the drafter's
    m-th likeliest (m = 1..`max_rank`) or further down, counted over rounds whose path reached depth j. Starts from
    a `prior` worth `prior_weight` rounds per depth; `add` counts a round's observations.

    Sampling (`draws`): the draws at a node are tested in the order drawn, so `counts[j][m - 1]` counts rounds whose
    m-th draw was accepted and `censored[j][n - 1]` rounds whose n draws were all rejected (`add_draw`). A round
    with fewer draws says nothing about the later ones: c(m) = 1 - Π_{i≤m} (1 - h_i), each draw's acceptance h_i
    measured over the rounds that tested an i-th draw (h_1's prior is `prior[0]`, each later draw's is h_1)."""

    max_rank: int = 8
    max_depth: int = 8
    prior: tuple[float, ...] = (0.6, 0.1, 0.05, 0.03, 0.02, 0.02, 0.01, 0.01)  # P(rank m) at any depth
    prior_weight: float = 4.0
    counts: list[list[float]] = field(default_factory=list)  # [depth][rank], rank max_rank = not among them
    draws: bool = False  # sampling: ranks are draws in test order, and rounds that drew fewer are `censored`
    censored: list[list[float]] = field(default_factory=list)  # [depth][n - 1]: rounds whose n draws all failed

    def __post_init__(self):
        if not self.counts:
            self.counts = [[0.0] * (self.max_rank + 1) for _ in range(self.max_depth)]
        if not self.censored:
            self.censored = [[0.0] * self.max_rank for _ in self.counts]

    def add(self, depth: int, rank: int | None) -> None:
        """One observation: the target's token at `depth` was the drafter's `rank`-th likeliest (1-based; None or
        beyond `max_rank`: not among them). Depths past `max_depth` are not kept."""
        if 1 <= depth <= self.max_depth:
            slot = self.max_rank if rank is None or rank > self.max_rank else rank - 1
            self.counts[depth - 1][slot] += 1.0

    def add_draw(self, depth: int, accepted: int | None, drawn: int) -> None:
        """Sampling: at `depth`, the `accepted`-th of `drawn` draws was accepted (1-based; None: all rejected)."""
        if not 1 <= depth <= self.max_depth or drawn < 1:
            return
        if accepted is None:
            self.censored[depth - 1][min(drawn, self.max_rank) - 1] += 1.0
        else:
            self.add(depth, accepted)

    def observed(self, depth: int) -> float:
        if not 1 <= depth <= self.max_depth:
            return 0.0
        return sum(self.counts[depth - 1]) + sum(self.censored[depth - 1])

    def coverage(self, depth: int, m: int) -> float:
        """c_depth(m): the probability that the target's token at `depth` is among the drafter's m likeliest
        (sampling: that one of its first m draws there is accepted)."""
        if m <= 0:
            return 0.0
        if self.draws:
            return self.draw_coverage(depth, m)
        row = self.counts[min(depth, self.max_depth) - 1]
        m = min(m, self.max_rank)
        prior = list(self.prior[: self.max_rank]) + [0.0] * (self.max_rank - len(self.prior))
        hits = sum(row[:m]) + self.prior_weight * sum(prior[:m])
        return hits / (sum(row) + self.prior_weight * 1.0)

    def draw_coverage(self, depth: int, m: int) -> float:
        """Sampling's c_depth(m) from each draw's measured acceptance (see the class)."""
        j = min(depth, self.max_depth) - 1
        row, censored = self.counts[j], self.censored[j]
        missed, first, hazard = 1.0, 0.0, 0.0
        for i in range(1, m + 1):
            if i <= self.max_rank:  # past the ranks kept, each further draw as the last one kept
                tested = sum(row[i - 1 :]) + sum(censored[i - 1 :])  # rounds that tested an i-th draw
                prior = self.prior[0] if i == 1 else first
                weight = tested + self.prior_weight
                hazard = (row[i - 1] + self.prior_weight * prior) / weight if weight > 0 else prior
                first = hazard if i == 1 else first
            missed *= 1.0 - hazard
        return 1.0 - missed

    def as_dict(self) -> dict:
        values = {"max_rank": self.max_rank, "counts": [[round(c, 2) for c in row] for row in self.counts]}
        if self.draws:
            values["censored"] = [[round(c, 2) for c in row] for row in self.censored]
        return values

    @classmethod
    def from_dict(cls, values, weight: float | None = None, **kwargs) -> "DepthAcceptance":
        """From `as_dict()`'s form; with `weight`, each depth's counts scaled down to at most that many rounds (a
        stored measurement that the running call's own rounds soon outweigh). A sampled measurement without
        `censored` (counted as accepted or not per depth) reads as one draw a round."""
        try:
            max_rank, counts = int(values["max_rank"]), [[float(c) for c in row] for row in values["counts"]]
            if max_rank < 1 or not counts or any(len(row) != max_rank + 1 or min(row) < 0 for row in counts):
                raise ValueError
            censored = [[float(c) for c in row] for row in values.get("censored") or []]
            if censored and (len(censored) != len(counts) or any(len(r) != max_rank or min(r) < 0 for r in censored)):
                raise ValueError
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ValueError(
                f"`draft_acceptance`: expected {{'max_rank': m, 'counts': [[m + 1 counts >= 0] per depth]}}, got "
                f"{str(values)[:80]}; measure it again (`slimspec bench --save-acceptance`) or remove it."
            ) from None
        if kwargs.get("draws") and not censored:  # accepted (rank 1) or not, one draw a round
            censored = [[row[max_rank]] + [0.0] * (max_rank - 1) for row in counts]
            counts = [[*row[:max_rank], 0.0] for row in counts]
        censored = censored or [[0.0] * max_rank for _ in counts]
        if weight is not None:
            totals = [sum(row) + sum(cut) for row, cut in zip(counts, censored)]
            scales = [min(1.0, weight / total) if total else 1.0 for total in totals]
            counts = [[c * k for c in row] for row, k in zip(counts, scales)]
            censored = [[c * k for c in row] for row, k in zip(censored, scales)]
        return cls(max_rank=max_rank, max_depth=len(counts), counts=counts, censored=censored, **kwargs)


def tokens_by_size(acceptance: DepthAcceptance, depth: int, top_k: int, max_size: int) -> list[float]:
    """E of the trees of `depth` levels and `top_k` children for every size 0..`max_size` (index = size).

    The nodes go, one at a time, to the depth where one more child of the true path's node adds most to E (a node
    at depth j needs one at j - 1; at most `top_k` per depth) — the likeliest-first keep of a dynamic tree, seen along
    the path that the target takes. One pass serves every size: the allocation for size n + 1 extends the one for n.
    """
    table = [[acceptance.coverage(j, m) for m in range(top_k + 1)] for j in range(1, depth + 1)]
    children = [0] * depth
    reach = [0.0] * depth  # reach[j]: the path gets past depth j + 1, Π_{l≤j} c_l(m_l)
    sizes = [1.0]
    for _ in range(max_size):
        suffix, best, best_gain = 0.0, None, -1.0
        tail = [0.0] * (depth + 1)  # tail[j] = Σ_{i≥j} reach[i]
        for j in range(depth - 1, -1, -1):
            suffix += reach[j]
            tail[j] = suffix
        for j in range(depth):
            m = children[j]
            if m >= top_k or (j > 0 and children[j - 1] == 0):
                continue
            before = 1.0 if j == 0 else reach[j - 1]
            if m == 0:
                gain = before * table[j][1]  # the first node at this depth: only its own term
            else:
                gain = (table[j][m + 1] / table[j][m] - 1.0) * tail[j] if table[j][m] > 0 else before * table[j][m + 1]
            if gain > best_gain + 1e-12:
                best, best_gain = j, gain
        if best is None:
            sizes.append(sizes[-1])
            continue
        children[best] += 1
        running = 1.0
        for j in range(depth):
            running *= table[j][children[j]]
            reach[j] = running
        sizes.append(1.0 + sum(reach))
    return sizes


# What the calls of this process counted: each drafter's per-depth acceptance (greedy and sampled apart). Weak keys:
# a drafter's entries go with it.
_ACCEPTANCE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
STORED_ROUNDS = 64.0  # what a stored measurement is worth, in rounds per depth


def depth_acceptance(drafter, sampled: bool) -> DepthAcceptance:
    """The per-depth acceptance measured for `drafter` (greedy or sampled), starting from what its generation config
    stores (`draft_acceptance`, written by `slimspec bench --save-acceptance`; worth at most `STORED_ROUNDS` rounds
    per depth), else from the prior."""
    per_mode = _ACCEPTANCE.setdefault(drafter, {})
    if sampled not in per_mode:
        stored = getattr(getattr(drafter, "generation_config", None), "draft_acceptance", None) or {}
        mode = ACCEPTANCE_MODES[sampled]
        per_mode[sampled] = (
            DepthAcceptance.from_dict(stored[mode], weight=STORED_ROUNDS, draws=sampled)
            if stored.get(mode)
            else DepthAcceptance(draws=sampled)
        )
    return per_mode[sampled]


def measured_acceptance(drafter) -> dict:
    """What `draft_acceptance` stores: the per-depth acceptance this process holds for `drafter`, per mode it
    counted rounds in ({"greedy": ..., "sampled": ...})."""
    per_mode = _ACCEPTANCE.get(drafter, {})
    return {ACCEPTANCE_MODES[s]: a.as_dict() for s, a in sorted(per_mode.items()) if a.observed(1) > 0}


def record_depths(acceptance: DepthAcceptance, tree, path: list[int], token: int, sampled: bool) -> None:
    """Counts one row's verified round in `acceptance`: at each depth the target reached below a node the drafter
    expanded, the rank of the target's token among the drafter's children there (greedy: `tree.ranked`), or which of
    the drafter's draws was accepted (sampling: `tree.proposals`, tested in order). A draw rejected there leaves the
    target no mass on its token, so the first draw of the token emitted is the one accepted, and a token emitted that
    no draw holds means every draw was rejected; a lookup draft accepted before the draws says nothing of them."""
    node, tokens = -1, [tree.tokens[n] for n in path] + [token]
    for depth, target_token in enumerate(tokens, start=1):
        if sampled:
            proposals = tree.proposals.get(node, [])
            drawn = [p.token for p in proposals if p.q is not None]
            if not drawn or any(p.q is None and p.token == target_token for p in proposals):
                return
            at = drawn.index(target_token) + 1 if target_token in drawn else None
            acceptance.add_draw(depth, at, len(drawn))
        else:
            children = tree.ranked.get(node)
            if children is None:
                return
            acceptance.add(depth, children.index(target_token) + 1 if target_token in children else None)
        if depth > len(path):
            return
        node = path[depth - 1]


# what lookup's grafts add per drafter row before any is measured, and what that guess is worth in rows: measured, they
# add 0.3-0.7 tokens a row to SmolLM2's sampled rounds (MT-Bench)
GRAFT_PRIOR, GRAFT_PRIOR_ROWS = 0.3, 16.0


@dataclass
class LookupRate:
    """What prompt lookup would do in a row's round, counted from the text decoded: over `rounds` row-rounds, in
    `alone` of them its match was long enough to draft alone, verifying `width` tokens per row in all (its draft and
    the root) and yielding `tokens` (its draft's agreement with the tokens the target went on to emit, plus the
    target's own). Every round of a `draft_shape="auto"` call counts, whether or not it drafted with lookup: a lookup
    draft is accepted exactly as far as it agrees with the target's tokens (greedy; sampled, a one-hot draft is
    accepted exactly when the target's draw is its token, so the agreement has the acceptance's distribution)."""

    rounds: float = 0.0
    alone: float = 0.0
    tokens: float = 0.0
    width: float = 0.0
    # the drafter's rows of rounds that drafted with lookup: how many, the tokens its grafts added to their accepted
    # paths, how many it grafted onto and the nodes those grafts added to the verified ones
    drafted: float = 0.0
    graft_tokens: float = 0.0
    grafted: float = 0.0
    graft_nodes: float = 0.0

    def add_graft(self, tokens: int, nodes: int) -> None:
        """One drafter row of a round that drafted with lookup: its grafts added `tokens` to the accepted path and
        `nodes` to the verified ones (0 and 0: nothing grafted)."""
        self.drafted += 1.0
        self.graft_tokens += float(tokens)
        if nodes > 0:
            self.grafted += 1.0
            self.graft_nodes += float(nodes)

    @property
    def graft_gain(self) -> float:
        """G: tokens lookup's grafts add per drafter row, from a prior of `GRAFT_PRIOR` tokens worth
        `GRAFT_PRIOR_ROWS` rows (optimistic: a shape with lookup gets drafted, and so measured, before it is ruled
        out)."""
        return (self.graft_tokens + GRAFT_PRIOR * GRAFT_PRIOR_ROWS) / (self.drafted + GRAFT_PRIOR_ROWS)

    @property
    def graft_share(self) -> float:
        """g: the share of drafter rows lookup grafts onto."""
        return self.grafted / self.drafted if self.drafted else 0.0

    @property
    def graft_width(self) -> float:
        """n_g: the nodes a graft adds to its row."""
        return self.graft_nodes / self.grafted if self.grafted else 0.0

    def add(self, draft: int | None, tokens: int = 0) -> None:
        """One row-round: lookup would draft `draft` tokens alone (None: it would not), `tokens` of them emitted
        (agreement + 1)."""
        self.rounds += 1.0
        if draft is not None:
            self.alone += 1.0
            self.tokens += float(tokens)
            self.width += float(draft + 1)

    @property
    def share(self) -> float:
        """p: the share of row-rounds lookup drafts alone."""
        return self.alone / self.rounds if self.rounds else 0.0

    @property
    def round_tokens(self) -> float:
        """E_L: tokens a row-round drafted by lookup alone yields."""
        return self.tokens / self.alone if self.alone else 1.0

    @property
    def round_width(self) -> float:
        """W_L: tokens per row such a round verifies."""
        return self.width / self.alone if self.alone else 1.0


# What prompt lookup would do in each drafter's calls of this process (greedy and sampled apart; weak keys)
_LOOKUP: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def lookup_rate(drafter, sampled: bool) -> LookupRate:
    """What prompt lookup would do in the rounds this process decoded with `drafter` (greedy or sampled)."""
    return _LOOKUP.setdefault(drafter, {}).setdefault(sampled, LookupRate())


__all__ = [
    "DepthAcceptance",
    "tokens_by_size",
    "depth_acceptance",
    "measured_acceptance",
    "record_depths",
    "STORED_ROUNDS",
    "LookupRate",
    "lookup_rate",
]
