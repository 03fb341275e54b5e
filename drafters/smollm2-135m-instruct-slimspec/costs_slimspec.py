# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""What rounds cost on this machine, for `draft_shape="auto"`: the measured tables (`CostLog`: the target verifying n
tokens per row, the drafter's step over w nodes, at one batch size and prompt-length bucket), the curves the choice
reads (`RoundCosts`), the plain-decoding choices with their re-check cadence, and their keeping across processes
(`costs_file`: one JSON file per target and drafter architecture, dtype, processor, threads, batch size and prompt
length, in the package's cache folder).

Part of the remote-code unit: it imports only the standard library and `torch`.
"""

import contextlib
import functools
import hashlib
import itertools
import json
import logging
import math
import os
import platform
import statistics
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch


logger = logging.getLogger(__name__)

ACCEPTANCE_MODES = {False: "greedy", True: "sampled"}  # greedy / sampled calls: the keys of what is kept per mode
PRIOR_ROUNDS = 8  # the least the prior of a shape's own ratio is worth, in rounds (`ShapeRatios.prior`)
ROUNDS_KEPT, YIELD_ROUNDS_KEPT = 64, 512  # a shape's rounds past this many count half (`ShapeRatios.add`; tokens)
# The prior is worth σ² / SHAPES_SPREAD² rounds (up to PRIOR_MOST), σ a round's spread about its shape's ratio in units
# of its prediction, once NOISE_MIN_ROUNDS tell it. SmolLM2, one row, greedy, lookup, 712 rounds of `auto`: tokens σ
# 1.5-2 (a prior of ~300), two shapes' ratios 1.032 and 1.026 in all, where a prior of 8 let each swing 0.6-1.7.
SHAPES_SPREAD, PRIOR_MOST, NOISE_MIN_ROUNDS = 0.1, 512, 16
NOT_KEPT = "Draft costs not kept at %s (%s): set SLIMSPEC_CACHE to a writable folder, or SLIMSPEC_DRAFT_COSTS=off."
# What the calls of this process measured, per target (weak keys: a model's entries go with the model)
_COSTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


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


class ShapeRatios:
    """Measured over predicted, per shape (its name), over rounds of the whole batch: what `choose_shape` scales a
    shape's predicted seconds (`CostLog.speed`: the lower medians and the interpolated curves price some shapes a
    few percent off) or predicted tokens (`CostLog.yields`: the acceptance model, lookup's grafts) by. Each shape's own
    rounds, from the ratio over every shape's rounds as a prior worth `prior()` of its rounds, itself from 1 worth
    as many; a shape's counts are halved past `rounds_kept` rounds, so that its recent rounds weigh most (longer
    caches, the load now, the text decoded now)."""

    def __init__(self, rounds_kept: int = ROUNDS_KEPT):
        self.rounds_kept = rounds_kept
        self.sums: dict[str, list[float]] = {}  # shape name -> [measured, predicted, rounds]
        self.squares: dict[str, list[float]] = {}  # shape name -> [Σ measured², Σ measured · predicted, Σ predicted²]
        # (the ratio over every shape's rounds, a round's mean prediction, the priors' worth in rounds)
        self.pooled: tuple[float, float, float] | None = None

    def add(self, shape: str, measured: float, predicted: float) -> None:
        """A round of `shape` measured `measured` where its choice predicted `predicted` (> 0)."""
        if predicted <= 0:
            return
        sums, squares = self.sums.setdefault(shape, [0.0, 0.0, 0.0]), self.squares.setdefault(shape, [0.0] * 3)
        sums[0], sums[1], sums[2] = sums[0] + measured, sums[1] + predicted, sums[2] + 1
        squares[:] = [squares[0] + measured**2, squares[1] + measured * predicted, squares[2] + predicted**2]
        if sums[2] > self.rounds_kept:
            sums[:], squares[:] = [value / 2 for value in sums], [value / 2 for value in squares]
        self.pooled = None

    def prior(self) -> float:
        """What a prior is worth, in rounds: σ² / SHAPES_SPREAD² (see PRIOR_ROUNDS), σ² the rounds' squared spread
        about their own shape's ratio over a round's mean prediction squared."""
        spread, freedom, predicted, rounds = 0.0, 0.0, 0.0, 0.0
        for shape, (own_measured, own_predicted, count) in self.sums.items():
            ratio = own_measured / own_predicted
            squared, cross, predicted_squared = self.squares[shape]
            spread += squared - 2 * ratio * cross + ratio**2 * predicted_squared
            freedom, predicted, rounds = freedom + count - 1, predicted + own_predicted, rounds + count
        if freedom < NOISE_MIN_ROUNDS:
            return PRIOR_ROUNDS
        noise = max(spread, 0.0) / freedom / (predicted / rounds) ** 2
        return min(max(noise / SHAPES_SPREAD**2, PRIOR_ROUNDS), PRIOR_MOST)

    def factor(self, shape: str) -> float:
        """Measured over predicted for `shape`'s rounds (see the class); 1 where no round was counted."""
        if self.pooled is None:
            measured, predicted, count = (sum(column) for column in zip(*self.sums.values() or [(0.0, 0.0, 0.0)]))
            mean = predicted / count if count else 1.0  # a round's prediction: the priors' unit
            worth = self.prior()
            self.pooled = ((measured + worth * mean) / (predicted + worth * mean), mean, worth)
        pooled, mean, worth = self.pooled
        own_measured, own_predicted, own_count = self.sums.get(shape, (0.0, 0.0, 0.0))
        own_prior = worth * (own_predicted / own_count if own_count else mean)
        return (own_measured + own_prior * pooled) / (own_predicted + own_prior)

    def relative(self, shape: str) -> float:
        """`factor` over the ratio over every shape's rounds: how far this shape's rounds measured from the others'
        (what tokens are scaled by: the call's calibration already holds what every shape's rounds share, and
        counting it again would double the luck of a few rounds)."""
        factor = self.factor(shape)
        return factor / self.pooled[0]


