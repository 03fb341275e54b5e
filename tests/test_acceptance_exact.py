"""The sampling acceptance rule, proven exactly: every random draw of a round is enumerated, so the distribution of
what a round emits is computed, not estimated, and must equal the target's to 1e-12.

The round is the package's own: `TreeDrafter.draft` (`expand`, `keep`) over a drafter whose logits are a table of
the context, lookup grafted with `DraftTree.graft`, the target's rows through `TargetLogits`, and `accept` /
`sample_child`. `Branches` replays every outcome of the round's draws depth-first: each `draw`
(the drafter's i.i.d. children, the residual and bonus tokens) and each acceptance test, which the real `accepts`
decides at a uniform draw inside the branch's interval of [0, 1). A round's tokens, continued by the target to a
fixed length, must have the target's joint distribution: that is what makes a round lossless.

The rule computes in fp32; here its inputs are fp64 tensors that stay fp64 through `.float()` (`_Float64`), so the
comparison is exact up to fp64 rounding rather than fp32's (1e-7).
"""

import functools
import itertools
from types import SimpleNamespace

import pytest
import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from slimspec_hf import decoding_slimspec, drafting_slimspec
from slimspec_hf.decoding_slimspec import RoundPlan, SpeculativeDecoder, TargetLogits, accept, lookup_tree
from slimspec_hf.drafting_slimspec import (
    ROOT,
    DecodingSequence,
    LogitsProcessing,
    LookupMatch,
    LookupPolicy,
    TreeDrafter,
    TreeShape,
)


V = 5  # vocabulary
PROMPT = (4, 0, 3, 1, 2, 4)  # every token once with a successor: lookup always finds a 1-gram match
EXACT = 1e-12
DRAFTER_NOISE = 0.7


class _Float64(torch.Tensor):
    """An fp64 tensor that stays fp64 through `.float()` (and so do the tensors computed from it)."""

    def float(self, *args, **kwargs):
        return self


def _f64(values) -> torch.Tensor:
    return torch.as_tensor(values, dtype=torch.float64).as_subclass(_Float64)


# -- the tables: target p and drafter q as functions of the context ---------------------------------------------


