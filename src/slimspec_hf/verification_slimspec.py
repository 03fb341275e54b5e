# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The target's side of a SlimSpec round: its LM head on the rows the acceptance walk reaches, the attention masks
that verify a tree (per layer type: sliding-window layers see only their window), and its KV cache rolled back to
what was accepted — one sequence (`compact_cache`) or a batch sharing one cache (`BatchSlots`).

Part of the remote-code unit: it imports only `torch` and its siblings (relatively).
"""

import inspect
import os
from contextlib import contextmanager

import torch

from .drafting_slimspec import ROOT, DecodingSequence, DraftTree


# Config fields of targets whose logits are more than `lm_head(last_hidden_state)` (soft-capping, scaling).
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")
TREE_ATTENTION = (None, "sdpa", "eager")  # implementations that take a 4-D (tree) attention mask
_LAYER_TYPES = ("full_attention", "sliding_attention")
_FORCE_GQA = "TRANSFORMERS_SDPA_FORCE_GQA"


# ----------------------------------------------------------------------------------------------------------------
# One sequence: the LM head on demand, tree attention masks, cache compaction
# ----------------------------------------------------------------------------------------------------------------


def _numbers_selected_states_by_position() -> bool:
    try:
        from transformers.utils import output_capturing
    except ImportError:
        return False
    return hasattr(output_capturing, "selected_hidden_states")


# A list-valued `output_hidden_states` returns the selected states at their `outputs.hidden_states` positions (0: the
# embeddings) from transformers 5.23 on; 5.20-5.22 number them by decoder layer output instead (i: layer i's output),
# one layer deeper than the same index of the full tuple.
SELECTED_STATES_BY_POSITION = _numbers_selected_states_by_position()


def captured_hidden_states(layer_ids) -> list[int] | bool:
    """The `output_hidden_states` a target forward takes so that `hidden_states[i]` is position i of the full tuple
    for every i in `layer_ids`: the ids themselves where transformers numbers a selection by position, else every
    state (the forward computes them all anyway; only references are kept)."""
    return list(layer_ids) if SELECTED_STATES_BY_POSITION else True


def cache_keyword(model) -> str:
    """The name under which `model`'s forward takes its KV cache: transformers 5.24 renamed `past_key_values` to
    `cache` (the old name deprecated), and the package supports releases on both sides of the rename."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@contextmanager
def shared_kv_heads():
    """The target's forwards inside run sdpa attention on its shared key/value heads (`enable_gqa`).

    transformers' sdpa attention copies a grouped-query target's keys and values once per query head (`repeat_kv`:
    the whole cache, every layer) whenever a mask is passed and more than one token is queried — every tree, padded
    or batched verification — unless `TRANSFORMERS_SDPA_FORCE_GQA=1`, which its `use_gqa_in_sdpa` reads per call
    from transformers 5.23 on (`tests/test_decoding_slimspec.py` fails if it stops doing so; earlier releases
    copy). Measured on SmolLM2 (bf16, 1 thread): a batch of 4 decoding chains of 1 went from 0.93x to 1.26x of plain
    batched `generate()` in one pair of runs."""
    previous = os.environ.get(_FORCE_GQA)
    os.environ[_FORCE_GQA] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_FORCE_GQA, None)
        else:
            os.environ[_FORCE_GQA] = previous


def plain_lm_head(target):
    """The target's LM head when its logits are exactly `head(backbone(...).last_hidden_state)`, else None."""
    config = target.config.get_text_config(decoder=True)
    if any(getattr(config, name, None) not in (None, 1, 1.0) for name in _LOGIT_TRANSFORMS):
        return None
    head = target.get_output_embeddings()
    backbone = getattr(target, target.base_model_prefix, None)
    if not isinstance(head, torch.nn.Linear) or backbone is None or backbone is target:
        return None
    return head


