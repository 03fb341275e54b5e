# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The target's side of a SlimSpec round: its LM head on the rows the acceptance walk reaches, the attention masks
that verify the rows' drafts (sliding-window layers see only their window), its KV cache rolled back to what each row
accepted (`TargetSlots`), and what a call may ask, checked once before the first forward (`check_decoding_inputs`).

Part of the remote-code unit: it imports only `torch`, `transformers` and its siblings (relatively).
"""

import inspect
import os
import threading
import time
import weakref
from contextlib import contextmanager

import torch
from transformers.cache_utils import DynamicCache

from .configuration_slimspec import validate_pairing
from .drafting_slimspec import ROOT, DraftTree, LogitsProcessing, is_row_wise
from .heads_slimspec import weight_first


# Config fields of targets whose logits are more than `lm_head(last_hidden_state)` (soft-capping, scaling).
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")
TREE_ATTENTION = (None, "sdpa", "eager")  # implementations that take a 4-D (tree) attention mask
_LAYER_TYPES = ("full_attention", "sliding_attention")
_FORCE_GQA, _GQA_LOCK = "TRANSFORMERS_SDPA_FORCE_GQA", threading.Lock()
_GQA_STATE = {"inside": 0, "before": None}  # forwards inside `shared_kv_heads` (every thread's), the switch before


# ----------------------------------------------------------------------------------------------------------------
# The target's forward: hidden states, cache keyword, attention kernel, LM head
# ----------------------------------------------------------------------------------------------------------------


def _numbers_selected_states_by_position() -> bool:
    try:
        from transformers.utils import output_capturing
    except ImportError:
        return False
    return hasattr(output_capturing, "selected_hidden_states")


# A list-valued `output_hidden_states` returns the selected states at their `outputs.hidden_states` positions (0: the
# embeddings) from transformers 5.23 on; 5.20-5.22 by layer output (i: layer i's, one deeper than the full tuple's i).
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
def shared_kv_heads(queries: int = 2):
    """The target's forwards inside (`queries` tokens a row) run sdpa on its shared key/value heads (`enable_gqa`):
    transformers otherwise copies a grouped-query cache per query head (`repeat_kv`) where a mask comes with several
    queries, unless `TRANSFORMERS_SDPA_FORCE_GQA=1` (5.23 on). One query is left to transformers, which folds its
    heads itself (torch's CPU kernel with `enable_gqa` is slow on one: docs/decoding.md)."""
    if queries <= 1:
        yield
        return
    with _GQA_LOCK:  # one switch for the process: the first forward in sets it, the last one out restores it
        if _GQA_STATE["inside"] == 0:
            _GQA_STATE["before"] = os.environ.get(_FORCE_GQA)
            os.environ[_FORCE_GQA] = "1"
        _GQA_STATE["inside"] += 1
    try:
        yield
    finally:
        with _GQA_LOCK:
            _GQA_STATE["inside"] -= 1
            if _GQA_STATE["inside"] == 0 and _GQA_STATE["before"] is None:
                os.environ.pop(_FORCE_GQA, None)
            elif _GQA_STATE["inside"] == 0:
                os.environ[_FORCE_GQA] = _GQA_STATE["before"]


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


# head -> whether `weight @ hidden.T` beat `F.linear` on its first multi-row call (CPU), kept for the process
_WEIGHT_FIRST = weakref.WeakKeyDictionary()


def head_rows(head: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    """`head(hidden)` for several verified rows ((..., n, d) -> (..., n, V)), with the kernel `time_head_kernels`
    chose for this head (CPU, n ≥ 2)."""
    rows = hidden.numel() // hidden.shape[-1]
    if rows < 2 or hidden.device.type != "cpu" or head.bias is not None:
        return head(hidden)
    return weight_first(hidden, head.weight) if time_head_kernels(head) else head(hidden)


def time_head_kernels(head: torch.nn.Linear, rows: int = 4) -> bool:
    """Whether `weight @ hidden.T` beats `F.linear` for `head` over `rows` rows, timed once per head and process
    (on the CPU; elsewhere False). On a CPU, `F.linear` over a row-major V×d weight and n ≥ 2 rows may pack the whole
    weight first: with Gemma-3's 262,144 rows, 4 rows cost 2.8× one (fp32, AVX2), while `weight @ hidden.T` streams
    the weight in place (1.4×). The logits are the same products, summed in another order. The decoding loop times
    them at its prefill, so that no timed round pays for it (`draft_shape="auto"`)."""
    if head.weight.device.type != "cpu" or head.bias is not None:
        return False
    if head not in _WEIGHT_FIRST:
        hidden = torch.randn(rows, head.in_features, dtype=head.weight.dtype)
        timings = {}
        with torch.no_grad():
            for name, kernel in (("linear", head), ("weight_first", lambda h: weight_first(h, head.weight))):
                kernel(hidden)  # warm
                start = time.perf_counter()
                kernel(hidden)
                timings[name] = time.perf_counter() - start
        _WEIGHT_FIRST[head] = timings["weight_first"] < timings["linear"]
    return _WEIGHT_FIRST[head]


class TargetLogits:
    """The target's logits of one round's verified rows (row 0 the root, row i the i-th kept node), computed when
    the acceptance walk reaches them (the LM head is a vocabulary-wide matmul): first the root, its children and the
    likeliest path below; a walk that leaves them, the rest of the subtree it entered. `lazy=False` (a head bound by
    reading its weights): every row at once. `head=None`: `logits` holds every row already (a target whose logits
    are more than its LM head applied to the last hidden state)."""

    def __init__(self, tree: DraftTree, head, hidden: torch.Tensor | None, logits=None, lazy: bool = True):
        self.tree, self.head, self.hidden, self.lazy = tree, head, hidden, lazy  # hidden: (1, n, d)
        self.rows = tree.rows()
        self.children: dict[int, list[int]] = {}
        for node in tree.kept:  # parents come before children
            self.children.setdefault(tree.parents[node], []).append(node)
        self.logits = {} if logits is None else {node: logits[:, row] for node, row in self.rows.items()}
        self.batches: list[int] = []  # rows per LM-head call (for tests and profiling)

    @classmethod
    def of_round(cls, trees: list[DraftTree], head, verified: torch.Tensor, lazy: bool) -> list["TargetLogits"]:
        """Each row's `TargetLogits` from the round's `verified` (B, W, ·): the last hidden states, whose rows every
        walk starts with (each tree's first batch) go through ONE LM-head call; or the logits (`head` None)."""
        if head is None:
            return [cls(tree, None, None, verified[i : i + 1]) for i, tree in enumerate(trees)]
        rounds = [cls(tree, head, verified[i : i + 1], lazy=lazy) for i, tree in enumerate(trees)]
        firsts = [logits.rows_for(ROOT) for logits in rounds]
        pairs = [(i, logits.rows[n]) for i, (logits, nodes) in enumerate(zip(rounds, firsts)) for n in nodes]
        index = torch.tensor(pairs, device=verified.device)
        computed = iter(head_rows(head, verified[index[:, 0], index[:, 1]]).split(1))  # (1, V) each
        for logits, nodes in zip(rounds, firsts):
            logits.logits.update({n: next(computed) for n in nodes})
            logits.batches.append(len(nodes))
        return rounds

    def __call__(self, node: int) -> torch.Tensor:
        """The target's raw logits (1, V) at `node`'s row."""
        if node not in self.logits:
            nodes = self.rows_for(node)
            index = torch.tensor([self.rows[n] for n in nodes], device=self.hidden.device)
            logits = head_rows(self.head, self.hidden[:, index])  # (1, len(nodes), V)
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


# ----------------------------------------------------------------------------------------------------------------
# The rows' shared cache: what each slot holds, rollback, masks
# ----------------------------------------------------------------------------------------------------------------


def row_states(hidden_states, row: int) -> tuple:
    """Batch row `row` (kept as a batch of 1) of every layer's states the target returned (None where not asked)."""
    return tuple(None if h is None else h[row : row + 1] for h in hidden_states)


class TargetSlots:
    """What each slot of the target's cache (B, H, S, d) holds: `valid` (B, S), whether the slot is one of the row's
    tokens (False: left padding, or a column a row left unused), and `positions` (B, S), its position. A round
    verifies every row's root and kept nodes as columns after the cache; `commit` keeps what each row accepted. Masks
    are built from the positions, so sliding windows count a row's positions, not slots."""

    def __init__(self, valid: torch.Tensor, positions: torch.Tensor):
        self.valid, self.positions = valid.bool().cpu(), positions.cpu()
        self.contiguous = True  # only left padding is unused: slots and positions advance together

    def keep_rows(self, cache, rows: list[int]) -> None:
        """Keeps the batch rows `rows` (in that order) in `cache` and here: rows that finished leave the batch."""
        index = torch.tensor(rows, dtype=torch.long)
        self.valid, self.positions = self.valid[index], self.positions[index]
        for layer in cache.layers:
            if getattr(layer, "is_initialized", False):
                on = index.to(layer.keys.device)
                layer.keys, layer.values = layer.keys.index_select(0, on), layer.values.index_select(0, on)

    def commit(self, cache, positions: torch.Tensor, keeps: list[torch.LongTensor]) -> None:
        """After a round that verified columns at `positions` (B, W): row i keeps columns `keeps[i]` (the root, 0,
        and its accepted path, in order).

        One row: the accepted columns move to the front of the round's slots (in place, over the round's columns
        only) and the rest is cropped, so the cache is exactly plain decoding's. Several rows: no key moves (moving
        each row's path cost more than the masks it saves, measured at B = 4): the columns a row rejected are marked
        unused and masked from then on, and the trailing columns no row accepted are cropped."""
        start, width = self.valid.shape[1], positions.shape[1]
        if len(keeps) == 1:
            keep = keeps[0]
            if not bool((keep == torch.arange(keep.numel())).all()):  # a prefix stays where it is
                for layer in cache.layers:
                    if not getattr(layer, "is_initialized", False):
                        continue
                    at = keep.to(layer.keys.device) + start
                    for name in ("keys", "values"):
                        tensor = getattr(layer, name)  # (1, H, S, d): gathered first, then written
                        tensor[:, :, start : start + keep.numel()] = tensor.index_select(2, at)
            used, kept_positions = torch.ones((1, keep.numel()), dtype=torch.bool), positions.cpu()[:, keep]
        else:
            used = torch.zeros((len(keeps), width), dtype=torch.bool)
            for i, keep in enumerate(keeps):
                used[i, keep] = True
            last = max(int(keep.max()) + 1 for keep in keeps)
            used, kept_positions = used[:, :last], positions.cpu()[:, :last]
        surplus = cache.get_seq_length() - (start + used.shape[1])
        if surplus > 0:
            cache.crop(-surplus)  # transformers' crop takes the number of positions to drop, negated
        self.contiguous = self.contiguous and bool(used.all())
        self.valid = torch.cat([self.valid, used], dim=1)
        self.positions = torch.cat([self.positions, kept_positions], dim=1)

    def masks(self, windows, trees: list[DraftTree], positions: torch.Tensor, dtype, device):
        """The attention mask of a round verifying `trees` at `positions` (B, W): None or a 2-D key mask (B, S + W)
        when every draft is a chain and slot order is position order for every layer (the target adds causality
        and its windows), else additive masks (B, 1, W, S + W) — each node sees its row's valid slots and its
        ancestors, within its layer's window (`windows`, from `layer_windows`; one mask per layer type where full
        and sliding-window layers mix), a padding column sees itself; on `device`."""
        (batch, slots), width = self.valid.shape, positions.shape[1]
        if all(tree.is_chain() for tree in trees) and (windows is None or self.contiguous):
            columns = torch.stack([torch.arange(width) <= len(tree.kept) for tree in trees])
            keys = torch.cat([self.valid, columns], dim=1)
            return None if bool(keys.all()) else keys.long().to(device)
        allowed = torch.zeros((batch, width, slots + width), dtype=torch.bool)
        allowed[:, :, :slots] = self.valid[:, None, :]
        allowed[:, torch.arange(width), slots + torch.arange(width)] = True
        for i, tree in enumerate(trees):
            rows = tree.rows()
            for node in tree.kept:  # parents first: a node sees itself, its parent and what its parent sees
                allowed[i, rows[node], slots:] |= allowed[i, rows[tree.parents[node]], slots:]
        queries = positions.cpu()
        distance = queries[:, :, None] - torch.cat([self.positions, queries], dim=1)[:, None, :]

        def additive(window):  # (B, 1, W, S + W), within the layer type's window
            visible = allowed if window is None else allowed & (distance < window)
            mask = torch.zeros(visible.shape, dtype=dtype, device=device)
            return mask.masked_fill(~visible.to(device), torch.finfo(dtype).min)[:, None]

        return {kind: additive(w) for kind, w in windows.items()} if isinstance(windows, dict) else additive(windows)


# ----------------------------------------------------------------------------------------------------------------
# What a call may ask: checked once, before the first forward
# ----------------------------------------------------------------------------------------------------------------


def check_drafter_placement(target, drafter) -> None:
    """Raises one clear `ValueError` when `drafter` does not sit on `target`'s device.

    The target's features are moved to the drafter and cast to its dtype, so a dtype mismatch only costs precision;
    a device mismatch would copy every round's features and candidates between devices (or fail inside a kernel),
    so it is refused with both devices and the fix named."""
    target_device = next(target.parameters()).device
    drafter_device = next(drafter.parameters()).device
    if target_device != drafter_device:
        raise ValueError(
            f"The drafter is on {drafter_device} but the target is on {target_device}: the SlimSpec drafter must "
            f"run where its target runs. Move it with `drafter.to(target.device)` (or load it with "
            f'`device_map="{target_device}"`), then call `target.generate(..., assistant_model=drafter)` again.'
        )


# what generate() passes a decoding loop besides the inputs (the output_* flags are read from the generation config)
_KNOWN_MODEL_KWARGS = {
    "attention_mask",
    "position_ids",
    "cache",
    "past_key_values",  # the cache's name before transformers 5.24
    "use_cache",
    "logits_to_keep",
    "output_hidden_states",
}


def check_decoding_inputs(
    model, drafter, input_ids, generation_config, logits_processor, streamer, settings, model_kwargs
) -> DynamicCache:
    """Refuses what SlimSpec decoding does not support, with one clear line each; returns the target's cache."""
    attention, config = getattr(model.config, "_attn_implementation", None), generation_config
    if input_ids.shape[0] > 1:
        batched = f"SlimSpec decoding with batch size {input_ids.shape[0]}"
        if streamer is not None:
            raise ValueError(f"{batched} cannot stream (batch size 1 only); drop the streamer or pass one prompt.")
        if layer_windows(model.config.get_text_config(decoder=True)) is not None and attention not in TREE_ATTENTION:
            raise ValueError(
                f"{batched} passes a sliding-window target 4-D attention masks, which `attn_implementation="
                f'{attention!r}` does not take; load it with `attn_implementation="sdpa"` or pass one prompt at a time.'
            )
        if config.return_dict_in_generate and (
            config.output_scores or config.output_logits or config.output_hidden_states
        ):
            raise ValueError(
                f"{batched} returns `sequences` only; drop output_scores/output_logits/output_hidden_states or pass "
                "one prompt."
            )
        processing = LogitsProcessing(logits_processor)
        if processing.processors is not None and not processing.row_wise:
            names = sorted({type(p).__name__ for p in processing.processors if not is_row_wise(p)})
            raise ValueError(
                f"{batched} applies logits processors per row; {names} hold per-batch state: pass one prompt."
            )
    if config.num_beams > 1 or config.num_return_sequences > 1:
        raise ValueError(
            f"SlimSpec decoding draws one sequence (greedy or sampled); got num_beams={config.num_beams}, "
            f"num_return_sequences={config.num_return_sequences}. Drop them or the drafter."
        )
    if config.return_dict_in_generate and config.output_attentions:
        raise ValueError(
            "SlimSpec decoding returns `scores`, `logits` and `hidden_states`: `output_attentions` is not supported "
            "(the target's attention rows belong to draft nodes, not to tokens)."
        )
    unknown = sorted(k for k, v in model_kwargs.items() if v is not None and k not in _KNOWN_MODEL_KWARGS)
    if unknown:
        raise ValueError(f"SlimSpec decoding supports text-only decoder inputs; got model kwargs {unknown}.")
    if settings.draft_tree_size > 0 and settings.draft_tree_top_k > 1 and attention not in TREE_ATTENTION:
        raise ValueError(
            f"SlimSpec tree decoding passes the target a 4-D tree attention mask, which `attn_implementation="
            f'{attention!r}` does not take; load the target with `attn_implementation="sdpa"` or `"eager"`, or '
            "draft chains (`draft_tree_size=0`)."
        )
    validate_pairing(drafter, model)
    check_drafter_placement(model, drafter)
    drafter.attach_target(model)
    return target_cache(model_kwargs.get("cache", model_kwargs.get("past_key_values")))


def target_cache(cache) -> DynamicCache:
    """A cache the loop can roll back: a fresh `DynamicCache` with full-attention layers for every layer type.

    transformers' own cache keeps only the window of sliding-window layers, which drops positions a rejected draft
    pushed out of it; full layers keep every position and the masks apply the window instead."""
    if cache is None:
        return DynamicCache()
    if type(cache) is not DynamicCache:
        raise ValueError(
            f"SlimSpec decoding rolls the target's KV cache back to the accepted tokens and needs a `DynamicCache`, "
            f"got {type(cache).__name__}. Drop `cache_implementation`/`cache`."
        )
    if cache.get_seq_length() != 0:
        raise ValueError("SlimSpec decoding starts from an empty cache; a prefilled `cache` is not supported.")
    return DynamicCache()


__all__ = [
    "cache_keyword",
    "captured_hidden_states",
    "check_decoding_inputs",
    "check_drafter_placement",
    "layer_windows",
    "plain_lm_head",
    "row_states",
    "shared_kv_heads",
    "target_cache",
    "TargetLogits",
    "TargetSlots",
    "TREE_ATTENTION",
]
