# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Dynamic-tree drafting (EAGLE-2) with SlimSpec drafters: `tree_decoding`, a drop-in for transformers'
`GenerationMixin._assisted_decoding`.

Part of the remote-code unit with `configuration_slimspec.py`, `modeling_slimspec.py` and `generation_slimspec.py`:
it imports only `torch`, `transformers` and those siblings (relatively), so it can be copied next to the weights.

One round:
1. The drafter appends the positions the target accepted last round (the target's fused features + the next
   token) to its cache, dropping its own drafted positions of the round before.
2. It expands a tree level by level, up to `tree_depth`: every frontier node gets `tree_top_k` children from the
   drafter's processed distribution q; the `tree_top_k` new nodes with the highest cumulative log q become the next
   frontier and go through the drafter in one forward, each seeing the committed cache and its ancestors (a 4-D
   mask), fed its parent's drafter state. All generated nodes are reranked by cumulative log q and the best
   `tree_size` are kept (a child never outranks its parent, so the kept set is a tree).
3. The target scores the root (the last token) and all kept nodes in ONE forward: a 4-D mask lets each node see
   the committed prefix and its ancestors, position ids are the prefix length + depth.
4. The longest accepted path is walked from the root, its tokens and one more target token are appended, the
   target's KV cache is compacted to the accepted path, and the drafter's cache keeps only committed positions.

Acceptance:
- Greedy: a node is accepted when it equals the target's argmax (after the logits processors) at its parent, so the
  output is exactly plain greedy decoding (in fp32; bf16 batched rows may round differently near ties).