@functools.cache
def _noise(context: tuple[int, ...], salt: int) -> torch.Tensor:
    """V standard normals from a generator seeded by the context (a table: the same context, the same values)."""
    seed = salt * 1_000_003 + sum((t + 1) * 7**i for i, t in enumerate(context))
    return torch.randn(V, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@functools.cache
def target_logits(context: tuple[int, ...]) -> tuple[float, ...]:
    """p: clearly non-uniform, different after every context, one token impossible (p = 0)."""
    logits = 1.2 * _noise(context, salt=1)
    logits[logits.argmin()] = float("-inf")
    return tuple(logits.tolist())


# What `generate(do_sample=True, temperature=0.7, top_k=3, top_p=0.9)` builds, in generate()'s order; each one changes
# the rounds' distribution when skipped below the root (`test_a_warper_skipped_below_the_root_is_seen`).
WARPERS = {
    "temperature": lambda: TemperatureLogitsWarper(0.7),
    "top_k": lambda: TopKLogitsWarper(3),
    "top_p": lambda: TopPLogitsWarper(0.9),
}


def warpers() -> LogitsProcessing:
    return LogitsProcessing(LogitsProcessorList([make() for make in WARPERS.values()]))


@functools.cache
def target_probs(context: tuple[int, ...], warped: bool = False) -> tuple[float, ...]:
    """p after `context`: softmax of `target_logits`, or of the logits through every warper of `WARPERS`."""
    logits = _f64([target_logits(context)])
    if warped:
        logits = warpers()(torch.tensor([context]), logits)  # in fp64: `_f64` stays fp64 through `.float()`
    return tuple(logits[0].softmax(-1).tolist())


@functools.cache
def drafter_logits(context: tuple[int, ...]) -> tuple[float, ...]:
    """q: the target's logits plus noise, on its 3 likeliest tokens (2 below depth 1: fewer branches to enumerate);
    it often agrees with the target, and often not."""
    finite = torch.tensor(target_logits(context), dtype=torch.float64).clamp(min=-3.0)
    logits = finite + DRAFTER_NOISE * _noise(context, salt=2)
    support = 3 if len(context) - len(PROMPT) <= 1 else 2
    logits[logits.argsort(descending=True)[support:]] = float("-inf")
    return tuple(logits.tolist())


def real(seq: DecodingSequence) -> list[int]:
    """A row's tokens without its left padding."""
    return seq.ids[0][seq.key_mask].tolist()


class TableState:
    """A drafter state whose level forwards return `drafter_logits` of each node's context."""

    def forward_level(self, seqs, rows, trees, frontiers, level):
        return [
            _f64([drafter_logits(tuple(real(seq) + tree.path_tokens(node))) for node in frontier])
            for seq, tree, frontier in zip(seqs, trees, frontiers)
        ]  # (F, V) per row


class TableDrafter(TreeDrafter):
    """The package's tree drafting (`draft`, `expand`, `keep`) over a drafter whose logits are `drafter_logits`, its
    q processed by `processing` (the call's logits processors) as the decoder processes it."""

    def __init__(self, shape: TreeShape, processing: LogitsProcessing | None = None):
        processing = processing or LogitsProcessing(None)
        super().__init__(TableState(), shape, processing, do_sample=True, eos_ids=set())

    def round_tree(self, seq: DecodingSequence):
        return self.round_trees([seq])[0]

    def round_trees(self, seqs: list[DecodingSequence]):
        """The rows' trees, drafted together as the decoder drafts a batch (one `draft` call)."""
        root_logits = _f64([drafter_logits(tuple(real(seq))) for seq in seqs])  # (B, V)
        return self.draft(
            seqs, list(range(len(seqs))), root_logits, [None] * len(seqs), [self.shape.depth] * len(seqs)
        )


def verify(seq: DecodingSequence, tree) -> TargetLogits:
    """The target's logits of the root and every kept node (what one verification forward returns)."""
    context = real(seq)
    rows = [target_logits(tuple(context + tree.path_tokens(n))) for n in [ROOT, *tree.kept]]
    return TargetLogits(tree, None, None, _f64([rows]))  # (1, 1 + kept, V)


def target_joint(context, length: int, warped: bool = False) -> dict[tuple[int, ...], float]:
    """The target's exact distribution of its next `length` tokens (each drawn from the warped p with `warped`)."""
    joint = {}
    for tokens in itertools.product(range(V), repeat=length):
        probability = 1.0
        for i, token in enumerate(tokens):
            probability *= target_probs(tuple(context) + tokens[:i], warped)[token]
            if probability == 0:
                break
        joint[tokens] = probability
    return joint


# -- every outcome of a round's draws --------------------------------------------------------------------------


class Branches:
    """Replays every sequence of outcomes of some draws, depth-first, with the probability of the current one.

    `choose(weights)` is one draw: it returns the outcome the current replay takes and multiplies `probability` by
    its weight; outcomes of weight 0 are never taken. `runs()` yields once per sequence of outcomes."""

    def __init__(self):
        self.script: list[int] = []  # the option taken at each draw of the current replay
        self.sizes: list[int] = []  # how many options each draw had
        self.position, self.probability = 0, 1.0

    def runs(self):
        while True:
            self.position, self.probability = 0, 1.0
            yield
            if self.position != len(self.script):
                raise AssertionError("a replay made fewer draws than the one it repeats: the round is not replayable")
            while self.script and self.script[-1] + 1 == self.sizes[-1]:
                self.script.pop()
                self.sizes.pop()
            if not self.script:
                return
            self.script[-1] += 1

    def choose(self, weights: list[float]) -> int:
        options = [i for i, w in enumerate(weights) if w > 0]
        if self.position == len(self.script):
            self.script.append(0)
            self.sizes.append(len(options))
        index = options[self.script[self.position]]
        self.position += 1
        self.probability *= weights[index]
        return index


class Draws:
    """The enumerations in progress, innermost last: a round enumerates its drafting draws, then the walk's draws
    for each tree drafted (the tree is drafted once per drafting outcome, not once per walk)."""

    def __init__(self):
        self.stack: list[Branches] = []

    def outcomes(self):
        """Yields once per outcome of the draws made until the next yield, the `Branches` whose `probability` is
        the outcome's once they are made."""
        branches = Branches()
        self.stack.append(branches)
        try:
            for _ in branches.runs():
                yield branches
        finally:
            self.stack.remove(branches)

    def choose(self, weights: list[float]) -> int:
        return self.stack[-1].choose(weights)


@pytest.fixture
def draws(monkeypatch) -> Draws:
    return enumerated_draws(monkeypatch)


def enumerated_draws(monkeypatch) -> Draws:
    """The draws (`draw`) and the acceptance tests become enumerated draws."""
    draws = Draws()
    real_accepts = decoding_slimspec.accepts
    uniform = [0.5]

    def draw(weights, n=1):
        rows = weights.tolist() if weights.dim() == 2 else [weights.tolist()]
        drawn = [[draws.choose([w / sum(row) for w in row]) for _ in range(n)] for row in rows]
        out = torch.tensor(drawn, dtype=torch.long)
        return out if weights.dim() == 2 else out[0]

    def accepts(p_token: float, q_token: float) -> bool:
        """Draws u ~ U[0, 1) as one of two intervals, [0, a) or [a, 1) with a = min(1, p/q), and lets the real
        `accepts` decide at the interval's middle (a right rule accepts in the first only)."""
        a = min(1.0, p_token / q_token)
        uniform[0] = a / 2 if draws.choose([a, 1.0 - a]) == 0 else (a + 1) / 2
        return real_accepts(p_token, q_token)

    monkeypatch.setattr(drafting_slimspec, "draw", draw)
    monkeypatch.setattr(decoding_slimspec, "draw", draw)
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: torch.tensor(uniform[0], dtype=torch.float64))
    monkeypatch.setattr(decoding_slimspec, "accepts", accepts)
    return draws


