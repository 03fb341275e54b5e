# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The one SlimSpec decoding loop: chains, trees and prompt lookup, greedy or sampled.

One round:
1. Propose (`SpeculativeDecoder.propose`): prompt lookup alone for a long match; otherwise the drafter appends the
   positions the target accepted last round to its cache and drafts a tree (`drafting_slimspec.TreeDrafter`; a
   chain is a tree of top-k 1), onto which lookup grafts a short match the drafter agrees with, or extends the
   likeliest path.
2. Verify (`verify`): ONE target forward over the root (the last token) and the kept nodes — a plain causal forward
   when the draft is a chain, else a tree attention mask per layer type (sliding-window layers see only their
   window). Position ids are the root's + depth.
3. Accept (`accept`): the longest accepted path from the root and one more target token; the target's KV cache is
   compacted to the accepted path (`compact_cache`) and the drafter's keeps only committed positions.

Acceptance:
- Greedy: a node is accepted when it equals the target's argmax (after the logits processors) at its parent, so the
  output is exactly plain greedy decoding (in fp32; bf16 batched rows may round differently near ties).
- Sampling: a node's proposals are tested in order with SpecInfer's multi-draft speculative sampling: accept x_i with
  probability min(1, p(x_i)/q_i(x_i)); on rejection p <- norm(max(p - q_i, 0)) and try x_{i+1}; if all are rejected,
  sample from the residual p. Deterministic drafts (lookup) come first with q_i one-hot (accepted with probability
  p(x), then p(x) <- 0); the drafter's children follow as drawn, i.i.d. from its q. Each proposal is independent of
  the earlier rejections, so by the single-draft argument applied recursively the emitted token is distributed
  exactly as p (SpecInfer, Miao et al. 2023, Thm 4.2). The tree's shape (what is expanded or kept) comes from
  drafter scores only and never changes the rule: a drawn child pruned from the tree (or a repeated draw) stays in
  the sequence of proposals; if a pruned child is accepted it is emitted and the round ends there (the target has
  no logits below it). Deterministic top-k children with the plain rejection rule would NOT be lossless; top-k is
  used for greedy only.

Part of the remote-code unit: it imports only `torch`, `transformers` and its siblings (relatively).
"""

from dataclasses import dataclass

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from .drafting_slimspec import (
    ROOT,
    BatchDrafting,
    DecodingSequence,
    DrafterState,
    DraftTree,
    LogitsProcessing,
    LookupMatch,
    LookupPolicy,
    Proposal,
    TreeDrafter,
    TreeShape,
)
from .generation_slimspec import (
    DraftSettings,
    SlimSpecGenerationStats,
    bound_generate_arguments,
    check_batch,
    check_decoding_inputs,
    is_slimspec_drafter,
)
from .verification_slimspec import (
    TREE_ATTENTION,
    BatchSlots,
    TargetLogits,
    cache_keyword,
    captured_hidden_states,
    compact_cache,
    first_rows_in_one_call,
    layer_windows,
    plain_lm_head,
    row_states,
    shared_kv_heads,
    tree_attention_mask,
)


# the output's cache field: `cache` from transformers 5.24, `past_key_values` before
OUTPUT_CACHE = "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"


# ----------------------------------------------------------------------------------------------------------------
# Acceptance
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Acceptance:
    """A verified round: the accepted nodes, the target's token after them, and the logits the walk used."""

    path: list[int]
    token: int
    raw_logits: list[torch.Tensor]  # (1, V) per row walked
    scores: list[torch.Tensor]  # the same, processed


def accepts(p_token: float, q_token: float) -> bool:
    """Speculative sampling's test: accept a draw x ~ q with probability min(1, p(x) / q(x))."""
    return float(torch.rand(())) * q_token < p_token


def sample_child(scores: torch.Tensor, proposals: list[Proposal]) -> tuple[int, int | None]:
    """Multi-draft speculative sampling at one node: the token emitted and the proposal's node (None: drawn from
    the residual, no proposal accepted). `scores` (V,) are the target's processed logits."""
    p = torch.softmax(scores, dim=-1)
    for proposal in proposals:
        x = proposal.token
        q_x = 1.0 if proposal.q is None else float(proposal.q[x])
        if accepts(float(p[x]), q_x):
            return x, proposal.node
        if proposal.q is None:  # q one-hot: the residual is p without x
            residual = p.clone()
            residual[x] = 0.0
        else:
            residual = (p - proposal.q.to(p.device)).clamp(min=0)
        total = residual.sum()
        if total > 0:
            p = residual / total
    return int(torch.multinomial(p, 1)), None


