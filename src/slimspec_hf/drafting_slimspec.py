# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The drafter side of SlimSpec decoding: a call's settings (`DraftSettings`), the sequence being decoded, the
drafter's state across rounds, prompt lookup, and the draft of one round — always a tree (`DraftTree`, a chain being
the tree of top-k 1) whose proposed children keep the distribution they were drawn from (`Proposal.q`), all the
acceptance rule needs to stay lossless.

Part of the remote-code unit: it imports only `torch`, `transformers` and its siblings (relatively). Shapes: L sequence
length, F frontier width, V vocabulary, d drafter width, d_t target width.
"""

from dataclasses import dataclass, field, fields

import torch
from transformers import GenerationConfig

from .cache_slimspec import SlimSpecDrafterCache


ROOT = -1  # the node id of a tree's root: the last token of the sequence


# ----------------------------------------------------------------------------------------------------------------
# Decoding settings: the drafter's `generation_config` holds the defaults, a `generate()` keyword overrides them
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftSettings:
    """How a SlimSpec drafter drafts, resolved once per `generate()` call (validated here and nowhere else).

    Each field is a key of the drafter's `generation_config` (saved as `generation_config.json`) and a `generate()`
    keyword of the same name, which overrides it for that call.

    Args:
        num_assistant_tokens: tokens the drafter drafts per round (k).
        assistant_confidence_threshold: stop a round's drafting after the first drafted token the drafter gives
            less than this probability (0 never stops early). Lossless either way.
        draft_lookup: hybrid drafting — when the latest tokens also occur earlier in the text, draft what followed
            them there (prompt-lookup decoding): alone for a match of at least `draft_lookup_min_ngram` tokens (its
            most recent occurrence), grafted onto the drafter's draft for a shorter one whose first token is also the
            drafter's next. Lossless either way.
        draft_lookup_min_ngram / draft_lookup_max_ngram: match lengths trusted without the drafter's agreement /
            longest suffix searched.
        draft_lookup_num_tokens: tokens drafted by a lookup round.
        draft_lookup_extend_ngram: with `draft_lookup`, a drafter chain whose last `draft_lookup_extend_ngram`+
            tokens occurred earlier is extended with what followed them there (verified in the same forward).
        draft_lookup_branch_ngram: with `draft_lookup` and a tree-capable target, a match of at least this many
            tokens that the drafter does not agree with is still verified, as a branch of its own beside the
            drafter's draft, in the same forward: the target picks per round which continuation holds. 0: never.
        draft_tree_size: > 0 drafts a dynamic tree of this many nodes (EAGLE-2 style) instead of a chain.
        draft_tree_depth / draft_tree_top_k: the tree's depth and children per expanded node.
        draft_sampling: settings (names of this class) that replace the ones above when `do_sample=True`: the
            shapes that pay differ between greedy and sampled decoding.
        draft_batched: settings that replace the ones above (and `draft_sampling`'s) when `generate()` gets more
            than one prompt: one forward verifies every row, padded to the widest row's draft, and a batch already
            uses the compute that makes verifying many tokens nearly free for one prompt.
        draft_max_batch_size: batches of more prompts than this decode without the drafter (plain batched
            `generate()`); 0 sets no limit. Where a batch already keeps the hardware busy, verifying more tokens
            per row costs more than the drafter's accepted tokens save.
        draft_shape: "auto" chooses each round's chain or tree, and plain decoding where nothing pays, from costs
            measured on this machine as calls decode and the drafter's per-depth acceptance (`shapes_slimspec`); the
            shape settings above are then where it starts. "fixed" drafts them as set. A call that sets any shape
            setting (`SHAPE_SETTINGS`) drafts it as set.
    """

    num_assistant_tokens: int = 6
    assistant_confidence_threshold: float = 0.0
    draft_lookup: bool = False
    draft_lookup_min_ngram: int = 2
    draft_lookup_max_ngram: int = 8
    draft_lookup_num_tokens: int = 10
    draft_lookup_extend_ngram: int = 2
    draft_lookup_branch_ngram: int = 0
    draft_tree_size: int = 0
    draft_tree_depth: int = 4
    draft_tree_top_k: int = 4
    draft_sampling: dict = field(default_factory=dict)
    draft_batched: dict = field(default_factory=dict)
    draft_max_batch_size: int = 0
    draft_shape: str = "fixed"

    VARIANTS = ("draft_sampling", "draft_batched")  # settings that replace others in some calls
    SHAPES = ("auto", "fixed")
    # the settings `draft_shape="auto"` chooses: a call that sets one of them keeps the shape it sets
    SHAPE_SETTINGS = ("num_assistant_tokens", "draft_tree_size", "draft_tree_depth", "draft_tree_top_k")
    SHAPE_SETTINGS += ("draft_max_batch_size",)

    # the least value of each integer setting
    MINIMA = {
        "draft_tree_size": 0,
        "draft_max_batch_size": 0,
        "draft_lookup_branch_ngram": 0,
        "draft_lookup_max_ngram": "draft_lookup_min_ngram",
    }

    def __post_init__(self):
        for name in self.names():
            value = getattr(self, name)
            if name in self.VARIANTS:
                self.check_variant(name, value)
            elif name == "assistant_confidence_threshold":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                    raise ValueError(f"`{name}` must be a probability in [0, 1], got {value!r} (0 never stops early).")
            elif name == "draft_lookup":
                if not isinstance(value, bool):
                    raise ValueError(f"`{name}` must be True or False, got {value!r}.")
            elif name == "draft_shape":
                if value not in self.SHAPES:
                    raise ValueError(f"`{name}` must be one of {list(self.SHAPES)}, got {value!r}.")
            else:
                least = self.MINIMA.get(name, 1)
                least = getattr(self, least) if isinstance(least, str) else least
                if isinstance(value, bool) or not isinstance(value, int) or value < least:
                    raise ValueError(f"`{name}` must be an integer >= {least}, got {value!r}.")

    @classmethod
    def check_variant(cls, variant: str, settings) -> None:
        """`draft_sampling` / `draft_batched` hold decoding settings (and no variant)."""
        valid = [name for name in cls.names() if name not in cls.VARIANTS]
        if not isinstance(settings, dict):
            raise ValueError(f"`{variant}` must be a dict of decoding settings, got {settings!r}.")
        unknown = sorted(set(settings) - set(valid))
        if unknown:
            raise ValueError(f"`{variant}` holds {unknown}, which are not decoding settings; valid: {valid}.")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def resolve(
        cls, drafter_generation_config, overrides: dict | None = None, do_sample: bool = False, batched: bool = False
    ) -> "DraftSettings":
        """The drafter's defaults (its `generation_config`), then its `draft_sampling` defaults when sampling and its
        `draft_batched` defaults for more than one prompt, then the caller's explicit values (and the caller's
        `draft_sampling` / `draft_batched` where they apply)."""
        config = drafter_generation_config
        values = {name: getattr(config, name, None) for name in cls.names()} if config is not None else {}
        values = {name: value for name, value in values.items() if value is not None}
        overrides = {name: value for name, value in (overrides or {}).items() if value is not None}
        applying = [name for name, on in zip(cls.VARIANTS, (do_sample, batched)) if on]
        for source in (values, overrides):
            for name in cls.VARIANTS:
                cls.check_variant(name, source.get(name) or {})
        for name in applying:
            values.update(values.get(name) or {})
        values.update(overrides)
        explicit = set(overrides)
        for name in applying:
            values.update(overrides.get(name) or {})
            explicit |= set(overrides.get(name) or {})
        if "draft_shape" not in explicit and explicit & set(cls.SHAPE_SETTINGS):
            values["draft_shape"] = "fixed"  # the caller's shape wins over the machine's choice
        return cls(**values)

    def tree_shape(self) -> "TreeShape":
        """The tree a round drafts: `draft_tree_size` > 0 a tree, else the chain of `num_assistant_tokens` (top-k 1)."""
        threshold, k = float(self.assistant_confidence_threshold), self.num_assistant_tokens
        if self.draft_tree_size > 0:
            return TreeShape(self.draft_tree_size, self.draft_tree_depth, self.draft_tree_top_k, threshold)
        return TreeShape(size=k, depth=k, top_k=1, threshold=threshold)

    def lookup_policy(self) -> "LookupPolicy | None":
        """When prompt lookup drafts; None without `draft_lookup`."""
        if not self.draft_lookup:
            return None
        names = ("min_ngram", "max_ngram", "num_tokens", "extend_ngram", "branch_ngram")  # the policy's fields
        return LookupPolicy(*(getattr(self, f"draft_lookup_{name}") for name in names))


def draft_generation_config() -> GenerationConfig:
    """The `generation_config` of a new drafter (and of a folder saved without one): the default draft length and no
    early stop, in place of transformers' defaults for its own assistants (k = 20, threshold 0.4)."""
    return GenerationConfig(
        num_assistant_tokens=DraftSettings.num_assistant_tokens, assistant_confidence_threshold=0.0
    )


