# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Breaks of speculative SAMPLING: each makes the emitted tokens differ in distribution from the target's, while
greedy decoding stays exact. `tests/test_acceptance_exact.py` computes the difference exactly (any break is off by
far more than its 1e-12); `tests/test_sampling_lossless.py` sees it through `generate()` (χ²)."""

from tests.mutations.mutant import Edit, Mutant


DECODING = "decoding_slimspec.py"
DRAFTING = "drafting_slimspec.py"
EXACT = "tests/test_acceptance_exact.py"
LOSSLESS = "tests/test_sampling_lossless.py"
FAMILIES = f"{LOSSLESS}::test_every_family_samples_the_joint_distribution_in_a_left_padded_batch"

WALK = "            token, child = sample_child(processed[0], tree.proposals.get(node, []))\n"
PROCESSED = "            processed = processing(seq.with_path([tree.tokens[n] for n in path]), row.clone())\n"

# Every statistical (χ²) or support test of sampling: each must fail on its own when every draft is accepted.
STATISTICAL = (
    "tests/test_generation.py::test_speculative_sampling_matches_the_target_distribution",
    "tests/test_generation.py::test_hybrid_sampling_matches_the_target_distribution",
    "tests/test_decoding_slimspec.py::test_tree_sampling_matches_the_target_distribution",
    "tests/test_decoding_families.py::test_sampled_trees_with_lookup_match_the_target_distribution",
    "tests/test_decoding_families.py::test_greedy_identity_and_sampling_for_every_family",
    "tests/test_batched_decoding.py::test_batched_sampling_matches_the_target_distribution_at_batch_4",
    f"{LOSSLESS}::test_chains_sample_the_joint_distribution_at_batch_1",
    f"{LOSSLESS}::test_the_token_after_an_accepted_draft_samples_the_joint_distribution",
    f"{LOSSLESS}::test_trees_with_repeated_and_pruned_draws_sample_the_joint_distribution",
    f"{LOSSLESS}::test_lookup_drafts_the_target_often_rejects_sample_the_joint_distribution",
    FAMILIES,
)

DRAW_EXACT = f"{LOSSLESS}::test_draw_inverts_the_cumulative_weights_and_never_draws_a_token_of_zero_weight"
DRAW_CDF = "    return torch.minimum(torch.searchsorted(cdf, u, right=True), torch.searchsorted(cdf, cdf[..., -1:].contiguous()))\n"

MUTANTS = [
    Mutant(
        name="sampling: a draw at a boundary of the cumulative weights takes a token of zero weight",
        edits=(Edit(DRAFTING, "torch.searchsorted(cdf, u, right=True)", "torch.searchsorted(cdf, u)"),),
        tests=(DRAW_EXACT,),
    ),
    Mutant(
        name="sampling: a draw rounded up to the total takes the vocabulary's last token, whatever its weight",
        edits=(
            Edit(
                DRAFTING, DRAW_CDF, "    return torch.searchsorted(cdf, u, right=True).clamp(max=cdf.shape[-1] - 1)\n"
            ),
        ),
        tests=(DRAW_EXACT,),
    ),
    Mutant(
        name="sampling: draws over several rows warn the user about non-contiguous totals",
        edits=(
            Edit(
                DRAFTING,
                "torch.searchsorted(cdf, cdf[..., -1:].contiguous())",
                "torch.searchsorted(cdf, cdf[..., -1:])",
            ),
        ),
        tests=(f"{LOSSLESS}::test_draw_samples_every_row_from_its_own_weights",),
    ),
    Mutant(
        name="sampling: draws read weights as if they summed to one",
        edits=(
            Edit(
                DRAFTING, "dtype=cdf.dtype, device=cdf.device) * cdf[..., -1:]", "dtype=cdf.dtype, device=cdf.device)"
            ),
        ),
        tests=(DRAW_EXACT, f"{LOSSLESS}::test_draw_samples_every_row_from_its_own_weights"),
        each=True,
    ),
    Mutant(
        name="sampling (control, each statistical test): every draft is accepted",
        edits=(Edit(DECODING, "return float(torch.rand(())) * q_token < p_token", "return True"),),
        tests=STATISTICAL,
        each=True,
    ),
    Mutant(
        name="sampling: every draft is accepted",
        edits=(Edit(DECODING, "return float(torch.rand(())) * q_token < p_token", "return True"),),
        tests=(
            f"{EXACT}::test_the_acceptance_test_is_a_bernoulli_of_p_over_q",
            f"{EXACT}::test_a_chain_of_depth_3_is_lossless_jointly",
            f"{LOSSLESS}::test_chains_sample_the_joint_distribution_at_batch_1",
            FAMILIES,
        ),
    ),
    Mutant(
        name="sampling: a draft is accepted with probability p(x), whatever the drafter's q(x)",
        edits=(Edit(DECODING, "if accepts(float(p[x]), q_x):", "if accepts(float(p[x]), 1.0):"),),
        tests=(
            f"{EXACT}::test_a_chain_of_depth_3_is_lossless_jointly",
            f"{LOSSLESS}::test_chains_sample_the_joint_distribution_at_batch_1",
        ),
    ),
    Mutant(
        name="sampling: drafts below the first level are accepted without a test",
        edits=(
            Edit(
                DECODING,
                WALK,
                "            proposals = tree.proposals.get(node, [])\n"
                "            if path and proposals:  # below the first level: the first draft is taken as it is\n"
                "                token, child = proposals[0].token, proposals[0].node\n"
                "            else:\n"
                "                token, child = sample_child(processed[0], proposals)\n",
            ),
        ),
        tests=(
            f"{EXACT}::test_a_chain_of_depth_3_is_lossless_jointly",
            f"{LOSSLESS}::test_chains_sample_the_joint_distribution_at_batch_1",
        ),
    ),
    Mutant(
        name="sampling: the token after a fully accepted path is drawn from its parent's distribution",
        edits=(
            Edit(
                DECODING,
                "row = logits(node).float()  # (1, V)",
                "leaf = do_sample and node != ROOT and not tree.proposals.get(node)\n"
                "        row = logits(tree.parents[node] if leaf else node).float()  # (1, V)",
            ),
        ),
        tests=(
            f"{EXACT}::test_a_chain_of_depth_3_is_lossless_jointly",
            f"{LOSSLESS}::test_the_token_after_an_accepted_draft_samples_the_joint_distribution",
            FAMILIES,
        ),
    ),
    Mutant(
        name="sampling: a rejected lookup draft stays in the target's distribution",
        edits=(Edit(DECODING, "            residual[x] = 0.0\n", ""),),
        tests=(
            f"{EXACT}::test_a_lookup_chain_the_target_often_rejects_is_lossless",
            f"{LOSSLESS}::test_lookup_drafts_the_target_often_rejects_sample_the_joint_distribution",
        ),
    ),
    Mutant(
        name="sampling: a lookup draft is accepted whenever the target allows it",
        edits=(Edit(DECODING, "q_x = 1.0 if proposal.q is None", "q_x = 1e-9 if proposal.q is None"),),
        tests=(
            f"{EXACT}::test_a_lookup_chain_the_target_often_rejects_is_lossless",
            f"{LOSSLESS}::test_lookup_drafts_the_target_often_rejects_sample_the_joint_distribution",
        ),
    ),
    Mutant(
        name="sampling: a rejected draw's q is not taken out of the residual",
        edits=(Edit(DECODING, "residual = (p - proposal.q.to(p.device)).clamp(min=0)", "residual = p.clone()"),),
        tests=(
            f"{EXACT}::test_a_chain_of_depth_3_is_lossless_jointly",
            f"{LOSSLESS}::test_chains_sample_the_joint_distribution_at_batch_1",
        ),
    ),
    Mutant(
        name="sampling: the residual is not renormalized after a rejection",
        edits=(Edit(DECODING, "            p = residual / total\n", "            p = residual\n"),),
        tests=(
            f"{EXACT}::test_a_tree_with_pruned_children_and_repeated_draws_is_lossless",
            f"{LOSSLESS}::test_trees_with_repeated_and_pruned_draws_sample_the_joint_distribution",
        ),
    ),
    Mutant(
        name="sampling: a child drawn twice is tested once",
        edits=(
            Edit(
                DRAFTING,
                "                tree.proposals.setdefault(parent, []).append(",
                "                if all(p.token != token for p in tree.proposals.get(parent, [])):  # drawn before\n"
                "                    tree.proposals.setdefault(parent, []).append(",
            ),
        ),
        tests=(
            f"{EXACT}::test_a_wide_tree_with_three_draws_per_node_is_lossless",
            f"{EXACT}::test_a_tree_with_pruned_children_and_repeated_draws_is_lossless",
            f"{LOSSLESS}::test_trees_with_repeated_and_pruned_draws_sample_the_joint_distribution",
        ),
    ),
    Mutant(
        name="sampling: drawn children pruned from the verified tree are not tested",
        edits=(
            Edit(
                DECODING,
                WALK,
                "            kept_proposals = [p for p in tree.proposals.get(node, []) if p.node in kept]\n"
                "            token, child = sample_child(processed[0], kept_proposals)\n",
            ),
        ),
        tests=(
            f"{EXACT}::test_a_wide_tree_with_three_draws_per_node_is_lossless",
            f"{EXACT}::test_a_tree_with_pruned_children_and_repeated_draws_is_lossless",
            f"{LOSSLESS}::test_trees_with_repeated_and_pruned_draws_sample_the_joint_distribution",
        ),
    ),
    Mutant(
        name="sampling: an accepted draft pruned from the tree is replaced by a fresh target draw",
        edits=(
            Edit(
                DECODING,
                "            child = child if child in kept else None  # accepted but pruned: emitted, no target",
                "            if child is not None and child not in kept:\n"
                "                token, child = int(draw(torch.softmax(processed[0], -1))), None\n"
                "            child = child if child in kept else None  # accepted but pruned: emitted, no target",
            ),
        ),
        tests=(
            f"{EXACT}::test_a_wide_tree_with_three_draws_per_node_is_lossless",
            f"{LOSSLESS}::test_trees_with_repeated_and_pruned_draws_sample_the_joint_distribution",
        ),
    ),
    Mutant(
        name="sampling: the drafter draws a node's children without replacement",
        edits=(
            Edit(
                DRAFTING,
                "            tokens = draw(q, self.shape.top_k)  # (F, top_k), i.i.d.\n",
                "            tokens = draw(q)\n"
                "            for _ in range(self.shape.top_k - 1):  # each draw leaves out the tokens drawn before\n"
                "                tokens = torch.cat([tokens, draw(q.scatter(-1, tokens, 0.0))], dim=-1)\n",
            ),
        ),
        tests=(
            f"{EXACT}::test_a_wide_tree_with_three_draws_per_node_is_lossless",
            f"{LOSSLESS}::test_trees_with_repeated_and_pruned_draws_sample_the_joint_distribution",
        ),
    ),
    Mutant(
        name="sampling: every frontier node's draws are tested against the first node's q",
        edits=(Edit(DRAFTING, "None if q is None else q[f]))", "None if q is None else q[0]))"),),
        tests=(
            f"{EXACT}::test_a_tree_with_pruned_children_and_repeated_draws_is_lossless",
        ),  # the χ² tree test's drafter has one q everywhere: siblings' q are equal there
    ),
    Mutant(
        name="sampling: lookup extends a leaf that its own (pruned) draws made the likeliest",
        edits=(Edit(DECODING, "if self.do_sample and tree.proposals.get(leaf):", "if False:"),),
        tests=(f"{EXACT}::test_lookup_extending_a_leaf_whose_draws_were_pruned_is_lossless",),
    ),
    Mutant(
        name="sampling: the target's distribution below the root is computed without the temperature",
        edits=(
            Edit(
                DECODING,
                PROCESSED,
                "            ids, processed = seq.with_path([tree.tokens[n] for n in path]), row.clone()\n"
                "            for processor in processing.processors:  # every processor, but T only at the root\n"
                "                if not path or type(processor).__name__ != 'TemperatureLogitsWarper':\n"
                "                    processed = processor(ids, processed)\n",
            ),
        ),
        tests=(
            f"{EXACT}::test_temperature_top_k_and_top_p_apply_at_every_depth",
            f"{EXACT}::test_temperature_top_k_and_top_p_apply_at_every_depth_in_a_left_padded_batch",
            f"{LOSSLESS}::test_warped_trees_with_lookup_branches_sample_the_joint_distribution_at_batch_1",
            f"{LOSSLESS}::test_warped_drafts_sample_the_joint_distribution_in_a_left_padded_batch",
        ),
        each=True,
    ),
]