def accept(tree: DraftTree, logits: TargetLogits, seq: DecodingSequence, processing, do_sample: bool) -> Acceptance:
    """Walks the tree from the root while the target accepts (see the module docstring for the rules)."""
    children, kept = tree.kept_children(), set(tree.kept)
    node, path, raw, scores = ROOT, [], [], []
    while True:
        row = logits(node).float()  # (1, V)
        processed = row
        if processing.processors is not None:  # processors read the ids of the path so far
            processed = processing(seq.with_path([tree.tokens[n] for n in path]), row.clone())
        raw.append(row)
        scores.append(processed)
        if do_sample:
            token, child = sample_child(processed[0], tree.proposals.get(node, []))
            child = child if child in kept else None  # accepted but pruned: emitted, no target logits below it
        else:
            token = int(processed.argmax(-1))
            child = children.get(node, {}).get(token)
        if child is None:
            return Acceptance(path, token, raw, scores)
        path.append(child)
        node = child


# ----------------------------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class RoundPlan:
    """A round before the drafter runs: the tokens it may append, the drafter's depth, lookup's match, and the
    whole draft when lookup drafts alone (else None)."""

    budget: int
    depth: int
    match: LookupMatch | None
    tree: DraftTree | None


class SpeculativeDecoder:
    """One `generate()` call: the target, its cache and outputs, the drafter's state and the round's proposer."""

    def __init__(self, target, drafter, generation_config, logits_processor, settings: DraftSettings, cache):
        self.target, self.drafter, self.cache, self.settings = target, drafter, cache, settings
        self.layer_ids = list(drafter.config.target_layer_ids)
        self.do_sample = bool(generation_config.do_sample)
        self.max_length = generation_config.max_length
        self.processing = LogitsProcessing(logits_processor)
        eos = getattr(generation_config, "_eos_token_tensor", None)
        self.eos_ids = set(eos.flatten().tolist()) if eos is not None else set()
        self.state = DrafterState(drafter, self.layer_ids)
        self.tree_masks = getattr(target.config, "_attn_implementation", None) in TREE_ATTENTION
        self.shape = settings_shape(settings)
        self.proposer = TreeDrafter(self.state, self.shape, self.processing, self.do_sample, self.eos_ids)
        self.lookup = settings_lookup(settings)
        self.head = plain_lm_head(target)
        # Rows on demand pay where the LM head is bound by arithmetic (fp32 on a CPU); where reading its weights
        # dominates (half precision, accelerators) a few more rows cost less than a second pass over them.
        self.lazy_head = (
            self.head is not None and self.head.weight.dtype == torch.float32 and target.device.type == "cpu"
        )
        self.stats = SlimSpecGenerationStats()
        self.scores: tuple[torch.Tensor, ...] = ()
        self.raw_logits: tuple[torch.Tensor, ...] = ()
        # every layer's states per generated token (transformers' layout), when the caller asks for them
        self.all_hidden_states = bool(
            generation_config.return_dict_in_generate and generation_config.output_hidden_states
        )
        self.hidden_states: tuple[tuple[torch.Tensor, ...], ...] = ()
        self.captured = True if self.all_hidden_states else captured_hidden_states(self.layer_ids)
        self.cache_name = cache_keyword(target)

    def prefill(self, seq: DecodingSequence) -> torch.LongTensor:
        """The target reads the prompt and picks the first token (1, 1)."""
        out = self.target(
            input_ids=seq.ids,
            position_ids=seq.positions[None],
            attention_mask=seq.key_mask[None].long() if seq.padded else None,
            **{self.cache_name: self.cache},
            use_cache=True,
            output_hidden_states=self.captured,
            logits_to_keep=1,
            return_dict=True,
        )
        return self.first_token(seq, out.logits[:, -1], out.hidden_states)

    def first_token(self, seq: DecodingSequence, logits: torch.Tensor, hidden_states) -> torch.LongTensor:
        """The token (1, 1) after the prompt from the prefill's last `logits` (1, V) and `hidden_states`."""
        if self.all_hidden_states:
            self.hidden_states = (tuple(hidden_states),)
        raw = logits.float()
        scores = self.processing(seq.ids, raw.clone())
        if self.do_sample:
            token = torch.multinomial(torch.softmax(scores, dim=-1), 1)
        else:
            token = scores.argmax(-1, keepdim=True)
        self.state.add_target_features(hidden_states)
        self.scores, self.raw_logits = (scores,), (raw,)
        return token

    def propose(self, seq: DecodingSequence) -> DraftTree:
        """The round's draft: prompt lookup alone, or the drafter's tree with lookup grafted on."""
        plan = self.plan(seq)
        if plan.tree is not None:
            return plan.tree  # no drafter call: the target features wait in the drafter's state
        root_logits, root_state = self.state.commit(seq)
        tree = self.proposer.draft(seq, root_logits, root_state, plan.depth)
        return self.graft_lookup(seq, tree, root_logits, plan)

    def plan(self, seq: DecodingSequence) -> "RoundPlan":
        """What the round drafts before the drafter runs: the lookup match, and the whole draft when it is lookup's."""
        budget = self.max_length - seq.length  # tokens this round may append (accepted + 1)
        lookup = self.lookup
        match = lookup.find(seq.ids[0], budget - 1) if lookup is not None else None
        tree = lookup_tree(match.tokens) if lookup is not None and lookup.drafts_alone(match) else None
        return RoundPlan(budget, min(self.shape.depth, budget - 1), match, tree)

    def graft_lookup(self, seq: DecodingSequence, tree: DraftTree, root_logits, plan: "RoundPlan") -> DraftTree:
        """The drafter's `tree` with lookup grafted on: a short match the drafter agrees with, or what followed
        the likeliest path earlier."""
        lookup, match, budget = self.lookup, plan.match, plan.budget
        if lookup is None or budget <= 1:
            return tree
        if match is not None and int(root_logits.argmax()) == match.tokens[0]:
            if not self.tree_masks:
                return lookup_tree(match.tokens)  # a target without tree masks verifies chains only
            tree.graft(match.tokens)  # a short match the drafter agrees with, verified in the same forward
        else:  # verifying a few more tokens costs little: extend the likeliest path with what followed it earlier
            leaf = tree.likeliest_leaf()
            if leaf != ROOT and tree.tokens[leaf] in self.eos_ids:
                return tree
            if self.do_sample and tree.proposals.get(leaf):
                # its own draws (all pruned) made it the leaf: a lookup draft placed before them would not be
                # independent of them, and the multi-draft rule would no longer be exact
                return tree
            extension = lookup.find(seq.with_path(tree.path_tokens(leaf))[0], budget - 1 - tree.depth(leaf))
            if not lookup.extends(extension):
                return tree
            tree.graft(extension.tokens, below=leaf)
        tree.source = "drafter+lookup"
        return tree

    def verify(self, seq: DecodingSequence, tree: DraftTree):
        """One target forward over the root and the kept nodes; returns the hidden states the drafter reads and
        the rows' logits (computed as the walk needs them)."""
        target, device = self.target, seq.ids.device
        depths = torch.tensor([[0] + [tree.depths[n] for n in tree.kept]], device=device)
        inputs = {
            "input_ids": torch.tensor([[int(seq.ids[0, -1])] + [tree.tokens[n] for n in tree.kept]], device=device),
            "position_ids": depths + seq.positions[-1],
            self.cache_name: self.cache,
            "use_cache": True,
            "output_hidden_states": self.captured,
            "return_dict": True,
        }
        if tree.is_chain():  # a plain causal forward: the target builds its own masks (any attention backend)
            keys = torch.cat([seq.key_mask, seq.key_mask.new_ones(len(tree.kept))])
            inputs["attention_mask"] = keys[None].long() if seq.padded else None
        else:
            dtype = target.dtype if target.dtype.is_floating_point else torch.float32
            inputs["attention_mask"] = tree_attention_mask(
                target.config.get_text_config(decoder=True), seq, tree, dtype
            )
        if self.head is None:
            with shared_kv_heads():
                out = target(**inputs, logits_to_keep=0)
            return out.hidden_states, TargetLogits(tree, None, None, out.logits)
        with shared_kv_heads():
            out = getattr(target, target.base_model_prefix)(**inputs)  # the decoder layers; the head runs in the walk
        return out.hidden_states, TargetLogits(tree, self.head, out.last_hidden_state, lazy=self.lazy_head)

    def advance(self, seq: DecodingSequence, tree: DraftTree, hidden_states, logits, acceptance) -> torch.LongTensor:
        """Commits the accepted path and the target's next token; returns the tokens appended (1, n)."""
        new_tokens, rows = self.take(seq, tree, logits, acceptance)
        compact_cache(self.cache, seq.length - 1, rows)
        return self.record(seq, tree, hidden_states, acceptance, new_tokens, rows)

    def take(self, seq: DecodingSequence, tree: DraftTree, logits, acceptance) -> tuple[list[int], torch.LongTensor]:
        """The tokens the round appends (the accepted path and the target's token, cut at EOS and the length
        limit) and the verified rows whose keys and values the target's cache keeps (the root and the path)."""
        new_tokens = [tree.tokens[n] for n in acceptance.path] + [acceptance.token]
        new_tokens = new_tokens[: self.max_length - seq.length]  # the drafter may propose beyond the length limit
        for i, token in enumerate(new_tokens):
            if token in self.eos_ids:  # ... and beyond an EOS
                new_tokens = new_tokens[: i + 1]
                break
        rows = [0] + [logits.rows[n] for n in acceptance.path[: len(new_tokens) - 1]]
        return new_tokens, torch.tensor(rows, dtype=torch.long)

    def record(self, seq, tree, hidden_states, acceptance, new_tokens, rows) -> torch.LongTensor:
        """Appends `new_tokens` to `seq`, their target features to the drafter's state, the round to the stats."""
        depth = max((tree.depths[n] for n in tree.kept), default=0)
        self.stats.record(tree.source, len(tree.kept), len(rows) - 1, positions=depth)  # per-position: per depth
        self.state.add_target_features(hidden_states, rows.to(hidden_states[self.layer_ids[0]].device))
        appended = torch.tensor([new_tokens], dtype=seq.ids.dtype, device=seq.ids.device)
        seq.append(appended)
        self.scores += tuple(acceptance.scores[: len(new_tokens)])
        self.raw_logits += tuple(acceptance.raw_logits[: len(new_tokens)])
        if self.all_hidden_states:  # the states of the row each new token was predicted from
            self.hidden_states += tuple(tuple(h[:, r : r + 1] for h in hidden_states) for r in rows.tolist())
        return appended


