"""Speculative sampling through `target.generate(..., assistant_model=drafter, do_sample=True)` has the target's
distribution: χ² tests of the JOINT distribution of consecutive sampled tokens against the target's own, computed
exactly by enumerating every continuation of the prompt.

Where it matters: drafts accepted at depths 1 and 2 and the token after them (asserted from the drafter's
per-position statistics), a target that is clearly non-uniform and changes with its context, trees whose draws
repeat and get pruned, lookup drafts the target often rejects, every target family, batch 1 and a left-padded batch. Many rows of one batch are
independent samples, which keeps the file within a minute. `tests/test_acceptance_exact.py` proves the same rule
exactly on tables; these tests prove the decoder wires it up through real models.
"""

import itertools
import math
import warnings

import pytest
import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from slimspec_hf.drafting_slimspec import draw

from .testing_utils import FAMILIES, chi_square, make_family_target, make_tiny_drafter


V = 8
Z_999 = 3.0902  # the standard normal's 0.999 quantile


def chi2_999(dof: int) -> float:
    """The χ² distribution's 0.999 quantile (Wilson–Hilferty; within 1% for the degrees of freedom used here)."""
    return dof * (1 - 2 / (9 * dof) + Z_999 * math.sqrt(2 / (9 * dof))) ** 3


def make_pair(family: str = "llama", drafter_scale: float = 0.2, seed: int = 21):
    """A target over V tokens, clearly non-uniform and context-dependent, and a tiny drafter whose q is flattened
    (`drafter_scale` < 1: most drafts are accepted, deep ones too) or sharpened (> 1: its draws repeat)."""
    target = make_family_target(family, seed=seed, vocab_size=V)
    with torch.no_grad():
        target.lm_head.weight.mul_(2.0)
    drafter = make_tiny_drafter(target, head_type="full", seed=4)
    with torch.no_grad():
        drafter.lm_head.weight.mul_(drafter_scale)
    return target, drafter


def fix_drafter_q(drafter, logits: list[float]) -> None:
    """Sets the drafter's weights so that its q is softmax(`logits`) in every context: every MLP unit adds
    g²σ(g) ≥ 0 (up = gate) to state coordinate 0, which then dominates the normed state the head reads."""
    with torch.no_grad():
        mlp = drafter.layer.mlp
        mlp.up_proj.weight.copy_(mlp.gate_proj.weight)
        mlp.down_proj.weight.zero_()
        mlp.down_proj.weight[0] = 50.0
        drafter.norm.weight.fill_(1.0)
        drafter.lm_head.weight.zero_()
        drafter.lm_head.weight[:, 0] = torch.tensor(logits) / drafter.config.hidden_size**0.5


# `do_sample=True` with a temperature, top-k and top-p together (the shipped sampled default's use is T 0.7)
WARPED = dict(temperature=0.7, top_k=3, top_p=0.8)


def warp(logits: torch.Tensor) -> torch.Tensor:
    """`logits` (n, V) through the warpers `generate(**WARPED)` builds, in its order (fp64)."""
    temperature, top_k, top_p = WARPED["temperature"], WARPED["top_k"], WARPED["top_p"]
    warpers = [TemperatureLogitsWarper(temperature), TopKLogitsWarper(top_k), TopPLogitsWarper(top_p)]
    return LogitsProcessorList(warpers)(None, logits)


def exact_joint(target, prompt: list[int], steps: int, warped: bool = False) -> torch.Tensor:
    """The target's exact distribution of its next `steps` tokens, (V,) * steps, by enumerating every prefix (each
    token drawn from the warped p with `warped`)."""
    seqs, weights = torch.tensor([prompt]), torch.ones(1, dtype=torch.float64)
    for _ in range(steps):
        with torch.no_grad():
            logits = target(seqs).logits[:, -1].double()
        probs = (warp(logits) if warped else logits).softmax(-1)  # (n, V)
        weights = (weights[:, None] * probs).flatten()
        seqs = torch.cat([seqs.repeat_interleave(V, 0), torch.arange(V).repeat(seqs.shape[0])[:, None]], 1)
    return weights.reshape((V,) * steps)


def window(joint: torch.Tensor, start: int, length: int = 2) -> torch.Tensor:
    """The joint distribution of tokens start .. start + length - 1 (0-based), flattened."""
    others = [d for d in range(joint.dim()) if not start <= d < start + length]
    return (joint.sum(others) if others else joint).flatten()