# -- a round and its exact distribution ------------------------------------------------------------------------


def round_outcomes(draws: Draws, context: list[int], build_tree, processing: LogitsProcessing | None = None):
    """Every outcome of one round from `context` (the tree `build_tree(seq)`, verified and walked with the call's
    `processing`): yields its probability, the tokens it emits and what happened (for the tests to check their cases
    were exercised)."""
    seq = DecodingSequence(torch.tensor([context]), None)
    for drafting in draws.outcomes():
        tree = build_tree(seq)
        logits = verify(seq, tree)
        drafted = drafting.probability
        for walk in draws.outcomes():
            acceptance = accept(tree, logits, seq, processing or LogitsProcessing(None), do_sample=True)
            tokens = [tree.tokens[n] for n in acceptance.path] + [acceptance.token]
            yield drafted * walk.probability, tokens, round_events(tree, acceptance, tokens)


def round_events(tree, acceptance, tokens) -> dict[str, bool]:
    kept = set(tree.kept)
    last = acceptance.path[-1] if acceptance.path else ROOT
    drawn = {node: [p.token for p in proposals if p.q is not None] for node, proposals in tree.proposals.items()}
    return {
        "depth 2+": len(acceptance.path) >= 2,
        "bonus": not tree.proposals.get(last),  # the walk ended at a node without proposals: a plain target draw
        "repeated draw": any(len(tokens) > len(set(tokens)) for tokens in drawn.values()),
        "pruned draw": any(p.node not in kept for proposals in tree.proposals.values() for p in proposals),
        "pruned accepted": any(  # (or a residual draw of the same token)
            p.token == acceptance.token and p.node not in kept for p in tree.proposals.get(last, [])
        ),
        "lookup rejected": any(
            p.q is None and p.token != tokens[i]
            for i, node in enumerate([ROOT, *acceptance.path])
            for p in tree.proposals.get(node, [])[:1]
        ),
    }


