# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""SlimSpec decoding: chains, trees and prompt lookup, greedy or sampled, for any batch size (one prompt is a batch
of one). Each round proposes every row's draft (`SpeculativeDecoder.propose`), verifies all of them in ONE target
forward (`verify`) and accepts per row (`accept`: the target's argmax when greedy, multi-draft speculative sampling,
`sample_child`, otherwise); docs/decoding.md walks through a round and why it is lossless.

`generate_with_drafter` is the one route in (from the `generate()` wrapper and from the Hub folder
`custom_generate/`); `slimspec_generate` is the loop, as transformers' `custom_generate` callable.

Part of the remote-code unit: it imports only `torch`, `transformers` and its siblings (relatively).
"""

from dataclasses import dataclass

import torch
from transformers.generation.stopping_criteria import StoppingCriteriaList, StopStringCriteria
from transformers.generation.utils import GenerateDecoderOnlyOutput

from .acceptance_slimspec import depth_acceptance, record_depths
from .calls_slimspec import judged, plain_is_chosen
from .configuration_slimspec import is_slimspec_drafter
from .drafting_slimspec import (
    ROOT,
    DecodingSequence,
    DrafterState,
    DraftSettings,
    DraftTree,
    LogitsProcessing,
    LookupMatch,
    Proposal,
    TreeDrafter,
    draw,
)
from .shapes_slimspec import round_timer
from .stats_slimspec import SlimSpecDecoderOnlyOutput, SlimSpecGenerationStats, record_stats
from .verification_slimspec import (
    TREE_ATTENTION,
    TargetLogits,
    TargetSlots,
    cache_keyword,
    captured_hidden_states,
    check_decoding_inputs,
    layer_windows,
    plain_lm_head,
    row_states,
    shared_kv_heads,
    time_head_kernels,
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
    """Multi-draft speculative sampling at one node (SpecInfer, Miao et al. 2023): the token emitted and the
    proposal's node (None: drawn from the residual, no proposal accepted). `scores` (V,) are the target's processed
    logits. Proposals are tested in order, x_i accepted with probability min(1, p(x_i)/q_i(x_i)), else
    p <- norm(max(p - q_i, 0)); lookup drafts come first with q one-hot, the drafter's draws follow as drawn (i.i.d.
    from q, pruned and repeated draws included). Deterministic top-k children would NOT be lossless here."""
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
    return int(draw(p)), None


def accept(tree: DraftTree, logits: TargetLogits, seq: DecodingSequence, processing, do_sample: bool) -> Acceptance:
    """Walks the tree from the root while the target accepts: greedy, the child that is the target's argmax;
    sampling, the child `sample_child` accepts (a pruned child is emitted and ends the round: the target has no
    logits below it)."""
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
    """One `generate()` call over B prompts: each row drafts and accepts on its own, ONE drafter forward per tree
    level drafts every row, and ONE target forward verifies every row's draft. The rows share both caches
    (`TargetSlots`, `DrafterState`); a row that finishes leaves the batch. `scores`, `raw_logits` and `hidden_states`
    are the outputs transformers returns on request (one prompt only)."""

    def __init__(self, target, drafter, generation_config, logits_processor, settings: DraftSettings, cache, seqs):
        self.target, self.cache, self.seqs = target, cache, list(seqs)
        self.layer_ids = list(drafter.config.target_layer_ids)
        self.do_sample = bool(generation_config.do_sample)
        self.max_length = generation_config.max_length
        self.processing = LogitsProcessing(logits_processor)
        eos = getattr(generation_config, "_eos_token_tensor", None)
        self.eos_ids = set(eos.flatten().tolist()) if eos is not None else set()
        self.active = list(range(len(self.seqs)))  # the rows still decoding, in the order of the caches' batch
        self.state = DrafterState(drafter, self.layer_ids, len(self.seqs))
        self.shape = settings.tree_shape()
        self.proposer = TreeDrafter(self.state, self.shape, self.processing, self.do_sample, self.eos_ids)
        self.lookup = settings.lookup_policy()
        # this round's lookup (`draft_shape="auto"`: where its shape drafts with it, `RoundTimer.lookup_allowed`)
        self.round_lookup = self.lookup
        self.tree_masks = getattr(target.config, "_attn_implementation", None) in TREE_ATTENTION
        self.windows = layer_windows(target.config.get_text_config(decoder=True))  # per layer type, or None
        self.head = plain_lm_head(target)
        # Rows on demand pay where the LM head is bound by arithmetic (fp32 on a CPU); where reading its weights
        # dominates (half precision, accelerators) a few more rows cost less than a second pass over them.
        self.lazy_head = (
            self.head is not None and self.head.weight.dtype == torch.float32 and target.device.type == "cpu"
        )
        self.row_stats = [SlimSpecGenerationStats() for _ in self.seqs]
        # per generated token, kept only when the caller asks for them: processed and raw logits (V each), every
        # layer's states (transformers' layout)
        self.scores, self.raw_logits, self.hidden_states = (), (), ()
        requested = bool(generation_config.return_dict_in_generate)
        self.keep_scores = requested and bool(generation_config.output_scores)
        self.keep_logits = requested and bool(generation_config.output_logits)
        self.all_hidden_states = requested and bool(generation_config.output_hidden_states)
        self.captured = True if self.all_hidden_states else captured_hidden_states(self.layer_ids)
        self.cache_name = cache_keyword(target)
        # `draft_shape="auto"`: each round's shape chosen from what the rounds measure (else None); every call counts
        # the drafter's per-depth acceptance it chooses from (and `slimspec bench --save-acceptance` stores)
        context = self.seqs[0].ids.shape[1]  # the prompts' (padded) length: what every round's cache reads first
        self.timer = round_timer(settings, target, drafter, self.shape, len(self.seqs), context, self.do_sample)
        self.acceptance = depth_acceptance(drafter, self.do_sample)
        self.proposer.ranks = self.acceptance.max_rank

    def prefill(self) -> None:
        """The target reads every prompt and picks each row's first token (and the LM head's kernel for several rows
        is chosen, once per process: not in a timed round)."""
        seqs, device = self.seqs, self.seqs[0].ids.device
        if self.head is not None:
            time_head_kernels(self.head)
        self.slots = TargetSlots(torch.stack([s.key_mask for s in seqs]), torch.stack([s.positions for s in seqs]))
        out = self.target(
            input_ids=torch.cat([s.ids for s in seqs]),
            position_ids=self.slots.positions.to(device),
            attention_mask=None if bool(self.slots.valid.all()) else self.slots.valid.long().to(device),
            **{self.cache_name: self.cache},
            use_cache=True,
            output_hidden_states=self.captured,
            logits_to_keep=1,
            return_dict=True,
        )
        for b, seq in enumerate(seqs):  # each row's token after its prompt: a round that drafted nothing
            hidden_states, empty = row_states(out.hidden_states, b), DraftTree()
            logits = TargetLogits(empty, None, None, out.logits[b : b + 1, -1:])
            acceptance = accept(empty, logits, seq, self.processing, self.do_sample)
            self.state.add_target_features(b, hidden_states)
            self.scores = tuple(acceptance.scores) if self.keep_scores else ()
            self.raw_logits = tuple(acceptance.raw_logits) if self.keep_logits else ()
            self.hidden_states = (tuple(hidden_states),) if self.all_hidden_states else ()
            seq.append(torch.tensor([[acceptance.token]], dtype=seq.ids.dtype, device=seq.ids.device))

    def round(self) -> list[torch.LongTensor]:
        """Drafts every active row, verifies them in one forward, accepts per row; returns each active row's
        appended tokens (1, n)."""
        if self.timer is not None:
            slots = self.slots.valid.shape[1]  # what the round's attention reads first: its cost grows with it
            self.shape = self.proposer.shape = self.timer.start(self.shape.threshold, len(self.active), slots)
        self.round_lookup = self.lookup if self.timer is None or self.timer.lookup_allowed else None
        trees = self.propose()
        if self.timer is not None:
            self.timer.mark_drafted()
        hidden_states, verified, positions = self.verify(trees)
        logits = TargetLogits.of_round(trees, self.head, verified, self.lazy_head)
        keeps, appended, accepted = [], [], []
        for i, (b, tree) in enumerate(zip(self.active, trees)):
            seq = self.seqs[b]
            acceptance = accept(tree, logits[i], seq, self.processing, self.do_sample)
            record_depths(self.acceptance, tree, acceptance.path, acceptance.token, self.do_sample)
            new_tokens, keep = self.take(seq, tree, logits[i], acceptance)
            appended.append(self.record(i, tree, row_states(hidden_states, i), acceptance, new_tokens, keep))
            keeps.append(keep)
            accepted.append(acceptance)
        self.slots.commit(self.cache, positions, keeps)
        if self.timer is not None:
            self.timer.end(trees, accepted, sum(a.shape[1] for a in appended))
        return appended

    def retire(self, stopping_criteria, appended: list[torch.LongTensor], scores=None) -> list[torch.LongTensor]:
        """Rows whose stopping criteria are met leave both caches. The criteria are checked after each token a row
        appended this round (`appended`, (1, n) each), so one met inside a round (a stop string, a caller's own) ends
        the row there, as decoding one token at a time does; returns `appended` cut the same way."""
        staying, kept = [], []
        for i, b in enumerate(self.active):
            seq, new = self.seqs[b], appended[i].shape[1]
            ends = range(seq.length - new + 1, seq.length + 1)
            end = next((e for e in ends if bool(stopping_criteria(seq.ids[:, :e], scores).all())), None)
            if end is None:
                staying.append(i)
            elif end < seq.length:
                self.cut(b, end)
            kept.append(appended[i][:, : new - (seq.length - end if end is not None else 0)])
        if len(staying) < len(self.active):
            self.active = [self.active[i] for i in staying]
            if staying:
                self.slots.keep_rows(self.cache, staying)
                self.state.keep_rows(staying)
        return kept

    def cut(self, b: int, end: int) -> None:
        """Row b ends after its first `end` tokens (a stopping criterion met inside the round): the tokens after it
        go, with their outputs kept on request (one prompt) and, where the cache can be cropped, their cache."""
        seq = self.seqs[b]
        drop = seq.length - end
        seq.ids = seq.ids[:, :end]
        if len(self.seqs) == 1:
            self.scores = self.scores[: len(self.scores) - drop]
            self.raw_logits = self.raw_logits[: len(self.raw_logits) - drop]
            self.hidden_states = self.hidden_states[: len(self.hidden_states) - drop]
            if hasattr(self.cache, "crop"):
                self.cache.crop(-drop)  # every token but the last is in the target's cache

    def propose(self) -> list[DraftTree]:
        """Every active row's draft: prompt lookup alone where it drafts alone, else one commit of the accepted
        positions and the drafter's tree with lookup grafted on."""
        seqs = [self.seqs[b] for b in self.active]
        plans = [self.plan(seq) for seq in seqs]
        drafting = [i for i, plan in enumerate(plans) if plan.tree is None]
        if not drafting:
            return [plan.tree for plan in plans]  # no drafter call: the target features wait in the drafter's state
        root_logits, root_states = self.state.commit(seqs)
        if self.timer is not None:
            self.timer.mark_committed(self.state.commit_width)
        trees = self.proposer.draft(seqs, drafting, root_logits, root_states, [plans[i].depth for i in drafting])
        for i, tree in zip(drafting, trees):
            plans[i].tree = self.graft_lookup(seqs[i], tree, root_logits[i], plans[i])
        return [plan.tree for plan in plans]

    def plan(self, seq: DecodingSequence) -> RoundPlan:
        """What the round drafts before the drafter runs: the lookup match, and the whole draft when it is lookup's."""
        budget = self.max_length - seq.length  # tokens this round may append (accepted + 1)
        match = self.lookup.find(seq.ids[0], budget - 1) if self.lookup is not None else None
        if self.timer is not None:  # `auto` counts what lookup would draft alone in every round, used or not
            self.timer.note_lookup(seq, match if self.lookup is not None and self.lookup.drafts_alone(match) else None)
        if self.shape.depth == 0:  # a plain round (`draft_shape="auto"`): plain decoding, neither drafter nor lookup
            return RoundPlan(budget, 0, None, DraftTree(source="plain"))
        match = match if self.round_lookup is not None else None
        tree = lookup_tree(match.tokens) if match is not None and self.lookup.drafts_alone(match) else None
        return RoundPlan(budget, min(self.shape.depth, budget - 1), match, tree)

    def graft_lookup(self, seq: DecodingSequence, tree: DraftTree, root_logits, plan: RoundPlan) -> DraftTree:
        """The drafter's `tree` with lookup grafted on: a short match the drafter agrees with, or what followed
        the likeliest path earlier."""
        lookup, match, budget = self.round_lookup, plan.match, plan.budget
        if lookup is None or budget <= 1:
            return tree
        agrees = match is not None and int(root_logits.argmax()) == match.tokens[0]
        if agrees and not self.tree_masks:
            return lookup_tree(match.tokens)  # a target without tree masks verifies chains only
        tree.grafted_from = len(tree.tokens)
        if agrees or (self.tree_masks and lookup.branches(match)):
            # a match the drafter agrees with, or one long enough to be a branch of its own: verified in the same
            # forward as the drafter's draft (a choice made from the text alone, before any draw: lossless sampled)
            tree.graft(match.tokens)
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

    def verify(self, trees: list[DraftTree]):
        """ONE target forward over every active row's root and kept nodes, padded to the widest row (padding masked as
        keys, seeing only itself); returns the hidden states, the last ones (or the logits) and the positions (B, W)."""
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
        dtype = self.target.dtype if self.target.dtype.is_floating_point else torch.float32
        inputs = {
            "input_ids": ids.to(device),
            "position_ids": positions.to(device),
            "attention_mask": self.slots.masks(self.windows, trees, positions, dtype, device),
            self.cache_name: self.cache,
            "use_cache": True,
            "output_hidden_states": self.captured,
            "return_dict": True,
        }
        backbone = self.head is not None  # the LM head then runs in the walk, on the rows it reaches
        model = getattr(self.target, self.target.base_model_prefix) if backbone else self.target
        with shared_kv_heads(width):
            out = model(**inputs) if backbone else model(**inputs, logits_to_keep=0)
        return out.hidden_states, out.last_hidden_state if backbone else out.logits, positions

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

    def record(self, i: int, tree, hidden_states, acceptance, new_tokens, rows) -> torch.LongTensor:
        """Appends `new_tokens` to active row i's sequence, their target features to the drafter's state, the round
        to the row's stats; returns the tokens appended (1, n)."""
        b, seq = self.active[i], self.seqs[self.active[i]]
        depth = max((tree.depths[n] for n in tree.kept), default=0)
        self.row_stats[b].record(tree.source, len(tree.kept), len(rows) - 1, positions=depth)  # per depth
        self.state.add_target_features(i, hidden_states, rows.to(hidden_states[self.layer_ids[0]].device))
        appended = torch.tensor([new_tokens], dtype=seq.ids.dtype, device=seq.ids.device)
        seq.append(appended)
        self.scores += tuple(acceptance.scores[: len(new_tokens)]) if self.keep_scores else ()
        self.raw_logits += tuple(acceptance.raw_logits[: len(new_tokens)]) if self.keep_logits else ()
        if self.all_hidden_states:  # the states of the row each new token was predicted from
            self.hidden_states += tuple(tuple(h[:, r : r + 1] for h in hidden_states) for r in rows.tolist())
        return appended

    def stats(self) -> SlimSpecGenerationStats:
        """The call's statistics: the row's own for one prompt, else the rows' totals (each row's in `per_row`)."""
        return self.row_stats[0] if len(self.row_stats) == 1 else SlimSpecGenerationStats.combined(self.row_stats)

    def output(self, generation_config, stats: SlimSpecGenerationStats):
        """What `generate()` returns: the sequences, or with `return_dict_in_generate` a `SlimSpecDecoderOnlyOutput`
        with `scores`, `logits` and `hidden_states` as requested (one prompt), the target's cache and the call's
        `stats` (`slimspec_stats`)."""
        pad = getattr(generation_config, "_pad_token_tensor", None)
        pad = pad if pad is not None else getattr(generation_config, "_eos_token_tensor", None)
        sequences = self.sequences(int(pad.flatten()[0]) if pad is not None else 0)
        if not generation_config.return_dict_in_generate:
            return sequences
        return SlimSpecDecoderOnlyOutput(
            sequences=sequences,
            scores=self.scores if self.keep_scores else None,
            logits=self.raw_logits if self.keep_logits else None,
            hidden_states=self.hidden_states if self.all_hidden_states else None,
            **{OUTPUT_CACHE: self.cache if len(self.seqs) == 1 else None},
            slimspec_stats=stats,
        )

    def sequences(self, pad_token_id: int) -> torch.LongTensor:
        """The rows as transformers returns a batch: each row's tokens, then `pad_token_id` to the longest."""
        if len(self.seqs) == 1:
            return self.seqs[0].ids
        length = max(seq.length for seq in self.seqs)
        out = self.seqs[0].ids.new_full((len(self.seqs), length), pad_token_id)
        for b, seq in enumerate(self.seqs):
            out[b, : seq.length] = seq.ids[0]
        return out


def lookup_tree(tokens: list[int]) -> DraftTree:
    tree = DraftTree(source="lookup")
    tree.graft(tokens)
    return tree


def slimspec_generate(
    model,
    input_ids: torch.LongTensor,
    logits_processor,
    stopping_criteria,
    generation_config,
    drafter=None,
    draft_settings: dict | DraftSettings | None = None,
    draft_streamer=None,
    **model_kwargs,
):
    """`target.generate(**inputs, custom_generate=slimspec_generate, drafter=drafter, draft_settings={...})`: greedy
    or sampled decoding of `model` with a SlimSpec drafter, on the contract of transformers' decoding loops
    (`generate()` prepared the inputs, processors, stopping criteria and cache; B prompts left-padded). Returns the
    sequences, or a `SlimSpecDecoderOnlyOutput` (`return_dict_in_generate`).

    `generate()` forwards neither `assistant_model` nor `streamer` to a callable: the drafter comes as `drafter=`,
    the settings as `draft_settings=` (names of `DraftSettings`, the drafter's `generation_config` supplying the
    rest; or `DraftSettings` resolved for this call) and a streamer as `draft_streamer=`.
    """
    if not is_slimspec_drafter(drafter):
        raise ValueError(f"Pass the SlimSpec drafter as `drafter=`; got {type(drafter).__name__}.")
    settings, batch, streamer = draft_settings, input_ids.shape[0], draft_streamer
    if not isinstance(settings, DraftSettings):
        sampled = bool(generation_config.do_sample)
        settings = DraftSettings.resolve(drafter.generation_config, draft_settings, sampled, batched=batch > 1)
    cache = check_decoding_inputs(
        model, drafter, input_ids, generation_config, logits_processor, streamer, settings, model_kwargs
    )
    mask = model_kwargs.get("attention_mask")
    seqs = [DecodingSequence(input_ids[b : b + 1], None if mask is None else mask[b : b + 1]) for b in range(batch)]
    decoder = SpeculativeDecoder(model, drafter, generation_config, logits_processor, settings, cache, seqs)
    record_stats(drafter, decoder.stats())  # the calling thread's, filled in as the call goes
    if streamer is not None:
        streamer.put(input_ids.cpu())
    decoder.prefill()
    appended = [seq.ids[:, -1:] for seq in seqs]
    while True:
        appended = decoder.retire(stopping_criteria, appended, decoder.scores if decoder.keep_scores else None)
        if streamer is not None:
            streamer.put(appended[0].cpu())
        if not decoder.active:
            break
        appended = decoder.round()
    if streamer is not None:
        streamer.end()
    stats = decoder.stats()  # a batch's totals are computed here, at the end
    if decoder.timer is not None:
        stats.draft_shape = decoder.timer.report()
        decoder.timer.save()
    record_stats(drafter, stats)
    return decoder.output(generation_config, stats)


def generate_with_drafter(generate, target, drafter, arguments: dict):
    """The one route into SlimSpec decoding (from the `generate()` wrapper and from `custom_generate/`): runs
    `generate(target, **arguments, custom_generate=slimspec_generate, drafter=drafter, draft_settings=...)`, the
    call's draft settings resolved once, here, so that bad values fail before any forward. `arguments`: the call's
    other arguments by name. A batch larger than `draft_max_batch_size` decodes without the drafter; under
    `draft_shape="auto"` a batch's calls are timed, plain ones against drafting ones (`judge_call`)."""
    arguments = dict(arguments)
    # what the call sets: a passed GenerationConfig's values, then keywords (taken out). Not the target's own
    # generation_config: transformers fills it with defaults for its assistants (k = 20, threshold 0.4).
    passed = arguments.get("generation_config")
    overrides = {n: getattr(passed, n) for n in DraftSettings.names() if getattr(passed, n, None) is not None}
    overrides.update({name: arguments.pop(name) for name in DraftSettings.names() if name in arguments})
    ids = arguments.get("inputs") if arguments.get("inputs") is not None else arguments.get("input_ids")
    batch = ids.shape[0] if isinstance(ids, torch.Tensor) and ids.dim() == 2 else 1
    sampled = bool(arguments.get("do_sample", getattr(passed or target.generation_config, "do_sample", False)))
    settings = DraftSettings.resolve(drafter.generation_config, overrides, sampled, batched=batch > 1)
    if settings.draft_shape == "auto":  # plain decoding where this machine's rounds (or calls) chose it
        plain = plain_is_chosen(target, drafter, batch, ids.shape[-1] if isinstance(ids, torch.Tensor) else 0, sampled)
    else:  # a batch this large decodes faster without the drafter
        plain = 0 < settings.draft_max_batch_size < batch
    if plain:
        record_stats(drafter, SlimSpecGenerationStats(draft_shape={"shape": "plain"}))
        return judged(generate, target, drafter, arguments, settings.draft_shape == "auto", sampled)
    streamer = arguments.pop("streamer", None)
    if arguments.get("stop_strings") and arguments.get("tokenizer") is not None:  # custom_generate drops `tokenizer`
        stops = StopStringCriteria(arguments.pop("tokenizer"), arguments.pop("stop_strings"))
        arguments["stopping_criteria"] = StoppingCriteriaList([*(arguments.get("stopping_criteria") or []), stops])
    loop = dict(custom_generate=slimspec_generate, drafter=drafter, draft_settings=settings, draft_streamer=streamer)
    return judged(generate, target, drafter, arguments, settings.draft_shape == "auto", sampled, **loop)


__all__ = ["accept", "Acceptance", "generate_with_drafter", "sample_child", "slimspec_generate", "SpeculativeDecoder"]