def sample(target, drafter, prompts: list[list[int]], copies: int, calls: int, steps: int, **settings):
    """`calls` batched `generate()` calls, each prompt `copies` times (left-padded); returns each prompt's sampled
    continuations (n, steps) and the drafter's statistics over all calls. `settings` go to `generate()` (`top_k=0`
    unless they set it)."""
    rows = [p for p in prompts for _ in range(copies)]
    length = max(len(p) for p in rows)
    ids = torch.zeros((len(rows), length), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, prompt in enumerate(rows):
        ids[i, length - len(prompt) :] = torch.tensor(prompt)
        mask[i, length - len(prompt) :] = 1
    drawn, accepted, drafted = [], [0] * 4, [0] * 4
    for _ in range(calls):
        out = target.generate(
            ids, attention_mask=mask, max_new_tokens=steps, do_sample=True, pad_token_id=0, assistant_model=drafter,
            **{"top_k": 0, **settings},
        )  # fmt: skip
        drawn.append(out[:, length : length + steps])
        stats = drafter.last_generation_stats
        for i, (a, d) in enumerate(zip(stats.accepted_per_position, stats.drafted_per_position)):
            accepted[i], drafted[i] = accepted[i] + a, drafted[i] + d
    drawn = torch.cat(drawn).reshape(calls, len(prompts), copies, steps).transpose(0, 1)  # (prompts, calls, copies, n)
    drawn = drawn.reshape(len(prompts), -1, steps)
    return drawn, [a / d if d else 0.0 for a, d in zip(accepted, drafted)]


def joint_counts(tokens: torch.Tensor, start: int, length: int = 2) -> torch.Tensor:
    """Counts of the sampled windows tokens[:, start : start + length], flattened like `window`."""
    index = torch.zeros(tokens.shape[0], dtype=torch.long)
    for j in range(start, start + length):
        index = index * V + tokens[:, j]
    return torch.bincount(index, minlength=V**length).double()


def worst_ratio(target, prompts, drawn, windows, steps, warped: bool = False) -> float:
    """The largest χ² statistic over prompts and windows ((first token, length), 0-based) of the sampled tokens,
    each over its 0.999 critical value: below 1 when every window has the target's joint distribution. With `warped`
    the target's is the warped one, and a sampled window it gives no probability fails at once (χ² pools it)."""
    worst = 0.0
    for prompt, tokens in zip(prompts, drawn):
        joint = exact_joint(target, prompt, steps, warped)
        for start, length in windows:
            counts, expected = joint_counts(tokens, start, length), window(joint, start, length)
            outside = int(counts[expected == 0].sum())
            assert outside == 0, f"{outside} sampled windows at {start} have probability 0 under the target's"
            stat, dof = chi_square(counts, expected)
            worst = max(worst, stat / chi2_999(dof))
    return worst


def test_the_target_is_clearly_non_uniform_and_depends_on_its_context():
    target, _ = make_pair()
    joint = exact_joint(target, [1, 5, 3, 7, 2], 2)
    first = joint.sum(1)
    assert first.max() > 0.4 and first.min() < 0.02, first  # far from uniform
    conditionals = joint / joint.sum(1, keepdim=True)  # p(x2 | x1), one row per x1
    spread = 0.5 * (conditionals[:, None] - conditionals[None]).abs().sum(-1)  # total variation between rows
    assert spread.max() > 0.5, spread  # the next token depends on the last


def test_chains_sample_the_joint_distribution_at_batch_1():
    """Chains of 3 (`num_assistant_tokens=3`; 4 new tokens leave room for 2 in the first round), one prompt at a
    time (the batch-1 decoder): drafts accepted at depths 1 and 2, residuals and bonus tokens; the joint of tokens
    2–3 and of tokens 3–4."""
    target, drafter = make_pair(drafter_scale=0.2)
    prompt = [1, 5, 3, 7, 2]
    torch.manual_seed(0)
    drawn, accepted = [], [0, 0]
    for _ in range(240):
        out = target.generate(
            torch.tensor([prompt]), max_new_tokens=4, do_sample=True, top_k=0, assistant_model=drafter,
            num_assistant_tokens=3,
        )  # fmt: skip
        drawn.append(out[0, len(prompt) :])
        for i, a in enumerate(drafter.last_generation_stats.accepted_per_position[:2]):
            accepted[i] += a
    assert min(accepted) > 30, accepted  # drafts accepted at depth 1 and 2
    assert worst_ratio(target, [prompt], [torch.stack(drawn)], windows=((1, 2), (2, 2)), steps=4) < 1.0


def test_the_token_after_an_accepted_draft_samples_the_joint_distribution():
    """Chains of 1 in a batch: the token after an accepted draft is the target's at the draft (not at its parent);
    the joint of tokens 1–2 and of tokens 2–3."""
    target, drafter = make_pair(drafter_scale=0.2)
    prompts = [[1, 5, 3, 7, 2]]
    torch.manual_seed(0)
    drawn, acceptance = sample(target, drafter, prompts, copies=64, calls=16, steps=3, num_assistant_tokens=1)
    assert acceptance[0] > 0.3, acceptance
    assert worst_ratio(target, prompts, drawn, windows=((0, 2), (1, 2)), steps=3) < 1.0


# q over the V tokens: likeliest a token the target rarely samples, then one it samples more often than q does; so
# the rule's second test of a repeated draw and the residual after it change what is emitted (see the mutants).
ADVERSE_Q = [-1.54, -1.56, 1.8, -2.32, -2.84, 1.09, -3.92, -1.5]


def test_trees_with_repeated_and_pruned_draws_sample_the_joint_distribution():
    """Three i.i.d. draws a node from a q that puts 0.6 on one token (repeats are common), one node kept: the other
    draws are pruned, and pruned draws get accepted; the joint of tokens 1–2 and of tokens 2–3."""
    target, drafter = make_pair()
    fix_drafter_q(drafter, ADVERSE_Q)
    prompts = [[1, 5, 3, 7, 2]]
    settings = dict(draft_tree_size=1, draft_tree_depth=1, draft_tree_top_k=3)
    torch.manual_seed(0)
    drawn, acceptance = sample(target, drafter, prompts, copies=64, calls=24, steps=3, **settings)
    assert acceptance[0] > 0.05, acceptance
    assert worst_ratio(target, prompts, drawn, windows=((0, 2), (1, 2)), steps=3) < 1.0


def test_lookup_drafts_the_target_often_rejects_sample_the_joint_distribution():
    """Prompt lookup drafting alone (a 1-gram match is enough; every token occurs in the prompt, so every round has
    one): what followed the last token earlier, which the target rejects about half the time; the joint of tokens
    1–2 and of tokens 2–3."""
    target, drafter = make_pair()
    prompts = [[4, 7, 3, 0, 1, 6, 2, 5, 3, 5]]
    settings = dict(draft_lookup=True, draft_lookup_min_ngram=1, num_assistant_tokens=2)
    torch.manual_seed(0)
    drawn, acceptance = sample(target, drafter, prompts, copies=64, calls=20, steps=3, **settings)
    rounds = drafter.last_generation_stats.rounds_by_source
    assert rounds["lookup"] == 64, rounds  # every row's first round (later ones may have no room to draft)
    assert 0.2 < acceptance[0] < 0.7, acceptance  # lookup drafts: often rejected, often accepted
    assert worst_ratio(target, prompts, drawn, windows=((0, 2), (1, 2)), steps=3) < 1.0


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_samples_the_joint_distribution_in_a_left_padded_batch(family):
    """Trees with lookup grafted on (one level in the first round: 3 new tokens), a prompt longer than the sliding
    windows and a short one left-padded into one batch, on every target family; the joint of tokens 1–2 and of
    tokens 2–3 of each prompt."""
    target, drafter = make_pair(family, drafter_scale=0.5)
    prompts = [[1, 5, 3, 7, 2, 0, 4, 1, 5], [3, 1]]
    settings = dict(draft_tree_size=4, draft_tree_depth=2, draft_tree_top_k=2, draft_lookup=True)
    settings.update(draft_lookup_min_ngram=3, draft_lookup_extend_ngram=1)
    torch.manual_seed(0)
    drawn, acceptance = sample(target, drafter, prompts, copies=32, calls=16, steps=3, **settings)
    assert acceptance[0] > 0.2, acceptance
    assert worst_ratio(target, prompts, drawn, windows=((0, 2), (1, 2)), steps=3) < 1.0


# -- temperature, top-k and top-p together, at every drafted depth ------------------------------------------------

WARPED_MODES = {
    "chain": dict(num_assistant_tokens=3),
    # a tree, and beside it a lookup match the drafter may disagree with as a branch of its own
    "tree+lookup branch": dict(
        draft_tree_size=4,
        draft_tree_depth=3,
        draft_tree_top_k=2,
        draft_lookup=True,
        draft_lookup_min_ngram=8,
        draft_lookup_branch_ngram=1,
    ),
}
LONG, SHORT = [1, 5, 3, 7, 2, 0, 4, 1, 5], [3, 1]


def warped_pair():
    """`make_pair`'s target made flatter (T 0.7 sharpens it back), so that each warper changes its p clearly after
    the prompts here: top-k (3) cuts the tail where it is flat, top-p (0.8) where one token dominates, and T reshapes
    the rest (each one's total variation at depths 1–2: 0.13 to 0.28)."""
    target, drafter = make_pair(drafter_scale=0.3)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.5)
    return target, drafter


