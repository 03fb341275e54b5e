# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""A `draft_shape="auto"` call: whether it drafts at all (`plain_is_chosen`: where this machine's rounds or calls
chose plain decoding it runs plain `generate()`) and, over several rows, how it is judged: its decoding timed from
its first token (`FirstStepClock`), its longest row's steps counted (`new_token_counts`) and both handed to
`judge_call`, which holds the calls that drafted against the plain calls (`costs_slimspec`), so that a batch size
where drafting loses decodes plain from then on (`judged`).

Part of the remote-code unit: it imports only the standard library, `torch`, `transformers` and `costs_slimspec`.
"""

import time

import torch
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList

from .costs_slimspec import cost_log, judge_call


def plain_is_chosen(target, drafter, batch_size: int, context: int, sampled: bool) -> bool:
    """Whether the calls so far (in this process or, where costs are kept, earlier ones) chose plain decoding for
    `target` and `drafter` at `batch_size` rows of prompts `context` tokens long, greedy or `sampled`: such calls skip
    the drafter, but one in `CostLog.recheck_every` (8, doubling while re-checks keep choosing plain, up to 64)
    drafts, so that a drafter whose acceptance rises (other prompts, code after chat) gets chosen again. Over several
    rows the first call is plain too: what calls that draft are held against (`judge_call`)."""
    log = cost_log(target, drafter, batch_size, context, sampled)
    if batch_size > 1 and not log.plain_rates:
        return True
    if not log.plain_chosen:
        return False
    log.plain_calls += 1
    plain = log.plain_calls < log.recheck_every
    if not plain:
        log.plain_calls = 0
    log.save()
    return plain


def new_token_counts(sequences: torch.LongTensor, prompt_length: int, eos_ids: set[int]) -> list[int]:
    """Each row's generated tokens up to and including its first EOS."""
    counts = []
    for row in sequences[:, prompt_length:].tolist():
        end = next((i + 1 for i, token in enumerate(row) if token in eos_ids), len(row))
        counts.append(end)
    return counts


class FirstStepClock(StoppingCriteria):
    """Never stops a row: notes when the criteria are first checked, after the prompts' pass and its first token (in
    `generate()`'s loops and in the decoding loop alike), so that a call's decoding is timed without that pass."""

    def __init__(self):
        self.at: float | None = None
        self.never: dict = {}  # (rows, device) -> the all-False answer, made once: the loop asks per row and token

    def __call__(self, input_ids: torch.LongTensor, scores=None, **kwargs) -> torch.BoolTensor:
        if self.at is None:
            self.at = time.perf_counter()
        key = (input_ids.shape[0], input_ids.device)
        if key not in self.never:
            self.never[key] = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        return self.never[key]


def judged(generate, target, drafter, arguments: dict, auto: bool, sampled: bool, /, **extra):
    """`generate(target, **arguments, **extra)`; an `auto` call over several rows timed from its first token on
    (`FirstStepClock`: the prompts' pass costs what their length makes it), its longest row's tokens after the first
    and seconds going to `judge_call` (with `extra`, the decoding loop's arguments, as a call that drafted)."""
    ids = arguments.get("inputs") if arguments.get("inputs") is not None else arguments.get("input_ids")
    if not auto or not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[0] <= 1:
        return generate(target, **arguments, **extra)
    clock = FirstStepClock()
    criteria = StoppingCriteriaList([*(arguments.get("stopping_criteria") or []), clock])
    out = generate(target, **{**arguments, "stopping_criteria": criteria}, **extra)
    if ids.device.type == "cuda":
        torch.cuda.synchronize(ids.device)
    if clock.at is None:
        return out
    seconds = time.perf_counter() - clock.at
    sequences = out if isinstance(out, torch.Tensor) else out.sequences
    passed = arguments.get("generation_config")
    eos = arguments.get("eos_token_id", getattr(passed or target.generation_config, "eos_token_id", None))
    eos_ids = set(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
    steps = max(new_token_counts(sequences, ids.shape[-1], eos_ids)) - 1
    judge_call(target, drafter, ids.shape[0], ids.shape[-1], sampled, steps, seconds, drafted=bool(extra))
    return out


__all__ = ["FirstStepClock", "judged", "new_token_counts", "plain_is_chosen"]