class TargetLogits:
    """The target's logits of one round's verified rows (row 0 the root, row i the i-th kept node), computed when
    the acceptance walk reaches them: the LM head is a vocabulary-wide matmul, so it runs only for rows that may be
    on the accepted path. The first batch is the root, its children and the likeliest path below; a walk that
    leaves it computes the rest of the subtree it entered in one more batch. `lazy=False` (a head bound by reading
    its weights): every row in the first batch. `head=None`: `logits` holds every row already (a target whose
    logits are more than its LM head applied to the last hidden state)."""

    def __init__(self, tree: DraftTree, head, hidden: torch.Tensor | None, logits=None, lazy: bool = True):
        self.tree, self.head, self.hidden, self.lazy = tree, head, hidden, lazy  # hidden: (1, n, d)
        self.rows = {ROOT: 0, **{node: i + 1 for i, node in enumerate(tree.kept)}}
        self.children: dict[int, list[int]] = {}
        for node in tree.kept:  # parents come before children
            self.children.setdefault(tree.parents[node], []).append(node)
        self.logits = {} if logits is None else {node: logits[:, row] for node, row in self.rows.items()}
        self.batches: list[int] = []  # rows per LM-head call (for tests and profiling)

    def __call__(self, node: int) -> torch.Tensor:
        """The target's raw logits (1, V) at `node`'s row."""
        if node not in self.logits:
            nodes = self.rows_for(node)
            index = torch.tensor([self.rows[n] for n in nodes], device=self.hidden.device)
            logits = self.head(self.hidden[:, index])  # (1, len(nodes), V)
            self.batches.append(len(nodes))
            for i, n in enumerate(nodes):
                self.logits[n] = logits[:, i]
        return self.logits[node]

    def rows_for(self, node: int) -> list[int]:
        """The nodes whose logits one LM-head call computes when the walk first needs `node`'s."""
        if node == ROOT and not self.lazy:
            return list(self.rows)
        if node == ROOT:  # the root, all its children (where most walks leave a single path), the best path
            nodes = [ROOT, *self.children.get(ROOT, [])]
            below = self.children.get(ROOT)
            while below:
                best = max(below, key=lambda n: self.tree.scores[n])
                nodes += [] if best in nodes else [best]
                below = self.children.get(best)
            return nodes
        nodes, stack = [], [node]  # the walk left the first batch: the whole subtree it entered
        while stack:
            current = stack.pop()
            if current not in self.logits:
                nodes.append(current)
            stack.extend(self.children.get(current, ()))
        return nodes


def layer_windows(config) -> int | None | dict[str, int | None]:
    """The attention window of the target's layers: one value for all layers (None: full attention), or one per
    layer type where full and sliding-window layers mix (transformers then takes a mask per type)."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if not types:
        return window
    unknown = sorted(set(types) - set(_LAYER_TYPES))
    if unknown:
        raise ValueError(
            f"SlimSpec tree decoding supports full and sliding-window attention layers, got layer types {unknown}; "
            "use chain drafting (`draft_tree_top_k=1` without `draft_lookup`)."
        )
    windows = {kind: window if kind == "sliding_attention" else None for kind in set(types)}
    return windows if len(windows) > 1 else next(iter(windows.values()))


def tree_ancestors(tree: DraftTree) -> tuple[torch.Tensor, torch.Tensor]:
    """Over the root and the kept nodes (n = kept + 1): which rows each row may see (itself and its ancestors),
    (n, n) bool, and each row's depth (n,)."""
    size = len(tree.kept) + 1
    rows = {ROOT: 0, **{node: i + 1 for i, node in enumerate(tree.kept)}}
    ancestors = torch.zeros((size, size), dtype=torch.bool)
    ancestors[0, 0] = True
    for node in tree.kept:  # parents come first
        ancestors[rows[node]] = ancestors[rows[tree.parents[node]]]
        ancestors[rows[node], rows[node]] = True
    return ancestors, torch.tensor([0] + [tree.depths[n] for n in tree.kept])


def tree_attention_mask(config, seq: DecodingSequence, tree: DraftTree, dtype) -> torch.Tensor | dict:
    """Additive masks (1, 1, n, past + n) over the root and the kept nodes: each row sees the committed prefix and
    its ancestors, within the layer's window (sequence index of a node: the root's + depth)."""
    past, size = seq.length - 1, len(tree.kept) + 1
    ancestors, depths = tree_ancestors(tree)
    allowed = torch.cat([seq.key_mask[:past].cpu().expand(size, -1), ancestors], dim=1)  # (n, past + n)
    distance = (past + depths)[:, None] - torch.cat([torch.arange(past), past + depths])[None]
    masks = window_masks(layer_windows(config), allowed[None], distance[None], dtype)
    if isinstance(masks, dict):
        return {kind: mask.to(seq.ids.device) for kind, mask in masks.items()}
    return masks.to(seq.ids.device)


def window_masks(windows, allowed: torch.Tensor, distance: torch.Tensor, dtype) -> torch.Tensor | dict:
    """Additive masks (B, 1, n, keys) from what each query may see, `allowed` (B, n, keys), and its distance to each
    key in positions, `distance`: within each layer type's window (`layer_windows`), one mask per type where they
    differ."""

    def additive(window):
        visible = allowed if window is None else allowed & (distance < window)
        mask = torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)
        return mask[:, None]

    if isinstance(windows, dict):
        return {kind: additive(window) for kind, window in windows.items()}
    return additive(windows)


def compact_cache(cache, start: int, keep: torch.LongTensor) -> None:
    """Keeps the first `start` positions of every layer, then the positions `start + keep` (in that order).

    A prefix `keep` (0, 1, ..., a) is a crop. Otherwise the kept rows move down in place and the layer keeps a view
    of the front: no copy of the whole cache (the next forward's `torch.cat` makes it contiguous again)."""
    end = start + keep.numel()
    if bool((keep == torch.arange(keep.numel())).all()):
        surplus = cache.get_seq_length() - end
        if surplus > 0:
            cache.crop(-surplus)  # transformers' crop takes the number of positions to drop, negated
        return
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", False):
            continue
        index = keep.to(layer.keys.device) + start
        layer.keys[:, :, start:end] = layer.keys.index_select(2, index)  # (B, H, n, d): gathered first, then written
        layer.values[:, :, start:end] = layer.values.index_select(2, index)
        layer.keys, layer.values = layer.keys[:, :, :end], layer.values[:, :, :end]


