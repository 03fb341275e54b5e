# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Acceptance length τ of speculative decoding, as an `evaluate` metric (self-contained: datasets + evaluate only).

Load it from its folder: `evaluate.load("<path>/evaluate_metrics/acceptance_length")`.
"""

import datasets
import evaluate


_DESCRIPTION = """\
Acceptance length τ: tokens produced per target verification round, (accepted drafts + rounds) / rounds, pooled
over all generations (a long generation weighs more than a short one, as in tokens/s). One example per
`generate()` call: the `accepted_tokens` and `rounds` of `drafter.last_generation_stats`.
"""

_KWARGS_DESCRIPTION = """
Args:
    accepted_tokens (`list[int]`): accepted drafted tokens of each generation.
    rounds (`list[int]`): verification rounds of each generation (rounds in which the drafter drafted).
Returns:
    acceptance_length (`float`): pooled τ (NaN when there were no rounds).
    mean_accepted_per_round (`float`): τ - 1.
Examples:
    >>> metric = evaluate.load("path/to/evaluate_metrics/acceptance_length")
    >>> metric.compute(accepted_tokens=[6, 2], rounds=[2, 2])
    {'acceptance_length': 3.0, 'mean_accepted_per_round': 2.0}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class AcceptanceLength(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"accepted_tokens": datasets.Value("int64"), "rounds": datasets.Value("int64")}
            ),
        )

    def _compute(self, accepted_tokens, rounds):
        if any(a < 0 for a in accepted_tokens) or any(r < 0 for r in rounds):
            raise ValueError("`accepted_tokens` and `rounds` must be non-negative counts.")
        total_rounds = sum(rounds)
        if total_rounds == 0:
            tau = float("nan")
        else:
            tau = (sum(accepted_tokens) + total_rounds) / total_rounds
        return {"acceptance_length": tau, "mean_accepted_per_round": tau - 1.0}