def test_warped_trees_with_lookup_branches_sample_the_joint_distribution_at_batch_1():
    """`temperature=0.7, top_k=3, top_p=0.8`, one prompt at a time: trees with a lookup branch beside them, drafts
    accepted at depths 1 and 2, each of the target's rows warped; the joint of tokens 2–3 and 3–4 is the warped
    target's, and no window outside its support is ever sampled (a warper skipped below the root samples some).
    Chains at batch 1 are proven exactly (`test_acceptance_exact.py`)."""
    target, drafter = warped_pair()
    torch.manual_seed(0)
    drawn, acceptance = sample(
        target, drafter, [LONG], copies=1, calls=120, steps=4, **WARPED, **WARPED_MODES["tree+lookup branch"]
    )
    assert min(acceptance[:2]) > 0.2, acceptance  # drafts accepted at depth 1 and 2
    assert worst_ratio(target, [LONG], drawn, windows=((1, 2), (2, 2)), steps=4, warped=True) < 1.0


@pytest.mark.parametrize("mode", list(WARPED_MODES))
def test_warped_drafts_sample_the_joint_distribution_in_a_left_padded_batch(mode):
    """The same warpers for a long prompt and a short one left-padded into one batch, chains and trees with lookup
    branches; the joint of tokens 2–3 and 3–4 of each prompt is its warped target's."""
    target, drafter = warped_pair()
    torch.manual_seed(0)
    drawn, acceptance = sample(
        target, drafter, [LONG, SHORT], copies=32, calls=8, steps=4, **WARPED, **WARPED_MODES[mode]
    )
    assert min(acceptance[:2]) > 0.2, acceptance
    assert worst_ratio(target, [LONG, SHORT], drawn, windows=((1, 2), (2, 2)), steps=4, warped=True) < 1.0


