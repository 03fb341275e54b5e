"""The decoding family matrix: every target family × chain / hybrid / tree, through `generate(assistant_model=...)`.

fp32 greedy output is identical to plain greedy decoding for each; sampling runs for each, and matches the target's
exact distribution (χ²) on the sliding-window families, where trees see only each layer's window."""

import pytest
import torch

from slimspec_hf import SlimSpecGenerationStats, decoding_slimspec

from .testing_utils import (
    CHI2_999,
    FAMILIES,
    SLIDING_FAMILIES,
    WINDOW,
    assert_deep_drafts_accepted_and_rejected,
    chi_square,
    exact_marginals,
    make_family_target,
    make_oracle_drafter,
    make_tiny_drafter,
)


MODES = {
    "chain": dict(num_assistant_tokens=3),
    "hybrid": dict(num_assistant_tokens=3, draft_lookup=True),
    "tree": dict(draft_tree_size=8, draft_tree_depth=3, draft_tree_top_k=3),
    "tree+lookup": dict(draft_tree_size=8, draft_tree_depth=3, draft_tree_top_k=3, draft_lookup=True),
}


def _prompt(vocab_size: int, length: int, seed: int = 1) -> torch.LongTensor:
    ids = torch.randint(0, vocab_size, (1, length), generator=torch.Generator().manual_seed(seed))
    return torch.cat([ids, ids[:, :4]], dim=-1)  # a repeat: prompt lookup has matches


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_identity_and_sampling_for_every_family(family):
    """Greedy with a drafter right at most positions (deep drafts accepted and rejected: each family's cache rolled
    back, sliding windows over tree nodes at their depth); sampling with a random drafter under top-k 4 emits only
    tokens the target's top 4 allows."""
    target = make_family_target(family)
    oracle, drafter = make_oracle_drafter(target), make_tiny_drafter(target)
    ids = _prompt(target.config.vocab_size, 2 * WINDOW)  # longer than the sliding window
    plain = target.generate(ids, max_new_tokens=24, do_sample=False)
    oracle.teach(plain[0].tolist())
    rounds = []
    for mode, settings in MODES.items():
        fast = target.generate(ids, max_new_tokens=24, do_sample=False, assistant_model=oracle, **settings)
        assert fast.tolist() == plain.tolist(), mode
        rounds.append(oracle.last_generation_stats)
        sampled = target.generate(ids, max_new_tokens=12, do_sample=True, top_k=4, assistant_model=drafter, **settings)
        assert sampled.shape == (1, ids.shape[1] + 12), mode
        assert drafter.last_generation_stats.rounds > 0
        with torch.no_grad():  # every sampled token is one the target's top-4 allows (a random drafter's are not)
            allowed = target(sampled).logits[0, ids.shape[1] - 1 : -1].topk(4).indices  # (12, 4)
        assert (allowed == sampled[0, ids.shape[1] :, None]).any(-1).all(), mode
    assert_deep_drafts_accepted_and_rejected(SlimSpecGenerationStats.combined(rounds), depth=3)


@pytest.mark.parametrize("family", SLIDING_FAMILIES)
def test_trees_apply_each_layers_window(family, monkeypatch):
    """The same tree with every layer treated as full attention is not plain greedy decoding: the windows count."""
    target = make_family_target(family)
    drafter = make_tiny_drafter(target)
    ids = _prompt(target.config.vocab_size, 2 * WINDOW)
    plain = target.generate(ids, max_new_tokens=24, do_sample=False)
    monkeypatch.setattr(decoding_slimspec, "layer_windows", lambda config: None)  # what the decoder reads
    fast = target.generate(ids, max_new_tokens=24, do_sample=False, assistant_model=drafter, **MODES["tree"])
    assert fast.tolist() != plain.tolist()


def _sample_counts(target, drafter, prompt, n, settings):
    torch.manual_seed(0)
    counts = torch.zeros(3, target.config.vocab_size)
    for _ in range(n):
        out = target.generate(prompt, max_new_tokens=3, do_sample=True, top_k=0, assistant_model=drafter, **settings)
        for j in range(3):
            counts[j, out[0, prompt.shape[1] + j]] += 1
    return counts


@pytest.mark.parametrize("family", SLIDING_FAMILIES)
def test_sampled_trees_with_lookup_match_the_target_distribution(family, monkeypatch):
    """Multi-draft trees (3 i.i.d. draws a node) with prompt lookup grafted on (deterministic drafts first), on a
    target whose sliding window is shorter than the prompt."""
    target = make_family_target(family, seed=21, vocab_size=12)
    with torch.no_grad():
        target.lm_head.weight.mul_(3)  # a peaked, non-uniform target distribution
    drafter = make_tiny_drafter(target, head_type="full", seed=4)
    prompt = torch.tensor([[1, 5, 3, 7, 2, 9, 4, 1, 5]])  # longer than the window; "1 5" repeats: lookup drafts
    settings = dict(draft_tree_size=4, draft_tree_depth=2, draft_tree_top_k=3, draft_lookup=True)
    settings.update(draft_lookup_min_ngram=3, draft_lookup_extend_ngram=1)  # short matches grafted, ends extended
    exact = exact_marginals(target, prompt, 3)
    counts = _sample_counts(target, drafter, prompt, 800, settings)
    for j in (1, 2):  # tokens 2 and 3 come through the tree's acceptance rule
        stat, dof = chi_square(counts[j], exact[j])
        assert stat < CHI2_999[dof - 1], (j, stat, dof)
    monkeypatch.setattr(decoding_slimspec, "accepts", lambda p, q: True)  # a broken rule: every first draft kept
    counts = _sample_counts(target, drafter, prompt, 400, settings)
    stats = [chi_square(counts[j], exact[j]) for j in (1, 2)]
    assert any(stat > CHI2_999[dof - 1] for stat, dof in stats), stats