# ----------------------------------------------------------------------------------------------------------------
# The sequence being decoded
# ----------------------------------------------------------------------------------------------------------------


class DecodingSequence:
    """The token ids of one row of a `generate()` call with their key mask and RoPE positions, grown together:
    `key_mask[j]` is False for left padding; `positions[j]` counts the real tokens before j (transformers'
    convention: the attention mask's cumulative sum minus one)."""

    def __init__(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None):
        self.ids, length = input_ids, input_ids.shape[1]  # (1, L)
        full = torch.ones(length, dtype=torch.bool, device=input_ids.device)
        self.key_mask = full if attention_mask is None else attention_mask[0, :length].bool()
        self.positions = (self.key_mask.long().cumsum(-1) - 1).clamp(min=0)  # (L,)

    @property
    def length(self) -> int:
        return self.ids.shape[1]

    def append(self, tokens: torch.LongTensor) -> None:
        """Appends `tokens` (1, n)."""
        n = tokens.shape[1]
        self.ids = torch.cat([self.ids, tokens.to(self.ids.device)], dim=-1)
        self.key_mask = torch.cat([self.key_mask, self.key_mask.new_ones(n)])
        steps = torch.arange(1, n + 1, device=self.positions.device)
        self.positions = torch.cat([self.positions, self.positions[-1] + steps])

    def with_path(self, tokens: list[int]) -> torch.LongTensor:
        """The ids followed by `tokens` (what a tree node's descendants are conditioned on), (1, L + n)."""
        if not tokens:
            return self.ids
        return torch.cat([self.ids, torch.tensor([tokens], dtype=self.ids.dtype, device=self.ids.device)], dim=-1)


