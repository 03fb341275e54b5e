# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""ρτ, a head's acceptance length relative to the full head's, as an `evaluate` metric (datasets + evaluate only).

Load it from its folder: `evaluate.load("<path>/evaluate_metrics/rho_tau")`.
"""

import datasets
import evaluate


_DESCRIPTION = """\
ρτ = τ_head / τ_full: the acceptance length of a drafter with a cheaper head (e.g. SlimSpec's low-rank head)
divided by that of the identically trained full-head drafter, both pooled over the same prompts. One example per
prompt: the head drafter's (`accepted_tokens`, `rounds`) and the full-head drafter's (`reference_accepted_tokens`,
`reference_rounds`).
"""

_KWARGS_DESCRIPTION = """
Args:
    accepted_tokens (`list[int]`), rounds (`list[int]`): the evaluated head's counts per prompt.
    reference_accepted_tokens (`list[int]`), reference_rounds (`list[int]`): the full head's counts per prompt.
Returns:
    rho_tau (`float`): τ_head / τ_full.
    acceptance_length (`float`): τ_head.
    reference_acceptance_length (`float`): τ_full.
Examples:
    >>> metric = evaluate.load("path/to/evaluate_metrics/rho_tau")
    >>> metric.compute(accepted_tokens=[4], rounds=[2], reference_accepted_tokens=[6], reference_rounds=[2])
    {'rho_tau': 0.75, 'acceptance_length': 3.0, 'reference_acceptance_length': 4.0}
"""


def _tau(accepted, rounds):
    total = sum(rounds)
    return (sum(accepted) + total) / total if total else float("nan")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class RhoTau(evaluate.Metric):
    def _info(self):
        count = datasets.Value("int64")
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "accepted_tokens": count,
                    "rounds": count,
                    "reference_accepted_tokens": count,
                    "reference_rounds": count,
                }
            ),
        )

    def _compute(self, accepted_tokens, rounds, reference_accepted_tokens, reference_rounds):
        for name, values in (
            ("accepted_tokens", accepted_tokens),
            ("rounds", rounds),
            ("reference_accepted_tokens", reference_accepted_tokens),
            ("reference_rounds", reference_rounds),
        ):
            if any(v < 0 for v in values):
                raise ValueError(f"`{name}` must hold non-negative counts.")
        tau, tau_full = _tau(accepted_tokens, rounds), _tau(reference_accepted_tokens, reference_rounds)
        if not tau_full > 0:
            raise ValueError("The reference (full head) has no rounds: `reference_rounds` must not all be 0.")
        return {"rho_tau": tau / tau_full, "acceptance_length": tau, "reference_acceptance_length": tau_full}
