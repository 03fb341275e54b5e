# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Batched generation side by side: plain batched `generate()` against SlimSpec decoding at the same batch size.

`slimspec bench --batch-sizes 1 4 16`: the questions are cut into batches of B (left padded, as transformers
batches a decoder-only model), and every system generates every batch, interleaved batch by batch, so that the
systems share the machine's noise. Throughput counts each row's new tokens up to and including its EOS (the
padding after it is not counted), the same way for every system. The systems are `slimspec bench`'s own
(`systems.build_systems`), sampled the same way (`timing.sampling_kwargs`: `top_p`, no top-k cut).
"""

from collections.abc import Sequence

import torch

from ..calls_slimspec import new_token_counts
from .metrics import acceptance_length
from .systems import chosen_shapes
from .timing import Timer, encode_prompt, sampling_kwargs


ANY_BATCH = "@any-batch"


def left_padded_batch(tokenizer, prompts: list[str], device) -> dict[str, torch.Tensor]:
    """The chat-formatted prompts as one left-padded batch (`input_ids`, `attention_mask`)."""
    encoded = [encode_prompt(tokenizer, p)["input_ids"][0] for p in prompts]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    length = max(len(ids) for ids in encoded)
    input_ids = torch.full((len(encoded), length), pad, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for i, ids in enumerate(encoded):
        input_ids[i, length - len(ids) :] = ids
        mask[i, length - len(ids) :] = 1
    return {"input_ids": input_ids.to(device), "attention_mask": mask.to(device)}


def batch_systems(systems) -> dict[str, dict]:
    """`generate()` keywords per system for the batched sweep, from `systems.build_systems`' list: every drafter
    row, and for a drafter whose generation_config stops drafting above a batch size (`draft_max_batch_size`) also
    NAME@any-batch, its own row drafting at every batch size. The target alone is added by `run_batch_sweep`."""
    batched = {}
    for system in systems:
        if system.kind == "target":
            continue
        if system.kind != "drafter":
            raise ValueError(
                f"`{system.name}` ({system.kind}) does not decode batches: transformers' assisted generation takes "
                "one prompt at a time."
            )
        batched[system.name] = dict(system.generate_kwargs)
        limit = getattr(system.drafter.generation_config, "draft_max_batch_size", 0)
        if limit and system.name == system.base:
            batched[system.name + ANY_BATCH] = {**system.generate_kwargs, "draft_max_batch_size": 0}
    return batched


def run_batch_sweep(
    target,
    tokenizer,
    systems: dict[str, dict],
    prompts: list[str],
    batch_sizes: Sequence[int],
    max_new_tokens: int = 128,
    temperatures: Sequence[float] = (0.0,),
    top_p: float = 1.0,
    seed: int = 0,
) -> dict:
    """Every system on every batch of every size, at every temperature; returns {"rows": [...], "identical": {...}}.

    `systems`: name -> `generate()` keywords (e.g. {"assistant_model": drafter}); "target" (plain) is added.
    Sampled runs draw with `top_p` and no top-k cut, every system from the same seed per batch. Greedy runs also
    count the batches whose output equals plain batched greedy token for token (`identical`, per NAME@B)."""
    if not prompts:
        raise ValueError("No prompts to benchmark: check `--categories` and `--limit`.")
    if not batch_sizes or min(batch_sizes) < 1:
        raise ValueError(f"`batch_sizes` must be at least 1 each, got {list(batch_sizes)}.")
    systems = {"target": {}, **systems}
    eos = target.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    # warm-up: one short batch per system, so that first-call costs stay out of the timings
    warm = left_padded_batch(tokenizer, prompts[: min(batch_sizes)], target.device)
    for kwargs in systems.values():
        with torch.inference_mode():
            target.generate(
                **warm, **{"max_new_tokens": min(8, max_new_tokens), "pad_token_id": pad, "do_sample": False, **kwargs}
            )
    rows, identical = [], {}
    for temperature in temperatures:
        sampling = sampling_kwargs(temperature, top_p=top_p, top_k=0)  # unbiased sampling: no top-k cut
        common = dict(max_new_tokens=max_new_tokens, pad_token_id=pad, **sampling)
        for size in batch_sizes:
            batches = [prompts[i : i + size] for i in range(0, len(prompts) - size + 1, size)] or [prompts[:size]]
            for index, batch in enumerate(batches):
                inputs = left_padded_batch(tokenizer, batch, target.device)
                outputs = {}
                names = list(systems)
                shift = index % len(names)  # rotate: no system always runs first
                for name in names[shift:] + names[:shift]:
                    torch.manual_seed(seed + index)  # every system samples from the same seed
                    outputs[name], row = _timed_batch(target, inputs, {**common, **systems[name]}, eos_ids)
                    rows.append(
                        {"temperature": temperature, "batch_size": size, "batch": index, "system": name, **row}
                    )
                if not temperature:
                    for name in names[1:]:
                        count = identical.setdefault(f"{name}@{size}", [0, 0])
                        count[0] += int(outputs[name].tolist() == outputs["target"].tolist())
                        count[1] += 1
    return {"rows": rows, "identical": identical}


def _timed_batch(target, inputs: dict, kwargs: dict, eos_ids: set[int]) -> tuple[torch.LongTensor, dict]:
    """One timed `generate()` of a batch: its sequences, and its row's new tokens (each row's up to its EOS),
    seconds, and the drafter's rounds and accepted tokens over all rows (0 and 0 when no drafter drafted)."""
    with torch.inference_mode(), Timer(target.device) as timer:
        out = target.generate(**inputs, **kwargs)
    drafter = kwargs.get("assistant_model")
    stats = getattr(drafter, "last_generation_stats", None) if drafter is not None else None
    return out, {
        "new_tokens": sum(new_token_counts(out, inputs["input_ids"].shape[1], eos_ids)),
        "seconds": timer.seconds,
        "rounds": stats.rounds if stats is not None else 0,
        "accepted_tokens": stats.accepted_tokens if stats is not None else 0,
        "shape": (stats.draft_shape.get("shape") or "") if stats is not None else "",
    }