# ----------------------------------------------------------------------------------------------------------------
# A batch sharing one target cache
# ----------------------------------------------------------------------------------------------------------------


def row_states(hidden_states, row: int) -> tuple:
    """Batch row `row` (kept as a batch of 1) of every layer's states the target returned (None where not asked)."""
    return tuple(None if h is None else h[row : row + 1] for h in hidden_states)


class BatchSlots:
    """What each slot of a batch's shared target cache (B, H, S, d) holds: `valid` (B, S), whether the slot is one
    of the row's tokens (False: left padding, or a node the row rejected), and `positions` (B, S), its position.

    Rows roll back without moving a key: a round appends every row's verified columns, `commit` marks the ones each
    row accepted and crops the trailing columns no row accepted. Masks are built from these positions, so sliding
    windows count a row's positions, not slots (full-attention targets take the 2-D `valid` mask)."""

    def __init__(self, valid: torch.Tensor, positions: torch.Tensor):
        self.valid, self.positions = valid.bool().cpu(), positions.cpu()

    def keep_rows(self, cache, rows: list[int]) -> None:
        """Keeps the batch rows `rows` (in that order) in `cache` and here: rows that finished leave the batch."""
        index = torch.tensor(rows, dtype=torch.long)
        self.valid, self.positions = self.valid[index], self.positions[index]
        for layer in cache.layers:
            if getattr(layer, "is_initialized", False):
                on = index.to(layer.keys.device)
                layer.keys, layer.values = layer.keys.index_select(0, on), layer.values.index_select(0, on)

    def commit(self, cache, positions: torch.Tensor, keeps: list[torch.LongTensor]) -> None:
        """After a round that verified columns at `positions` (B, W): row i keeps columns `keeps[i]`."""
        width = positions.shape[1]
        accepted = torch.zeros((len(keeps), width), dtype=torch.bool)
        for i, keep in enumerate(keeps):
            accepted[i, keep] = True
        last = max(int(keep.max()) + 1 for keep in keeps)
        if last < width:
            cache.crop(-(width - last))  # transformers' crop takes the number of positions to drop, negated
        self.valid = torch.cat([self.valid, accepted[:, :last]], dim=1)
        self.positions = torch.cat([self.positions, positions[:, :last].cpu()], dim=1)

    def key_mask(self, trees: list[DraftTree], width: int) -> torch.Tensor:
        """The 2-D mask (B, S + width) of a round whose drafts are all chains (the target adds causality)."""
        nodes = torch.stack([torch.arange(width) <= len(tree.kept) for tree in trees])
        return torch.cat([self.valid, nodes], dim=1).long()

    def tree_masks(self, windows, trees: list[DraftTree], positions: torch.Tensor, dtype):
        """Additive masks (B, 1, W, S + W) for the verified columns at `positions` (B, W): each node sees its
        row's valid slots and its ancestors, within its layer's window (`windows`, from `layer_windows`); a padding
        column sees itself. One mask per layer type where full and sliding-window layers mix."""
        (batch, slots), width = self.valid.shape, positions.shape[1]
        allowed = torch.zeros((batch, width, slots + width), dtype=torch.bool)
        allowed[:, :, :slots] = self.valid[:, None, :]
        allowed[:, torch.arange(width), slots + torch.arange(width)] = True
        for i, tree in enumerate(trees):
            ancestors, _ = tree_ancestors(tree)
            allowed[i, : len(ancestors), slots : slots + len(ancestors)] = ancestors
        queries = positions.cpu()
        distance = queries[:, :, None] - torch.cat([self.positions, queries], dim=1)[:, None, :]
        return window_masks(windows, allowed, distance, dtype)


def first_rows_in_one_call(targets: list[TargetLogits], head, hidden: torch.Tensor) -> None:
    """Fills every row's first batch of logits (`TargetLogits.rows_for(ROOT)`) with ONE call of the LM head over the
    batch's last hidden states `hidden` (B, W, d): row i's `TargetLogits` reads `hidden[i]`."""
    firsts = [target.rows_for(ROOT) for target in targets]
    pairs = torch.tensor(
        [[i, target.rows[n]] for i, (target, nodes) in enumerate(zip(targets, firsts)) for n in nodes]
    )
    pairs = pairs.to(hidden.device)
    computed = head(hidden[pairs[:, 0], pairs[:, 1]])  # (N, V)
    k = 0
    for target, nodes in zip(targets, firsts):
        for n in nodes:
            target.logits[n] = computed[k : k + 1]
            k += 1
        target.batches.append(len(nodes))


__all__ = [
    "first_rows_in_one_call",
    "window_masks",
    "cache_keyword",
    "shared_kv_heads",
    "TREE_ATTENTION",
    "compact_cache",
    "layer_windows",
    "BatchSlots",
    "plain_lm_head",
    "row_states",
    "tree_ancestors",
    "TargetLogits",
    "tree_attention_mask",
]
