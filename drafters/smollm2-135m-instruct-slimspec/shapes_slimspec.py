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
(sampling: that one of the drafter's first m draws there is accepted; the path before it held) and m_j the children
of the true path's node at depth j that the tree keeps (its `size` nodes spread over the depths where they add most).
Plain decoding yields one token per row for T_verify(B, 1). With prompt lookup (`draft_lookup`), each drafting
shape is also priced with it: a row whose latest tokens occurred earlier (a share p of row-rounds) verifies lookup's
draft alone (W_L tokens, yielding E_L), so a round yields (1 - p) · E(s) + p · E_L tokens per row and, where any of
the B rows matches (1 - (1 - p)^B), verifies max(size + 1, W_L) tokens per row; where all of them do (p^B), the
drafter does not run. Onto the other rows' drafts lookup grafts what followed earlier (a match the drafter agrees
with, a branch, an extension of its likeliest path): G more tokens per row, n_g more nodes in the share g of rows
it grafts onto, so those rounds verify size + 1 + (1 - (1 - g)^B) · n_g tokens per row. p, E_L and W_L are counted
from the text decoded, G, g and n_g from the rounds that drafted with lookup (`LookupRate`). Each T is scaled by what
that shape's rounds measured against their price (`CostLog.speed`), and each E - 1 by the tokens they gained against
those predicted, relative to every shape's (`CostLog.yields`: what the model above misses for one shape, as lookup's
grafts on a wider root). The shape with the most tokens per second, B · E / T, is used (the current drafting shape
unless another is predicted `SWITCH_MARGIN` faster); plain decoding when none beats it.

Part of the remote-code unit: it imports only the standard library and `torch`.
"""

import functools
import time
from dataclasses import dataclass, field

import torch

from .acceptance_slimspec import DepthAcceptance, LookupRate, depth_acceptance, lookup_rate, tokens_by_size
from .costs_slimspec import CostLog, RoundCosts, cost_log, costs_at_rows


@dataclass(frozen=True)
class DraftShape:
    """A round's draft: `size` nodes verified over `depth` levels with `top_k` children per expanded node (a chain of
    k is k/k/1); size 0 is plain decoding (no drafter)."""

    size: int = 0
    depth: int = 0
    top_k: int = 1
    lookup: bool = False  # prompt lookup drafts alone where it matches, and grafts onto the drafter's draft

    @property
    def is_plain(self) -> bool:
        return self.size == 0

    @property
    def is_chain(self) -> bool:
        return self.size > 0 and self.top_k == 1

    def __str__(self) -> str:
        if self.is_plain:
            return "plain"
        name = f"chain {self.size}" if self.is_chain else f"tree {self.size}/{self.depth}/{self.top_k}"
        return name + " + lookup" if self.lookup else name

    def settings(self) -> dict:
        """The decoding settings (names of `DraftSettings`) that draft this shape; plain decoding has none."""
        if self.is_plain:
            return {}
        if self.is_chain:
            shape = {"num_assistant_tokens": self.size, "draft_tree_size": 0}
        else:
            shape = {"draft_tree_size": self.size, "draft_tree_depth": self.depth, "draft_tree_top_k": self.top_k}
        return {**shape, "draft_lookup": self.lookup}


# tree sizes tried: every size up to 8, then the verification widths a machine is probed at (2^i) and a few between
TREE_SIZES = (*range(2, 9), 10, 12, 15, 16, 20, 24, 31, 32, 40, 48, 63, 64, 96, 127, 128)


@functools.lru_cache(maxsize=64)
def candidate_shapes(
    max_size: int, max_depth: int = 8, top_ks: tuple[int, ...] = (2, 4, 8), lookup: bool = False
) -> tuple[DraftShape, ...]:
    """Plain decoding, chains of 1..`max_depth`, and trees of every depth up to `max_depth` with `top_k` children
    and the `TREE_SIZES` up to `max_size` nodes (at least one node per level); with `lookup`, each drafting shape
    also with prompt lookup. Built once per arguments (a choice every few rounds reads a thousand of them)."""
    shapes = [DraftShape(k, k, 1) for k in range(1, min(max_depth, max_size) + 1)]
    for top_k in top_ks:
        for depth in range(1, max_depth + 1):
            shapes += [DraftShape(size, depth, top_k) for size in TREE_SIZES if depth <= size <= max_size]
    with_lookup = [DraftShape(s.size, s.depth, s.top_k, lookup=True) for s in shapes] if lookup else []
    return (DraftShape(), *shapes, *with_lookup)


def expected_tokens(shape: DraftShape, acceptance: DepthAcceptance) -> float:
    """E(s): tokens a round of `shape` yields per row (accepted drafts + the target's own token)."""
    if shape.is_plain:
        return 1.0
    return tokens_by_size(acceptance, shape.depth, shape.top_k, shape.size)[shape.size]


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


def lookup_round(shape: DraftShape, costs: RoundCosts, tokens: float, rate: LookupRate) -> tuple[float, float]:
    """Tokens per row and seconds of a round of `shape` drafted with prompt lookup (see the module): the drafter's
    rounds yield `tokens` per row, lookup's `rate.round_tokens`."""
    p, batch = rate.share, costs.batch_size
    all_alone, any_alone = p**batch, 1.0 - (1.0 - p) ** batch
    per_row = (1.0 - p) * (tokens + rate.graft_gain) + p * rate.round_tokens
    drafting = round_time(shape, costs, per_row) - costs.verify_time(shape.size + 1)  # the drafter's steps
    width = shape.size + 1 + (1.0 - (1.0 - rate.graft_share) ** batch) * rate.graft_width  # with the rows' grafts
    seconds = (
        all_alone * costs.verify_time(rate.round_width)
        + (1.0 - all_alone) * drafting
        + (any_alone - all_alone) * costs.verify_time(max(width, rate.round_width))
        + (1.0 - any_alone) * costs.verify_time(width)
    )
    return per_row, seconds


@dataclass(frozen=True)
class ShapeChoice:
    """The chosen shape, its predicted tokens per second and speed-up over plain decoding, and every priced
    candidate's prediction (tokens/s by shape name; `dominated` trees are not priced), round seconds and tokens per
    row before the shapes' own factors (what their rounds are measured against)."""

    shape: DraftShape
    tokens_per_second: float
    speedup: float
    predictions: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)  # a round's predicted seconds by shape name, before `speed`
    tokens: dict = field(default_factory=dict)  # a round's predicted tokens per row by shape name, before `yields`