class BatchedSpeculativeDecoder:
    """A `generate()` call over B > 1 prompts: every row drafts and accepts on its own (a batch-1
    `SpeculativeDecoder` per row: its sequence, drafter state, proposer and stats), and ONE target forward verifies
    every row's draft.

    The target's cache is shared, (B, H, S, d): rows roll back by masking the nodes they rejected (`BatchSlots`),
    so no key moves, and a row that finishes (EOS, the length limit, a stopping criterion) leaves the batch. The
    drafter's side is batched the same way (`BatchDrafting`).
    """

    def __init__(self, target, drafter, generation_config, logits_processor, settings, cache, input_ids, mask):
        self.target, self.cache = target, cache
        batch = input_ids.shape[0]
        self.rows = [
            SpeculativeDecoder(target, drafter, generation_config, logits_processor, settings, cache)
            for _ in range(batch)
        ]
        self.seqs = [
            DecodingSequence(input_ids[b : b + 1], None if mask is None else mask[b : b + 1]) for b in range(batch)
        ]
        self.active = list(range(batch))  # the rows still decoding, in the order of the cache's batch dimension
        self.drafting = BatchDrafting(drafter, [row.state for row in self.rows], [row.proposer for row in self.rows])
        self.head, self.lazy_head = self.rows[0].head, self.rows[0].lazy_head
        self.captured = self.rows[0].captured
        self.windows = layer_windows(target.config.get_text_config(decoder=True))  # per layer type, or None

    def prefill(self) -> None:
        seqs = self.seqs
        self.slots = BatchSlots(torch.stack([s.key_mask for s in seqs]), torch.stack([s.positions for s in seqs]))
        out = self.target(
            input_ids=torch.cat([s.ids for s in seqs]),
            position_ids=self.slots.positions.to(seqs[0].ids.device),
            attention_mask=self.slots.valid.long().to(seqs[0].ids.device),
            **{self.rows[0].cache_name: self.cache},
            use_cache=True,
            output_hidden_states=self.captured,
            logits_to_keep=1,
            return_dict=True,
        )
        for b, (row, seq) in enumerate(zip(self.rows, seqs)):
            seq.append(row.first_token(seq, out.logits[b : b + 1, -1], row_states(out.hidden_states, b)))

    def round(self, stopping_criteria) -> None:
        """Drafts every active row, verifies them in one forward, accepts per row, retires finished rows."""
        trees = self.propose()
        hidden_states, verified, positions = self.verify(trees)
        logits = self.target_logits(trees, verified)
        keeps = []
        for i, (b, tree) in enumerate(zip(self.active, trees)):
            row, seq = self.rows[b], self.seqs[b]
            acceptance = accept(tree, logits[i], seq, row.processing, row.do_sample)
            new_tokens, keep = row.take(seq, tree, logits[i], acceptance)
            row.record(seq, tree, row_states(hidden_states, i), acceptance, new_tokens, keep)
            keeps.append(keep)
        self.slots.commit(self.cache, positions, keeps)
        done = [bool(stopping_criteria(self.seqs[b].ids, None).all()) for b in self.active]
        if any(done):
            self.keep_rows([i for i, finished in enumerate(done) if not finished])

    def keep_rows(self, staying: list[int]) -> None:
        """Keeps the active rows at indices `staying` in both caches (the others finished)."""
        self.active = [self.active[i] for i in staying]
        if staying:
            self.slots.keep_rows(self.cache, staying)
            self.drafting.keep_rows(staying)

    def propose(self) -> list[DraftTree]:
        """Every active row's draft (`SpeculativeDecoder.propose` for the batch): lookup where it drafts alone, else
        one batched commit and one drafter forward per tree level for every row that drafts."""
        seqs = [self.seqs[b] for b in self.active]
        plans = [self.rows[b].plan(seq) for b, seq in zip(self.active, seqs)]
        drafting = [i for i, plan in enumerate(plans) if plan.tree is None]
        if not drafting:
            return [plan.tree for plan in plans]
        root_logits, root_states = self.drafting.commit(seqs)
        trees = self.drafting.draft(seqs, drafting, root_logits, root_states, [plans[i].depth for i in drafting])
        for i, tree in zip(drafting, trees):
            row = self.rows[self.active[i]]
            plans[i].tree = row.graft_lookup(seqs[i], tree, root_logits[i], plans[i])
        return [plan.tree for plan in plans]

    def target_logits(self, trees: list[DraftTree], verified: torch.Tensor) -> list[TargetLogits]:
        """Each row's `TargetLogits`; the rows every walk starts with (each tree's first batch) in ONE LM-head call."""
        if self.head is None:
            return [TargetLogits(tree, None, None, verified[i : i + 1]) for i, tree in enumerate(trees)]
        logits = [TargetLogits(t, self.head, verified[i : i + 1], lazy=self.lazy_head) for i, t in enumerate(trees)]
        first_rows_in_one_call(logits, self.head, verified)
        return logits

    def verify(self, trees: list[DraftTree]):
        """ONE target forward over every active row's root and kept nodes, padded to the widest row (padding is
        masked as keys and sees only itself as a query); returns the hidden states, the last hidden states (or the
        logits, when the target's logits are more than its LM head) and the columns' positions (B, W)."""
        width = max(len(t.kept) + 1 for t in trees)
        device = self.seqs[0].ids.device
        ids = torch.zeros((len(trees), width), dtype=torch.long)
        positions = torch.zeros((len(trees), width), dtype=torch.long)
        for i, (b, tree) in enumerate(zip(self.active, trees)):
            seq, n = self.seqs[b], len(tree.kept) + 1
            ids[i, :n] = torch.tensor([int(seq.ids[0, -1])] + [tree.tokens[k] for k in tree.kept])
            ids[i, n:] = ids[i, n - 1]
            depths = torch.tensor([0] + [tree.depths[k] for k in tree.kept] + [0] * (width - n))
            positions[i] = int(seq.positions[-1]) + depths
        if all(tree.is_chain() for tree in trees) and self.windows is None:
            mask = self.slots.key_mask(trees, width).to(device)
        else:
            dtype = self.target.dtype if self.target.dtype.is_floating_point else torch.float32
            mask = self.slots.tree_masks(self.windows, trees, positions, dtype)
            mask = {k: m.to(device) for k, m in mask.items()} if isinstance(mask, dict) else mask.to(device)
        inputs = {
            "input_ids": ids.to(device),
            "position_ids": positions.to(device),
            "attention_mask": mask,
            self.rows[0].cache_name: self.cache,
            "use_cache": True,
            "output_hidden_states": self.captured,
            "return_dict": True,
        }
        if self.head is None:
            with shared_kv_heads():
                out = self.target(**inputs, logits_to_keep=0)
            return out.hidden_states, out.logits, positions
        with shared_kv_heads():
            out = getattr(self.target, self.target.base_model_prefix)(**inputs)
        return out.hidden_states, out.last_hidden_state, positions

    def stats(self) -> SlimSpecGenerationStats:
        return SlimSpecGenerationStats.combined([row.stats for row in self.rows])

    def sequences(self, pad_token_id: int) -> torch.LongTensor:
        """The rows as transformers returns a batch: each row's tokens, then `pad_token_id` to the longest."""
        length = max(seq.length for seq in self.seqs)
        out = self.seqs[0].ids.new_full((len(self.seqs), length), pad_token_id)
        for b, seq in enumerate(self.seqs):
            out[b, : seq.length] = seq.ids[0]
        return out