def exact_distribution(draws: Draws, context: list[int], length: int, build_tree, rounds: int = 1, processing=None):
    """The exact distribution of the next `length` tokens when up to `rounds` rounds (each from the tokens so far)
    emit them and the target continues, and the probability of each event of the first round. With `processing`
    (`warpers()`) the rounds walk with it and the target continues from its warped p."""
    joint: dict[tuple[int, ...], float] = {}
    events: dict[str, float] = {}
    warped = processing is not None

    def emit(context, emitted, probability, rounds_left):
        if len(emitted) >= length or rounds_left == 0:
            prefix = tuple(emitted[:length])
            for rest, p_rest in target_joint(context, length - len(prefix), warped).items():  # the target continues
                joint[prefix + rest] = joint.get(prefix + rest, 0.0) + probability * p_rest
            return
        for p_round, tokens, happened in round_outcomes(draws, context, build_tree, processing):
            if not emitted:
                for name, value in happened.items():
                    events[name] = events.get(name, 0.0) + probability * p_round * value
            emit(context + tokens, emitted + tokens, probability * p_round, rounds_left - 1)

    emit(list(context), [], 1.0, rounds)
    return joint, events


def assert_lossless(joint: dict, context: list[int], length: int, warped: bool = False) -> None:
    expected = target_joint(context, length, warped)
    assert abs(sum(joint.values()) - 1.0) < EXACT
    worst = max(abs(joint.get(tokens, 0.0) - p) for tokens, p in expected.items())
    assert worst < EXACT, (
        f"the emitted distribution is off by {worst:.3g} (total variation {_tv(joint, expected):.3g})"
    )


def _tv(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


# -- the tests -------------------------------------------------------------------------------------------------


def test_the_acceptance_test_is_a_bernoulli_of_p_over_q(monkeypatch):
    """accepts(p, q) is u·q < p for one u ~ U[0, 1): True exactly below min(1, p/q)."""
    draws = []
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: torch.tensor(draws.pop(), dtype=torch.float64))

    def decide(u, p, q):
        draws.append(u)
        return decoding_slimspec.accepts(p, q)

    tiny = 2.0**-40
    assert decide(0.5 - tiny, 0.25, 0.5) and not decide(0.5, 0.25, 0.5) and not decide(0.5 + tiny, 0.25, 0.5)
    assert decide(0.375 - tiny, 0.375, 1.0) and not decide(0.375, 0.375, 1.0)  # a one-hot draft: p(x)
    assert decide(0.1 - tiny, 0.05, 0.5) and not decide(0.1 + tiny, 0.05, 0.5)
    assert decide(1.0 - tiny, 0.6, 0.3)  # p ≥ q: always
    assert not decide(0.0, 0.0, 0.3)  # p = 0: never
    assert not draws


def test_a_chain_of_depth_3_is_lossless_jointly(draws):
    """Drafts at depths 1–3 accepted or rejected, the residual at each, the bonus after a full path: the round's
    tokens, continued by the target, are jointly the target's next 4 tokens."""
    drafter = TableDrafter(TreeShape(size=3, depth=3, top_k=1))
    joint, events = exact_distribution(draws, list(PROMPT), 4, drafter.round_tree)
    assert_lossless(joint, list(PROMPT), 4)
    assert events["depth 2+"] > 0.1 and events["bonus"] > 0.05, events  # deep paths and bonus tokens happen


def test_a_tree_with_pruned_children_and_repeated_draws_is_lossless(draws):
    """Two i.i.d. draws per node, two levels, two nodes kept of up to six: repeated draws (one node, two proposals)
    and drawn children pruned from the verified tree, some of them accepted."""
    drafter = TableDrafter(TreeShape(size=2, depth=2, top_k=2))
    joint, events = exact_distribution(draws, list(PROMPT), 3, drafter.round_tree)
    assert_lossless(joint, list(PROMPT), 3)
    assert events["repeated draw"] > 0.2 and events["pruned accepted"] > 0.05, events
    assert events["depth 2+"] > 0.1 and events["bonus"] > 0.05, events


def test_a_wide_tree_with_three_draws_per_node_is_lossless(draws):
    """Three draws at the root (repeats of a repeat), one level, one node kept: most draws are pruned."""
    drafter = TableDrafter(TreeShape(size=1, depth=1, top_k=3))
    joint, events = exact_distribution(draws, list(PROMPT), 2, drafter.round_tree)
    assert_lossless(joint, list(PROMPT), 2)
    assert events["repeated draw"] > 0.3 and events["pruned accepted"] > 0.05, events


