# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""What a SlimSpec `generate()` call measured: its acceptance statistics (`SlimSpecGenerationStats`), kept per thread
as the drafter's `last_generation_stats`, and the output class that returns them (`slimspec_stats`).

Part of the remote-code unit: it imports only `transformers`.
"""

import threading
import weakref
from dataclasses import dataclass, field

from transformers.generation.utils import GenerateDecoderOnlyOutput


@dataclass
class SlimSpecGenerationStats:
    """Acceptance statistics of one `generate()` call: the output's `slimspec_stats` (`return_dict_in_generate`) and
    the drafter's `last_generation_stats` (the calling thread's last call). Rounds are also counted by draft source:
    `"drafter"`, `"lookup"`, `"drafter+lookup"` or `"plain"`. With `draft_shape="auto"`, `draft_shape` holds the
    shape chosen last and its predicted and measured speed-ups over plain decoding."""

    rounds: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    drafted_per_position: list[int] = field(default_factory=list)
    rounds_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    per_row: list["SlimSpecGenerationStats"] = field(default_factory=list)  # batch > 1: each prompt's own
    draft_shape: dict = field(default_factory=dict)

    @classmethod
    def combined(cls, rows: list["SlimSpecGenerationStats"]) -> "SlimSpecGenerationStats":
        """The totals of a batch's rows, which it keeps as `per_row`."""
        total = cls(per_row=list(rows))
        for row in rows:
            total.rounds += row.rounds
            total.drafted_tokens += row.drafted_tokens
            total.accepted_tokens += row.accepted_tokens
            for name in ("accepted_per_position", "drafted_per_position"):
                mine, theirs = getattr(total, name), getattr(row, name)
                mine.extend([0] * (len(theirs) - len(mine)))
                mine[: len(theirs)] = [a + b for a, b in zip(mine, theirs)]
            for name in ("rounds_by_source", "accepted_by_source"):
                mine = getattr(total, name)
                for source, value in getattr(row, name).items():
                    mine[source] = mine.get(source, 0) + value
        return total

    @property
    def acceptance_length(self) -> float:
        """τ: tokens produced per target verification (accepted drafts + the target's own token)."""
        return (self.accepted_tokens + self.rounds) / self.rounds if self.rounds else float("nan")

    @property
    def per_position_acceptance(self) -> list[float]:
        """Fraction of rounds in which the i-th drafted token was accepted, among rounds that drafted it."""
        return [a / d if d else float("nan") for a, d in zip(self.accepted_per_position, self.drafted_per_position)]

    @property
    def acceptance_length_by_source(self) -> dict[str, float]:
        """τ of the rounds drafted by each source."""
        return {
            source: (self.accepted_by_source.get(source, 0) + rounds) / rounds
            for source, rounds in self.rounds_by_source.items()
            if rounds
        }

    def record(self, source: str, drafted: int, accepted: int, positions: int | None = None) -> None:
        """Counts one verified round: `drafted` tokens verified, `accepted` of them kept, over `positions` draft
        positions (default `drafted`, a chain; a tree's depth)."""
        positions = drafted if positions is None else positions
        self.rounds += 1
        self.drafted_tokens += drafted
        self.accepted_tokens += accepted
        self.rounds_by_source[source] = self.rounds_by_source.get(source, 0) + 1
        self.accepted_by_source[source] = self.accepted_by_source.get(source, 0) + accepted
        for counts in (self.drafted_per_position, self.accepted_per_position):
            counts.extend([0] * (positions - len(counts)))
        for i in range(positions):
            self.drafted_per_position[i] += 1
            self.accepted_per_position[i] += int(i < accepted)

    def as_dict(self) -> dict:
        return {
            "rounds": self.rounds,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_length": self.acceptance_length,
            "per_position_acceptance": self.per_position_acceptance,
            "rounds_by_source": dict(self.rounds_by_source),
            "acceptance_length_by_source": self.acceptance_length_by_source,
            **({"per_row": [row.as_dict() for row in self.per_row]} if self.per_row else {}),
            **({"draft_shape": dict(self.draft_shape)} if self.draft_shape else {}),
        }


_CALLS = threading.local()  # per thread: drafter -> the statistics of its last call in that thread (weak keys)


class PerThreadStats:
    """`drafter.last_generation_stats`: the statistics of the last `generate()` call the calling thread made with the
    drafter (one drafter serving several threads tells each thread its own call's); before any: `AttributeError`."""

    def __get__(self, drafter, owner=None):
        stats = self if drafter is None else _CALLS.__dict__.get("stats", {}).get(drafter)
        if stats is None:
            raise AttributeError("`last_generation_stats`: this thread has made no `generate()` call yet")
        return stats

    def __set__(self, drafter, stats: SlimSpecGenerationStats) -> None:
        _CALLS.__dict__.setdefault("stats", weakref.WeakKeyDictionary())[drafter] = stats


@dataclass
class SlimSpecDecoderOnlyOutput(GenerateDecoderOnlyOutput):
    """transformers' `GenerateDecoderOnlyOutput` and the call's own statistics, `slimspec_stats`."""

    slimspec_stats: SlimSpecGenerationStats | None = None


def record_stats(drafter, stats: SlimSpecGenerationStats) -> None:
    """Makes `stats` the calling thread's `drafter.last_generation_stats` (set up on the drafter's class once)."""
    if not isinstance(getattr(type(drafter), "last_generation_stats", None), PerThreadStats):
        type(drafter).last_generation_stats = PerThreadStats()
    drafter.last_generation_stats = stats


__all__ = ["PerThreadStats", "record_stats", "SlimSpecDecoderOnlyOutput", "SlimSpecGenerationStats"]