def lookup_tree(tokens: list[int]) -> DraftTree:
    tree = DraftTree(source="lookup")
    tree.graft(tokens)
    return tree


def settings_shape(settings: DraftSettings) -> TreeShape:
    """The tree a round drafts: `draft_tree_size` > 0 a tree, else the chain of `num_assistant_tokens` (top-k 1)."""
    threshold = settings.assistant_confidence_threshold
    if settings.draft_tree_size > 0:
        return TreeShape(settings.draft_tree_size, settings.draft_tree_depth, settings.draft_tree_top_k, threshold)
    k = settings.num_assistant_tokens
    return TreeShape(size=k, depth=k, top_k=1, threshold=threshold)


def settings_lookup(settings: DraftSettings) -> LookupPolicy | None:
    if not settings.draft_lookup:
        return None
    return LookupPolicy(
        settings.draft_lookup_min_ngram,
        settings.draft_lookup_max_ngram,
        settings.draft_lookup_num_tokens,
        settings.draft_lookup_extend_ngram,
    )


def speculative_decoding(
    model,
    drafter,
    input_ids,
    logits_processor,
    stopping_criteria,
    generation_config,
    settings,
    streamer=None,
    **model_kwargs,
):
    """Greedy or sampled decoding of `model` with a SlimSpec drafter; the contract of transformers' decoding loops
    (`generate()` prepared the inputs, processors, stopping criteria and cache). Returns the sequences, or a
    `GenerateDecoderOnlyOutput` with `sequences`, `scores`, `logits` and `cache` (`return_dict_in_generate`)."""
    cache = check_decoding_inputs(model, drafter, input_ids, generation_config, settings, model_kwargs)
    if input_ids.shape[0] > 1:
        check_batch(model, generation_config, logits_processor, streamer)
        return batched_decoding(
            model,
            drafter,
            input_ids,
            logits_processor,
            stopping_criteria,
            generation_config,
            settings,
            cache,
            model_kwargs.get("attention_mask"),
        )
    decoder = SpeculativeDecoder(model, drafter, generation_config, logits_processor, settings, cache)
    drafter.last_generation_stats = decoder.stats
    return_dict = bool(generation_config.return_dict_in_generate)
    output_scores = return_dict and bool(generation_config.output_scores)
    seq = DecodingSequence(input_ids, model_kwargs.get("attention_mask"))
    appended = decoder.prefill(seq)
    seq.append(appended)
    while True:
        if streamer is not None:
            streamer.put(appended.cpu())
        if bool(stopping_criteria(seq.ids, decoder.scores if output_scores else None).all()):
            break
        tree = decoder.propose(seq)
        hidden_states, logits = decoder.verify(seq, tree)
        acceptance = accept(tree, logits, seq, decoder.processing, decoder.do_sample)
        appended = decoder.advance(seq, tree, hidden_states, logits, acceptance)
    if streamer is not None:
        streamer.end()
    if not return_dict:
        return seq.ids
    return GenerateDecoderOnlyOutput(
        sequences=seq.ids,
        scores=decoder.scores if output_scores else None,
        logits=decoder.raw_logits if generation_config.output_logits else None,
        hidden_states=decoder.hidden_states if decoder.all_hidden_states else None,
        **{OUTPUT_CACHE: cache},
    )