def _likely_rejected_token(context) -> int:
    """A token the target gives a modest probability: a deterministic draft of it is rejected more often than not."""
    probs = target_probs(tuple(context))
    token = min(range(V), key=lambda t: abs(probs[t] - 0.3))
    assert 0.1 < probs[token] < 0.5, probs
    return token


def test_a_lookup_chain_the_target_often_rejects_is_lossless(draws):
    """Prompt lookup drafting alone (one-hot q): accepted with probability p(x), else x leaves the residual."""
    first = _likely_rejected_token(PROMPT)
    second = _likely_rejected_token((*PROMPT, first))
    joint, events = exact_distribution(draws, list(PROMPT), 3, lambda seq: lookup_tree([first, second]))
    assert_lossless(joint, list(PROMPT), 3)
    assert events["lookup rejected"] > 0.5 and events["bonus"] > 0.01, events


def _decoder_graft(seq, tree, match=None, branch_ngram=0):
    """The decoder's own `graft_lookup` on `tree`: `match` grafted at the root if the drafter's likeliest first
    token agrees with it (or, with `branch_ngram`, as a branch of its own), else the likeliest path extended by what
    followed its last token earlier."""
    lookup = LookupPolicy(min_ngram=3, max_ngram=1, num_tokens=2, extend_ngram=1, branch_ngram=branch_ngram)
    decoder = SimpleNamespace(
        lookup=lookup,
        round_lookup=lookup,  # the round's: lookup drafts in it (not a probe of `draft_shape="auto"`)
        eos_ids=set(),
        tree_masks=True,
        do_sample=True,
    )
    root_logits = _f64(drafter_logits(tuple(seq.ids[0].tolist())))
    plan = RoundPlan(budget=5, depth=tree.depth(tree.likeliest_leaf()), match=match, tree=None)
    return SpeculativeDecoder.graft_lookup(decoder, seq, tree, root_logits, plan)


def test_lookup_grafted_at_the_root_of_a_drafted_tree_is_lossless(draws):
    """A lookup match the drafter agrees with, grafted at the root: its tokens are tested before the drafter's
    draws (the first is often one of them) and the second sits below a drafted node, before its draws."""
    drafter = TableDrafter(TreeShape(size=2, depth=2, top_k=2))
    agreed = int(torch.tensor(drafter_logits(PROMPT)).argmax())
    match = LookupMatch([agreed, _likely_rejected_token((*PROMPT, agreed))], ngram=1)
    joint, events = exact_distribution(
        draws, list(PROMPT), 3, lambda seq: _decoder_graft(seq, drafter.round_tree(seq), match)
    )
    assert_lossless(joint, list(PROMPT), 3)
    assert events["lookup rejected"] > 0.2 and events["depth 2+"] > 0.1, events


def test_lookup_the_drafter_disagrees_with_verified_as_its_own_branch_is_lossless(draws):
    """`draft_lookup_branch_ngram`: a match whose first token is not the drafter's likeliest, grafted at the root
    beside the drafter's draws as a branch of its own (tested before them, one-hot q)."""
    drafter = TableDrafter(TreeShape(size=2, depth=2, top_k=2))
    logits = torch.tensor(drafter_logits(PROMPT))
    first = _likely_rejected_token(PROMPT)
    assert first != int(logits.argmax())
    match = LookupMatch([first, _likely_rejected_token((*PROMPT, first))], ngram=1)
    branched = []

    def build(seq):
        tree = _decoder_graft(seq, drafter.round_tree(seq), match, branch_ngram=1)
        branched.append(tree.proposals[-1][0].q is None and len(tree.proposals[-1]) > 1)
        return tree

    joint, events = exact_distribution(draws, list(PROMPT), 3, build)
    assert all(branched)  # the lookup token is tested first, the drafter's draws after it
    assert_lossless(joint, list(PROMPT), 3)
    assert events["lookup rejected"] > 0.2 and events["depth 2+"] > 0.1, events