# ----------------------------------------------------------------------------------------------------------------
# Logits processors
# ----------------------------------------------------------------------------------------------------------------

# Processors that treat every row of a batch alike (from the row's own ids and scores): a tree level's frontier goes
# through them as one batch. Any other processor (built for the batch of 1: classifier-free guidance, watermarks,
# prefix constraints ...) sees one row at a time.
ROW_WISE_PROCESSORS = {
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


def is_row_wise(processor) -> bool:
    # a repetition penalty that skips each row's own prompt (left padding) holds one length per batch row
    per_row = isinstance(getattr(processor, "prompt_ignore_length", None), torch.Tensor)
    return type(processor).__name__ in ROW_WISE_PROCESSORS and not per_row


class LogitsProcessing:
    """The call's logits processors (a `LogitsProcessorList` or None), applied in fp32 to the target's rows and the
    drafter's alike, so that both distributions of the acceptance rule are the processed ones."""

    def __init__(self, processors):
        self.processors = processors if processors is not None and len(processors) else None
        self.row_wise = self.processors is not None and all(map(is_row_wise, self.processors))

    def __call__(self, ids: torch.LongTensor, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        return self.processors(ids, logits) if self.processors is not None else logits

    def per_node(self, seq: "DecodingSequence", tree: "DraftTree", nodes: list[int], logits: torch.Tensor):
        """`logits` (F, V) of tree `nodes` processed, each row with the ids of its own path."""
        if self.processors is None:
            return logits.float()
        paths = [seq.with_path(tree.path_tokens(node)) for node in nodes]  # all the same length (one level)
        if self.row_wise:
            return self(torch.cat(paths), logits)
        return torch.cat([self(ids, logits[f : f + 1]) for f, ids in enumerate(paths)])


# ----------------------------------------------------------------------------------------------------------------
# Prompt lookup
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LookupMatch:
    """What followed the latest n-gram of a sequence where that n-gram occurred before."""

    tokens: list[int]  # the continuation found
    ngram: int  # n: how many of the latest tokens matched


def lookup_continuation(tokens: torch.Tensor, max_ngram: int, num_tokens: int) -> LookupMatch | None:
    """The continuation of the longest latest n-gram (n ≤ max_ngram) of `tokens` (1-D) at its most recent earlier
    occurrence, up to `num_tokens` tokens; None without a match."""
    length = tokens.shape[0]
    for n in range(min(max_ngram, length - 1), 0, -1):
        windows = tokens[: length - 1].unfold(0, n, 1)  # (length - n, n): every n-gram that has a successor
        hits = (windows == tokens[length - n :]).all(dim=-1).nonzero()
        if hits.numel():
            start = int(hits[-1]) + n
            return LookupMatch(tokens[start : start + num_tokens].tolist(), n)
    return None


@dataclass(frozen=True)
class LookupPolicy:
    """When prompt lookup drafts (hybrid drafting); see `DraftSettings` for the meaning of each length."""

    min_ngram: int
    max_ngram: int
    num_tokens: int
    extend_ngram: int
    branch_ngram: int = 0

    def find(self, tokens: torch.Tensor, room: int) -> LookupMatch | None:
        """The continuation of `tokens`' latest n-gram, at most `room` tokens (None where there is no room)."""
        if room <= 0:
            return None
        return lookup_continuation(tokens, self.max_ngram, min(self.num_tokens, room))

    def drafts_alone(self, match: LookupMatch | None) -> bool:
        """A match long enough to be verified without the drafter's agreement (no drafter call that round)."""
        return match is not None and match.ngram >= self.min_ngram

    def branches(self, match: LookupMatch | None) -> bool:
        """A match long enough to be verified beside the drafter's draft even where the drafter disagrees."""
        return match is not None and bool(match.tokens) and 0 < self.branch_ngram <= match.ngram

    def extends(self, match: LookupMatch | None) -> bool:
        """A match long enough to extend the end of the drafter's likeliest path."""
        return match is not None and bool(match.tokens) and match.ngram >= self.extend_ngram


# ----------------------------------------------------------------------------------------------------------------
# The draft tree of one round
# ----------------------------------------------------------------------------------------------------------------


def draw(weights: torch.Tensor, n: int = 1) -> torch.LongTensor:
    """`n` i.i.d. draws per row of `weights` (..., V) ≥ 0 by inverse CDF (float64), exact as `torch.multinomial`, whose
    one draw costs an exponential per token (V 49,152 / 262,144: 1.06 / 5.6 ms, this 0.07 / 0.30; EPYC, 1 thread)."""
    cdf = weights.double().cumsum(-1)
    u = torch.rand((*cdf.shape[:-1], n), dtype=cdf.dtype, device=cdf.device) * cdf[..., -1:]
    return torch.minimum(torch.searchsorted(cdf, u, right=True), torch.searchsorted(cdf, cdf[..., -1:].contiguous()))


@dataclass
class Proposal:
    """One proposed child of a node, in the order the acceptance rule tests them."""

    token: int
    node: int  # the child's node id (it may have been pruned from the verified tree)
    q: torch.Tensor | None  # the distribution (V,) the token was drawn from; None: a deterministic draft


@dataclass
class DraftTree:
    """The draft of one round. Node ids index the lists; the root (the sequence's last token) is `ROOT`. `kept` are
    the nodes the target verifies, parents before children. `proposals[node]` are the node's proposed children in
    test order: deterministic (lookup) drafts first, then the drafter's draws as drawn — including draws pruned from
    `kept` and repeated draws, which the sampling rule must still see."""

    source: str = "drafter"  # "drafter", "lookup" or "drafter+lookup" (for the statistics)
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)  # cumulative log q of the drafter (0 for lookup nodes)
    proposals: dict[int, list[Proposal]] = field(default_factory=dict)
    states: dict[int, torch.Tensor] = field(default_factory=dict)  # node -> drafter state fed to its children (d,)
    slots: dict[int, int] = field(default_factory=dict)  # node -> its position in the drafter's cache
    kept: list[int] = field(default_factory=list)
    ranked: dict[int, list[int]] = field(default_factory=dict)  # node -> the drafter's likeliest children (tuning)
    grafted_from: int | None = None  # nodes from this id on were grafted by prompt lookup onto the drafter's tree

    def add(self, token: int, parent: int, score: float) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(1 if parent == ROOT else self.depths[parent] + 1)
        self.scores.append(score)
        return len(self.tokens) - 1

    def score(self, node: int) -> float:
        return 0.0 if node == ROOT else self.scores[node]

    def depth(self, node: int) -> int:
        return 0 if node == ROOT else self.depths[node]

    def path(self, node: int) -> list[int]:
        """The nodes from the root's child down to `node`."""
        nodes = []
        while node != ROOT:
            nodes.append(node)
            node = self.parents[node]
        return nodes[::-1]

    def path_tokens(self, node: int) -> list[int]:
        return [self.tokens[n] for n in self.path(node)]

    def rows(self) -> dict[int, int]:
        """node -> its row in the round's verification: 0 the root, i the i-th kept node."""
        return {ROOT: 0, **{node: i + 1 for i, node in enumerate(self.kept)}}

    def kept_children(self) -> dict[int, dict[int, int]]:
        """parent -> {token: child} over the kept nodes."""
        children: dict[int, dict[int, int]] = {}
        for node in self.kept:
            children.setdefault(self.parents[node], {})[self.tokens[node]] = node
        return children

    def is_chain(self) -> bool:
        """Every kept node is the child of the one before it: verifiable with a plain causal mask."""
        return all(self.parents[node] == (self.kept[i - 1] if i else ROOT) for i, node in enumerate(self.kept))

    def likeliest_leaf(self) -> int:
        """The end of the likeliest kept path (best-scored child at every step); ROOT for an empty tree."""
        children = self.kept_children()
        node = ROOT
        while children.get(node):
            node = max(children[node].values(), key=lambda n: self.scores[n])
        return node

    def graft(self, tokens: list[int], below: int = ROOT) -> None:
        """Adds a deterministic chain of `tokens` below `below`, sharing the kept nodes it runs along; each of its
        tokens becomes its parent's first proposal (q one-hot: lossless in speculative sampling as well)."""
        children = self.kept_children()
        node = below
        for token in tokens:
            child = children.get(node, {}).get(token)
            if child is None:
                child = self.add(token, node, self.score(node))
                self.kept.append(child)
            self.proposals.setdefault(node, []).insert(0, Proposal(token, child, None))
            node = child


# ----------------------------------------------------------------------------------------------------------------
# The drafter's state across rounds
# ----------------------------------------------------------------------------------------------------------------


class DrafterState:
    """The drafter's KV cache over the B rows of a `generate()` call and, per row, the target features of accepted
    positions not in it yet.

    The cache holds only positions computed from the target's features (`committed[b]` of row b's sequence): the
    positions a round drafts are dropped at the next commit, which appends every row's newly accepted positions as
    one block, each row's padded in front to the longest row's. `valid` (B, S) marks the slots holding a row's
    positions: padding is never attended to and each row's RoPE positions are its own, so padding changes no row's
    result. A round without a drafter call (lookup alone) leaves the features pending.
    """

    def __init__(self, drafter, layer_ids: list[int], batch: int = 1):
        self.drafter = drafter
        self.layer_ids = list(layer_ids)
        self.cache = SlimSpecDrafterCache()
        self.valid = torch.zeros((batch, 0), dtype=torch.bool)
        self.committed = [0] * batch
        self.pending: list[list[torch.Tensor]] = [[] for _ in range(batch)]  # per row: (1, n, 3·d_t) blocks
        self.commit_width = 0

    def add_target_features(self, row: int, hidden_states, rows: torch.LongTensor | None = None) -> None:
        """Stores for batch row `row` the fused features of the accepted `rows` (all when None) of `hidden_states`,
        the target's states of that batch row."""
        picked = [hidden_states[i] if rows is None else hidden_states[i][:, rows] for i in self.layer_ids]
        self.pending[row].append(torch.cat(picked, dim=-1))  # (1, n, 3·d_t)

    def keep_rows(self, rows: list[int]) -> None:
        """Keeps the batch rows `rows` (in that order): rows that finished leave the batch."""
        index = torch.tensor(rows, dtype=torch.long)
        self.committed = [self.committed[i] for i in rows]
        self.pending = [self.pending[i] for i in rows]
        self.valid = self.valid[index]
        if self.cache.keys is not None:
            index = index.to(self.cache.keys.device)
            self.cache.keys = self.cache.keys.index_select(0, index)
            self.cache.values = self.cache.values.index_select(0, index)

    def commit(self, seqs: list[DecodingSequence]) -> tuple[torch.Tensor, torch.Tensor]:
        """Runs every row's pending positions through the drafter in one forward; returns each row's logits (B, V)
        and state (B, d) at its last position."""
        drafter, device = self.drafter, self.drafter.device
        self.cache.crop(self.valid.shape[1])  # the last round's drafted positions go
        blocks = [torch.cat(pending, dim=1) if pending else None for pending in self.pending]
        counts = [0 if block is None else block.shape[1] for block in blocks]
        width = self.commit_width = max(max(counts), 1)  # positions per row of this forward (`draft_shape="auto"`)
        size = next(block.shape[-1] for block in blocks if block is not None)
        features = torch.zeros((len(blocks), width, size), dtype=drafter.dtype, device=device)
        ids = torch.zeros((len(blocks), width), dtype=torch.long)
        positions = torch.zeros((len(blocks), width), dtype=torch.long)
        new_valid = torch.zeros((len(blocks), width), dtype=torch.bool)
        for i, (seq, block, n) in enumerate(zip(seqs, blocks, counts)):
            start, pad = self.committed[i], width - n  # a row's new positions end the block: its last is the block's
            positions[i] = int(seq.positions[max(start - 1, 0)])
            if n:
                features[i, pad:] = block[0].to(device=device, dtype=drafter.dtype)
                ids[i, pad:] = seq.ids[0, start + 1 : start + 1 + n].cpu()  # x_{t+1} for each new t
                positions[i, pad:] = seq.positions[start : start + n].cpu()
                new_valid[i, pad:] = seq.key_mask[start : start + n].cpu()
            self.pending[i].clear()
            self.committed[i] += n
        self.valid = torch.cat([self.valid, new_valid], dim=1)
        out = drafter(
            input_ids=ids.to(device),
            target_features=features,
            position_ids=positions.to(device),
            attention_mask=None if bool(self.valid.all()) else self.valid.to(device).long(),
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1], out.hidden_states[:, -1]

    def forward_level(self, seqs, rows: list[int], trees: list[DraftTree], frontiers: list[list[int]], level: int):
        """One drafter forward over the frontiers of batch `rows` (every other row padding), each node fed its
        parent's state and seeing its row's committed positions and its ancestors; returns each frontier's logits
        (F, V)."""
        drafter, device = self.drafter, self.drafter.device
        batch, past, committed = self.valid.shape[0], self.cache.get_seq_length(), self.valid.shape[1]
        width = max(len(f) for f in frontiers)
        ids = torch.zeros((batch, width), dtype=torch.long)
        positions = torch.zeros((batch, width), dtype=torch.long)
        states = torch.zeros((batch, width, drafter.config.hidden_size), dtype=drafter.dtype, device=device)
        allowed = torch.zeros((batch, 1, width, past + width), dtype=torch.bool)
        allowed[:, 0, :, past + torch.arange(width)] = torch.eye(width, dtype=torch.bool)  # padding sees itself
        for i, seq, tree, frontier in zip(rows, seqs, trees, frontiers):
            allowed[i, 0, : len(frontier), :committed] = self.valid[i]
            ids[i, : len(frontier)] = torch.tensor([tree.tokens[n] for n in frontier])
            positions[i] = int(seq.positions[self.committed[i] - 1]) + level
            for f, node in enumerate(frontier):
                for ancestor in tree.path(tree.parents[node]):
                    allowed[i, 0, f, tree.slots[ancestor]] = True
                tree.slots[node] = past + f
                states[i, f] = tree.states[tree.parents[node]]
        out = drafter(
            input_ids=ids.to(device),
            hidden_states=states,
            position_ids=positions.to(device),
            attention_mask=None if width == 1 and bool(allowed.all()) else allowed.to(device),  # None: a chain
            cache=self.cache,
            use_cache=True,
        )
        for i, tree, frontier in zip(rows, trees, frontiers):
            for f, node in enumerate(frontier):
                tree.states[node] = out.hidden_states[i, f]
        return [out.logits[i, : len(frontier)] for i, frontier in zip(rows, frontiers)]


# ----------------------------------------------------------------------------------------------------------------
# The proposer: a dynamic tree (EAGLE-2), a chain being the tree of top-k 1
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeShape:
    """How far a round's tree grows: `size` nodes verified, `depth` levels, `top_k` children per expanded node and
    nodes expanded per level; nodes the drafter gives less than `threshold` are not expanded."""

    size: int
    depth: int
    top_k: int
    threshold: float = 0.0


class TreeDrafter:
    """Drafts each row's tree level by level, one drafter forward per level over every row's frontier.

    Every frontier node gets `top_k` children from the drafter's processed distribution q: its top-k when greedy,
    `top_k` i.i.d. draws when sampling (what keeps the multi-draft acceptance lossless). The `top_k` new nodes with
    the highest cumulative log q form the next frontier; the best `size` nodes are kept (a child never outranks its
    parent, so the kept set is a tree).
    """

    def __init__(
        self, state: DrafterState, shape: TreeShape, processing: LogitsProcessing, do_sample: bool, eos_ids: set[int]
    ):
        self.state, self.shape = state, shape
        self.processing, self.do_sample, self.eos_ids = processing, do_sample, eos_ids
        self.min_logq = float("-inf") if shape.threshold <= 0 else float(torch.tensor(shape.threshold).log())
        self.ranks = 0  # > 0: each greedy node keeps its `ranks` likeliest children in `tree.ranked`

    def draft(self, seqs, rows: list[int], root_logits, root_states, depths: list[int]) -> list[DraftTree]:
        """The trees of batch `rows` (`seqs` every row's sequence, `root_logits` (B, V) and `root_states` (B, d)
        every row's), each at most `depths[j]` deep."""
        trees = [DraftTree() for _ in rows]
        frontiers, logits = {}, {}
        for j, i in enumerate(rows):
            trees[j].states[ROOT] = root_states[i]
            if depths[j] > 0:
                frontiers[j], logits[j] = [ROOT], root_logits[i][None]  # (F, V)
        level = 1
        while frontiers:
            growing = {}
            for j, frontier in frontiers.items():
                seq, tree = seqs[rows[j]], trees[j]
                children = self.expand(tree, frontier, self.processing.per_node(seq, tree, frontier, logits[j]))
                if level < depths[j] and children:
                    growing[j] = sorted(children, key=lambda n: -tree.scores[n])[: self.shape.top_k]
            if growing:
                batch = list(growing)
                level_logits = self.state.forward_level(
                    [seqs[rows[j]] for j in batch], [rows[j] for j in batch], [trees[j] for j in batch],
                    [growing[j] for j in batch], level,
                )  # fmt: skip
                logits = dict(zip(batch, level_logits))
            frontiers, level = growing, level + 1
        for tree in trees:
            tree.kept = self.keep(tree)
        return trees

    def expand(self, tree: DraftTree, frontier: list[int], logits: torch.Tensor) -> list[int]:
        """Adds the children of every frontier node; returns those that may be expanded in turn."""
        logq = torch.log_softmax(logits.float(), dim=-1)  # (F, V)
        q = logq.exp() if self.do_sample else None
        if q is not None:
            tokens = draw(q, self.shape.top_k)  # (F, top_k), i.i.d.
        else:
            ranked = logits.topk(min(max(self.shape.top_k, self.ranks), logits.shape[-1]), dim=-1).indices
            tokens = ranked[:, : self.shape.top_k]  # (F, top_k)
            if self.ranks:  # the ranks of every call's per-depth acceptance (`record_depths`)
                tree.ranked.update(zip(frontier, ranked.tolist()))
        token_logq = logq.gather(-1, tokens).tolist()
        expandable = []
        for f, parent in enumerate(frontier):
            seen: dict[int, int] = {}
            for token, lq in zip(tokens[f].tolist(), token_logq[f]):
                if lq == float("-inf"):
                    continue  # a processor ruled the token out
                if token not in seen:
                    seen[token] = tree.add(token, parent, tree.score(parent) + lq)
                    if token not in self.eos_ids and lq >= self.min_logq:
                        expandable.append(seen[token])
                tree.proposals.setdefault(parent, []).append(Proposal(token, seen[token], None if q is None else q[f]))
        return expandable

    def keep(self, tree: DraftTree) -> list[int]:
        """The best `size` nodes by cumulative log q, parents before children (ties go to the shallower node)."""
        order = sorted(range(len(tree.tokens)), key=lambda n: (-tree.scores[n], tree.depths[n], n))
        return sorted(order[: self.shape.size], key=lambda n: (tree.depths[n], -tree.scores[n], n))


__all__ = [
    "DraftSettings",
    "draft_generation_config",
    "ROOT",
    "DecodingSequence",
    "LogitsProcessing",
    "LookupMatch",
    "lookup_continuation",
    "LookupPolicy",
    "Proposal",
    "DraftTree",
    "DrafterState",
    "TreeShape",
    "TreeDrafter",
]