def batched_decoding(
    model, drafter, input_ids, logits_processor, stopping_criteria, generation_config, settings, cache, mask
):
    """`speculative_decoding` for B > 1 prompts (left padding and `attention_mask` as for plain `generate()`)."""
    decoder = BatchedSpeculativeDecoder(
        model, drafter, generation_config, logits_processor, settings, cache, input_ids, mask
    )
    decoder.prefill()
    staying = [i for i, b in enumerate(decoder.active) if not bool(stopping_criteria(decoder.seqs[b].ids, None).all())]
    if len(staying) < input_ids.shape[0]:
        decoder.keep_rows(staying)
    while decoder.active:
        decoder.round(stopping_criteria)
    drafter.last_generation_stats = decoder.stats()
    pad = getattr(generation_config, "_pad_token_tensor", None)
    if pad is None:
        pad = getattr(generation_config, "_eos_token_tensor", None)
    sequences = decoder.sequences(int(pad.flatten()[0]) if pad is not None else 0)
    if not generation_config.return_dict_in_generate:
        return sequences
    return GenerateDecoderOnlyOutput(sequences=sequences)


def slimspec_generate(
    model,
    input_ids: torch.LongTensor,
    logits_processor,
    stopping_criteria,
    generation_config,
    drafter=None,
    draft_settings: dict | None = None,
    draft_streamer=None,
    **model_kwargs,
):
    """`target.generate(**inputs, custom_generate=slimspec_generate, drafter=drafter, draft_settings={...})`.

    The `custom_generate` callable behind `generate(assistant_model=drafter)`, usable directly (and from the
    Hub-ready `custom_generate/` folder). `generate()` forwards neither `assistant_model` nor `streamer` to a
    callable, so the drafter comes as `drafter=`, the settings as `draft_settings=` (the names of `DraftSettings`;
    the drafter's `generation_config` supplies the rest) and a streamer as `draft_streamer=` (which then also
    receives the prompt, as `generate()` would have done).
    """
    if not is_slimspec_drafter(drafter):
        raise ValueError(f"Pass the SlimSpec drafter as `drafter=`; got {type(drafter).__name__}.")
    settings = DraftSettings.resolve(
        drafter.generation_config, draft_settings, bool(generation_config.do_sample), input_ids.shape[0] > 1
    )
    if draft_streamer is not None:
        draft_streamer.put(input_ids.cpu())
    return speculative_decoding(
        model,
        drafter,
        input_ids,
        logits_processor,
        stopping_criteria,
        generation_config,
        settings,
        streamer=draft_streamer,
        **model_kwargs,
    )