RECHECK_EVERY, RECHECK_MOST = 8, 64  # plain calls between re-check calls: at first, and at most
# calls of several rows that drafted slower than this much under plain decoding (`drafting_lost`: together
# `JUDGE_CALLS` or more, beyond their noise; one alone by `JUDGE_MARGIN_ONE` under the slowest plain call) make the next
# calls decode plain
JUDGE_MARGIN, JUDGE_CALLS, JUDGE_MARGIN_ONE = 0.05, 3, 0.20
# drafting that gained under this much at half the rows or fewer starts a batch size plain (`plain_inherited`; SmolLM2,
# bf16, 1 thread: where 4 rows gained 10% (EPYC) 8 rows lost 6%, where they gained 27% (Xeon) 8 rows gained 0-11%)
HALF_ROWS_MARGIN = 0.15
# a call is judged (a plain one sets the plain rate) only where its longest row made this many tokens after its
# first: a short call's few steps run over short caches (a warm-up call of 8 tokens at 4 rows set too high a rate)
JUDGE_MIN_TOKENS = 16
# a verification costs more the more cache slots its attention reads (SmolLM2, bf16, 1 thread, `slimspec bench-verify
# --context 128 / 256 / 512`: a plain round 61 / 62 / 69 ms at one row, 106 / 128 / 225 at 8): two kept rounds of one
# width this many slots apart estimate the cost of a slot (`CostLog.slope`), and at least this many estimates make one
SLOPE_MIN_SPREAD, SLOPE_MIN_PAIRS = 8, 3
PLAIN_ROUNDS_MIN = 2  # the decoding loop's plain rounds that set a plain rate (`CostLog.plain_rate`)


