# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Breaks of `slimspec bench`: what a run samples with and what it counts. The figures still come out, only wrong:
a sampled run that ignores `--top-p`, or a batched run that reports drafters as lossless without comparing."""

from tests.mutations.mutant import Edit, Mutant


BATCHING = "evaluation/batching.py"
BENCHMARK = "evaluation/benchmark.py"
BATCHED_GREEDY = (
    "tests/evaluation/test_batching.py::test_batched_drafters_generate_plain_batched_greedy_tokens_in_fp32"
)
SAMPLED = "tests/evaluation/test_batching.py::test_sampled_runs_pass_top_p_and_no_top_k_to_every_call"

MUTANTS = [
    Mutant(
        name="bench: batched sampled runs ignore `--top-p`",
        edits=(
            Edit(
                BATCHING,
                "sampling_kwargs(temperature, top_p=top_p, top_k=0)",
                "sampling_kwargs(temperature, top_k=0)",
            ),
        ),
        tests=(SAMPLED,),
    ),
    Mutant(
        name="bench: batched sampled runs keep transformers' default top-k cut",
        edits=(
            Edit(
                BATCHING,
                "sampling_kwargs(temperature, top_p=top_p, top_k=0)",
                "sampling_kwargs(temperature, top_p=top_p)",
            ),
        ),
        tests=(SAMPLED,),
    ),
    Mutant(
        name="bench: sampled runs one question at a time ignore `--top-p`",
        edits=(
            Edit(
                BENCHMARK,
                "sampling_kwargs(temperature, top_p=top_p, top_k=0)",
                "sampling_kwargs(temperature, top_k=0)",
            ),
        ),
        tests=(SAMPLED,),
    ),
    Mutant(
        name="bench: every greedy batch counts as identical to plain batched greedy",
        edits=(
            Edit(
                BATCHING,
                'count[0] += int(outputs[name].tolist() == outputs["target"].tolist())',
                "count[0] += 1",
            ),
        ),
        tests=(BATCHED_GREEDY,),
    ),
    Mutant(
        name="bench: the @any-batch row keeps its drafter's batch limit",
        edits=(
            Edit(BATCHING, '{**system.generate_kwargs, "draft_max_batch_size": 0}', "dict(system.generate_kwargs)"),
        ),
        tests=(BATCHED_GREEDY,),
    ),
]