def test_lookup_extending_a_drafted_chain_is_lossless(draws):
    """The likeliest path extended by lookup: the chain's last node had no draws, so the lookup token is its only
    proposal."""
    drafter = TableDrafter(TreeShape(size=2, depth=2, top_k=1))
    joint, events = exact_distribution(
        draws, list(PROMPT), 4, lambda seq: _decoder_graft(seq, drafter.round_tree(seq))
    )
    assert_lossless(joint, list(PROMPT), 4)
    assert events["lookup rejected"] > 0.05 and events["depth 2+"] > 0.1, events


def test_lookup_extending_a_leaf_whose_draws_were_pruned_is_lossless(draws):
    """A tree's likeliest leaf may be a node whose drawn children were all pruned. Whether it is the leaf depends on
    those very draws, so a lookup token placed before them would make them no longer i.i.d. from q (a bias of total
    variation 0.009 here): when sampling, lookup extends only a leaf without draws of its own."""
    drafter = TableDrafter(TreeShape(size=2, depth=2, top_k=2))
    leaf_had_draws, grafted_on_draws = [], []

    def build(seq):
        tree = drafter.round_tree(seq)
        leaf_had_draws.append(bool(tree.proposals.get(tree.likeliest_leaf())))
        tree = _decoder_graft(seq, tree)
        grafted_on_draws.append(any(p.q is None for n, ps in tree.proposals.items() if len(ps) > 1 for p in ps))
        return tree

    joint, events = exact_distribution(draws, list(PROMPT), 4, build)
    assert any(leaf_had_draws) and not any(grafted_on_draws)
    assert_lossless(joint, list(PROMPT), 4)


def test_consecutive_rounds_are_jointly_the_target(draws):
    """Rounds one after another, each drafting from the tokens the last one emitted: the first 3 tokens after the
    prompt, over every way the rounds split them, are jointly the target's."""
    drafter = TableDrafter(TreeShape(size=2, depth=2, top_k=1))
    joint, events = exact_distribution(draws, list(PROMPT), 3, drafter.round_tree, rounds=3)
    assert_lossless(joint, list(PROMPT), 3)
    assert 0.1 < events["depth 2+"] < 0.9, events  # the first round emits all 3 tokens, or later rounds finish


def test_the_enumeration_sees_a_rule_that_is_wrong(draws, monkeypatch):
    """The harness has teeth: a rule that drops the drafter's repeated draws is off by far more than 1e-12."""
    expand = TreeDrafter.expand

    def without_repeats(self, tree, frontier, logits):
        children = expand(self, tree, frontier, logits)
        for node, proposals in tree.proposals.items():
            seen = set()
            tree.proposals[node] = [p for p in proposals if not (p.token in seen or seen.add(p.token))]
        return children

    monkeypatch.setattr(TableDrafter, "expand", without_repeats)
    drafter = TableDrafter(TreeShape(size=1, depth=1, top_k=3))
    joint, _ = exact_distribution(draws, list(PROMPT), 2, drafter.round_tree)
    assert _tv(joint, target_joint(list(PROMPT), 2)) > 1e-3


# -- the call's logits processors (temperature, top-k, top-p), applied at every depth ---------------------------


def _warped_round(shape: str, processing: LogitsProcessing):
    """(build_tree, length) of a round whose q is warped as the decoder warps it: a chain of 3, a tree of two levels
    (repeated and pruned draws), or that tree with a lookup match the drafter disagrees with as a branch of its own."""
    if shape == "chain":
        return TableDrafter(TreeShape(size=3, depth=3, top_k=1), processing).round_tree, 4
    drafter = TableDrafter(TreeShape(size=3, depth=2, top_k=2), processing)
    if shape == "tree":
        return drafter.round_tree, 3
    probs = target_probs(PROMPT, warped=True)
    first = sorted(range(V), key=lambda t: -probs[t])[1]  # the warped target's runner-up: accepted, or rejected
    second = max(range(V), key=lambda t: target_probs((*PROMPT, first), warped=True)[t])
    assert first != int(torch.tensor(drafter_logits(PROMPT)).argmax())  # a branch beside the drafter's draws
    match = LookupMatch([first, second], ngram=1)
    return lambda seq: _decoder_graft(seq, drafter.round_tree(seq), match, branch_ngram=1), 3