- Sampling: children of a node are drawn i.i.d. (with replacement) from q, and verified in the order they were
  drawn with SpecInfer's multi-step speculative sampling: accept x_i with probability min(1, p(x_i)/q(x_i)); on
  rejection p <- norm(max(p - q, 0)) and try x_{i+1}; if all are rejected, sample from the residual p. Each x_i is a
  fresh draw from q independent of the earlier rejections, so by the single-draft speculative-sampling argument
  applied recursively the emitted token is distributed exactly as p (SpecInfer, Miao et al. 2023, Thm 4.2). The
  tree's shape (which nodes are expanded or kept) is decided from drafter scores only, and never changes the
  acceptance rule: a drawn child that was pruned from the tree (or a duplicate draw) stays in the sequence of draws
  and is tested like any other; if a pruned child is accepted it is emitted and the round ends without a bonus
  token (the target has no logits below it). Duplicates after a rejected equal draw have residual p = 0, so they
  are always rejected, but they still update the residual, exactly as in the i.i.d. scheme. Deterministic top-k
  children with the plain rejection rule (EAGLE-2's reference code) would NOT be lossless; top-k is used for greedy
  only.
"""

import warnings

import torch
from transformers.cache_utils import DynamicCache
from transformers.generation.utils import GenerateDecoderOnlyOutput

from .generation_slimspec import SlimSpecGenerationStats, lookup_continuation, validate_pairing


_KNOWN_MODEL_KWARGS = {"attention_mask", "position_ids", "cache", "use_cache", "logits_to_keep"}
_ROOT = -1
# Processors that treat every row of a batch alike (from the row's own ids and scores): a tree level's frontier goes
# through them as one batch. Any other processor (built for the batch of 1: classifier-free guidance, watermarks,
# prefix constraints ...) sees one row at a time.
_ROW_WISE_PROCESSORS = {
    "TemperatureLogitsWarper",
    "TopKLogitsWarper",
    "TopPLogitsWarper",
    "MinPLogitsWarper",
    "TypicalLogitsWarper",
    "EpsilonLogitsWarper",
    "EtaLogitsWarper",
    "RepetitionPenaltyLogitsProcessor",
    "NoRepeatNGramLogitsProcessor",
    "MinLengthLogitsProcessor",
    "MinNewTokensLengthLogitsProcessor",
    "SuppressTokensLogitsProcessor",
    "SuppressTokensAtBeginLogitsProcessor",
    "ForcedEOSTokenLogitsProcessor",
    "InfNanRemoveLogitsProcessor",
    "LogitNormalization",
}


def _is_row_wise(processor) -> bool:
    # a repetition penalty that skips each row's own prompt (left padding) holds one length per batch row
    per_row = isinstance(getattr(processor, "prompt_ignore_length", None), torch.Tensor)
    return type(processor).__name__ in _ROW_WISE_PROCESSORS and not per_row


# Config fields of targets whose logits are more than `lm_head(last_hidden_state)` (soft-capping, scaling).
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def _plain_lm_head(target):
    """The target's LM head when its logits are exactly `head(backbone(...).last_hidden_state)`, else None."""
    config = target.config.get_text_config(decoder=True)
    if any(getattr(config, name, None) not in (None, 1, 1.0) for name in _LOGIT_TRANSFORMS):
        return None
    head = target.get_output_embeddings()
    backbone = getattr(target, target.base_model_prefix, None)
    if not isinstance(head, torch.nn.Linear) or backbone is None or backbone is target:
        return None
    return head


def _check_tree_settings(tree_size, tree_depth, tree_top_k) -> tuple[int, int, int]:
    for name, value in (("tree_size", tree_size), ("tree_depth", tree_depth), ("tree_top_k", tree_top_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    return tree_size, tree_depth, tree_top_k


def _compact_cache(cache, start: int, keep: torch.LongTensor) -> None:
    """Keeps the first `start` positions of every layer, then the positions `start + keep` (in that order).

    The kept rows move down in place and the layer keeps a view of the front: no copy of the whole cache (the next
    forward's `torch.cat` makes it contiguous again)."""
    end = start + keep.numel()
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", False):
            continue
        index = keep.to(layer.keys.device) + start
        layer.keys[:, :, start:end] = layer.keys.index_select(2, index)  # (B, H, n, d): gathered first, then written
        layer.values[:, :, start:end] = layer.values.index_select(2, index)
        layer.keys, layer.values = layer.keys[:, :, :end], layer.values[:, :, :end]


def _check_cache(cache) -> None:
    layers = getattr(cache, "layers", None)
    supported = isinstance(cache, DynamicCache) and all(
        not getattr(layer, "is_sliding", False) and hasattr(layer, "keys") for layer in layers or []
    )
    if not supported or type(cache).__name__ != "DynamicCache":
        raise ValueError(
            f"Tree decoding compacts the target's KV cache to the accepted path and supports a `DynamicCache` with "
            f"full-attention layers only, got {type(cache).__name__}. Drop `cache_implementation`/`cache` or use "
            "chain drafting (`draft_tree_size=0`)."
        )


class _Round:
    """The draft tree of one round. Node ids index the lists; the root (the last committed token) is `_ROOT`."""

    def __init__(self):
        self.token: list[int] = []
        self.parent: list[int] = []
        self.depth: list[int] = []
        self.score: list[float] = []
        self.draws: dict[int, list[tuple[int, int]]] = {}  # node -> children as drawn: (token, child id)
        self.q: dict[int, torch.Tensor] = {}  # node -> drafter distribution its children were drawn from (V,)
        self.slot: dict[int, int] = {}  # node -> its position in the drafter's cache
        self.state: dict[int, torch.Tensor] = {}  # node -> drafter state fed to its children (d,)

    def add(self, token: int, parent: int, score: float) -> int:
        self.token.append(token)
        self.parent.append(parent)
        self.depth.append(1 if parent == _ROOT else self.depth[parent] + 1)
        self.score.append(score)
        return len(self.token) - 1

    def path(self, node: int) -> list[int]:
        nodes = []
        while node != _ROOT:
            nodes.append(node)
            node = self.parent[node]
        return nodes[::-1]


class _TargetRows:
    """The target's logits of one round's verified rows (row 0 the root, row i the i-th verified node), computed
    when the walk reaches them: the LM head is a vocabulary-wide matmul, so it runs only for rows that may be on the
    accepted path. The first batch is the root, its children and the likeliest path below (the best-scored child
    at every step); a walk that leaves it computes the rest of the subtree it entered in one more batch. `lazy=False`
    (a head bound by reading its weights): every row in the first batch.
    `head=None`: `logits` holds every row already (a target whose logits are more than its LM head applied to the
    last hidden state)."""

    def __init__(self, tree: _Round, kept: list[int], head, hidden: torch.Tensor | None, logits=None, lazy=True):
        self.tree, self.head, self.hidden = tree, head, hidden  # hidden: (1, n, d) final hidden states
        self.lazy = lazy  # False: every row in the first batch
        self.rows = {_ROOT: 0, **{node: i + 1 for i, node in enumerate(kept)}}
        self.children: dict[int, list[int]] = {}
        for node in kept:  # parents come before children
            self.children.setdefault(tree.parent[node], []).append(node)
        self.logits = {} if logits is None else {node: logits[:, row] for node, row in self.rows.items()}
        self.batches: list[int] = []  # rows per LM-head call (for tests and profiling)

    def __call__(self, node: int) -> torch.Tensor:
        """The target's raw logits (1, V) at `node`'s row."""
        if node not in self.logits:
            self._compute(node)
        return self.logits[node]

    def _compute(self, node: int) -> None:
        if node == _ROOT and not self.lazy:
            nodes = list(self.rows)
        elif node == _ROOT:  # the root, all its children (where most walks leave a single path), the best path
            nodes = [_ROOT, *self.children.get(_ROOT, [])]
            below = self.children.get(_ROOT)
            while below:
                best = max(below, key=lambda n: self.tree.score[n])
                nodes += [] if best in nodes else [best]
                below = self.children.get(best)
        else:  # the walk left the first batch: the whole subtree it entered
            nodes, stack = [], [node]
            while stack:
                current = stack.pop()
                if current not in self.logits:
                    nodes.append(current)
                stack.extend(self.children.get(current, ()))
        index = torch.tensor([self.rows[n] for n in nodes], device=self.hidden.device)
        logits = self.head(self.hidden[:, index])  # (1, len(nodes), V)
        self.batches.append(len(nodes))
        for i, n in enumerate(nodes):
            self.logits[n] = logits[:, i]


class _TreeDecoder:
    def __init__(self, target, drafter, generation_config, logits_processor, tree_size, tree_depth, tree_top_k):
        self.target = target
        self.drafter = drafter
        self.layer_ids = list(drafter.config.target_layer_ids)
        self.tree_size, self.tree_depth, self.tree_top_k = tree_size, tree_depth, tree_top_k
        self.do_sample = bool(generation_config.do_sample)
        self.processors = logits_processor if logits_processor is not None and len(logits_processor) else None
        self.max_length = generation_config.max_length
        self.row_wise = self.processors is not None and all(map(_is_row_wise, self.processors))
        self.head = _plain_lm_head(target)
        # Rows on demand pay where the LM head is bound by arithmetic (fp32 on a CPU); where reading its weights
        # dominates (half precision, accelerators) a few more rows cost less than a second pass over them.
        self.lazy_head = (
            self.head is not None and self.head.weight.dtype == torch.float32 and target.device.type == "cpu"
        )
        from .modeling_slimspec import SlimSpecDrafterCache  # lazy, as in generation_slimspec: no import cycle

        self.cache = SlimSpecDrafterCache()
        self.committed = 0  # drafter positions computed from target features
        self.stats = SlimSpecGenerationStats()

    # -- helpers -------------------------------------------------------------------------------------------------
    def process(self, ids: torch.LongTensor, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        return self.processors(ids, logits) if self.processors is not None else logits

    def features(self, hidden_states, rows: torch.LongTensor | None) -> torch.Tensor:
        picked = [hidden_states[i] if rows is None else hidden_states[i][:, rows] for i in self.layer_ids]
        return torch.cat(picked, dim=-1).to(device=self.drafter.device, dtype=self.drafter.dtype)  # (1, n, 3·d_t)

    # -- drafter -------------------------------------------------------------------------------------------------
    def commit(self, input_ids, features, key_mask, positions):
        """Runs the newly accepted positions (target features) through the drafter; returns its last logits/state."""
        n_new = features.shape[1]
        start = self.committed
        tokens = input_ids[:, start + 1 : start + 1 + n_new].to(self.drafter.device)
        mask = None if bool(key_mask.all()) else key_mask[None, : start + n_new].to(self.drafter.device)
        self.cache.crop(start)
        out = self.drafter(
            input_ids=tokens,
            target_features=features,
            position_ids=positions[None, start : start + n_new].to(self.drafter.device),
            attention_mask=mask,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.committed += n_new
        return out.logits[0, -1], out.hidden_states[0, -1]  # (V,), (d,)

    def draft(self, input_ids, root_logits, root_state, key_mask, positions, max_depth) -> _Round:
        tree = _Round()
        tree.state[_ROOT] = root_state
        if max_depth <= 0:
            return tree
        drafter, k = self.drafter, self.tree_top_k
        committed = self.committed
        last_position = positions[committed - 1]
        frontier, logits = [_ROOT], root_logits[None]  # (F, V)
        for level in range(1, max_depth + 1):
            if self.processors is not None:  # each frontier node with its own path (all level - 1 tokens long)
                paths = torch.tensor([[tree.token[n] for n in tree.path(node)] for node in frontier], dtype=torch.long)
                ids = torch.cat([input_ids.expand(len(frontier), -1), paths.to(input_ids.device)], -1)  # (F, L)
                if self.row_wise:
                    logits = self.process(ids, logits)
                else:  # processors that hold state for the batch of 1 (e.g. guidance, watermarks): row by row
                    logits = torch.cat([self.process(ids[f : f + 1], logits[f : f + 1]) for f in range(len(frontier))])
            logits = logits.float()
            children = []
            if self.do_sample:
                logq = torch.log_softmax(logits, dim=-1)  # (F, V)
                q = logq.exp()
                draws = self.draw_children(q, k)  # (F, k)
                draw_logq = logq.gather(-1, draws).tolist()
                for f, parent in enumerate(frontier):
                    tree.q[parent] = q[f]
                    seen, sequence = {}, []
                    for x, lq in zip(draws[f].tolist(), draw_logq[f]):
                        if x not in seen:
                            seen[x] = tree.add(x, parent, self._score(tree, parent) + lq)
                            children.append(seen[x])
                        sequence.append((x, seen[x]))
                    tree.draws[parent] = sequence
            else:
                values, tokens = logits.topk(min(k, logits.shape[-1]), dim=-1)  # (F, k)
                values = values - torch.logsumexp(logits, dim=-1, keepdim=True)  # log q of the k best, no (F, V) copy
                for f, parent in enumerate(frontier):
                    for x, lq in zip(tokens[f].tolist(), values[f].tolist()):
                        if lq > float("-inf"):
                            children.append(tree.add(x, parent, self._score(tree, parent) + lq))
            if level == max_depth or not children:
                break
            frontier = sorted(children, key=lambda n: -tree.score[n])[:k]
            # One drafter forward over the new frontier: each node sees the committed cache and its ancestors.
            past = self.cache.get_seq_length()
            width = len(frontier)
            mask = torch.zeros((width, past + width), dtype=torch.bool)
            mask[:, :committed] = key_mask[:committed].cpu()
            for f, node in enumerate(frontier):
                ancestor = tree.parent[node]
                while ancestor != _ROOT:
                    mask[f, tree.slot[ancestor]] = True
                    ancestor = tree.parent[ancestor]
                mask[f, past + f] = True
                tree.slot[node] = past + f
            states = torch.stack([tree.state[tree.parent[n]] for n in frontier])[None]  # (1, F, d)
            out = drafter(
                input_ids=torch.tensor([[tree.token[n] for n in frontier]], device=drafter.device),
                hidden_states=states,
                position_ids=torch.full((1, width), int(last_position) + level, device=drafter.device),
                attention_mask=mask[None, None].to(drafter.device),
                cache=self.cache,
                use_cache=True,
            )
            logits = out.logits[0]  # (F, V)
            for f, node in enumerate(frontier):
                tree.state[node] = out.hidden_states[0, f]
        return tree

    @staticmethod
    def draw_children(q: torch.Tensor, k: int) -> torch.LongTensor:
        """k children per row of q (F, V), drawn i.i.d. (with replacement): what makes the acceptance lossless."""
        return torch.multinomial(q, k, replacement=True)  # (F, k)

    @staticmethod
    def accepts(p: torch.Tensor, q: torch.Tensor, token: int) -> bool:
        """Speculative sampling's test: accept a draw x ~ q with probability min(1, p(x) / q(x))."""
        return float(torch.rand(())) * float(q[token]) < float(p[token])

    @staticmethod
    def _score(tree: _Round, node: int) -> float:
        return 0.0 if node == _ROOT else tree.score[node]

    def keep(self, tree: _Round) -> list[int]:
        """The best `tree_size` nodes by cumulative log q, parents before children (ancestor-closed: a child's score
        is its parent's plus a log-probability <= 0, and ties go to the shallower node)."""
        order = sorted(range(len(tree.token)), key=lambda n: (-tree.score[n], tree.depth[n], n))
        kept = order[: self.tree_size]
        return sorted(kept, key=lambda n: (tree.depth[n], -tree.score[n], n))

    # -- target --------------------------------------------------------------------------------------------------
    def verify(self, model_cache, input_ids, tree: _Round, kept, key_mask, positions):
        """One target forward over the root and the kept nodes with a tree attention mask; returns the hidden states
        the drafter reads (`hidden_states`) and the rows' logits, computed as the walk needs them (`_TargetRows`)."""
        target = self.target
        past = model_cache.get_seq_length()
        rows = {_ROOT: 0, **{node: i + 1 for i, node in enumerate(kept)}}
        size = len(kept) + 1
        ancestors = torch.zeros((size, size), dtype=torch.bool)
        ancestors[0, 0] = True
        for node in kept:  # parents come first
            row = rows[node]
            ancestors[row] = ancestors[rows[tree.parent[node]]]
            ancestors[row, row] = True
        allowed = torch.zeros((size, past + size), dtype=torch.bool)
        allowed[:, :past] = key_mask[:past].cpu()
        allowed[:, past:] = ancestors
        dtype = target.dtype if target.dtype.is_floating_point else torch.float32
        mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
        tokens = [int(input_ids[0, -1])] + [tree.token[n] for n in kept]
        depths = [0] + [tree.depth[n] for n in kept]
        root_position = int(positions[input_ids.shape[1] - 1])
        device = input_ids.device
        inputs = {
            "input_ids": torch.tensor([tokens], device=device),
            "position_ids": torch.tensor([depths], device=device) + root_position,
            "attention_mask": mask[None, None].to(device),
            "cache": model_cache,
            "use_cache": True,
            "output_hidden_states": self.layer_ids,
            "return_dict": True,
        }
        if self.head is None:
            out = target(**inputs, logits_to_keep=0)
            return out.hidden_states, _TargetRows(tree, kept, None, None, out.logits)
        out = getattr(target, target.base_model_prefix)(**inputs)  # the decoder layers; the LM head runs in the walk
        return out.hidden_states, _TargetRows(tree, kept, self.head, out.last_hidden_state, lazy=self.lazy_head)

    def walk(self, input_ids, tree: _Round, logits: _TargetRows):
        """The accepted path (node ids), the token after it, and the raw and processed target logits used."""
        kept = logits.rows
        node, path, raw, processed = _ROOT, [], [], []
        children = {}
        for child in kept:
            if child != _ROOT:
                children.setdefault(tree.parent[child], {})[tree.token[child]] = child
        while True:
            prefix = input_ids
            if path:
                prefix = torch.cat(
                    [input_ids, torch.tensor([[tree.token[n] for n in path]], device=input_ids.device)], 1
                )
            row_logits = logits(node).float()  # (1, V)
            scores = self.process(prefix, row_logits.clone())
            raw.append(row_logits)
            processed.append(scores)
            if not self.do_sample:
                token = int(scores.argmax(-1))
                child = children.get(node, {}).get(token)
                if child is None:
                    return path, token, raw, processed
                path.append(child)
                node = child
                continue
            p = torch.softmax(scores[0], dim=-1)
            accepted = None
            if node in tree.draws:
                q = tree.q[node].to(p.device)
                for token, child in tree.draws[node]:
                    if self.accepts(p, q, token):
                        accepted = (token, child)
                        break
                    residual = (p - q).clamp(min=0)
                    total = residual.sum()
                    if total > 0:
                        p = residual / total
            if accepted is None:
                return path, int(torch.multinomial(p, 1)), raw, processed
            token, child = accepted
            if child not in kept:  # drawn and accepted, but pruned from the tree: no target logits below it
                return path, token, raw, processed
            path.append(child)
            node = child


@torch.no_grad()
def _graft(tree: _Round, kept: list[int], tokens: list[int]) -> list[int]:
    """`kept` plus a chain of `tokens` from the root (prompt lookup's draft), sharing the kept nodes it runs along.

    Parents stay before children, as `verify` needs; the grafted nodes carry no drafter state (they are only
    verified, and the accepted path's drafter inputs are the target's features, as for every node)."""
    children = {}
    for node in kept:
        children.setdefault(tree.parent[node], {})[tree.token[node]] = node
    kept, node = list(kept), _ROOT
    for token in tokens:
        child = children.get(node, {}).get(token)
        if child is None:
            child = tree.add(token, node, 0.0)
            kept.append(child)
        node = child
    return kept


def tree_decoding(
    model,
    input_ids: torch.LongTensor,
    logits_processor,
    stopping_criteria,
    generation_config,
    synced_gpus: bool = False,
    streamer=None,
    inputs_tensor: torch.Tensor | None = None,
    assistant_model=None,
    tree_size: int = 16,
    tree_depth: int = 4,
    tree_top_k: int = 4,
    lookup: tuple[int, int, int] | None = None,
    assistant_tokenizer=None,
    tokenizer=None,
    **model_kwargs,
):
    r"""Greedy or sampled decoding of `model` with a SlimSpec drafter proposing a dynamic tree (EAGLE-2) per round.

    Same contract as transformers' `GenerationMixin._assisted_decoding`: `generate()` prepares the inputs, the logits
    processors, the stopping criteria and the cache, puts the prompt into `streamer`, and calls this with
    `assistant_model=<SlimSpec drafter>`. Returns the sequences (`torch.LongTensor`), or a
    `GenerateDecoderOnlyOutput` with `sequences`, `scores` and `logits` when `return_dict_in_generate=True`.
    Batch size 1 only. The drafter's acceptance statistics land on `assistant_model.last_generation_stats`
    (`drafted_tokens` counts verified tree nodes; τ = (accepted + rounds) / rounds as for chain drafting).

    Args:
        tree_size (`int`): nodes the target verifies per round (besides the root).
        tree_depth (`int`): drafter levels per round (the longest path that can be accepted).
        tree_top_k (`int`): children per expanded node, and nodes expanded per level.
        lookup (`tuple`, *optional*): `(min_ngram, max_ngram, num_tokens)` — hybrid greedy decoding with prompt
            lookup's draft (what followed the latest tokens' earlier occurrence), as the hybrid chain does: a match
            spanning ≥ min_ngram tokens is verified alone (no drafter call that round); a shorter one whose first
            token is the drafter's next token is grafted onto the tree as a chain from the root, verified in the
            same forward. Not applied when sampling (a deterministic branch would need its own place in the
            multi-draft rule): a warning says so.
    """
    tree_size, tree_depth, tree_top_k = _check_tree_settings(tree_size, tree_depth, tree_top_k)
    if lookup is not None and generation_config.do_sample:
        warnings.warn(
            "`draft_lookup` is not applied to tree drafting when sampling (greedy only); the tree drafts alone.",
            stacklevel=3,
        )
    drafter = assistant_model
    if drafter is None or getattr(drafter.config, "model_type", None) != "slimspec_drafter":
        raise ValueError(f"Tree decoding needs a SlimSpec drafter as `assistant_model`, got {type(drafter).__name__}.")
    if input_ids.shape[0] != 1:
        raise ValueError(
            f"SlimSpec tree decoding is batch-1 (as is assisted generation in transformers); got batch size "
            f"{input_ids.shape[0]}. Call `generate` once per prompt."
        )
    if synced_gpus:
        raise ValueError("`synced_gpus=True` is not supported by SlimSpec tree decoding.")
    return_dict = bool(generation_config.return_dict_in_generate)
    if return_dict and (generation_config.output_attentions or generation_config.output_hidden_states):
        raise ValueError(
            "SlimSpec tree decoding returns `scores` and `logits` only: `output_attentions` and "
            "`output_hidden_states` are not supported (the target's rows belong to tree nodes, not to tokens)."
        )
    unknown = sorted(k for k, v in model_kwargs.items() if v is not None and k not in _KNOWN_MODEL_KWARGS)
    if unknown:
        raise ValueError(f"SlimSpec tree decoding supports text-only decoder inputs; got model kwargs {unknown}.")
    attention = getattr(model.config, "_attn_implementation", None)
    if attention not in (None, "sdpa", "eager"):
        raise ValueError(
            f"SlimSpec tree decoding passes the target a 4-D tree attention mask, which `attn_implementation="
            f'{attention!r}` does not take; load the target with `attn_implementation="sdpa"` or `"eager"`.'
        )
    validate_pairing(drafter, model)
    drafter.attach_target(model)

    cache = model_kwargs.get("cache")
    if cache is None:
        cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    _check_cache(cache)
    if cache.get_seq_length() != 0:
        raise ValueError("SlimSpec tree decoding starts from an empty cache; a prefilled `cache` is not supported.")

    decoder = _TreeDecoder(model, drafter, generation_config, logits_processor, tree_size, tree_depth, tree_top_k)
    drafter.last_generation_stats = decoder.stats
    stats = decoder.stats
    output_scores = return_dict and generation_config.output_scores
    output_logits = return_dict and generation_config.output_logits
    scores, raw_logits = (), ()
    eos = getattr(generation_config, "_eos_token_tensor", None)
    eos_ids = set(eos.flatten().tolist()) if eos is not None else set()

    # Key mask and positions over the whole sequence (grown as tokens are appended).
    prompt_len = input_ids.shape[1]
    mask_2d = model_kwargs.get("attention_mask")
    key_mask = torch.ones(prompt_len, dtype=torch.bool, device=input_ids.device)
    if mask_2d is not None:
        key_mask = mask_2d[0, :prompt_len].bool()
    positions = (key_mask.long().cumsum(-1) - 1).clamp(min=0)

    def grow(n: int):
        nonlocal key_mask, positions
        key_mask = torch.cat([key_mask, key_mask.new_ones(n)])
        positions = torch.cat([positions, positions[-1] + torch.arange(1, n + 1, device=positions.device)])

    # Prefill: the target reads the prompt and picks the first token.
    out = model(
        input_ids=input_ids,
        position_ids=positions[None],
        attention_mask=None if bool(key_mask.all()) else key_mask[None].long(),
        cache=cache,
        use_cache=True,
        output_hidden_states=decoder.layer_ids,
        logits_to_keep=1,
        return_dict=True,
    )
    first_raw = out.logits[:, -1].float()
    first = decoder.process(input_ids, first_raw.clone())
    if decoder.do_sample:
        token = torch.multinomial(torch.softmax(first, dim=-1), 1)
    else:
        token = first.argmax(-1, keepdim=True)
    pending = decoder.features(out.hidden_states, None)  # target features of positions not yet in the drafter
    input_ids = torch.cat([input_ids, token.to(input_ids.device)], dim=-1)
    grow(1)
    if streamer is not None:
        streamer.put(token.cpu())
    scores += (first,)
    raw_logits += (first_raw,)
    finished = bool(stopping_criteria(input_ids, scores if output_scores else None).all())

    while not finished:
        budget = decoder.max_length - input_ids.shape[1]  # tokens this round may append (accepted + 1)
        found = None
        if lookup is not None and not decoder.do_sample and budget > 1:
            found = lookup_continuation(input_ids[0], lookup[1], min(lookup[2], budget - 1))
        if found is not None and found[1] >= lookup[0]:
            # A long match: its continuation alone is verified, with no drafter call (as in the hybrid chain's lookup
            # rounds); the target features wait in `pending` for the next drafter round.
            tree, source = _Round(), "lookup"
            kept = _graft(tree, [], found[0].tolist())
        else:
            root_logits, root_state = decoder.commit(input_ids, pending, key_mask, positions)
            pending = pending[:, :0]
            tree = decoder.draft(
                input_ids, root_logits, root_state, key_mask, positions, min(decoder.tree_depth, budget - 1)
            )
            kept, source = decoder.keep(tree), "drafter"
            if found is not None and int(root_logits.argmax()) == int(found[0][0]):
                # a short match the drafter agrees with: grafted onto the tree (along the drafter's best child)
                kept, source = _graft(tree, kept, found[0].tolist()), "drafter+lookup"
        hidden_states, logits = decoder.verify(cache, input_ids, tree, kept, key_mask, positions)
        path, last, round_raw, round_scores = decoder.walk(input_ids, tree, logits)
        new_tokens = [tree.token[n] for n in path] + [last]
        # Stop at the length limit and at the first EOS (the drafter may propose beyond both).
        new_tokens = new_tokens[:budget]
        for i, t in enumerate(new_tokens):
            if t in eos_ids:
                new_tokens = new_tokens[: i + 1]
                break
        n_accepted = len(new_tokens) - 1
        path = path[:n_accepted]

        depth = max((tree.depth[n] for n in kept), default=0)
        stats.record(source, len(kept), n_accepted, positions=depth)  # per-position lists are per depth

        keep_rows = torch.tensor([0] + [logits.rows[n] for n in path], dtype=torch.long)
        _compact_cache(cache, cache.get_seq_length() - len(logits.rows), keep_rows)
        accepted = decoder.features(hidden_states, keep_rows.to(hidden_states[decoder.layer_ids[0]].device))
        pending = torch.cat([pending, accepted], dim=1)
        appended = torch.tensor([new_tokens], dtype=input_ids.dtype, device=input_ids.device)
        input_ids = torch.cat([input_ids, appended], dim=-1)
        grow(len(new_tokens))
        if streamer is not None:
            streamer.put(appended.cpu())
        scores += tuple(round_scores[: len(new_tokens)])
        raw_logits += tuple(round_raw[: len(new_tokens)])
        finished = bool(stopping_criteria(input_ids, scores if output_scores else None).all())

    if streamer is not None:
        streamer.end()
    if return_dict:
        return GenerateDecoderOnlyOutput(
            sequences=input_ids,
            scores=scores if output_scores else None,
            logits=raw_logits if output_logits else None,
            cache=cache,
        )
    return input_ids


def slimspec_tree_generate(
    model,
    input_ids: torch.LongTensor,
    logits_processor,
    stopping_criteria,
    generation_config,
    drafter=None,
    tree_size: int = 16,
    tree_depth: int = 4,
    tree_top_k: int = 4,
    tree_streamer=None,
    inputs_tensor: torch.Tensor | None = None,
    **model_kwargs,
):
    """`target.generate(**inputs, custom_generate=slimspec_tree_generate, drafter=drafter, tree_size=16, ...)`.

    A `custom_generate` callable for transformers 5.x: `generate()` forwards `assistant_model` and `streamer` to a
    callable neither (see `_extract_generation_mode_kwargs`), so the drafter comes as `drafter=` and a streamer as
    `tree_streamer=` (which then also receives the prompt, as `generate()` would have done).
    """
    if drafter is None:
        raise ValueError("Pass the SlimSpec drafter as `drafter=` (generate() keeps `assistant_model` to itself).")
    if tree_streamer is not None:
        tree_streamer.put(input_ids.cpu())
    return tree_decoding(
        model,
        input_ids,
        logits_processor,
        stopping_criteria,
        generation_config,
        streamer=tree_streamer,
        inputs_tensor=inputs_tensor,
        assistant_model=drafter,
        tree_size=tree_size,
        tree_depth=tree_depth,
        tree_top_k=tree_top_k,
        **model_kwargs,
    )


__all__ = ["tree_decoding", "slimspec_tree_generate"]