def generate_with_drafter(drafter, generate, arguments: dict):
    """`target.generate(..., assistant_model=drafter)` (bound by name, see `install_generation_hook`), run as
    `generate(..., custom_generate=slimspec_generate, drafter=drafter)`."""
    target, arguments = bound_generate_arguments(arguments)
    arguments.pop("custom_generate", None)
    settings = DraftSettings.explicit(arguments.get("generation_config"), arguments)
    ids = arguments.get("inputs") if arguments.get("inputs") is not None else arguments.get("input_ids")
    batch = ids.shape[0] if isinstance(ids, torch.Tensor) and ids.dim() == 2 else 1
    # bad values fail here, before any forward
    resolved = DraftSettings.resolve(drafter.generation_config, settings, batched=batch > 1)
    arguments.pop("assistant_model")
    if 0 < resolved.draft_max_batch_size < batch:  # a batch this large decodes faster without the drafter
        drafter.last_generation_stats = SlimSpecGenerationStats()
        return generate(target, **arguments)
    streamer = arguments.pop("streamer", None)
    return generate(
        target,
        **arguments,
        custom_generate=slimspec_generate,
        drafter=drafter,
        draft_settings=settings,
        draft_streamer=streamer,
    )


__all__ = [
    "accept",
    "Acceptance",
    "compact_cache",
    "generate_with_drafter",
    "layer_windows",
    "plain_lm_head",
    "sample_child",
    "slimspec_generate",
    "speculative_decoding",
    "SpeculativeDecoder",
    "TargetLogits",
    "tree_attention_mask",
]
