# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Breaks of the embedded targets' cache: two builders at once (parallel test workers, two CLI calls) must take
turns, and nobody may find a half-written GGUF."""

from tests.mutations.mutant import Edit, Mutant


TARGETS = "targets.py"
TAKE_TURNS = "tests/test_targets.py::test_builders_running_at_once_take_turns_and_never_see_half_a_file"

MUTANTS = [
    Mutant(
        name="targets: the GGUF is rebuilt without the inter-process lock",
        edits=(
            Edit(
                TARGETS,
                "        with _cache_lock(path):  # one process rebuilds it",
                '        with __import__("contextlib").nullcontext():  # one process rebuilds it',
            ),
        ),
        tests=(TAKE_TURNS,),
    ),
    Mutant(
        name="targets: the GGUF is written in place instead of to a temporary path renamed when whole",
        edits=(
            Edit(
                TARGETS,
                '            tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")\n',
                "            tmp = path\n",
            ),
            Edit(TARGETS, "                tmp.unlink(missing_ok=True)\n", "                pass\n"),
        ),
        tests=(TAKE_TURNS,),
    ),
]
