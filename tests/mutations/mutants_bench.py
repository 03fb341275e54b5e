# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Breaks of `slimspec bench`: what a run samples with and what it counts. The figures still come out, only wrong:
a sampled run that ignores `--top-p`, or a batched run that reports drafters as lossless without comparing."""

from tests.mutations.mutant import Edit, Mutant


BATCHING = "evaluation/batching.py"
BENCHMARK = "evaluation/benchmark.py"
BATCHED_GREEDY = (
    "tests/evaluation/test_batching.py::test_batched_drafters_generate_plain_batched_greedy_tokens_in_fp32"
)
MARGIN = "tests/test_shapes_slimspec.py::test_a_predicted_gain_within_the_plain_rounds_spread_decodes_plain"
EXPLORE = (
    "tests/test_shapes_slimspec.py::"
    "test_a_call_that_chose_plain_on_unlucky_probes_keeps_drafting_now_and_then_and_returns_to_it"
)
SKIPPED = "tests/test_shapes_slimspec.py::test_the_trees_a_choice_skips_are_never_the_fastest"
DEARER = "tests/test_shapes_slimspec.py::test_a_shape_whose_rounds_run_dearer_than_priced_gives_way"
FEWER = "tests/test_shapes_slimspec.py::test_a_shape_whose_rounds_yield_fewer_tokens_than_predicted_gives_way"
SWITCH = "tests/test_shapes_slimspec.py::test_a_shape_gives_way_only_to_one_predicted_faster_by_more_than_the_prices_own_error"
NEW_BATCH = (
    "tests/test_shapes_slimspec.py::test_a_new_batch_size_prices_its_rounds_from_a_smaller_ones_costs_without_probing"
)
UNTRIED = (
    "tests/test_shapes_slimspec.py::test_a_shape_not_tried_must_be_predicted_ten_percent_faster_than_the_best_tried"
)
PLAIN_START = (
    "tests/test_shapes_slimspec.py::"
    "test_where_the_settings_decode_a_batch_plain_an_untried_shape_must_beat_plain_decoding_by_ten_percent"
)
JUDGED = "tests/test_shapes_slimspec.py::test_a_batch_that_drafts_slower_than_its_plain_calls_decodes_plain_next"
LITTLE = "tests/test_shapes_slimspec.py::test_a_batch_size_starts_plain_where_fewer_rows_drafted_for_little"
INHERITED = (
    "tests/test_shapes_slimspec.py::"
    "test_a_batch_size_without_a_choice_starts_plain_where_fewer_rows_or_greedy_calls_chose_plain"
)
NOISE = "tests/test_shapes_slimspec.py::test_a_shapes_own_ratio_counts_as_far_as_its_rounds_noise_lets_it"
SLOTS = "tests/test_shapes_slimspec.py::test_rounds_timed_over_longer_caches_are_priced_at_the_coming_rounds_cache"
KEPT = "tests/test_shapes_slimspec.py::test_measured_costs_are_kept_for_the_next_process"
SAMPLED = "tests/evaluation/test_batching.py::test_sampled_runs_pass_top_p_and_no_top_k_to_every_call"

SPREAD = "tests/test_shapes_slimspec.py::test_a_widths_kept_rounds_come_from_several_calls_and_points_of_each"

MUTANTS = [
    Mutant(
        name="auto calls: every round of a call goes to the kept costs",
        edits=(
            Edit("shapes_slimspec.py", "        if self.kept_round(log.batch_size, width):\n", "        if True:\n"),
        ),
        tests=(SPREAD,),
    ),
    Mutant(
        name="auto calls: a call keeps its first rounds of a width only",
        edits=(Edit("shapes_slimspec.py", " or (first == 0 and late & (late - 1) == 0)", ""),),
        tests=(SPREAD,),
    ),
    Mutant(
        name="bench: batched sampled runs ignore `--top-p`",
        edits=(
            Edit(
                BATCHING,
                "sampling_kwargs(temperature, top_p=top_p, top_k=0)",
                "sampling_kwargs(temperature, top_k=0)",
            ),
        ),
        tests=(SAMPLED,),
    ),
    Mutant(
        name="bench: batched sampled runs keep transformers' default top-k cut",
        edits=(
            Edit(
                BATCHING,
                "sampling_kwargs(temperature, top_p=top_p, top_k=0)",
                "sampling_kwargs(temperature, top_p=top_p)",
            ),
        ),
        tests=(SAMPLED,),
    ),
    Mutant(
        name="bench: sampled runs one question at a time ignore `--top-p`",
        edits=(
            Edit(
                BENCHMARK,
                "sampling_kwargs(temperature, top_p=top_p, top_k=0)",
                "sampling_kwargs(temperature, top_k=0)",
            ),
        ),
        tests=(SAMPLED,),
    ),
    Mutant(
        name="bench: every greedy batch counts as identical to plain batched greedy",
        edits=(
            Edit(
                BATCHING,
                'count[0] += int(outputs[name].tolist() == outputs["target"].tolist())',
                "count[0] += 1",
            ),
        ),
        tests=(BATCHED_GREEDY,),
    ),
    Mutant(
        name="bench: the @any-batch row keeps its drafter's batch limit",
        edits=(
            Edit(BATCHING, '{**system.generate_kwargs, "draft_max_batch_size": 0}', "dict(system.generate_kwargs)"),
        ),
        tests=(BATCHED_GREEDY,),
    ),
    Mutant(
        name="bench: the NAME@auto row runs the drafter's fixed shape",
        edits=(
            Edit(
                "evaluation/systems.py",
                '"draft_shape": shape}',
                '"draft_shape": "fixed"}',
            ),
        ),
        tests=(
            "tests/evaluation/test_benchmark.py::test_draft_shape_rows_sit_beside_the_others_and_name_the_shapes_chosen",
            "tests/evaluation/test_benchmark.py::test_bench_batch_sizes_end_to_end_on_tiny_target",
        ),
    ),
    Mutant(
        name="bench: the shapes chosen are counted once each, whatever their number",
        edits=(Edit("evaluation/systems.py", "counts[shape] = counts.get(shape, 0) + 1", "counts[shape] = 1"),),
        tests=(
            "tests/evaluation/test_benchmark.py::test_draft_shape_rows_sit_beside_the_others_and_name_the_shapes_chosen",
        ),
    ),
    Mutant(
        name="auto shapes: a stored acceptance keeps its full weight over the call's own rounds",
        edits=(Edit("acceptance_slimspec.py", "        if weight is not None:\n", "        if False:\n"),),
        tests=(
            "tests/test_shapes_slimspec.py::test_a_drafter_starts_from_the_acceptance_its_generation_config_stores",
        ),
    ),
    Mutant(
        name="bench: --save-acceptance writes nothing",
        edits=(Edit("commands/bench.py", "    if not args.save_acceptance:\n        return\n", "    return\n"),),
        tests=("tests/evaluation/test_benchmark.py::test_bench_batch_sizes_end_to_end_on_tiny_target",),
    ),
    Mutant(
        name="auto shapes: a recheck call decodes plain rounds without drafting",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "self.explore = log.plain_chosen",
                "self.explore = False",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_a_recheck_call_drafts_again_before_it_settles",),
    ),
    Mutant(
        name="auto shapes: re-checks stay one call in 8 however often they choose plain again",
        edits=(
            Edit(
                "costs_slimspec.py",
                "min(2 * self.recheck_every, RECHECK_MOST)",
                "self.recheck_every",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_rechecks_grow_rarer_while_they_keep_choosing_plain",),
    ),
    Mutant(
        name="auto shapes: a choice that drafts leaves the re-check wait as long as it grew",
        edits=(Edit("costs_slimspec.py", "            self.recheck_every = RECHECK_EVERY\n", "            pass\n"),),
        tests=("tests/test_shapes_slimspec.py::test_rechecks_grow_rarer_while_they_keep_choosing_plain",),
    ),
    Mutant(
        name="auto shapes: every plain choice in a re-check call, not only its first, doubles the wait",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "self.shape.is_plain, again=self.explore)",
                "self.shape.is_plain, again=True)",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_rechecks_grow_rarer_while_they_keep_choosing_plain",),
    ),
    Mutant(
        name="auto shapes: the drafter's first step is logged as a 1-node step whatever it read",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "steps = [(self.commit_width, self.committed - self.started)] if levels else []",
                "steps = [(1, self.committed - self.started)] if levels else []",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_a_round_times_the_drafters_first_step_at_the_width_it_read",),
    ),
    Mutant(
        name="auto shapes: measured curves keep a slow round instead of pooling it with its neighbours",
        edits=(Edit("costs_slimspec.py", "while len(pools) > 1 and pools[-2][1] > pools[-1][1]:", "while False:"),),
        tests=(
            "tests/test_shapes_slimspec.py::"
            "test_a_measured_curve_pools_a_slow_round_instead_of_raising_every_wider_width",
        ),
    ),
    Mutant(
        name="auto shapes: a width's cost is the upper median of its rounds",
        edits=(
            Edit(
                "costs_slimspec.py",
                "return sorted(times)[(len(times) - 1) // 2]",
                "return sorted(times)[len(times) // 2]",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_one_slow_round_at_a_width_does_not_rule_it_out",),
    ),
    Mutant(
        name="auto shapes: a probe's second round is skipped where its first looked too dear",
        edits=(Edit("shapes_slimspec.py", "            if self.retry is not None:  #", "            if False:  #"),),
        tests=("tests/test_shapes_slimspec.py::test_one_slow_round_at_a_width_does_not_rule_it_out",),
    ),
    Mutant(
        name="auto shapes: the LM head's kernels are timed in the first multi-row round",
        edits=(Edit("decoding_slimspec.py", "            time_head_kernels(self.head)\n", "            pass\n"),),
        tests=("tests/test_decoding_slimspec.py::test_the_lm_head_kernels_are_timed_at_prefill_not_in_a_timed_round",),
    ),
    Mutant(
        name="auto shapes: measured costs are not written for the next process",
        edits=(Edit("decoding_slimspec.py", "        decoder.timer.save()\n", ""),),
        tests=("tests/test_shapes_slimspec.py::test_measured_costs_are_kept_for_the_next_process",),
    ),
    Mutant(
        name="auto shapes: kept costs are not read back",
        edits=(
            Edit(
                "costs_slimspec.py",
                "key=key, chooser=chooser).load()\n        for bucket",
                "key=key, chooser=chooser)\n        for bucket",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_measured_costs_are_kept_for_the_next_process",),
    ),
    Mutant(
        name="auto shapes: one file for every batch size",
        edits=(Edit("costs_slimspec.py", '        "batch_size": batch_size,\n', ""),),
        tests=("tests/test_shapes_slimspec.py::test_measured_costs_are_kept_for_the_next_process",),
    ),
    Mutant(
        name="auto shapes: a drafter inherits another's plain choices",
        edits=(
            Edit(
                "costs_slimspec.py",
                'if choices.get("chooser") == self.chooser and "plain" in choices:',
                'if "plain" in choices:',
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_measured_costs_are_kept_for_the_next_process",),
    ),
    Mutant(
        name="auto shapes: a drafter's kept choices keyed by its folder as spelt",
        edits=(Edit("costs_slimspec.py", "return os.path.realpath(name)", "return name"),),
        tests=(
            "tests/test_shapes_slimspec.py::test_a_drafter_folder_named_relative_or_absolute_keeps_one_set_of_choices",
        ),
    ),
    Mutant(
        name="auto shapes: kept costs are written in place (a reader may see half a file)",
        edits=(
            Edit(
                "costs_slimspec.py",
                'partial = self.path.with_name(f".tmp-{os.getpid()}-{self.path.name}")',
                "partial = self.path",
            ),
            Edit("costs_slimspec.py", "            os.replace(partial, self.path)\n", ""),
        ),
        tests=("tests/test_shapes_slimspec.py::test_kept_costs_that_cannot_be_read_or_written_are_measured_again",),
    ),
    Mutant(
        name="auto shapes: impossible kept times are loaded",
        edits=(
            Edit("costs_slimspec.py", "if not (width >= 1 and math.isfinite(seconds) and seconds > 0):", "if False:"),
        ),
        tests=("tests/test_shapes_slimspec.py::test_kept_costs_that_cannot_be_read_or_written_are_measured_again",),
    ),
    Mutant(
        name="auto shapes: rounds after rows finished are timed as the whole batch's",
        edits=(Edit("shapes_slimspec.py", "full = rows is None or rows == self.log.batch_size", "full = True"),),
        tests=("tests/test_shapes_slimspec.py::test_rounds_after_rows_finished_are_timed_at_their_own_row_count",),
    ),
    Mutant(
        name="auto shapes: the rows left of a batch are timed into the tables of calls with that many prompts",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "log = self.log if full else self.log_for(rows, left_of=self.log.batch_size)",
                "log = self.log if full else self.log_for(rows)",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_rounds_after_rows_finished_are_timed_at_their_own_row_count",),
    ),
    Mutant(
        name="auto shapes: the rows left of a batch keep the whole batch's shape",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "if rows is not None and rows < self.log.batch_size and self.choice is not None:",
                "if False:",
            ),
        ),
        tests=(
            "tests/test_shapes_slimspec.py::test_the_rows_left_of_a_batch_are_shaped_by_the_costs_at_their_row_count",
        ),
    ),
    Mutant(
        name="auto shapes: each call chooses afresh for the rows left of its batch",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "if left.choice is None or left.rounds_since_choice >= self.every:",
                "if True:",
            ),
        ),
        tests=(
            "tests/test_shapes_slimspec.py::test_the_rows_left_of_a_batch_are_shaped_by_the_costs_at_their_row_count",
        ),
    ),
    Mutant(
        name="auto shapes: the rows left's kept choice is never made again",
        edits=(
            Edit("shapes_slimspec.py", "left.rounds_since_choice >= self.every:", "left.rounds_since_choice < 0:"),
        ),
        tests=(
            "tests/test_shapes_slimspec.py::test_the_rows_left_of_a_batch_are_shaped_by_the_costs_at_their_row_count",
        ),
    ),
    Mutant(
        name="auto shapes: the rows left of a batch price a plain round as the batch size above",
        edits=(Edit("costs_slimspec.py", "share = (rows - lower) / (upper - lower) if", "share = 1.0 if"),),
        tests=(
            "tests/test_shapes_slimspec.py::test_the_rows_left_of_a_batch_are_shaped_by_the_costs_at_their_row_count",
        ),
    ),
    Mutant(
        name="auto shapes: one cost curve for short and long prompts",
        edits=(Edit("costs_slimspec.py", '        "context": context_bucket(context),\n', ""),),
        tests=("tests/test_shapes_slimspec.py::test_measured_costs_are_kept_for_the_next_process",),
    ),
    Mutant(
        name="auto shapes: greedy and sampled calls share one cost curve",
        edits=(Edit("costs_slimspec.py", '        "mode": ACCEPTANCE_MODES[bool(sampled)],\n', ""),),
        tests=("tests/test_shapes_slimspec.py::test_measured_costs_are_kept_for_the_next_process",),
    ),
    Mutant(
        name="auto shapes: one plain round is timed before the first choice",
        edits=(Edit("shapes_slimspec.py", "TIMED_ROUNDS = 2 ", "TIMED_ROUNDS = 1 "),),
        tests=("tests/test_shapes_slimspec.py::test_one_slow_round_at_a_width_does_not_rule_it_out",),
    ),
    Mutant(
        name="auto shapes: m sampled draws cover 1 - (1 - c)^m, not what each draw was measured to accept",
        edits=(
            Edit(
                "acceptance_slimspec.py",
                "        if self.draws:\n            return self.draw_coverage(depth, m)\n",
                "        if self.draws and m > 1:\n            return 1.0 - (1.0 - self.coverage(depth, 1)) ** m\n",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_sampled_coverage_reads_each_draws_measured_acceptance",),
    ),
    Mutant(
        name="auto shapes: a sampled round counts any accepted draw as the first",
        edits=(
            Edit(
                "acceptance_slimspec.py",
                "at = drawn.index(target_token) + 1 if target_token in drawn else None",
                "at = 1 if target_token in drawn else None",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_a_sampled_round_counts_which_draw_was_accepted",),
    ),
    Mutant(
        name="auto shapes: a lookup draft accepted counts as one of the drafter's draws",
        edits=(
            Edit(
                "acceptance_slimspec.py",
                "if not drawn or any(p.q is None and p.token == target_token for p in proposals):",
                "if not drawn:",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_a_sampled_round_counts_which_draw_was_accepted",),
    ),
    Mutant(
        name="auto shapes: a new prompt length probes every width again",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "if size + 1 not in log.widths()]",
                "if size + 1 not in log.verify]",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_a_new_prompt_length_borrows_the_costs_measured_at_another",),
    ),
    Mutant(
        name="auto shapes: another prompt length's costs are borrowed unscaled",
        edits=(
            Edit(
                "costs_slimspec.py",
                "scale = self.lower_median(verify[1]) / self.lower_median(theirs[1])",
                "scale = 1.0",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_a_new_prompt_length_borrows_the_costs_measured_at_another",),
    ),
    Mutant(
        name="auto shapes: costs are borrowed from the farthest prompt length",
        edits=(
            Edit(
                "costs_slimspec.py",
                "return min(others, key=distance, default=None)",
                "return max(others, key=distance, default=None)",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_a_new_prompt_length_borrows_the_costs_measured_at_another",),
    ),
    Mutant(
        name="auto shapes: probe rounds draft with lookup's grafts",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "self.lookup_allowed = self.shape.lookup and not self.tuner.probing",
                "self.lookup_allowed = self.shape.lookup or True",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_a_probe_round_measures_its_own_width_without_lookups_grafts",),
    ),
    Mutant(
        name="auto shapes: the tuner chooses without the costs' margin",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "                    self.log.margin(),\n                    self.lookup,\n",
                "                    0.0,\n                    self.lookup,\n",
            ),
        ),
        tests=(MARGIN,),
    ),
    Mutant(
        name="auto shapes: any predicted gain leaves plain decoding",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "    if best_speed <= plain_speed * over_plain:",
                "    if False and over_plain:",
            ),
        ),
        tests=(MARGIN,),
    ),
    Mutant(
        name="auto shapes: a round drafts with lookup whatever its shape says",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "self.lookup_allowed = self.shape.lookup and not self.tuner.probing",
                "self.lookup_allowed = not self.tuner.probing",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_an_auto_round_drafts_with_lookup_exactly_where_its_shape_does",),
    ),
    Mutant(
        name="auto shapes: lookup's matches are counted only in rounds that draft with it",
        edits=(
            Edit(
                "decoding_slimspec.py",
                "match = self.lookup.find(seq.ids[0], budget - 1) if self.lookup is not None else None",
                "match = self.round_lookup.find(seq.ids[0], budget - 1) if self.round_lookup is not None else None",
            ),
        ),
        tests=(
            "tests/test_shapes_slimspec.py::test_lookup_rate_counts_what_lookup_would_draft_and_agrees_with_what_it_drafted",
        ),
    ),
    Mutant(
        name="auto shapes: a lookup draft counts as accepted whole",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "self.tuner.lookup.add(len(draft), min(agree + 1, len(emitted)))",
                "self.tuner.lookup.add(len(draft), len(draft) + 1)",
            ),
        ),
        tests=(
            "tests/test_shapes_slimspec.py::test_lookup_rate_counts_what_lookup_would_draft_and_agrees_with_what_it_drafted",
        ),
    ),
    Mutant(
        name="auto shapes: shapes with lookup are priced as without it",
        edits=(Edit("shapes_slimspec.py", "if shape.lookup and lookup is not None:", "if False:"),),
        tests=(
            "tests/test_shapes_slimspec.py::test_lookup_is_chosen_where_its_drafts_pay_for_the_width_they_add_to_every_row",
        ),
    ),
    Mutant(
        name="auto shapes: lookup's grafts start from nothing, so a shape with lookup may never be drafted to measure them",
        edits=(
            Edit(
                "acceptance_slimspec.py",
                "GRAFT_PRIOR, GRAFT_PRIOR_ROWS = 0.3, 16.0",
                "GRAFT_PRIOR, GRAFT_PRIOR_ROWS = 0.0, 16.0",
            ),
        ),
        tests=(
            "tests/test_shapes_slimspec.py::test_lookup_is_chosen_where_its_drafts_pay_for_the_width_they_add_to_every_row",
        ),
    ),
    Mutant(
        name="auto shapes: tokens accepted on lookup's grafts count as the drafter's own",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "grafted = tree.grafted_from",
                "grafted = None",
            ),
        ),
        tests=(
            "tests/test_shapes_slimspec.py::test_lookup_rate_counts_what_lookup_would_draft_and_agrees_with_what_it_drafted",
        ),
    ),
    Mutant(
        name="auto shapes: a graft's nodes are taken for the drafter's",
        edits=(Edit("decoding_slimspec.py", "        tree.grafted_from = len(tree.tokens)\n", ""),),
        tests=(
            "tests/test_shapes_slimspec.py::test_lookup_rate_counts_what_lookup_would_draft_and_agrees_with_what_it_drafted",
        ),
    ),
    Mutant(
        name="auto shapes: the tokens lookup's grafts add are not priced",
        edits=(Edit("shapes_slimspec.py", "(tokens + rate.graft_gain)", "(tokens + 0.0)"),),
        tests=("tests/test_shapes_slimspec.py::test_lookups_grafts_are_priced_by_the_tokens_and_the_width_they_add",),
    ),
    Mutant(
        name="auto shapes: the nodes lookup's grafts add are not priced",
        edits=(Edit("shapes_slimspec.py", "** batch) * rate.graft_width", "** batch) * 0.0"),),
        tests=("tests/test_shapes_slimspec.py::test_lookups_grafts_are_priced_by_the_tokens_and_the_width_they_add",),
    ),
    Mutant(
        name="auto shapes: one row's lookup draft widens only its own row",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "all_alone, any_alone = p**batch, 1.0 - (1.0 - p) ** batch",
                "all_alone, any_alone = p**batch, p",
            ),
        ),
        tests=(
            "tests/test_shapes_slimspec.py::test_lookup_is_chosen_where_its_drafts_pay_for_the_width_they_add_to_every_row",
        ),
    ),
    Mutant(
        name="auto shapes: plain rounds are never timed again while drafting",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "if not self.shape.is_plain and self.rounds % PLAIN_EVERY == PLAIN_EVERY - 1:",
                "if False:",
            ),
        ),
        tests=("tests/test_shapes_slimspec.py::test_while_drafting_a_round_now_and_then_times_plain_decoding_again",),
    ),
    Mutant(
        name="auto shapes: a call that chose plain never drafts again",
        edits=(Edit("shapes_slimspec.py", "if self.plain_rounds > self.explore_after:", "if False:"),),
        tests=(EXPLORE,),
    ),
    Mutant(
        name="auto shapes: exploring rounds do not grow rarer while plain keeps winning",
        edits=(Edit("shapes_slimspec.py", "2 * self.explore_after", "self.explore_after"),),
        tests=(EXPLORE,),
    ),
    Mutant(
        name="auto shapes: the calibration trusts its first rounds fully",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "(self.accepted + CALIBRATION_PRIOR) / (self.predicted + CALIBRATION_PRIOR)",
                "self.accepted / self.predicted if self.predicted >= 4 else 1.0",
            ),
        ),
        tests=(EXPLORE,),
    ),
    Mutant(
        name="auto shapes: the report names an exploring round's shape as the choice",
        edits=(
            Edit("shapes_slimspec.py", "str(choice.shape if choice is not None else self.shape)", "str(self.shape)"),
        ),
        tests=(EXPLORE,),
    ),
    Mutant(
        name="bench: a shape row inherits the chain rows' lookup setting",
        edits=(
            Edit(
                "evaluation/systems.py",
                'own = {"assistant_model": drafter, "draft_shape": shape}',
                "own = dict(kwargs, draft_shape=shape)",
            ),
        ),
        tests=(
            "tests/evaluation/test_benchmark.py::test_draft_shape_rows_sit_beside_the_others_and_name_the_shapes_chosen",
        ),
    ),
    Mutant(
        name="auto shapes: a choice skips trees that yield more than the shallower or narrower tree of their size",
        edits=(
            Edit("shapes_slimspec.py", "tokens <= other[shape.size] + 1e-12", "tokens >= other[shape.size] - 1e-12"),
        ),
        tests=(SKIPPED,),
    ),
    Mutant(
        name="auto shapes: a choice skips trees against the wider tree of their size",
        edits=(Edit("shapes_slimspec.py", "(shape.depth, shape.top_k // 2)", "(shape.depth, shape.top_k * 2)"),),
        tests=(SKIPPED,),
    ),
    Mutant(
        name="auto shapes: a round's time is not held against its price",
        edits=(Edit("shapes_slimspec.py", "            self.log.speed.add(", "            (lambda *a: None)("),),
        tests=(DEARER,),
    ),
    Mutant(
        name="auto shapes: the choice ignores how much dearer than priced each shape ran",
        edits=(
            Edit("shapes_slimspec.py", "                    self.log.speed.factor,\n", "                    None,\n"),
        ),
        tests=(DEARER,),
    ),
    Mutant(
        name="auto shapes: a shape's own ratio (speed, tokens) is the pooled one, not its own rounds'",
        edits=(Edit("costs_slimspec.py", "(own_measured + own_prior", "(own_predicted * pooled + own_prior"),),
        tests=(DEARER,),
    ),
    Mutant(
        name="auto shapes: a round whose drafter caught up on a plain round is timed against its shape's price",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "if counted and (shape.is_plain or self.drafted_last) else None",
                "if counted else None",
            ),
        ),
        tests=(DEARER,),
    ),
    Mutant(
        name="auto shapes: a shape's counted rounds are never forgotten",
        edits=(Edit("costs_slimspec.py", "        if sums[2] > self.rounds_kept:\n", "        if False:\n"),),
        tests=(DEARER,),
    ),
    Mutant(
        name="auto shapes: a probe's least cost leaves out the drafter's steps",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "least = verify + costs.draft_time(1) + (probe.depth - 1) * costs.draft_time(probe.top_k)",
                "least = verify",
            ),
        ),
        tests=(
            "tests/test_shapes_slimspec.py::test_probing_stops_where_the_drafters_steps_alone_outweigh_what_a_wider_probe_could_yield",
        ),
    ),
    Mutant(
        name="auto shapes: over several rows drafting needs only the costs' own margin over plain decoding",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "(max(margin, SWITCH_MARGIN) if costs.batch_size > 1 else margin)",
                "margin",
            ),
        ),
        tests=(SWITCH,),
    ),
    Mutant(
        name="auto shapes: one row's drafting needs the switch margin over plain decoding",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "(max(margin, SWITCH_MARGIN) if costs.batch_size > 1 else margin)",
                "max(margin, SWITCH_MARGIN)",
            ),
        ),
        tests=(SWITCH,),
    ),
    Mutant(
        name="auto shapes: a new batch size probes although a smaller one measured its costs",
        edits=(
            Edit("shapes_slimspec.py", "self.probes = [] if self.estimated else", "self.probes = [] if False else"),
        ),
        tests=(NEW_BATCH,),
    ),
    Mutant(
        name="auto shapes: a new batch size prices its rounds from its plain rounds alone",
        edits=(Edit("shapes_slimspec.py", "        if self.estimated:\n", "        if False:\n"),),
        tests=(NEW_BATCH,),
    ),
    Mutant(
        name="auto shapes: a probe's least verification is the widest measured, whatever its width",
        edits=(Edit("shapes_slimspec.py", "        if width > widest > 1:\n", "        if False:\n"),),
        tests=(
            "tests/test_shapes_slimspec.py::test_probing_stops_where_the_cost_per_token_so_far_rules_out_the_wider_probes",
        ),
    ),
    Mutant(
        name="auto shapes: the rows left's wider rounds grow as at the batch size above",
        edits=(
            Edit(
                "costs_slimspec.py",
                "verify = {w: plain + blend(added(w)) for w",
                "verify = {w: plain * high.verify_time(w) / high.verify[0] for w",
            ),
        ),
        tests=(
            "tests/test_shapes_slimspec.py::test_the_rows_left_of_a_batch_are_shaped_by_the_costs_at_their_row_count",
        ),
    ),
    Mutant(
        name="auto shapes: a round's tokens are not held against those predicted",
        edits=(Edit("shapes_slimspec.py", "            self.log.yields.add(", "            (lambda *a: None)("),),
        tests=(FEWER,),
    ),
    Mutant(
        name="auto shapes: the choice ignores how many fewer tokens than predicted each shape yielded",
        edits=(
            Edit(
                "shapes_slimspec.py", "                    self.log.yields.relative,\n", "                    None,\n"
            ),
        ),
        tests=(FEWER,),
    ),
    Mutant(
        name="auto shapes: a shape's tokens are scaled by its own ratio, counting the calibration's share twice",
        edits=(Edit("costs_slimspec.py", "        return factor / self.pooled[0]\n", "        return factor\n"),),
        tests=(FEWER,),
    ),
    Mutant(
        name="auto shapes: a probe's round is held against a choice's prediction",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "counted = full and not self.probing and self.choice is not None",
                "counted = full and self.choice is not None",
            ),
        ),
        tests=(FEWER,),
    ),
    Mutant(
        name="auto shapes: a shape gives way to any predicted faster, however slightly",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "if kept is not None and best_speed <= kept * (1 + max(margin, SWITCH_MARGIN)):",
                "if False:",
            ),
        ),
        tests=(SWITCH,),
    ),
    Mutant(
        name="auto shapes: plain decoding is kept as a drafting shape is (drafting must beat it by the switch margin)",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "if current is not None and not current.is_plain else None",
                "if current is not None else None",
            ),
        ),
        tests=(SWITCH,),
    ),
    Mutant(
        name="auto shapes: the settings' own shape is not priced where no candidate list holds it",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "if self.start not in self.candidates and not self.start.is_plain:",
                "if False:",
            ),
        ),
        tests=(SWITCH,),
    ),
    Mutant(
        name="auto shapes: a shape never tried is chosen on its prediction alone, as one measured",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "score = predictions[name] / (1.0 + UNTRIED_MARGIN if hold and not tried(name) else 1.0)",
                "score = predictions[name]",
            ),
        ),
        tests=(UNTRIED,),
    ),
    Mutant(
        name="auto shapes: where the settings decode a batch plain, an untried shape needs only the usual margin",
        edits=(Edit("shapes_slimspec.py", "hold=self.start.is_plain,", "hold=False,"),),
        tests=(PLAIN_START,),
    ),
    Mutant(
        name="auto shapes: a batch the settings decode plain starts from the settings' drafting shape",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "if 0 < settings.draft_max_batch_size < batch_size:",
                "if False:",
            ),
        ),
        tests=(PLAIN_START,),
    ),
    Mutant(
        name="auto calls: over several rows the first call drafts, no plain call timed to hold drafting ones against",
        edits=(Edit("calls_slimspec.py", "if batch_size > 1 and not log.plain_rates:", "if False:"),),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: a batch size with no choice of its own never starts from others' plain choice",
        edits=(
            Edit(
                "costs_slimspec.py",
                "if batch_size > 1 and not left_of and not log.chose and plain_inherited(key, chooser, logs):",
                "if False:",
            ),
        ),
        tests=(INHERITED,),
    ),
    Mutant(
        name="auto calls: drafting that gained little at fewer rows never starts a batch size plain",
        edits=(
            Edit(
                "costs_slimspec.py",
                "found.plain_chosen or fewer and found.gained_little(margin)",
                "found.plain_chosen",
            ),
        ),
        tests=(LITTLE,),
    ),
    Mutant(
        name="auto calls: drafting that gained little at the same rows (another prompt length) starts it plain",
        edits=(
            Edit(
                "costs_slimspec.py",
                "found.plain_chosen or fewer and found.gained_little(margin)",
                "found.plain_chosen or found.gained_little(margin)",
            ),
        ),
        tests=(LITTLE,),
    ),
    Mutant(
        name="auto calls: drafting that gained under 15% at half the rows does not start a batch size plain",
        edits=(
            Edit(
                "costs_slimspec.py",
                'HALF_ROWS_MARGIN if 2 * rows <= key["batch_size"] else JUDGE_MARGIN',
                "JUDGE_MARGIN",
            ),
        ),
        tests=(LITTLE,),
    ),
    Mutant(
        name="auto calls: the half-rows margin applies at any fewer rows",
        edits=(Edit("costs_slimspec.py", 'if 2 * rows <= key["batch_size"]', 'if rows < key["batch_size"]'),),
        tests=(LITTLE,),
    ),
    Mutant(
        name="auto calls: fewer rows' drafting judged a small gain on too few calls",
        edits=(
            Edit("costs_slimspec.py", "enough = len(drafted) >= JUDGE_CALLS and bool(plain)", "enough = bool(plain)"),
        ),
        tests=(LITTLE,),
    ),
    Mutant(
        name="auto calls: fewer rows' drafting judged by its median calls",
        edits=(
            Edit(
                "costs_slimspec.py",
                "return enough and statistics.harmonic_mean(drafted) < self.plain_rate() * (1 + margin)",
                "return enough and statistics.median(drafted) < self.plain_rate() * (1 + margin)",
            ),
        ),
        tests=(LITTLE,),
    ),
    Mutant(
        name="auto calls: fewer rows' drafting starts more rows plain only where it lost",
        edits=(
            Edit(
                "costs_slimspec.py",
                "return enough and statistics.harmonic_mean(drafted) < self.plain_rate() * (1 + margin)",
                "return enough and statistics.harmonic_mean(drafted) < self.plain_rate() * (1 - margin)",
            ),
        ),
        tests=(LITTLE,),
    ),
    Mutant(
        name="auto calls: a kept choice of its own gives way to another batch size's plain choice",
        edits=(Edit("costs_slimspec.py", "and not left_of and not log.chose and", "and not left_of and"),),
        tests=(INHERITED,),
    ),
    Mutant(
        name="auto calls: plain chosen at more rows, or at one row, starts a batch size plain",
        edits=(
            Edit("costs_slimspec.py", 'for rows in range(2, key["batch_size"] + 1):', "for rows in range(1, 65):"),
        ),
        tests=(INHERITED,),
    ),
    Mutant(
        name="auto calls: plain chosen for sampled calls starts greedy ones plain",
        edits=(
            Edit(
                "costs_slimspec.py",
                'modes = {ACCEPTANCE_MODES[False], key["mode"]}',
                "modes = set(ACCEPTANCE_MODES.values())",
            ),
        ),
        tests=(INHERITED,),
    ),
    Mutant(
        name="auto calls: the loop's own plain rounds never set the plain rate (one plain call's luck stands)",
        edits=(
            Edit(
                "costs_slimspec.py",
                "return max(rate, 1 / self.lower_median(rounds)) if len(rounds) >= PLAIN_ROUNDS_MIN else rate",
                "return rate",
            ),
        ),
        tests=(JUDGED, LITTLE),
    ),
    Mutant(
        name="auto calls: one plain round of the loop sets the plain rate",
        edits=(Edit("costs_slimspec.py", "PLAIN_ROUNDS_MIN = 2", "PLAIN_ROUNDS_MIN = 1"),),
        tests=(JUDGED, LITTLE),
    ),
    Mutant(
        name="auto calls: the loop's plain rounds replace faster plain calls as the plain rate",
        edits=(
            Edit(
                "costs_slimspec.py",
                "return max(rate, 1 / self.lower_median(rounds)) if",
                "return 1 / self.lower_median(rounds) if",
            ),
        ),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: a call judged against the plain calls' median alone",
        edits=(
            Edit(
                "costs_slimspec.py",
                "drafting_lost(log.drafted_rates, log.plain_rates, log.plain_rate(context + steps / 2))",
                "drafting_lost(log.drafted_rates, log.plain_rates, statistics.median(log.plain_rates))",
            ),
        ),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: drafting calls judged without their noise (a spread of calls sends a cell plain)",
        edits=(Edit("costs_slimspec.py", "rate * (1 - JUDGE_MARGIN - noise)", "rate * (1 - JUDGE_MARGIN)"),),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: drafting calls' noise counted without the plain calls'",
        edits=(
            Edit(
                "costs_slimspec.py",
                "math.sqrt(1 / len(drafted) + 1 / max(len(plain), 1))",
                "math.sqrt(1 / len(drafted))",
            ),
        ),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: a batch that drafted slower than its plain calls keeps drafting",
        edits=(
            Edit(
                "costs_slimspec.py",
                "if log.plain_rates and drafting_lost(log.drafted_rates, log.plain_rates, log.plain_rate(context + steps / 2)):",
                "if False:",
            ),
        ),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: one drafting call a little slower than the plain calls sends the next calls plain",
        edits=(Edit("costs_slimspec.py", "if len(drafted) < JUDGE_CALLS:", "if len(drafted) < 2:"),),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: one drafting call far slower than the plain calls waits for two more",
        edits=(Edit("costs_slimspec.py", "alone = len(plain) >= 2 and", "alone = False and"),),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: one drafting call judged against a single plain call's luck",
        edits=(Edit("costs_slimspec.py", "alone = len(plain) >= 2 and", "alone = len(plain) >= 1 and"),),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: one drafting call judged against the plain calls' median, not the slowest",
        edits=(Edit("costs_slimspec.py", "drafted[-1] < min(plain) *", "drafted[-1] < statistics.median(plain) *"),),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: a re-check's drafting calls judged with the calls before the last verdict",
        edits=(
            Edit(
                "costs_slimspec.py",
                "log.plain_chosen, log.plain_calls, log.drafted_rates = True, 0, []",
                "log.plain_chosen, log.plain_calls = True, 0",
            ),
        ),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: the drafting calls' rates not kept with the costs",
        edits=(Edit("costs_slimspec.py", '"drafted": self.drafted_rates,', ""),),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: a call's steps counted past its rows' EOS",
        edits=(
            Edit(
                "calls_slimspec.py",
                "end = next((i + 1 for i, token in enumerate(row) if token in eos_ids), len(row))",
                "end = len(row)",
            ),
        ),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: a call judged in useful tokens a second (how unequal its rows are moves it)",
        edits=(
            Edit(
                "calls_slimspec.py",
                "steps = max(new_token_counts(sequences, ids.shape[-1], eos_ids)) - 1",
                "steps = sum(new_token_counts(sequences, ids.shape[-1], eos_ids)) - ids.shape[0]",
            ),
        ),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: a call of a few steps judged, or setting the plain rate",
        edits=(Edit("costs_slimspec.py", "steps < JUDGE_MIN_TOKENS or", "steps <= 0 or"),),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: a call of one row judged against plain calls",
        edits=(
            Edit("costs_slimspec.py", "if batch_size <= 1 or steps < JUDGE_MIN_TOKENS", "if steps < JUDGE_MIN_TOKENS"),
        ),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: a call timed with its prompts' pass",
        edits=(
            Edit(
                "calls_slimspec.py",
                "    clock = FirstStepClock()\n",
                "    clock = FirstStepClock()\n    clock.at = time.perf_counter()\n",
            ),
        ),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto calls: the decoding loop's calls judged as plain ones",
        edits=(Edit("calls_slimspec.py", "drafted=bool(extra))", "drafted=False)"),),
        tests=(JUDGED,),
    ),
    Mutant(
        name="auto costs: rounds priced as timed, whatever cache they read",
        edits=(Edit("costs_slimspec.py", "slope = self.slope() if slots is not None else 0.0", "slope = 0.0"),),
        tests=(SLOTS,),
    ),
    Mutant(
        name="auto costs: the cost a cache slot adds taken as the mean over pairs (one slowed round moves it)",
        edits=(
            Edit(
                "costs_slimspec.py",
                "return max(statistics.median(slopes), 0.0) if len(slopes) >= SLOPE_MIN_PAIRS else 0.0",
                "return max(statistics.fmean(slopes), 0.0) if len(slopes) >= SLOPE_MIN_PAIRS else 0.0",
            ),
        ),
        tests=(SLOTS,),
    ),
    Mutant(
        name="auto costs: the choice priced where the rounds were timed, not at the coming round's cache",
        edits=(
            Edit("shapes_slimspec.py", "        return self.log.costs(self.slots)", "        return self.log.costs()"),
        ),
        tests=(SLOTS,),
    ),
    Mutant(
        name="auto costs: a round's cache slots not recorded with its time",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "log.add_verify(width, verify_seconds, self.slots)",
                "log.add_verify(width, verify_seconds)",
            ),
        ),
        tests=(KEPT,),
    ),
    Mutant(
        name="auto costs: the decoding loop's rounds timed without the cache they read",
        edits=(
            Edit(
                "decoding_slimspec.py",
                "self.timer.start(self.shape.threshold, len(self.active), slots)",
                "self.timer.start(self.shape.threshold, len(self.active))",
            ),
        ),
        tests=(KEPT,),
    ),
    Mutant(
        name="auto costs: the rounds' cache slots not kept for the next process",
        edits=(
            Edit(
                "costs_slimspec.py",
                '**tables, "slots": slots, "choices": choices}',
                '**tables, "choices": choices}',
            ),
        ),
        tests=(SLOTS, KEPT),
    ),
    Mutant(
        name="auto shapes: in a call, every shape counts as tried (its rounds measured or not)",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "return name in self.log.speed.sums or name == str(self.start)",
                "return True",
            ),
        ),
        tests=(UNTRIED,),
    ),
    Mutant(
        name="auto shapes: the settings' own shape counts as not tried until its rounds are measured",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "return name in self.log.speed.sums or name == str(self.start)",
                "return name in self.log.speed.sums",
            ),
        ),
        tests=(UNTRIED,),
    ),
    Mutant(
        name="auto shapes: the handicapped score is reported as the chosen shape's prediction",
        edits=(Edit("shapes_slimspec.py", "    best_speed = predictions[str(best)]\n", ""),),
        tests=(UNTRIED,),
    ),
    Mutant(
        name="auto shapes: untried shapes are held back against plain decoding too (no tried drafting shape pays)",
        edits=(
            Edit(
                "shapes_slimspec.py",
                "    hold = hold or tried_best > plain_speed * over_plain\n",
                "    hold = tried is not None\n",
            ),
        ),
        tests=(MARGIN,),
    ),
    Mutant(
        name="metrics: every draft step's head is timed right after a target pass (no chain round)",
        edits=(
            Edit(
                "evaluation/metrics.py",
                "            with Timer(device) as timer:\n                head_fn()",
                "            verify()\n            with Timer(device) as timer:\n                head_fn()",
            ),
        ),
        tests=(
            "tests/evaluation/test_metrics.py::"
            "test_the_heads_are_timed_in_a_chain_round_the_first_step_right_after_the_targets_pass",
        ),
    ),
    Mutant(
        name="bench: the model card entries of every temperature share one config (the card refuses them)",
        edits=(Edit(BENCHMARK, 'dataset_config=dataset_config(row["temperature"]),', ""),),
        tests=("tests/evaluation/test_benchmark.py::test_bench_end_to_end_on_tiny_target",),
    ),
    Mutant(
        name="bench: the card gives ρτ against the drafter's own merged head (the same drafts) as a head's quality",
        edits=(
            Edit(
                BENCHMARK,
                "rho_tau=None if own_merged else row.get(",
                "rho_tau=(",
            ),
        ),
        tests=("tests/evaluation/test_benchmark.py::test_bench_merged_head_row_drafts_the_same_and_is_the_reference",),
    ),
    Mutant(
        name="auto shapes: a shape's own ratio is worth its rounds however much they scatter (prior always 8 rounds)",
        edits=(
            Edit(
                "costs_slimspec.py",
                "        if freedom < NOISE_MIN_ROUNDS:\n            return PRIOR_ROUNDS\n",
                "        return PRIOR_ROUNDS\n",
            ),
        ),
        tests=(NOISE,),
    ),
    Mutant(
        name="auto shapes: a shape's halved counts keep their squares whole (the spread reads too large)",
        edits=(
            Edit(
                "costs_slimspec.py",
                "sums[:], squares[:] = [value / 2 for value in sums], [value / 2 for value in squares]",
                "sums[:] = [value / 2 for value in sums]",
            ),
        ),
        tests=(NOISE,),
    ),
    Mutant(
        name="auto shapes: the prior's worth has no ceiling",
        edits=(
            Edit(
                "costs_slimspec.py",
                "min(max(noise / SHAPES_SPREAD**2, PRIOR_ROUNDS), PRIOR_MOST)",
                "max(noise / SHAPES_SPREAD**2, PRIOR_ROUNDS)",
            ),
        ),
        tests=(NOISE,),
    ),
    Mutant(
        name="auto shapes: the spread is taken about every shape's ratio, not each shape's own",
        edits=(
            Edit(
                "costs_slimspec.py", "            ratio = own_measured / own_predicted\n", "            ratio = 1.0\n"
            ),
        ),
        tests=(NOISE,),
    ),
]