def dominated(shape: DraftShape, tables: dict) -> bool:
    """Whether a tree of `shape` yields no more tokens than the tree of its size one level shallower or with the
    next fewer children per node (`tables`: E by size per (depth, top_k)): that tree is no slower (one drafter step
    less, or as many over fewer nodes), so this one need not be priced; it never runs, so no speed factor of its own
    would say otherwise (at 4 rows a choice skips about a quarter of
    the 754 shapes it reads: trees deeper or wider than their nodes reach)."""
    if shape.top_k == 1:
        return False
    tokens = tables[(shape.depth, shape.top_k)][shape.size]
    for key in ((shape.depth - 1, shape.top_k), (shape.depth, shape.top_k // 2)):
        other = tables.get(key)
        if other is not None and shape.size < len(other) and tokens <= other[shape.size] + 1e-12:
            return True
    return False


# a drafting shape gives way to another only where that one is predicted this much faster, and over several rows
# plain decoding to a drafting one: at 4 rows, greedy, the best few shapes are priced within 1-2% of each other while
# their rounds measured up to 7% apart (tree 3/1/3 + lookup 84.5 tokens/s over the calls' full-batch rounds, the
# shapes a choice without it moved among 79); at 8 rows, sampled, shapes priced 5-8% ahead of plain decoding ran no
# faster (`auto` 0.97-0.99x the target over 64 questions). Moving on such a prediction follows the prices' own error,
# and each move tries a shape that may be slower
SWITCH_MARGIN = 0.03
# where a shape this batch size has drafted (or the settings' own) beats plain decoding, one not drafted yet is chosen
# only where predicted this much faster than it: among hundreds of candidates the fastest predicted is mostly the one
# the model errs on most in its favour. At 4 rows, greedy, SmolLM2, trees of two levels were priced 4-15% ahead of the
# settings' tree 3/1/3 + lookup and ran 10-25% slower per token; a new machine's gains that pay are larger (a GPU's
# trees several times wider than a CPU's). Where the settings decode a batch this large plain (`draft_max_batch_size`),
# an untried shape is held so against plain decoding: at 8 rows, sampled, shapes priced 3-15% ahead of it ran 0.67-0.92
UNTRIED_MARGIN = 0.10


def choose_shape(
    candidates: list[DraftShape],
    costs: RoundCosts,
    acceptance: DepthAcceptance,
    calibration: float = 1.0,
    margin: float = 0.0,
    lookup: LookupRate | None = None,
    speed=None,
    yields=None,
    current: DraftShape | None = None,
    tried=None,
    hold: bool = False,
) -> ShapeChoice:
    """The candidate with the most predicted tokens per second (B · E / T); plain decoding when none beats it by more
    than `margin` (relative: the costs' own uncertainty, `CostLog.margin`; over several rows, or than
    `SWITCH_MARGIN`); the `current` drafting shape (a candidate) where none beats it by more than either.
    `calibration` scales the predicted accepted tokens (measured / predicted, from the running call); `lookup` prices
    the shapes drafted with prompt lookup (`lookup_round`; without it they are priced as without lookup); `speed`
    (shape name -> measured over predicted seconds, `CostLog.speed.factor`) scales each round's predicted seconds and
    `yields` (measured over predicted tokens beyond the target's own, against every shape's:
    `CostLog.yields.relative`) its predicted tokens.
    `tried` (shape name -> whether rounds of it were measured; default every shape): where a tried drafting shape
    beats plain decoding, a shape not tried must be predicted `UNTRIED_MARGIN` faster than it to be chosen; with
    `hold` (the settings decode plain at this batch size) one not tried must be so against plain decoding too."""
    speed = speed or (lambda name: 1.0)
    yields = yields or (lambda name: 1.0)
    seconds, per_row = {"plain": costs.verify_time(1)}, {}
    plain_speed = costs.batch_size / (seconds["plain"] * speed("plain"))
    predictions = {"plain": plain_speed}
    best, best_speed = DraftShape(), plain_speed
    measured = [
        s for s in candidates if not s.is_plain and s.size + 1 <= len(costs.verify) and s.top_k <= len(costs.draft)
    ]
    families = {}  # (depth, top_k) -> E by size, one pass each
    for shape in measured:
        key = (shape.depth, shape.top_k)
        families[key] = max(families.get(key, 0), shape.size)
    tables = {key: tokens_by_size(acceptance, *key, size) for key, size in families.items()}
    priced = []  # the shapes not `dominated`, in the candidates' order
    for shape in measured:
        if dominated(shape, tables):
            continue
        priced.append(shape)
        tokens = 1.0 + calibration * (tables[(shape.depth, shape.top_k)][shape.size] - 1.0)
        name = str(shape)
        if shape.lookup and lookup is not None:
            tokens, seconds[name] = lookup_round(shape, costs, tokens, lookup)
        else:
            seconds[name] = round_time(shape, costs, tokens)
        per_row[name] = tokens
        tokens = 1.0 + (tokens - 1.0) * yields(name)
        predictions[name] = costs.batch_size * tokens / (seconds[name] * speed(name))
    over_plain = 1 + (max(margin, SWITCH_MARGIN) if costs.batch_size > 1 else margin)
    # where a tried drafting shape beats plain decoding, an untried one must beat it by UNTRIED_MARGIN
    tried_best = max((v for name, v in predictions.items() if name != "plain" and tried and tried(name)), default=0.0)
    hold = hold or tried_best > plain_speed * over_plain
    for shape in priced:
        name = str(shape)
        score = predictions[name] / (1.0 + UNTRIED_MARGIN if hold and not tried(name) else 1.0)
        if score > best_speed * (1 + 1e-9):
            best, best_speed = shape, score
    kept = predictions.get(str(current)) if current is not None and not current.is_plain else None
    if kept is not None and best_speed <= kept * (1 + max(margin, SWITCH_MARGIN)):
        best, best_speed = current, kept
    if best_speed <= plain_speed * over_plain:
        best = DraftShape()
    best_speed = predictions[str(best)]
    return ShapeChoice(best, best_speed, best_speed / plain_speed, predictions, seconds, per_row)


TIMED_ROUNDS = 2  # plain rounds timed before the first choice; a probe whose cost ends the probing is timed again
# while a drafting shape is chosen, one round in this many decodes plain: the plain rounds' cost, what every choice
# compares with, is measured again under this call's conditions (its prompt lengths, the machine's load now); at 4
# rows, bf16, a plain round yields 26% fewer tokens per second than the chosen tree, so each one costs a call 0.4%
PLAIN_EVERY = 64
# rounds between two choices (the rows left's apart): a choice prices hundreds of shapes in Python (at 4 rows, bf16,
# 9 ms for the batch and 14 for the rows left, timed inside calls of 85 ms rounds: about 2% of a call at every 8)
CHOOSE_EVERY = 16
# while plain decoding is chosen, the round after this many plain ones drafts (the best drafting shape), so that the
# call keeps measuring its acceptance (a few unlucky probes do not rule drafting out); the wait doubles while the
# choice stays plain, so that where drafting cannot pay the exploring costs next to nothing
EXPLORE_AFTER = 8
# the calibration's prior, in drafted tokens predicted: a few rounds move it a little, many rounds a lot
CALIBRATION_PRIOR = 4.0
# a call's rounds of one width (at one row count) that the costs keep: its first `CALL_ROUNDS_FIRST`, then the
# `CALL_ROUNDS_FIRST + CALL_ROUNDS_LATE`-th, twice that, ... (`ShapeTuner.kept_round`), so that a width's kept rounds
# come from several calls and several points of each (SmolLM2, bf16, EPYC, 4 rows: the 9 kept plain rounds had come
# from one cheap stretch of one call, 57 ms where the plain calls ran 62-70 a step, and made plain rounds win a call)
CALL_ROUNDS_FIRST, CALL_ROUNDS_LATE = 2, 14


class ShapeTuner:
    """Chooses each round's shape while a call decodes (`draft_shape="auto"`).

    The first rounds measure what is not yet known at this batch size and prompt length: `TIMED_ROUNDS` plain rounds
    (width 1), then rounds of the `probe_sizes` whose width no prompt length measured yet (`CostLog.costs` scales
    another prompt length's costs), each the best shape of its size under the acceptance known so far, widest last,
    stopping at the first width that costs more than the most tokens a round could yield there — after timing that
    width once more (costs are lower medians: one slow round does not end the probing); a probe drafts without
    lookup's grafts, which would widen it. From then on every `every` rounds the best candidate is chosen again (a
    drafting one only where it beats plain decoding by more than the costs' own uncertainty, `CostLog.margin`) from
    the measured costs (`CostLog`, shared by every call at this batch size and prompt length and kept on disk for the
    next process: `costs_file`), the drafter's per-depth acceptance (`DepthAcceptance`, shared by every call of this
    drafter) and `calibration`: how many of the tokens predicted for the shapes used were accepted, so that a
    drifting acceptance (long answers, code after chat) moves the choice; each round of the whole batch is timed
    against its price and its tokens against those predicted (`CostLog.speed`, `CostLog.yields`), so that a shape
    running dearer or yielding less than priced gives way. While plain decoding is chosen, a round drafts now and
    then (`EXPLORE_AFTER`), so that the acceptance keeps being measured.

    Once rows of a batch have finished, the rounds over the rows left (fewer, so verifying a wider draft costs
    less) are timed in the log of their own row count (`log_for`) and shaped from the costs at that count
    (`costs_at_rows`: between the batch sizes measured, with that count's own rounds where timed)."""

    def __init__(
        self,
        log: CostLog,
        acceptance: DepthAcceptance,
        start: DraftShape,
        probe_sizes: tuple[int, ...] = (1, 3, 7, 15, 31, 63),
        every: int = CHOOSE_EVERY,
        top_ks: tuple[int, ...] = (2, 4, 8),
        lookup: LookupRate | None = None,
        log_for=None,
    ):
        self.log, self.acceptance, self.every, self.top_ks = log, acceptance, every, top_ks
        # (rows, left_of=0) -> the log of that batch size, or of the rows left of a batch of `left_of` (`cost_log`;
        # by default one not kept), looked up once
        self.log_for = functools.lru_cache(maxsize=None)(log_for or (lambda rows, left_of=0: CostLog(rows)))
        self.timed_rows: set[int] = set()  # the row counts below the batch whose rounds were timed (kept by `save`)
        self.lookup = lookup  # the call drafts with prompt lookup where it pays (`draft_lookup`): what it would do
        # the smaller batch sizes' logs (same models, prompt length and mode): where one has measured wider rounds,
        # this batch size's costs are brought from theirs (`costs`) instead of probed
        self.smaller = [self.log_for(rows) for rows in range(1, log.batch_size)]
        self.estimated = any(len(other.widths()) > 1 and other.costs() is not None for other in self.smaller)
        self.probes = [] if self.estimated else [size for size in probe_sizes if size + 1 not in log.widths()]
        self.retry: int | None = None  # the probe size timed once so far: timed again before its cost ends probing
        self.shape, self.start, self.rounds = start, start, 0
        self.probing = False  # the coming round measures a probe's width: it drafts without lookup's grafts
        self.predicted = self.accepted = 0.0
        self.choice: ShapeChoice | None = None
        self.candidates: list[DraftShape] = []
        self.plain_rounds, self.explore_after = 0, EXPLORE_AFTER  # plain rounds since the last drafting one
        self.drafted_last = False  # the last round ran the drafter: its state is current
        self.timed: dict[tuple[int, int], int] = {}  # (rows, width) -> this call's rounds of that width (`kept_round`)
        self.slots: float | None = None  # the cache slots the coming round reads first: where its costs are priced
        # a call made although plain decoding won before (`plain_is_chosen`'s recheck): its first `every` rounds draft
        # the best other shape, so that the acceptance is measured again before the choice
        self.explore = log.plain_chosen

    def costs(self) -> RoundCosts | None:
        """What the choices price: the costs measured at this batch size (`CostLog.costs`), or where a smaller batch
        size had measured wider rounds (`estimated`: no probing here) theirs brought to this batch's rows
        (`costs_at_rows`: a wider round adds the target's work on its extra tokens, linear in the rows), moved to the
        level of this batch size's own rounds, whose widths stand (SmolLM2, bf16: one row's curve, brought to 4 rows,
        put widths 4 and 8 11 and 20 ms above a plain round, where 4 rows measured 11-19 and 17-25)."""
        if self.estimated:
            costs = costs_at_rows(self.log.batch_size, self.smaller, own=self.log, slots=self.slots)
            if costs is not None and self.log.verify.get(1):
                return costs
        return self.log.costs(self.slots)

    def tried(self, name: str) -> bool:
        """Whether rounds of the shape `name` were measured at this batch size (the settings' own shape counts as
        tried: `UNTRIED_MARGIN`)."""
        return name in self.log.speed.sums or name == str(self.start)

    @property
    def calibration(self) -> float:
        """Accepted / predicted drafted tokens over this call's rounds, from a prior of 1 worth `CALIBRATION_PRIOR`
        predicted tokens."""
        return (self.accepted + CALIBRATION_PRIOR) / (self.predicted + CALIBRATION_PRIOR)

    def next_shape(self, rows: int | None = None, slots: float | None = None) -> DraftShape:
        """The shape of the coming round over `rows` rows (default the batch) after `slots` cache slots (None:
        unknown; the costs are priced there); `probing`: whether it is a probe."""
        self.probing, self.slots = False, slots
        if rows is not None and rows < self.log.batch_size and self.choice is not None:
            return self.fewer_rows(rows)
        if len(self.log.verify.get(1, ())) < TIMED_ROUNDS:
            return DraftShape()
        if self.probes:
            probe = self.best_of_size(self.probes[0])
            self.probing = True
            if self.may_pay(probe):
                return probe
            if self.retry is not None:  # the last probe's one round says stop: time it once more first
                retry, self.retry = self.best_of_size(self.retry), None
                return retry
            self.probing = False
            self.probes.clear()  # wider rounds cost more still: none of them can pay here
        if self.choice is None or self.rounds % self.every == 0:
            costs = self.costs()
            if costs is not None:
                max_size, lookup = len(costs.verify) - 1, self.lookup is not None
                self.candidates = candidate_shapes(max_size, self.acceptance.max_depth, self.top_ks, lookup)
                if self.start not in self.candidates and not self.start.is_plain:  # the settings' own shape
                    self.candidates = (*self.candidates, self.start)
                self.choice = choose_shape(
                    self.candidates,
                    costs,
                    self.acceptance,
                    self.calibration,
                    self.log.margin(),
                    self.lookup,
                    self.log.speed.factor,
                    self.log.yields.relative,
                    current=self.shape,
                    tried=self.tried,
                    hold=self.start.is_plain,
                )
                self.shape = self.choice.shape
                self.log.plain_chosen = self.shape.is_plain
                # a re-check's first choice only (a drafting choice after exploring resets the wait again)
                self.log.rechecked(self.shape.is_plain, again=self.explore)
                if not self.shape.is_plain:
                    self.explore_after = EXPLORE_AFTER
                elif self.explore:
                    self.shape = self.best_drafting()
                self.explore = False
        if not self.shape.is_plain and self.rounds % PLAIN_EVERY == PLAIN_EVERY - 1:
            return DraftShape()
        if self.shape.is_plain and self.choice is not None:
            self.plain_rounds += 1
            if self.plain_rounds > self.explore_after:
                self.plain_rounds, self.explore_after = 0, 2 * self.explore_after
                return self.best_drafting()
        return self.shape

    def fewer_rows(self, rows: int) -> DraftShape:
        """The shape for a round over the `rows` rows left of the batch: chosen from the costs at that row count
        (`costs_at_rows`, from the logs of the batch sizes measured) and again after every `every` rounds over that
        many rows left, this call's or an earlier one's (the choice is kept with that count's log)."""
        left = self.log_for(rows, left_of=self.log.batch_size)
        if left.choice is None or left.rounds_since_choice >= self.every:
            costs = costs_at_rows(rows, [*self.smaller, self.log], left, slots=self.slots)
            if costs is None:
                return self.shape
            candidates = candidate_shapes(
                len(costs.verify) - 1, self.acceptance.max_depth, self.top_ks, bool(self.lookup)
            )
            left.choice = choose_shape(
                candidates,
                costs,
                self.acceptance,
                self.calibration,
                self.log.margin(),
                self.lookup,
                current=left.choice.shape if left.choice is not None else None,
            )
            left.rounds_since_choice = 0
        left.rounds_since_choice += 1
        return left.choice.shape

    def best_drafting(self) -> DraftShape:
        """The drafting shape the last choice predicted fastest (plain where it predicted none)."""
        predicted = self.choice.predictions
        drafting = [s for s in self.candidates if not s.is_plain and str(s) in predicted]
        return max(drafting, key=lambda s: predicted[str(s)], default=DraftShape())

    def may_pay(self, probe: DraftShape) -> bool:
        """Whether a round of `probe` could beat plain decoding: the least it can cost is less than the tokens it is
        expected to yield, in plain rounds. Its verification costs at least what the widest measured so far costs
        plus, per token more, the average a token added up to there (a token costs the more the wider the round:
        its kernels leave their memory-bound floor, its attention reads more); its drafter steps one over the round's
        tokens and one per further level over `top_k` nodes, each at the cheapest step measured that wide. At 8
        rows, sampled, widths 16 and 32 had cost 0.26 and 0.38-0.93 s a round against 85 ms for a plain one, for 1.9
        and 1.3 tokens a row."""
        costs = self.log.costs(self.slots)
        if costs is None:
            return True
        width, widest = probe.size + 1, len(costs.verify)
        verify = costs.verify_time(min(width, widest))
        if width > widest > 1:
            verify += (width - widest) * (verify - costs.verify_time(1)) / (widest - 1)
        least = verify + costs.draft_time(1) + (probe.depth - 1) * costs.draft_time(probe.top_k)
        return least < expected_tokens(probe, self.acceptance) * costs.verify_time(1)

    def kept_round(self, rows: int, width: int) -> bool:
        """Whether this call's next round `width` tokens wide over `rows` rows goes to the costs: the first
        `CALL_ROUNDS_FIRST` of the call, then its n-th where n is `CALL_ROUNDS_FIRST + CALL_ROUNDS_LATE` times a
        power of 2 (16, 32, 64, ...: a call of 96 rounds keeps five)."""
        n = self.timed.get((rows, width), 0)
        self.timed[(rows, width)] = n + 1
        late, first = n // (CALL_ROUNDS_FIRST + CALL_ROUNDS_LATE), n % (CALL_ROUNDS_FIRST + CALL_ROUNDS_LATE)
        return n < CALL_ROUNDS_FIRST or (first == 0 and late & (late - 1) == 0)

    def best_of_size(self, size: int) -> DraftShape:
        shapes = [s for s in candidate_shapes(size, self.acceptance.max_depth, self.top_ks) if s.size == size]
        return max(shapes, key=lambda s: expected_tokens(s, self.acceptance))

    def observe(
        self,
        shape: DraftShape,
        verify_seconds: float,
        draft_steps: list,
        accepted: float | None,
        width: int | None = None,
        rows: int | None = None,
        seconds: float | None = None,
        yielded: float | None = None,
    ) -> None:
        """One round of `shape` over `rows` rows (default the batch): its verification time (of `width` tokens per
        row, default the shape's), its drafter steps as (nodes per row, seconds), and the drafted tokens the target
        accepted (per row the drafter drafted; None: lookup drafted every row alone), the whole round's `seconds`
        (default verification and steps) and the tokens it appended per row (`yielded`, lookup's included), held
        against what its choice predicted (`CostLog.speed`, `CostLog.yields`). A round over fewer rows than the
        batch (rows have finished) costs less: its times go to the log of its row count (`log_for`)."""
        self.rounds += 1
        full = rows is None or rows == self.log.batch_size
        log = self.log if full else self.log_for(rows, left_of=self.log.batch_size)
        name = str(shape)
        counted = full and not self.probing and self.choice is not None
        # the whole round against its price, where the drafter's first step read one round's tokens: after a round
        # without it (a call's first, a plain one) it reads them all, which no shape's price holds
        price = self.choice.seconds.get(name) if counted and (shape.is_plain or self.drafted_last) else None
        if price is not None:
            if seconds is None:
                seconds = verify_seconds + sum(step for _, step in draft_steps)
            self.log.speed.add(name, seconds, price)
        predicted = self.choice.tokens.get(name) if counted else None
        if predicted is not None and yielded is not None:
            self.log.yields.add(name, yielded - 1.0, predicted - 1.0)
        self.drafted_last = bool(draft_steps)
        width = shape.size + 1 if width is None else width
        if self.kept_round(log.batch_size, width):
            log.add_verify(width, verify_seconds, self.slots)
        for nodes, step in draft_steps:
            log.add_draft(max(1, round(nodes)), step)
        if not full:
            self.timed_rows.add(rows)
        if full and self.probes and shape.size == self.probes[0]:
            self.retry = self.probes.pop(0)
        if not shape.is_plain and accepted is not None:
            self.predicted += expected_tokens(shape, self.acceptance) - 1.0
            self.accepted += accepted


def round_timer(settings, target, drafter, shape, batch_size: int, context: int, sampled: bool) -> "RoundTimer | None":
    """The `RoundTimer` of a `draft_shape="auto"` call (None for a fixed shape), starting from `shape` (the settings'
    `TreeShape`) with what this process measured for the target at this batch size and for the drafter."""
    if settings.draft_shape != "auto":
        return None
    start = DraftShape(shape.size, shape.depth, shape.top_k, lookup=bool(settings.draft_lookup) and shape.size > 0)
    if 0 < settings.draft_max_batch_size < batch_size:  # the settings decode this batch plain: `auto` starts there
        start = DraftShape()
    lookup = lookup_rate(drafter, sampled) if settings.draft_lookup else None
    log = cost_log(target, drafter, batch_size, context, sampled)
    log_for = functools.partial(cost_log, target, drafter, context=context, sampled=sampled)
    tuner = ShapeTuner(log, depth_acceptance(drafter, sampled), start, lookup=lookup, log_for=log_for)
    return RoundTimer(tuner, target.device, type(shape))


class RoundTimer:
    """Times a call's rounds for its `ShapeTuner`: the drafter's part and the rest (verification, acceptance), with
    the device synchronised at each mark so that queued GPU work is counted where it ran. `tree_shape` is the
    decoding loop's shape class (size, depth, top_k, threshold)."""

    def __init__(self, tuner: ShapeTuner, device, tree_shape):
        self.tuner, self.cuda = tuner, getattr(device, "type", str(device)) == "cuda"
        self.tree_shape = tree_shape
        self.shape, self.started, self.committed, self.drafted = tuner.shape, 0.0, 0.0, 0.0
        self.commit_width = 1  # positions per row the drafter's first step read (its accepted tokens, or more)
        self.lookup_allowed = False  # whether the round drafts with prompt lookup (its shape's choice)
        self.pending: list = []  # lookup's drafts not yet compared with what the target emitted: (seq, start, tokens)
        self.tokens, self.seconds = 0, 0.0

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def start(self, threshold: float, rows: int | None = None, slots: int | None = None):
        """Marks the start of a round over `rows` rows (default the batch) after `slots` cache slots; returns its
        shape (a `tree_shape` with the call's confidence `threshold`)."""
        self.shape = self.tuner.next_shape(rows, slots)
        # a probe measures its own width, without lookup (its shapes have none): lookup's drafts would widen it
        self.lookup_allowed = self.shape.lookup and not self.tuner.probing
        self.started = self.committed = self.drafted = self.now()
        return self.tree_shape(self.shape.size, self.shape.depth, self.shape.top_k, threshold)

    def note_lookup(self, seq, match) -> None:
        """A row's round starts at `seq`'s end: `match` is what prompt lookup drafts alone there (None: it would
        not), compared with what the target emits once the row has gone past it (`settle`)."""
        if self.tuner.lookup is None:
            return
        if match is None:
            self.tuner.lookup.add(None)
        else:
            self.pending.append((seq, seq.length, list(match.tokens)))

    def settle(self, final: bool = False) -> None:
        """Counts the lookup drafts the target has emitted past (all of them when the call is `final`)."""
        waiting = []
        for seq, start, draft in self.pending:
            emitted = seq.ids[0, start : start + len(draft) + 1].tolist()
            if len(emitted) <= len(draft) and not final:
                waiting.append((seq, start, draft))
                continue
            agree = next((i for i, (a, b) in enumerate(zip(draft, emitted)) if a != b), min(len(draft), len(emitted)))
            self.tuner.lookup.add(len(draft), min(agree + 1, len(emitted)))
        self.pending = waiting

    def mark_committed(self, width: int) -> None:
        """The drafter's first step (over `width` positions per row: the tokens accepted since it last ran) is done."""
        self.committed, self.commit_width = self.now(), max(1, int(width))

    def mark_drafted(self) -> None:
        self.drafted = self.now()

    def end(self, trees: list, accepted: list, tokens: int) -> None:
        """Marks the round's end: every active row's draft (`trees`) and acceptance walk (`accepted`: `.path`),
        `tokens` appended over all rows (the loop counts each row's acceptance by depth: `record_depths`). Costs are
        logged at the round's row count; the call's measured speed-up counts rounds of the whole batch only."""
        end = self.now()
        width = max(len(tree.kept) + 1 for tree in trees)  # tokens verified per row
        drafted = any(tree.source in ("drafter", "drafter+lookup") for tree in trees)  # the drafter ran this round
        levels = self.shape.depth if drafted else 0
        # the first step reads the accepted tokens (many after plain rounds: kept apart, at their own width), each
        # further level `top_k` nodes per expanded node
        steps = [(self.commit_width, self.committed - self.started)] if levels else []
        if levels > 1:
            steps += [(self.shape.top_k, (self.drafted - self.committed) / (levels - 1))] * (levels - 1)
        # the drafter's rows only, and of their paths the drafter's own nodes: lookup's rounds and grafts say nothing
        # of the drafter's shape (`LookupRate` counts them)
        drafter_rows = []
        for tree, walked in zip(trees, accepted):
            if tree.source == "lookup":
                continue
            grafted = tree.grafted_from  # the drafter's own nodes come before lookup's grafts
            own = next(
                (i for i, n in enumerate(walked.path) if grafted is not None and n >= grafted), len(walked.path)
            )
            drafter_rows.append(own)
            if self.lookup_allowed and self.tuner.lookup is not None:
                added = 0 if grafted is None else sum(node >= grafted for node in tree.kept)
                self.tuner.lookup.add_graft(len(walked.path) - own, added)
        mean_accepted = sum(drafter_rows) / len(drafter_rows) if drafter_rows else None
        # a round with fewer rows than the batch (rows that finished) costs less: its times are its row count's
        full = len(trees) == self.tuner.log.batch_size
        self.tuner.observe(
            self.shape,
            end - self.drafted,
            steps,
            mean_accepted,
            width=width,
            rows=len(trees),
            seconds=end - self.started,
            yielded=tokens / len(trees),
        )
        if full:  # the measured speed-up compares rounds of the whole batch with its plain rounds
            self.tokens += tokens
            self.seconds += end - self.started
        self.settle()

    def save(self) -> None:
        """Counts the call's last lookup drafts; keeps the costs measured so far for the next process
        (`CostLog.save`), the batch's and those of the fewer rows its last rounds decoded."""
        self.settle(final=True)
        self.tuner.log.save()
        for rows in sorted(self.tuner.timed_rows):
            self.tuner.log_for(rows, left_of=self.tuner.log.batch_size).save()

    def report(self) -> dict:
        """The shape chosen last, its predicted speed-up over plain decoding and the call's measured one (over its
        rounds of the whole batch)."""
        costs, choice = self.tuner.log.costs(), self.tuner.choice
        plain = costs.batch_size / costs.verify_time(1) if costs is not None else float("nan")
        return {
            "shape": str(choice.shape if choice is not None else self.shape),  # not an exploring round's
            "predicted_speedup": choice.speedup if choice is not None else float("nan"),
            "measured_speedup": self.tokens / self.seconds / plain if self.seconds > 0 else float("nan"),
        }


__all__ = [
    "round_timer",
    "RoundTimer",
    "ShapeTuner",
    "TIMED_ROUNDS",
    "CHOOSE_EVERY",
    "DraftShape",
    "candidate_shapes",
    "TREE_SIZES",
    "lookup_round",
    "expected_tokens",
    "round_time",
    "ShapeChoice",
    "choose_shape",
    "SWITCH_MARGIN",
    "dominated",
]
