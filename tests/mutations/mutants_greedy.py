# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Greedy decoding's breaks: the target's cache, tree masks and positions, rollback (one sequence and a batch), the
drafter's cache, EOS and the length limit. Each must make fp32 greedy output differ from plain greedy decoding, or
(the drafter's side, which changes only the acceptance) the drafter's state differ from a fresh one's."""

from tests.mutations.mutant import Edit, Mutant


GEN = "tests/test_generation.py"
DEC = "tests/test_decoding_slimspec.py"
BAT = "tests/test_batched_decoding.py"
FAM = "tests/test_decoding_families.py"

CHAIN_LIVE = f"{GEN}::test_greedy_identity_on_a_live_target_with_eos_and_length_boundary"
TREE_LIVE = f"{DEC}::test_greedy_identity_on_a_live_target_with_eos_and_length_boundary"
BATCH_LIVE = f"{BAT}::test_batched_greedy_with_eos_inside_a_round_and_the_length_boundary"

MUTANTS = [
    Mutant(
        name="greedy: the target's cache keeps a chain round's rejected drafts",
        edits=(
            Edit(
                "verification_slimspec.py",
                "            cache.crop(-surplus)  # transformers' crop takes the number of positions to drop, negated\n"
                "        return\n",
                "            pass\n        return\n",
            ),
        ),
        tests=(f"{CHAIN_LIVE}[3]",),
    ),
    Mutant(
        name="greedy: tokens after an EOS accepted inside a round are kept",
        edits=(
            Edit(
                "decoding_slimspec.py",
                "            if token in self.eos_ids:  # ... and beyond an EOS",
                "            if False:",
            ),
        ),
        tests=(f"{CHAIN_LIVE}[3]",),
    ),
    Mutant(
        name="greedy: a round drafts past the length limit",
        edits=(
            Edit(
                "decoding_slimspec.py",
                "return RoundPlan(budget, min(self.shape.depth, budget - 1), match, tree)",
                "return RoundPlan(budget, self.shape.depth, match, tree)",
            ),
        ),
        tests=(f"{CHAIN_LIVE}[6]",),
    ),
    Mutant(
        name="greedy: a round appends tokens past the length limit",
        edits=(
            Edit(
                "decoding_slimspec.py",
                "return RoundPlan(budget, min(self.shape.depth, budget - 1), match, tree)",
                "return RoundPlan(budget, self.shape.depth, match, tree)",
            ),
            Edit(
                "decoding_slimspec.py",
                "        new_tokens = new_tokens[: self.max_length - seq.length]",
                "        new_tokens = new_tokens[:]",
            ),
        ),
        tests=(f"{CHAIN_LIVE}[6]",),
    ),
    Mutant(
        name="greedy: the drafter's cache keeps the last round's drafted positions",
        edits=(Edit("drafting_slimspec.py", "        self.cache.crop(start)\n", "        pass\n"),),
        tests=(f"{CHAIN_LIVE}[3]",),
    ),
    Mutant(
        name="greedy: the drafter reads the features of the first verified rows, not the accepted path's",
        edits=(
            Edit(
                "decoding_slimspec.py",
                "self.state.add_target_features(hidden_states, rows.to(hidden_states[self.layer_ids[0]].device))",
                "self.state.add_target_features(hidden_states, torch.arange(len(rows)))",
            ),
        ),
        tests=(f"{TREE_LIVE}[tree0]",),
    ),
    Mutant(
        name="greedy: the target's cache keeps the first verified rows after a tree round, not the accepted path's",
        edits=(
            Edit(
                "decoding_slimspec.py",
                "compact_cache(self.cache, seq.length - 1, rows)",
                "compact_cache(self.cache, seq.length - 1, torch.arange(rows.numel()))",
            ),
        ),
        tests=(f"{TREE_LIVE}[tree0]",),
    ),
    Mutant(
        name="greedy: compacting the target's cache moves the accepted path's keys but not its values",
        edits=(
            Edit(
                "verification_slimspec.py",
                "        layer.values[:, :, start:end] = layer.values.index_select(2, index)\n",
                "",
            ),
        ),
        tests=(f"{TREE_LIVE}[tree0]",),
    ),
    Mutant(
        name="greedy: a tree node sees every node verified before it (siblings, cousins), not only its ancestors",
        edits=(
            Edit(
                "verification_slimspec.py",
                "allowed = torch.cat([seq.key_mask[:past].cpu().expand(size, -1), ancestors], dim=1)",
                "allowed = torch.cat([seq.key_mask[:past].cpu().expand(size, -1), torch.ones_like(ancestors).tril()], 1)",
            ),
        ),
        tests=(f"{TREE_LIVE}[tree0]",),
    ),
    Mutant(
        name="greedy: tree nodes take the positions of their index in the round, not of their depth",
        edits=(
            Edit(
                "decoding_slimspec.py",
                '"position_ids": depths + seq.positions[-1],',
                '"position_ids": torch.arange(depths.shape[1], device=device)[None] + seq.positions[-1],',
            ),
        ),
        tests=(f"{TREE_LIVE}[tree0]",),
    ),
    Mutant(
        name="greedy: sliding windows measure a tree node's distance by its index in the round, not its depth",
        edits=(
            Edit(
                "verification_slimspec.py",
                "    distance = (past + depths)[:, None] - torch.cat([torch.arange(past), past + depths])[None]",
                "    index = torch.arange(size)\n"
                "    distance = (past + index)[:, None] - torch.cat([torch.arange(past), past + index])[None]",
            ),
        ),
        tests=(f"{FAM}::test_greedy_identity_and_sampling_for_every_family[gpt_oss]",),
    ),
    Mutant(
        name="batched: a row keeps the first column it rejected",
        edits=(
            Edit(
                "verification_slimspec.py",
                "            accepted[i, keep] = True",
                "            accepted[i, : keep.numel() + 1] = True",
            ),
        ),
        tests=(f"{BATCH_LIVE}[chain-3]",),
    ),
    Mutant(
        name="batched: a row that accepted EOS inside a round keeps decoding to the length limit",
        edits=(
            Edit(
                "decoding_slimspec.py",
                "done = [bool(stopping_criteria(self.seqs[b].ids, None).all()) for b in self.active]",
                "done = [self.seqs[b].length >= self.rows[b].max_length for b in self.active]",
            ),
        ),
        tests=(f"{BATCH_LIVE}[chain-3]",),
    ),
    Mutant(
        name="batched: tree nodes take the positions of their column, not of their depth",
        edits=(
            Edit(
                "decoding_slimspec.py",
                "depths = torch.tensor([0] + [tree.depths[k] for k in tree.kept] + [0] * (width - n))",
                "depths = torch.arange(width)",
            ),
        ),
        tests=(f"{BATCH_LIVE}[tree]",),
    ),
    Mutant(
        name="batched: a tree node sees every column verified before it in its row, not only its ancestors",
        edits=(
            Edit(
                "verification_slimspec.py",
                "allowed[i, : len(ancestors), slots : slots + len(ancestors)] = ancestors",
                "allowed[i, : len(ancestors), slots : slots + len(ancestors)] = torch.ones_like(ancestors).tril()",
            ),
        ),
        tests=(f"{BATCH_LIVE}[tree]",),
    ),
    Mutant(
        name="batched: the drafter's cache keeps the last round's drafted positions",
        edits=(
            Edit(
                "drafting_slimspec.py",
                "        self.cache.crop(self.valid.shape[1])  # the last round's drafted positions go\n",
                "",
            ),
        ),
        tests=(f"{BATCH_LIVE}[chain-3]",),
    ),
    Mutant(
        name="hybrid: the drafter skips the target features that lookup rounds accepted",
        edits=(
            Edit(
                "drafting_slimspec.py",
                "features = torch.cat(self.pending, dim=1)",
                "features = torch.cat(self.pending[-1:], dim=1)",
            ),
        ),
        tests=(f"{GEN}::test_hybrid_greedy_on_a_live_target_accepts_and_rejects_deep_drafts",),
    ),
    Mutant(
        name="hybrid: lookup extends the drafter's draft past the length limit",
        edits=(Edit("decoding_slimspec.py", "budget - 1 - tree.depth(leaf))", "budget - 1)"),),
        tests=(f"{GEN}::test_hybrid_greedy_on_a_live_target_accepts_and_rejects_deep_drafts",),
    ),
    Mutant(
        name="greedy: the drafter's tree nodes see every node drafted before them, not only their ancestors",
        edits=(
            Edit(
                "drafting_slimspec.py",
                "                    allowed[f, tree.slots[ancestor]] = True\n",
                "                    allowed[f, self.state.committed : past] = True\n",
            ),
        ),
        tests=(f"{DEC}::test_tree_forward_matches_each_path_run_as_a_chain",),
    ),
    Mutant(
        name="greedy: the drafter's tree nodes sit one position too far",
        edits=(
            Edit(
                "drafting_slimspec.py", "(1, width), last_position + level,", "(1, width), last_position + level + 1,"
            ),
        ),
        tests=(f"{DEC}::test_tree_forward_matches_each_path_run_as_a_chain",),
    ),
    Mutant(
        name="greedy: a tree round on a left-padded prompt attends to the padding",
        edits=(
            Edit(
                "verification_slimspec.py",
                "allowed = torch.cat([seq.key_mask[:past].cpu().expand(size, -1), ancestors], dim=1)",
                "allowed = torch.cat([torch.ones(size, past, dtype=torch.bool), ancestors], dim=1)",
            ),
        ),
        tests=(f"{DEC}::test_streamer_dict_output_scores_and_left_padding",),
    ),
    Mutant(
        name="batched: tree rounds attend to the left padding and to the slots rows rejected earlier",
        edits=(
            Edit(
                "verification_slimspec.py",
                "allowed[:, :, :slots] = self.valid[:, None, :]",
                "allowed[:, :, :slots] = True",
            ),
        ),
        tests=(f"{BATCH_LIVE}[tree]",),
    ),
    Mutant(
        name="batched: chain rounds attend to the left padding and to the slots rows rejected earlier",
        edits=(
            Edit(
                "verification_slimspec.py",
                "return torch.cat([self.valid, nodes], dim=1).long()",
                "return torch.cat([torch.ones_like(self.valid), nodes], dim=1).long()",
            ),
        ),
        tests=(f"{BATCH_LIVE}[chain-3]",),
    ),
]