class CostLog:
    """Round costs measured at one batch size as calls decode: the target's verification by width (tokens per row)
    and the drafter's step by nodes per row, each the lower median of its last `keep` observations. With a `path`
    (`costs_file`) the tables start from what earlier processes on this machine measured and `save` writes them back,
    with the `chooser` drafter's plain-decoding choices, so that a new process chooses from its first round instead of
    probing again, or decodes plain from its first call where plain decoding won."""

    def __init__(
        self, batch_size: int, keep: int = 9, path: "Path | None" = None, key: dict | None = None, chooser: str = ""
    ):
        self.batch_size, self.keep, self.path, self.key = batch_size, keep, path, key
        self.chooser = chooser  # the drafter (name or path) whose choices the log keeps (they rest on its acceptance)
        self.plain_chosen = False  # the last choice was plain decoding (the log's mode: its key's, greedy or sampled)
        self.chose = False  # the plain-decoding choice was read from `path` (this chooser's): not one to inherit
        self.plain_calls = 0  # calls since the last that drafted, decoded without the drafter
        # plain calls between two re-check calls: doubled each time a re-check chooses plain again, reset by a
        # choice that drafts (`RECHECK_EVERY` .. `RECHECK_MOST`)
        self.recheck_every = RECHECK_EVERY
        # over several rows, the steps a second of the last `keep` plain `generate()` calls (the longest row's tokens
        # after its first, `new_token_counts`): what a call that drafted is held against (`judge_call`)
        self.plain_rates: list[float] = []
        self.drafted_rates: list[float] = []  # the same of the last `keep` calls that drafted since the last verdict
        self.verify: dict[int, list[float]] = {}
        self.verify_slots: dict[int, list[float]] = {}  # the cache slots each verification read first (nan: unknown)
        self.draft: dict[int, list[float]] = {}
        self.related: list[CostLog] = []  # the same models and batch size at other prompt lengths (`cost_log`)
        # over rounds of the whole batch, per shape: seconds measured over priced, and the tokens a row gained beyond
        # the target's own over those predicted (`ShapeTuner.observe`; what each choice scales its prices by)
        self.speed, self.yields = ShapeRatios(), ShapeRatios(rounds_kept=YIELD_ROUNDS_KEPT)
        # the rows left of a batch (`ShapeTuner.fewer_rows`): the last choice made from these costs and the rounds
        # decoded since, kept for the next call's rows left (a choice prices hundreds of shapes in Python: at 4 rows
        # each call's first choice for each row count left had cost 1.6% of the calls' time)
        self.choice, self.rounds_since_choice = None, 0

    def add(self, table: dict, width: int, seconds: float) -> None:
        times = table.setdefault(int(width), [])
        times.append(float(seconds))
        del times[: -self.keep]

    def add_verify(self, width: int, seconds: float, slots: float | None = None) -> None:
        """A verification `width` tokens wide per row that took `seconds`, after `slots` cache slots (None: unknown)."""
        self.add(self.verify, width, seconds)
        self.add(self.verify_slots, width, math.nan if slots is None else slots)

    def add_draft(self, nodes: int, seconds: float) -> None:
        self.add(self.draft, nodes, seconds)

    def gained_little(self, margin: float = JUDGE_MARGIN) -> bool:
        """Whether `JUDGE_CALLS` or more calls that drafted ran under `margin` faster in all than plain decoding
        (`plain_rate`; `drafting_lost`'s measure; more rows gain less still: `plain_inherited`)."""
        drafted, plain = self.drafted_rates, self.plain_rates
        enough = len(drafted) >= JUDGE_CALLS and bool(plain)
        return enough and statistics.harmonic_mean(drafted) < self.plain_rate() * (1 + margin)

    def plain_rate(self, slots: float | None = None) -> float:
        """The steps a second that calls which drafted are held against: the plain calls' median, raised to what the
        decoding loop's own plain rounds imply where `PLAIN_ROUNDS_MIN` were kept (one over their lower median,
        brought to `slots` cache slots: a plain round is a plain step's forward, and a call's luck does not move it).
        SmolLM2, bf16, 1 thread, EPYC, 4 rows: plain steps of 62-69 ms against rounds of 64 (82-89 where one-token
        rounds ran on torch's slow one-query kernel: `shared_kv_heads`); one plain call that ran 0.65x the same
        batch's had made drafting look 29% faster where it gained about 10%."""
        rate = statistics.median(self.plain_rates) if self.plain_rates else 0.0
        rounds = self.verify_at(slots).get(1, [])
        return max(rate, 1 / self.lower_median(rounds)) if len(rounds) >= PLAIN_ROUNDS_MIN else rate

    def rechecked(self, plain: bool, again: bool) -> None:
        """A choice of `plain` decoding or not, made in a re-check call (`again`) or not: a re-check that chooses
        plain again doubles the wait before the next; a choice that drafts resets it."""
        if not plain:
            self.recheck_every = RECHECK_EVERY
        elif again:
            self.recheck_every = min(2 * self.recheck_every, RECHECK_MOST)

    def load(self) -> "CostLog":
        """The tables `path` holds for this `key`; nothing where the file is missing, unreadable, for another key or
        malformed (the costs are then measured again)."""
        if self.path is None or not self.path.is_file():
            return self
        try:
            stored = json.loads(self.path.read_text(encoding="utf-8"))
            if stored.get("format") not in (1, COSTS_FORMAT) or stored.get("key") != self.key:
                return self
            tables = {
                name: {int(w): [float(t) for t in times] for w, times in stored[name].items()}
                for name in ("verify", "draft")
            }
            slots = {
                int(w): [math.nan if s is None else float(s) for s in v] for w, v in stored.get("slots", {}).items()
            }
            choices = stored.get("choices") or {}
            if stored["format"] == 1:  # the choices of both modes in every file: this file's mode's
                choices = {**(choices.get((self.key or {}).get("mode")) or {}), "chooser": choices.get("chooser")}
            plain, speeds, drafted = None, [], []
            if choices.get("chooser") == self.chooser and "plain" in choices:
                plain = bool(choices["plain"]), int(choices["calls"]), int(choices["every"])
                speeds = [float(v) for v in choices.get("steps") or []]
                drafted = [float(v) for v in choices.get("drafted") or []]
        except (OSError, ValueError, TypeError, AttributeError, KeyError) as err:
            logger.warning("Measured draft costs at %s were not read (%s); they are measured again.", self.path, err)
            return self
        if plain is not None:
            self.chose = True
            self.plain_chosen, self.plain_calls = plain[0], max(0, plain[1])
            self.recheck_every = min(max(plain[2], RECHECK_EVERY), RECHECK_MOST)
        self.plain_rates = [v for v in speeds if math.isfinite(v) and v > 0][-self.keep :]
        self.drafted_rates = [v for v in drafted if math.isfinite(v) and v > 0][-self.keep :]
        for name, table in tables.items():
            for width, times in table.items():
                read = slots.get(width, []) if name == "verify" else []
                for seconds, slot in zip(times, read if len(read) == len(times) else [math.nan] * len(times)):
                    if not (width >= 1 and math.isfinite(seconds) and seconds > 0):
                        continue
                    if name == "draft":
                        self.add_draft(width, seconds)
                    else:
                        self.add_verify(width, seconds, slot if math.isfinite(slot) and slot >= 0 else None)
        return self

    def save(self) -> None:
        """Writes the tables to `path` (a temporary file renamed over it: a reader never sees half of one). A folder
        that cannot be written only costs the next process its measurement: one warning, decoding goes on."""
        if self.path is None:
            return
        tables = {name: {str(w): t for w, t in sorted(getattr(self, name).items())} for name in ("verify", "draft")}
        choices = {
            "chooser": self.chooser,
            "plain": self.plain_chosen,
            "calls": self.plain_calls,
            "every": self.recheck_every,
            "steps": self.plain_rates,
            "drafted": self.drafted_rates,
        }
        partial = self.path.with_name(f".tmp-{os.getpid()}-{self.path.name}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            slots = {
                str(w): [s if math.isfinite(s) else None for s in v] for w, v in sorted(self.verify_slots.items())
            }
            stored = {"format": COSTS_FORMAT, "key": self.key, **tables, "slots": slots, "choices": choices}
            partial.write_text(json.dumps(stored), encoding="utf-8")
            os.replace(partial, self.path)
        except OSError as err:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
            logger.warning(NOT_KEPT, self.path, err)
            self.path = None

    @staticmethod
    def curve(table: dict) -> tuple[float, ...]:
        """1..the widest measured width: (lower) medians, made non-decreasing by pooling neighbours that decrease
        (weighted by their observations, so one slow round does not raise every wider width), linear between measured
        widths."""
        pools = []  # [width, value, weight] per measured width, then merged where the values decrease
        for w in sorted(w for w, t in table.items() if t):
            pools.append([[w], CostLog.lower_median(table[w]), len(table[w])])
            while len(pools) > 1 and pools[-2][1] > pools[-1][1]:
                (ws, v, n), (ws2, v2, n2) = pools[-2], pools.pop()
                pools[-1] = [ws + ws2, (v * n + v2 * n2) / (n + n2), n + n2]
        points = {w: value for ws, value, _ in pools for w in ws}
        widths = sorted(points)
        values, best, i = [], 0.0, 0  # widths[i]: the widest measured width up to n (the narrowest below it)
        for n in range(1, widths[-1] + 1):
            while i + 1 < len(widths) and widths[i + 1] <= n:
                i += 1
            low = widths[i]
            if n <= low:
                value = points[low]
            else:
                high = widths[i + 1]
                value = points[low] + (n - low) / (high - low) * (points[high] - points[low])
            best = max(best, value)
            values.append(best)
        return tuple(values)

    def slope(self) -> float:
        """What one more cache slot adds to a verification, in seconds: the median, over pairs of kept rounds of one
        width timed at least `SLOPE_MIN_SPREAD` slots apart, of their difference in time over their difference in
        slots (robust to a few rounds slowed by anything else); 0 with fewer than `SLOPE_MIN_PAIRS` pairs, or where
        that median is negative."""
        slopes = []
        for width, times in self.verify.items():
            points = [(s, t) for s, t in zip(self.verify_slots.get(width, ()), times) if math.isfinite(s)]
            for (s1, t1), (s2, t2) in itertools.combinations(points, 2):
                if abs(s2 - s1) >= SLOPE_MIN_SPREAD:
                    slopes.append((t2 - t1) / (s2 - s1))
        return max(statistics.median(slopes), 0.0) if len(slopes) >= SLOPE_MIN_PAIRS else 0.0

    def verify_at(self, slots: float | None) -> dict[int, list[float]]:
        """The kept verification times as they would have run after `slots` cache slots: each moved by `slope`
        over its distance from there (never below half its own time); as kept where `slots` is None or a round's
        slots are unknown. Prices compare rounds at one cache length: the plain rounds a log keeps are timed late in
        calls (one in `PLAIN_EVERY` while drafting), over longer caches than the drafting rounds of a call's start."""
        slope = self.slope() if slots is not None else 0.0
        if slope <= 0:
            return self.verify

        def moved(seconds: float, at: float) -> float:
            return seconds if not math.isfinite(at) else max(seconds + slope * (slots - at), seconds / 2)

        return {w: [moved(t, s) for t, s in zip(times, self.verify_slots[w])] for w, times in self.verify.items()}

    def borrowed(self) -> "CostLog | None":
        """The log of the nearest other prompt length (`related`) that measured wider rounds: its costs stand in for
        the widths not measured here (`costs`)."""
        others = [log for log in self.related if log.verify.get(1) and len(log.verify) > 1]
        here = (self.key or {}).get("context", CONTEXT_BUCKET_MIN)

        def distance(log):
            return abs(math.log2((log.key or {}).get("context", CONTEXT_BUCKET_MIN) / here)), -len(log.verify)

        return min(others, key=distance, default=None)

    def widths(self) -> set[int]:
        """The verification widths whose cost is known here: measured, or borrowed (`costs`)."""
        other = self.borrowed()
        return set(self.verify) | (set(other.verify) if other is not None else set())

    def costs(self, slots: float | None = None) -> RoundCosts | None:
        """The measured curves (verifications brought to `slots` cache slots, `verify_at`), or None before one plain
        round (width 1) and one drafter step were seen.

        A width not measured at this prompt length takes the nearest measured one's cost (`borrowed`), scaled by the
        two plain rounds' ratio (a longer prompt makes every width dearer, about alike), and a drafter step not
        measured here its cost there: a new prompt length needs its plain rounds only, not its own probing."""
        verify, draft = self.verify_at(slots), self.draft
        other = self.borrowed()
        if other is not None and verify.get(1):
            theirs = other.verify_at(slots)
            scale = self.lower_median(verify[1]) / self.lower_median(theirs[1])
            verify = {**{w: [t * scale for t in times] for w, times in theirs.items() if times}, **verify}
            draft = {**{w: times for w, times in other.draft.items() if times}, **draft}
        if 1 not in verify or not draft:
            return None
        return RoundCosts(self.batch_size, self.curve(verify), self.curve(draft))

    @staticmethod
    def lower_median(times: list[float]) -> float:
        return sorted(times)[(len(times) - 1) // 2]

    def margin(self) -> float:
        """How far apart two of these estimates may lie by chance, relative to a plain round: the standard error of
        a median of the plain rounds kept (1.25 σ / √n, σ from their median absolute deviation: 1.4826 MAD), for the
        difference of two such estimates (× √2). A shape must be predicted faster than plain decoding by more than
        this to be chosen over it: where rounds vary a few percent, a predicted 1% gain is a coin."""
        times = self.verify.get(1, [])
        if len(times) < 2:
            return 0.0
        median = statistics.median(times)
        mad = statistics.median(abs(t - median) for t in times)
        return math.sqrt(2) * 1.25 * 1.4826 * mad / median / math.sqrt(len(times))


def costs_at_rows(
    rows: int, logs: list[CostLog], own: CostLog | None = None, slots: float | None = None
) -> RoundCosts | None:
    """The costs of rounds over `rows` rows, from `logs` at other batch sizes (a batch whose first rows have
    finished decodes its last rounds over fewer rows). A plain round's cost is linear in the rows between the nearest
    batch sizes measured below and above (the nearest one where only one side was measured). What a wider round adds
    to it is the target's work on the extra tokens, rows × (width - 1): the nearest batch sizes' additions scaled by
    `rows` over their own row count, weighted as the plain round (SmolLM2, bf16, 1 thread: a width of 4 added 14-19
    ms at 4 rows where 8 rows added 35, and a width of 8 about 5 ms at one row where 4 rows added 20-25); the
    drafter's steps linear in the rows. Where rounds over the rows left were timed themselves (`own`), the curve is
    moved to their level (the median difference over the widths timed: they ran late in their calls, over longer
    caches, whose reading costs each round alike) and their own medians stand. Every log's verifications are brought
    to `slots` cache slots (`CostLog.verify_at`). None where no log has costs."""
    measured = {log.batch_size: costs for log in logs if (costs := log.costs(slots)) is not None}
    lower = max((b for b in measured if b < rows), default=None)
    upper = min((b for b in measured if b > rows), default=None)
    if lower is None and upper is None:
        return measured.get(rows)
    low, high = measured[lower if lower is not None else upper], measured[upper if upper is not None else lower]
    share = (rows - lower) / (upper - lower) if lower is not None and upper is not None else 0.0

    def blend(value) -> float:  # `value` of the costs below and above, weighted as the rows lie between them
        return value(low) + share * (value(high) - value(low))

    def added(width: int):  # what a round `width` wide adds to a plain one, scaled to `rows` rows
        return lambda c: rows / c.batch_size * (c.verify_time(width) - c.verify[0])

    def step(nodes: int):
        return lambda c: c.draft_time(nodes)

    plain = blend(lambda c: c.verify[0])
    verify = {w: plain + blend(added(w)) for w in range(1, max(len(low.verify), len(high.verify)) + 1)}
    draft = {w: [blend(step(w))] for w in range(1, max(len(low.draft), len(high.draft)) + 1)}
    timed = {w: times for w, times in (own.verify_at(slots).items() if own is not None else ()) if times}
    offsets = [CostLog.lower_median(times) - verify[w] for w, times in timed.items() if w in verify]
    offset = statistics.median(offsets) if offsets else 0.0
    verify = {**{w: [max(t + offset, 0.0)] for w, t in verify.items()}, **timed}
    if own is not None:
        draft.update({w: times for w, times in own.draft.items() if times})
    return RoundCosts(rows, CostLog.curve(verify), CostLog.curve(draft))


COSTS_FORMAT = 2  # the layout of a `costs_file` (2: one mode per file, its plain-decoding choice kept as such)


def costs_root() -> "Path | None":
    """Where measured costs are kept across processes: `draft_costs/` in the package's cache folder
    (`$SLIMSPEC_CACHE`, else `~/.cache/slimspec_hf`, as `slimspec_hf.paths.cache_dir`); None where
    `SLIMSPEC_DRAFT_COSTS` is off (0, off, false, no)."""
    if os.environ.get("SLIMSPEC_DRAFT_COSTS", "").strip().lower() in ("0", "off", "false", "no"):
        return None
    return Path(os.environ.get("SLIMSPEC_CACHE", Path.home() / ".cache" / "slimspec_hf")) / "draft_costs"


def processor_name(device: torch.device) -> str:
    """The accelerator's name, or the CPU's model name (/proc/cpuinfo, else `platform`); read once per device."""
    return _processor_name(str(device))


@functools.lru_cache(maxsize=8)
def _processor_name(name: str) -> str:
    device = torch.device(name)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def architecture(model) -> str:
    """The model's class and a digest of its config (names, paths and versions left out): what its costs depend on."""
    config = {
        k: v
        for k, v in model.config.to_dict().items()
        if not k.startswith("_") and k not in ("transformers_version", "torch_dtype", "dtype", "name_or_path")
    }
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{type(model).__name__}-{digest}"


CONTEXT_BUCKET_MIN = 256  # prompts up to this many tokens share one cost curve; longer ones, one per power of 2
CONTEXT_BUCKETS = tuple(CONTEXT_BUCKET_MIN << i for i in range(10))  # the buckets looked up for borrowed costs


def context_bucket(tokens: int) -> int:
    """The prompt length's bucket: reading a longer KV cache makes every round dearer (at 8 rows of 1,500 tokens a
    SmolLM2 step costs 3× one of 100), so costs are measured per power of 2 of the prompt's length."""
    return max(CONTEXT_BUCKET_MIN, 1 << (max(int(tokens), 1) - 1).bit_length())


def costs_key(target, drafter, batch_size: int, context: int, sampled: bool = False, left_of: int = 0) -> dict:
    """What a measured cost curve holds for: the two models' architectures and dtypes, the processor, the threads
    (on a CPU), the batch size, the prompt length's bucket (`context_bucket` of `context` tokens) and the mode
    (greedy or `sampled`: a sampled round also draws the drafts and tests them against the target's distribution,
    which costs more per node verified); with `left_of`, the rounds over `batch_size` rows left of a batch of
    `left_of` (late in their calls, over padded caches: kept apart from calls of `batch_size` prompts)."""
    return {
        **({"left_of": left_of} if left_of else {}),
        "target": architecture(target),
        "drafter": architecture(drafter),
        "dtype": f"{target.dtype}/{drafter.dtype}",
        "processor": processor_name(target.device),
        "threads": torch.get_num_threads() if target.device.type == "cpu" else None,
        "batch_size": batch_size,
        "context": context_bucket(context),
        "mode": ACCEPTANCE_MODES[bool(sampled)],
    }


def costs_file(key: dict) -> "Path | None":
    """The file that keeps the costs measured for `key` (None where keeping them is off)."""
    root = costs_root()
    if root is None:
        return None
    return root / f"{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]}.json"


def drafter_name(drafter) -> str:
    """The drafter whose plain-decoding choices a log keeps: its Hub id as given, or its local folder resolved (so
    `drafters/x` and `/abs/drafters/x` name one drafter, and two folders called `x` two)."""
    name = str(getattr(drafter.config, "name_or_path", "") or "")
    if name and os.path.isdir(name):
        return os.path.realpath(name)
    return name


def cost_log(target, drafter, batch_size: int, context: int, sampled: bool = False, left_of: int = 0) -> CostLog:
    """The costs measured for `target` with `drafter` at `batch_size` rows of prompts `context` tokens long (their
    bucket; on their device, in their dtypes), greedy or `sampled` (`left_of`: the rows left of a larger batch), by
    this process and, where they are kept (`costs_file`), by earlier ones on this machine."""
    key = costs_key(target, drafter, batch_size, context, sampled, left_of)
    logs = _COSTS.setdefault(target, {})
    chooser = drafter_name(drafter)
    name = (json.dumps(key, sort_keys=True), chooser)
    if name not in logs:
        log = logs[name] = CostLog(batch_size, path=costs_file(key), key=key, chooser=chooser).load()
        for bucket in CONTEXT_BUCKETS:  # the other prompt lengths' logs, in this process or kept: `CostLog.borrowed`
            if bucket == key["context"]:
                continue
            other_key = {**key, "context": bucket}
            other_name = (json.dumps(other_key, sort_keys=True), chooser)
            if other_name not in logs:
                kept = kept_log(other_key, chooser)
                if kept is None:
                    continue
                logs[other_name] = kept
            logs[other_name].related.append(log)
            log.related.append(logs[other_name])
        if batch_size > 1 and not left_of and not log.chose and plain_inherited(key, chooser, logs):
            log.plain_chosen = True  # its first call still decodes plain: what the others are judged against
    return logs[name]


def kept_log(key: dict, chooser: str) -> "CostLog | None":
    """The log an earlier process kept for `key` (`costs_file`), None where none is kept."""
    path = costs_file(key)
    if path is None or not path.is_file():
        return None
    return CostLog(key["batch_size"], path=path, key=key, chooser=chooser).load()


def plain_inherited(key: dict, chooser: str, logs: dict) -> bool:
    """Whether a batch size with no choice of its own yet (`key`) starts from plain decoding: where these models chose
    plain at no more rows (2 up to `key`'s), or drafted for little at fewer (`CostLog.gained_little`: under
    `HALF_ROWS_MARGIN` at half as many or fewer), at any prompt length, greedy or in `key`'s mode — more rows and
    sampling only make a round's drafts pay less. Such calls draft only at `plain_is_chosen`'s re-checks (at 8 rows,
    bf16, each bucket's or mode's calls before its verdict had been half of a cell's). The logs of this process
    (`logs`) and the kept ones (`kept_log`)."""
    modes = {ACCEPTANCE_MODES[False], key["mode"]}
    for rows in range(2, key["batch_size"] + 1):
        fewer, margin = rows < key["batch_size"], HALF_ROWS_MARGIN if 2 * rows <= key["batch_size"] else JUDGE_MARGIN
        for bucket in CONTEXT_BUCKETS:
            for mode in modes:
                other = {**key, "batch_size": rows, "context": bucket, "mode": mode}
                if other == key:
                    continue
                found = logs.get((json.dumps(other, sort_keys=True), chooser)) or kept_log(other, chooser)
                if found is not None and (found.plain_chosen or fewer and found.gained_little(margin)):
                    return True
    return False


def drafting_lost(drafted: list[float], plain: list[float], rate: float) -> bool:
    """Whether drafting calls at `drafted` steps a second lost to plain calls at `plain`: the last alone by over
    `JUDGE_MARGIN_ONE` under the slowest of two or more, or `JUDGE_CALLS` or more (harmonic mean) under the plain
    `rate` (`CostLog.plain_rate`) by over `JUDGE_MARGIN` and their noise: a call's spread (the drafting calls'
    relative standard deviation) times √(1/n + 1/m) over n drafting and m plain calls. SmolLM2, bf16, 1 thread, EPYC,
    4 rows: `auto`'s calls that drafted ran 0.82-1.47x the target's same calls where the fixed tree gained 12% in all,
    and verdicts without the noise sent four of the cell's 16 calls plain."""
    alone = len(plain) >= 2 and drafted[-1] < min(plain) * (1 - JUDGE_MARGIN_ONE)
    if len(drafted) < JUDGE_CALLS:
        return alone
    noise = statistics.stdev(drafted) / statistics.mean(drafted) * math.sqrt(1 / len(drafted) + 1 / max(len(plain), 1))
    return alone or statistics.harmonic_mean(drafted) < rate * (1 - JUDGE_MARGIN - noise)


def judge_call(
    target, drafter, batch_size: int, context: int, sampled: bool, steps: int, seconds: float, drafted: bool
) -> None:
    """After a `draft_shape="auto"` call over `batch_size` > 1 rows whose longest row made `steps` tokens after its
    first (up to its EOS: `new_token_counts`) in `seconds`: plain `generate()` steps every row until the longest
    ends, so a plain call's steps a second join `CostLog.plain_rates`, one that `drafted` (ran the decoding loop)
    `drafted_rates`; where those lost to plain decoding (`drafting_lost`) the next calls decode plain, the
    re-checks' wait doubled (`plain_is_chosen`), a re-check's calls judged afresh. Steps, not useful tokens (they
    swing with how unequal a batch's rows are). A call of fewer than `JUDGE_MIN_TOKENS` steps is left out."""
    if batch_size <= 1 or steps < JUDGE_MIN_TOKENS or not seconds > 0:
        return
    log = cost_log(target, drafter, batch_size, context, sampled)
    speed = steps / seconds
    if not drafted:
        log.plain_rates = [*log.plain_rates, speed][-log.keep :]
    else:
        log.drafted_rates = [*log.drafted_rates, speed][-log.keep :]
        # plain decoding priced where the call's rounds read on average: its prompts and half its tokens
        if log.plain_rates and drafting_lost(log.drafted_rates, log.plain_rates, log.plain_rate(context + steps / 2)):
            log.plain_chosen, log.plain_calls, log.drafted_rates = True, 0, []
            log.recheck_every = min(2 * log.recheck_every, RECHECK_MOST)
    log.save()


__all__ = [
    "RoundCosts",
    "CostLog",
    "ShapeRatios",
    "cost_log",
    "costs_at_rows",
    "costs_key",
    "costs_file",
    "costs_root",
    "context_bucket",
    "JUDGE_MARGIN",
    "JUDGE_CALLS",
    "JUDGE_MARGIN_ONE",
    "HALF_ROWS_MARGIN",
    "drafting_lost",
    "JUDGE_MIN_TOKENS",
    "judge_call",
    "plain_inherited",
    "RECHECK_EVERY",
    "RECHECK_MOST",
]
