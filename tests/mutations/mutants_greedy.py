# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Greedy decoding's breaks: the target's cache, tree masks and positions, rollback (one row and a batch), the
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

VER = "verification_slimspec.py"
DECODING = "decoding_slimspec.py"
STATS = "stats_slimspec.py"
DRAFTING = "drafting_slimspec.py"

ONE_QUERY = f"{DEC}::test_a_one_token_verification_leaves_the_query_heads_to_transformers"

MUTANTS = [
    Mutant(
        name="verification: a one-token round runs on the shared key/value heads too (the slow kernel)",
        edits=(Edit(VER, "    if queries <= 1:\n        yield\n        return\n", ""),),
        tests=(ONE_QUERY,),
    ),
    Mutant(
        name="drafter: one query token runs with `enable_gqa` (the slow kernel)",
        edits=(Edit("modeling_slimspec.py", "if q_len == 1 and self.num_groups > 1:", "if False:"),),
        tests=(ONE_QUERY,),
    ),
    Mutant(
        name="drafter: one query token's heads folded onto the wrong key/value heads",
        edits=(
            Edit(
                "modeling_slimspec.py",
                "folded = q.reshape(batch, heads // self.num_groups, self.num_groups, dim)",
                "folded = q.reshape(batch, self.num_groups, heads // self.num_groups, dim).transpose(1, 2)",
            ),
        ),
        tests=("tests/test_modeling_slimspec.py::test_cached_and_uncached_forward_agree",),
    ),
    Mutant(
        name="stop strings: the drafter's route leaves them to transformers, which has dropped the tokenizer",
        edits=(
            Edit(
                "decoding_slimspec.py",
                'if arguments.get("stop_strings") and arguments.get("tokenizer") is not None:',
                "if False:",
            ),
        ),
        tests=("tests/test_generation.py::test_stop_strings_end_a_drafted_answer_where_they_end_the_targets_own",),
    ),
    Mutant(
        name="greedy: stopping criteria checked after a round's last token only",
        edits=(
            Edit(
                DECODING,
                "            ends = range(seq.length - new + 1, seq.length + 1)\n",
                "            ends = range(seq.length, seq.length + 1)\n",
            ),
        ),
        tests=(f"{DEC}::test_a_stopping_criterion_met_inside_a_round_ends_the_row_there",),
    ),
    Mutant(
        name="greedy: a row cut inside a round keeps its cache",
        edits=(Edit(DECODING, "                self.cache.crop(-drop)", "                pass"),),
        tests=(f"{DEC}::test_a_stopping_criterion_met_inside_a_round_ends_the_row_there",),
    ),
    Mutant(
        name="auto shapes: a plain round still drafts (the drafter's tree replaces the empty one)",
        edits=(
            Edit(DECODING, "        if self.shape.depth == 0:  # a plain round", "        if False:  # a plain round"),
        ),
        tests=("tests/test_shapes_slimspec.py::test_auto_shapes_changing_every_round_keep_greedy_output",),
    ),
    Mutant(
        name="auto shapes: a call's own shape setting no longer fixes the shape",
        edits=(Edit(DRAFTING, '            values["draft_shape"] = "fixed"', "            pass"),),
        tests=(
            "tests/test_shapes_slimspec.py::test_a_call_that_sets_a_shape_keeps_it_and_auto_decodes_plain_once_plain_wins",
        ),
    ),
    Mutant(
        name="auto shapes: depths counted against the drafter's first child only",
        edits=(
            Edit(
                "acceptance_slimspec.py",
                "children.index(target_token) + 1 if target_token in children else None",
                "1 if target_token == children[0] else None",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_depths_are_counted_below_the_nodes_the_drafter_ranked",),
    ),
    Mutant(
        name="greedy: the target's cache keeps a round's rejected drafts",
        edits=(
            Edit(
                DECODING,
                "            keeps.append(keep)\n",
                "            keeps.append(torch.arange(len(tree.kept) + 1))\n",
            ),
        ),
        tests=(f"{CHAIN_LIVE}[3]",),
    ),
    Mutant(
        name="greedy: tokens after an EOS accepted inside a round are kept",
        edits=(
            Edit(DECODING, "            if token in self.eos_ids:  # ... and beyond an EOS", "            if False:"),
        ),
        tests=(f"{CHAIN_LIVE}[3]",),
    ),
    Mutant(
        name="greedy: a round drafts past the length limit",
        edits=(
            Edit(
                DECODING,
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
                DECODING,
                "return RoundPlan(budget, min(self.shape.depth, budget - 1), match, tree)",
                "return RoundPlan(budget, self.shape.depth, match, tree)",
            ),
            Edit(
                DECODING,
                "        new_tokens = new_tokens[: self.max_length - seq.length]",
                "        new_tokens = new_tokens[:]",
            ),
        ),
        tests=(f"{CHAIN_LIVE}[6]",),
    ),
    Mutant(
        name="greedy: the drafter's cache keeps the last round's drafted positions",
        edits=(
            Edit(
                DRAFTING, "        self.cache.crop(self.valid.shape[1])  # the last round's drafted positions go\n", ""
            ),
        ),
        tests=(f"{CHAIN_LIVE}[3]", f"{BATCH_LIVE}[chain-3]"),
    ),
    Mutant(
        name="greedy: the drafter reads the features of the first verified rows, not the accepted path's",
        edits=(
            Edit(
                DECODING,
                "self.state.add_target_features(i, hidden_states, rows.to(hidden_states[self.layer_ids[0]].device))",
                "self.state.add_target_features(i, hidden_states, torch.arange(len(rows)))",
            ),
        ),
        tests=(f"{TREE_LIVE}[tree0]",),
    ),
    Mutant(
        name="greedy: the target's cache keeps the first verified columns after a tree round, not the accepted path's",
        edits=(
            Edit(
                DECODING, "            keeps.append(keep)\n", "            keeps.append(torch.arange(keep.numel()))\n"
            ),
        ),
        tests=(f"{TREE_LIVE}[tree0]",),
    ),
    Mutant(
        name="greedy: rolling the target's cache back moves the accepted path's keys but not its values",
        edits=(Edit(VER, 'for name in ("keys", "values"):', 'for name in ("keys",):'),),
        tests=(f"{TREE_LIVE}[tree0]", f"{BATCH_LIVE}[tree]"),
    ),
    Mutant(
        name="greedy: a tree node sees every node verified before it (siblings, cousins), not only its ancestors",
        edits=(
            Edit(
                VER,
                "allowed[i, rows[node], slots:] |= allowed[i, rows[tree.parents[node]], slots:]",
                "allowed[i, rows[node], slots : slots + rows[node] + 1] = True",
            ),
        ),
        tests=(f"{TREE_LIVE}[tree0]", f"{BATCH_LIVE}[tree]"),
    ),
    Mutant(
        name="greedy: tree nodes take the positions of their column in the round, not of their depth",
        edits=(
            Edit(
                DECODING,
                "depths = torch.tensor([0] + [tree.depths[k] for k in tree.kept] + [0] * (width - n))",
                "depths = torch.arange(width)",
            ),
        ),
        tests=(f"{TREE_LIVE}[tree0]", f"{BATCH_LIVE}[tree]"),
    ),
    Mutant(
        name="greedy: sliding windows measure a tree node's distance by its slot, not its position",
        edits=(
            Edit(
                VER,
                "        distance = queries[:, :, None] - torch.cat([self.positions, queries], dim=1)[:, None, :]\n",
                "        index = torch.arange(slots + width)\n"
                "        distance = (index[None, slots:, None] - index[None, None, :]).expand(batch, -1, -1)\n",
            ),
        ),
        tests=(f"{FAM}::test_greedy_identity_and_sampling_for_every_family[gpt_oss]",),
    ),
    Mutant(
        name="batched: a row keeps the first column it rejected",
        edits=(
            Edit(VER, "                used[i, keep] = True", "                used[i, : keep.numel() + 1] = True"),
        ),
        tests=(f"{BATCH_LIVE}[chain-3]",),
    ),
    Mutant(
        name="greedy: a row that accepted EOS inside a round keeps decoding to the length limit",
        edits=(
            Edit(
                DECODING,
                "end = next((e for e in ends if bool(stopping_criteria(seq.ids[:, :e], scores).all())), None)",
                "end = next((e for e in ends if e >= self.max_length), None)",
            ),
        ),
        tests=(f"{BATCH_LIVE}[chain-3]", f"{CHAIN_LIVE}[3]"),
    ),
    Mutant(
        name="hybrid: the drafter skips the target features that lookup rounds accepted",
        edits=(
            Edit(
                DRAFTING,
                "blocks = [torch.cat(pending, dim=1) if pending else None",
                "blocks = [torch.cat(pending[-1:], dim=1) if pending else None",
            ),
        ),
        tests=(f"{GEN}::test_hybrid_greedy_on_a_live_target_accepts_and_rejects_deep_drafts",),
    ),
    Mutant(
        name="hybrid: lookup extends the drafter's draft past the length limit",
        edits=(Edit(DECODING, "budget - 1 - tree.depth(leaf))", "budget - 1)"),),
        tests=(f"{GEN}::test_hybrid_greedy_on_a_live_target_accepts_and_rejects_deep_drafts",),
    ),
    Mutant(
        name="greedy: the drafter's tree nodes see every node drafted before them, not only their ancestors",
        edits=(
            Edit(
                DRAFTING,
                "                    allowed[i, 0, f, tree.slots[ancestor]] = True\n",
                "                    allowed[i, 0, f, committed:past] = True\n",
            ),
        ),
        tests=(f"{DEC}::test_tree_forward_matches_each_path_run_as_a_chain",),
    ),
    Mutant(
        name="greedy: the drafter's tree nodes sit one position too far",
        edits=(
            Edit(
                DRAFTING,
                "positions[i] = int(seq.positions[self.committed[i] - 1]) + level",
                "positions[i] = int(seq.positions[self.committed[i] - 1]) + level + 1",
            ),
        ),
        tests=(f"{DEC}::test_tree_forward_matches_each_path_run_as_a_chain",),
    ),
    Mutant(
        name="greedy: tree rounds attend to the left padding and to the slots rows left unused",
        edits=(Edit(VER, "allowed[:, :, :slots] = self.valid[:, None, :]", "allowed[:, :, :slots] = True"),),
        tests=(f"{DEC}::test_streamer_dict_output_scores_and_left_padding", f"{BATCH_LIVE}[tree]"),
    ),
    Mutant(
        name="batched: chain rounds attend to the left padding and to the slots rows left unused",
        edits=(
            Edit(
                VER,
                "keys = torch.cat([self.valid, columns], dim=1)",
                "keys = torch.cat([torch.ones_like(self.valid), columns], dim=1)",
            ),
        ),
        tests=(f"{BATCH_LIVE}[chain-3]",),
    ),
    Mutant(
        name="drafter: a batched tree level attends to the left padding and to the slots rows left unused",
        edits=(
            Edit(
                DRAFTING,
                "allowed[i, 0, : len(frontier), :committed] = self.valid[i]",
                "allowed[i, 0, : len(frontier), :committed] = True",
            ),
        ),
        tests=(f"{BATCH_LIVE}[tree]",),  # the output stays exact: only the drafts change
    ),
    Mutant(
        name="drafter: tree and chain levels take their RoPE positions from cache slots, counting left padding",
        edits=(
            Edit(
                DRAFTING,
                "positions[i] = int(seq.positions[self.committed[i] - 1]) + level",
                "positions[i] = self.committed[i] - 1 + level",
            ),
        ),
        tests=(f"{BATCH_LIVE}[tree]", f"{BATCH_LIVE}[chain-3]"),  # the output stays exact: only the drafts change
        each=True,
    ),
    Mutant(
        name="statistics: one drafter serving several threads keeps one last_generation_stats for all of them",
        edits=(Edit(STATS, "_CALLS = threading.local()", "_CALLS = type('Shared', (), {})()"),),
        tests=(f"{GEN}::test_one_drafter_serving_several_threads_gives_each_call_its_own_statistics",),
    ),
    Mutant(
        name="threads: the sdpa GQA switch is restored by whichever verification ends, while others still run",
        edits=(
            Edit(
                VER,
                '        if _GQA_STATE["inside"] == 0:\n',
                "        if True:  # every forward saves what it finds and restores it\n",
            ),
        ),
        tests=(f"{GEN}::test_one_drafter_serving_several_threads_gives_each_call_its_own_statistics",),
    ),
]
