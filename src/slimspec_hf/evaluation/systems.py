# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The systems `slimspec bench` compares: the target alone, each drafter and its variants (draft lookup, draft trees,
confidence thresholds), optionally prompt lookup; each a row of the results. One question at a time
(`benchmark.py`) and in batches (`batching.py`), the same rows.

With `merged_head`, every low-rank drafter NAME also runs as NAME-merged (`add_merged_drafters`), its head
W_up·W_down multiplied out into one dense V×d head (`with_merged_head`): the same drafts at a full head's cost.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


MERGED_SUFFIX = "-merged"


def add_merged_drafters(drafters: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The drafters with, right after every low-rank drafter NAME, NAME-merged: a copy whose head is W_up·W_down
    multiplied out into one dense V×d head (`with_merged_head`), so the same drafts at a full head's cost. Drafters
    with another head are kept as they are (there is nothing to merge). Returns the drafters and
    `{NAME-merged: NAME}`; raises when none has a low-rank head or a merged name is already taken."""
    from ..heads_slimspec import with_merged_head

    low_rank = [name for name, drafter in drafters.items() if drafter.config.head_type == "low_rank"]
    if not low_rank:
        heads = {name: drafter.config.head_type for name, drafter in drafters.items()}
        raise ValueError(
            f"`merged_head` (--merged-head) merges low-rank heads, but no drafter has one (heads: {heads}); add a "
            "low-rank drafter or drop it."
        )
    taken = [f"{name}{MERGED_SUFFIX}" for name in low_rank if f"{name}{MERGED_SUFFIX}" in drafters]
    if taken:
        raise ValueError(
            f"`merged_head` (--merged-head) names its rows NAME{MERGED_SUFFIX}, but {taken} is already a drafter's "
            "name; rename that drafter (--name)."
        )
    merged: dict[str, Any] = {}
    merged_from = {}
    for name, drafter in drafters.items():
        merged[name] = drafter
        if name in low_rank:
            merged[f"{name}{MERGED_SUFFIX}"] = with_merged_head(drafter)
            merged_from[f"{name}{MERGED_SUFFIX}"] = name
    return merged, merged_from


def head_label(head_type: str, head_rank: int | None = None, merged_from: str | None = None) -> str:
    """How tables name a head: `low_rank r=80`, `full`, `full (merged)` for a low-rank head multiplied out."""
    if merged_from is not None:
        return f"{head_type} (merged)"
    return head_type + (f" r={head_rank}" if head_type == "low_rank" else "")


@dataclass
class System:
    """One way of generating: `kind` is "target" (alone), "drafter" or "prompt_lookup"."""

    name: str
    kind: str
    drafter: Any = None
    generate_kwargs: dict = field(default_factory=dict)
    base: str | None = None  # for a drafter system: the name of its drafter (variants share it)


def build_systems(
    drafters: dict[str, Any],
    prompt_lookup: int | None = None,
    num_assistant_tokens=None,
    confidence_thresholds: tuple[float, ...] = (),
    draft_lookup: bool = False,
    draft_trees: tuple[tuple[int, int, int], ...] = (),
    draft_shapes: tuple[str, ...] = (),
) -> list[System]:
    """The target alone, each drafter (and, per confidence threshold, the same drafter stopping its rounds early
    at the first drafted token it gives less than that probability), and optionally prompt lookup.

    `draft_lookup`: each drafter twice, as a chain only (`draft_lookup=False`, row NAME) and hybrid with prompt
    lookup (`draft_lookup=True`, row NAME+lookup); otherwise each drafter runs with its own defaults.
    `draft_trees`: (size, depth, top_k) of dynamic draft trees, each drafter once per tree (row NAME+treeS/D/K),
    and with `draft_lookup` also hybrid (row NAME+treeS/D/K+lookup). With either, the rows NAME and NAME+lookup
    are chains (`draft_tree_size=0`) even where the drafter's generation_config drafts a tree by default: a row
    is what its name says, whatever the folder's defaults.
    `draft_shapes`: each drafter once per `draft_shape` ("auto": chosen on this machine, "fixed": the drafter's
    shipped settings), row NAME@SHAPE, side by side with the rows above: the drafter's own settings and the shape
    only (neither `draft_lookup`'s chain rows' lookup off nor `num_assistant_tokens`, which would fix the shape)."""
    systems = [System("target", "target")]
    for name, drafter in drafters.items():
        kwargs = {"assistant_model": drafter}
        if num_assistant_tokens:
            kwargs["num_assistant_tokens"] = int(num_assistant_tokens)
        if draft_lookup:
            kwargs["draft_lookup"] = False
        chain = dict(kwargs, draft_tree_size=0) if (draft_lookup or draft_trees) else kwargs
        if draft_lookup:
            systems.append(System(f"{name}+lookup", "drafter", drafter, dict(chain, draft_lookup=True), base=name))
        systems.append(System(name, "drafter", drafter, chain, base=name))
        for size, depth, top_k in draft_trees:
            tree = dict(kwargs, draft_tree_size=int(size), draft_tree_depth=int(depth), draft_tree_top_k=int(top_k))
            label = f"{name}+tree{size}/{depth}/{top_k}"
            systems.append(System(label, "drafter", drafter, tree, base=name))
            if draft_lookup:
                systems.append(System(f"{label}+lookup", "drafter", drafter, dict(tree, draft_lookup=True), base=name))
        for shape in draft_shapes:
            own = {"assistant_model": drafter, "draft_shape": shape}
            systems.append(System(f"{name}@{shape}", "drafter", drafter, own, base=name))
        for threshold in confidence_thresholds:
            variant = dict(kwargs, assistant_confidence_threshold=float(threshold))
            systems.append(System(f"{name}@p{threshold:g}", "drafter", drafter, variant, base=name))
    if prompt_lookup:
        systems.append(
            System("prompt_lookup", "prompt_lookup", None, {"prompt_lookup_num_tokens": int(prompt_lookup)})
        )
    return systems


def chosen_shapes(stats: list[dict | None]) -> str:
    """The shapes `draft_shape="auto"` ended its calls with, most frequent first ("plain ×7, chain 3 ×1"), from
    the calls' statistics (`as_dict()`); "" where no call chose one (a fixed shape)."""
    counts: dict[str, int] = {}
    for entry in stats:
        shape = ((entry or {}).get("draft_shape") or {}).get("shape")
        if shape:
            counts[shape] = counts.get(shape, 0) + 1
    return ", ".join(f"{shape} ×{n}" for shape, n in sorted(counts.items(), key=lambda item: -item[1]))


__all__ = ["System", "add_merged_drafters", "build_systems", "chosen_shapes", "head_label"]