def summarize(sweep: dict) -> list[dict]:
    """Per temperature, batch size and system: tokens/s over all its batches, the ratio to plain batched
    `generate()` on the same batches, and τ pooled over all rounds of all rows (None where nothing was drafted)."""
    totals: dict[tuple[float, int, str], list[float]] = {}
    shapes: dict[tuple[float, int, str], list[dict]] = {}
    for row in sweep["rows"]:
        key = (row["temperature"], row["batch_size"], row["system"])
        shapes.setdefault(key, []).append({"draft_shape": {"shape": row.get("shape")}})
        tokens, seconds, rounds, accepted = totals.get(key, [0, 0.0, 0, 0])
        totals[key] = [
            tokens + row["new_tokens"],
            seconds + row["seconds"],
            rounds + row["rounds"],
            accepted + row["accepted_tokens"],
        ]
    summary = []
    for (temperature, size, name), (tokens, seconds, rounds, accepted) in totals.items():
        base_tokens, base_seconds = totals[(temperature, size, "target")][:2]
        rate, base = tokens / seconds, base_tokens / base_seconds
        tau = acceptance_length(accepted, rounds) if rounds else None
        identical = sweep["identical"].get(f"{name}@{size}") if not temperature else None
        summary.append(
            {
                "temperature": temperature,
                "batch_size": size,
                "system": name,
                "tokens_per_second": rate,
                "speedup": rate / base,
                "tau": tau,
                "identical": None if identical is None else f"{identical[0]}/{identical[1]}",
                "shapes": chosen_shapes(shapes[(temperature, size, name)]),
            }
        )
    return summary


def render_sweep(summary: list[dict], header: str) -> str:
    """The sweep as a markdown table: per temperature and batch size, each system's tokens/s, its speed-up over
    plain batched `generate()`, τ and (greedy) the batches identical to plain greedy."""
    lines = [
        header,
        "",
        "| T | B | system | tok/s | vs plain batched generate() | τ | identical batches | shapes chosen (auto) |",
        "|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for row in summary:
        tau = f"{row['tau']:.2f}" if row["tau"] is not None else "–"
        lines.append(
            f"| {row['temperature']:g} | {row['batch_size']} | {row['system']} | "
            f"{row['tokens_per_second']:.1f} | {row['speedup']:.2f}× | {tau} | {row['identical'] or '–'} | "
            f"{row.get('shapes') or '–'} |"
        )
    return "\n".join(lines)


__all__ = [
    "ANY_BATCH",
    "batch_systems",
    "left_padded_batch",
    "new_token_counts",
    "render_sweep",
    "run_batch_sweep",
    "summarize",
]