def test_auto_shapes_changing_every_round_sample_the_joint_distribution(monkeypatch):
    """`draft_shape="auto"` changes the shape between rounds of one call (plain rounds included): forced here to a
    new shape every round, in a left-padded batch; the joint of tokens 1–2 and 2–3 of each prompt is its target's."""
    from slimspec_hf import decoding_slimspec
    from slimspec_hf.shapes_slimspec import DraftShape, ShapeTuner

    shapes = itertools.cycle([DraftShape(), DraftShape(2, 2, 1), DraftShape(3, 2, 2), DraftShape(1, 1, 1)])
    monkeypatch.setattr(ShapeTuner, "next_shape", lambda self, rows=None, slots=None: next(shapes))
    monkeypatch.setattr(decoding_slimspec, "plain_is_chosen", lambda *args: False)  # every call runs the loop
    target, drafter = make_pair(drafter_scale=0.2)
    prompts = [[1, 5, 3, 7, 2], [4, 2]]
    torch.manual_seed(0)
    drawn, acceptance = sample(target, drafter, prompts, copies=32, calls=12, steps=3, draft_shape="auto")
    assert acceptance[0] > 0.3, acceptance
    assert worst_ratio(target, prompts, drawn, windows=((0, 2), (1, 2)), steps=3) < 1.0


def test_draw_inverts_the_cumulative_weights_and_never_draws_a_token_of_zero_weight(monkeypatch):
    """`draw` at a uniform u gives the token whose share of the cumulative weight holds u·total: tokens of zero
    weight (first, between, last) are never drawn, not at u = 0 nor where u·total rounds up to the total."""
    weights = torch.tensor([[0.0, 1.0, 0.0, 2.0, 1.0, 0.0]])  # not normalised: cumulative 0 1 1 3 4 4
    for u, token in [(0.0, 1), (0.2499, 1), (0.25, 3), (0.7499, 3), (0.75, 4), (1.0, 4)]:
        monkeypatch.setattr(torch, "rand", lambda shape, dtype, device, u=u: torch.full(shape, u, dtype=dtype))
        assert draw(weights).tolist() == [[token]], u
        assert draw(weights[0], 2).tolist() == [token, token], u


def test_draw_samples_every_row_from_its_own_weights():
    torch.manual_seed(0)
    weights = torch.tensor([[1.0, 0.0, 3.0, 6.0, 2.0], [5.0, 5.0, 0.0, 0.0, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing for the user to see (searchsorted warns over non-contiguous values)
        drawn = draw(weights, 4000)
    assert drawn.shape == (2, 4000)
    for row, w in zip(drawn, weights):
        counts = torch.bincount(row, minlength=len(w)).double()
        assert counts[w == 0].sum() == 0
        stat, dof = chi_square(counts[w > 0], (w[w > 0] / w.sum()).double())
        assert stat < chi2_999(dof - 1), (stat, dof)
