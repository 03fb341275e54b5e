# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Batched generation side by side: plain batched `generate()` against SlimSpec decoding at the same batch size.

`slimspec bench --batch-sizes 1 4 16`: the questions are cut into batches of B (left padded, as transformers
batches a decoder-only model), and every system generates every batch, interleaved batch by batch, so that the
systems share the machine's noise. Throughput counts each row's new tokens up to and including its EOS (the
padding after it is not counted), the same way for every system.
"""

import time

import torch

from .timing import encode_prompt, sampling_kwargs


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


def new_token_counts(sequences: torch.LongTensor, prompt_length: int, eos_ids: set[int]) -> list[int]:
    """Each row's generated tokens up to and including its first EOS."""
    counts = []
    for row in sequences[:, prompt_length:].tolist():
        end = next((i + 1 for i, token in enumerate(row) if token in eos_ids), len(row))
        counts.append(end)
    return counts


def run_batch_sweep(
    target,
    tokenizer,
    systems: dict[str, dict],
    prompts: list[str],
    batch_sizes: list[int],
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    seed: int = 0,
) -> dict:
    """Every system on every batch of every size; returns {"rows": [...], "identical": {...}}.

    `systems`: name -> `generate()` keywords (e.g. {"assistant_model": drafter}); "target" (plain) is added.
    Greedy runs also count the batches whose output equals plain batched greedy token for token."""
    if not prompts:
        raise ValueError("No prompts to benchmark: check `--categories` and `--limit`.")
    systems = {"target": {}, **systems}
    eos = target.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    sampling = sampling_kwargs(temperature, top_p=0.95 if temperature else 1.0)
    rows, identical = [], {}
    for size in batch_sizes:
        batches = [prompts[i : i + size] for i in range(0, len(prompts) - size + 1, size)] or [prompts[:size]]
        for index, batch in enumerate(batches):
            inputs = left_padded_batch(tokenizer, batch, target.device)
            names = list(systems)
            shift = index % len(names)  # rotate: no system always runs first
            outputs = {}
            for name in names[shift:] + names[:shift]:
                torch.manual_seed(seed + index)
                kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=pad, **sampling, **systems[name])
                start = time.perf_counter()
                with torch.inference_mode():
                    out = target.generate(**inputs, **kwargs)
                seconds = time.perf_counter() - start
                outputs[name] = out
                drafter = systems[name].get("assistant_model")
                stats = getattr(drafter, "last_generation_stats", None) if drafter is not None else None
                rows.append(
                    {
                        "batch_size": size,
                        "batch": index,
                        "system": name,
                        "new_tokens": sum(new_token_counts(out, inputs["input_ids"].shape[1], eos_ids)),
                        "seconds": seconds,
                        "tau": stats.acceptance_length if stats is not None and stats.rounds else None,
                    }
                )
            if not temperature:
                for name in names[1:]:
                    same = outputs[name].tolist() == outputs["target"].tolist()
                    identical.setdefault(f"{name}@{size}", [0, 0])
                    identical[f"{name}@{size}"][0] += int(same)
                    identical[f"{name}@{size}"][1] += 1
    return {"rows": rows, "identical": identical}


def summarize(sweep: dict) -> list[dict]:
    """Per batch size and system: tokens/s over all its batches and the ratio to plain batched `generate()`."""
    totals: dict[tuple[int, str], list[float]] = {}
    taus: dict[tuple[int, str], list[float]] = {}
    for row in sweep["rows"]:
        key = (row["batch_size"], row["system"])
        tokens, seconds = totals.get(key, [0, 0.0])
        totals[key] = [tokens + row["new_tokens"], seconds + row["seconds"]]
        if row["tau"] is not None:
            taus.setdefault(key, []).append(row["tau"])
    summary = []
    for (size, name), (tokens, seconds) in totals.items():
        base_tokens, base_seconds = totals[(size, "target")]
        rate, base = tokens / seconds, base_tokens / base_seconds
        tau = sum(taus[(size, name)]) / len(taus[(size, name)]) if (size, name) in taus else None
        identical = sweep["identical"].get(f"{name}@{size}")
        summary.append(
            {
                "batch_size": size,
                "system": name,
                "tokens_per_second": rate,
                "speedup": rate / base,
                "tau": tau,
                "identical": None if identical is None else f"{identical[0]}/{identical[1]}",
            }
        )
    return summary


def render_sweep(summary: list[dict], header: str) -> str:
    lines = [
        header,
        "",
        "| B | system | tok/s | vs plain batched generate | τ | identical batches |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for row in summary:
        tau = f"{row['tau']:.2f}" if row["tau"] is not None else "–"
        lines.append(
            f"| {row['batch_size']} | {row['system']} | {row['tokens_per_second']:.1f} | {row['speedup']:.2f}× | "
            f"{tau} | {row['identical'] or '–'} |"
        )
    return "\n".join(lines)


__all__ = ["left_padded_batch", "new_token_counts", "render_sweep", "run_batch_sweep", "summarize"]