@pytest.mark.parametrize("shape", ["chain", "tree", "lookup branch"])
def test_temperature_top_k_and_top_p_apply_at_every_depth(draws, shape):
    """`do_sample=True, temperature=0.7, top_k=3, top_p=0.9`: the drafter's q and the target's p are warped at the root
    and at every drafted depth, so the round's tokens are jointly the warped target's. Each warper changes the
    target's p after most contexts here: skipping any one below the root is off by far more than 1e-12
    (`test_a_warper_skipped_below_the_root_is_seen`)."""
    build, length = _warped_round(shape, warpers())
    joint, events = exact_distribution(draws, list(PROMPT), length, build, processing=warpers())
    assert_lossless(joint, list(PROMPT), length, warped=True)
    assert events["depth 2+"] > 0.1 and events["bonus"] > 0.05, events
    if shape == "lookup branch":
        assert events["lookup rejected"] > 0.2, events


def test_temperature_top_k_and_top_p_apply_at_every_depth_in_a_left_padded_batch(draws):
    """Two rows drafted in one `draft` call, the shorter left-padded (the processors read its padding), each walked
    with the warpers: each row's chain of 3 emits the warped target's next 4 tokens of its own prompt."""
    prompts = [(2, *PROMPT), PROMPT]  # the second row: one pad in front
    ids, mask = torch.zeros((2, 7), dtype=torch.long), torch.zeros((2, 7), dtype=torch.long)
    for b, prompt in enumerate(prompts):
        ids[b, 7 - len(prompt) :], mask[b, 7 - len(prompt) :] = torch.tensor(prompt), 1
    seqs = [DecodingSequence(ids[b : b + 1], mask[b : b + 1]) for b in range(2)]
    drafter = TableDrafter(TreeShape(size=3, depth=3, top_k=1), warpers())
    joints: list[dict] = [{}, {}]
    deep = [0.0, 0.0]
    for drafting in draws.outcomes():
        trees = drafter.round_trees(seqs)
        for b, (seq, tree) in enumerate(zip(seqs, trees)):
            logits = verify(seq, tree)
            for walk in draws.outcomes():
                acceptance = accept(tree, logits, seq, warpers(), do_sample=True)
                tokens = tuple([tree.tokens[n] for n in acceptance.path] + [acceptance.token])
                probability = drafting.probability * walk.probability
                deep[b] += probability * (len(acceptance.path) >= 2)
                for rest, p_rest in target_joint(real(seq) + list(tokens), 4 - len(tokens), warped=True).items():
                    joints[b][tokens + rest] = joints[b].get(tokens + rest, 0.0) + probability * p_rest
    for b, prompt in enumerate(prompts):
        assert_lossless(joints[b], list(prompt), 4, warped=True)
    assert min(deep) > 0.1, deep


@pytest.mark.parametrize("skipped", list(WARPERS))
def test_a_warper_skipped_below_the_root_is_seen(draws, monkeypatch, skipped):
    """The tests above have teeth: the target's p (and the drafter's q) below the root computed without one warper
    makes every shape's round off by far more than 1e-12."""
    call = LogitsProcessing.__call__

    def without_below_the_root(self, ids, logits):
        if self.processors is not None and ids.shape[1] > len(PROMPT):  # a drafted depth ≥ 1
            kept = [p for p in self.processors if not isinstance(p, type(WARPERS[skipped]()))]
            return call(LogitsProcessing(LogitsProcessorList(kept)), ids, logits)
        return call(self, ids, logits)

    monkeypatch.setattr(LogitsProcessing, "__call__", without_below_the_root)
    for shape in ("chain", "tree", "lookup branch"):
        build, length = _warped_round(shape, warpers())
        joint, _ = exact_distribution(draws, list(PROMPT), length, build, processing=warpers())
        assert _tv(joint, target_joint(list(PROMPT), length, warped=True)) > 1e-3, shape
