# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""A deliberate break of the package: a behaviour to get wrong, the source edit that gets it wrong, and the tests
that must fail when it is wrong. `tests/mutations/run.py` applies each to a copy of `src/` and runs those tests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    """Replace `old` (which must occur exactly once in `file`, a path under `src/slimspec_hf/`) by `new`."""

    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    """`name` says the wrong behaviour (not the function it lives in), so a refactor keeps it meaningful: when an
    edit no longer applies, rewrite the edit for the new code and keep the name."""

    name: str
    edits: tuple[Edit, ...]
    tests: tuple[str, ...]  # pytest node ids or files (relative to the repository) that must catch it
    each: bool = False  # every listed test must fail (a control break that no statistical test may miss)

    def __post_init__(self):
        if not self.edits or not self.tests:
            raise ValueError(f"mutant {self.name!r} needs at least one edit and one test")
