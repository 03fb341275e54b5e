# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Breaks of training: the TTT unroll's wiring (which teacher, token and states each step reads), the step weights,
the loss and its mask; and of conversion, the embedding a converted drafter reads. Most are caught by
`test_ttt_loss_equals_drafting_position_by_position`, which recomputes the training loss the way decoding drafts, one
position and one step at a time."""

from tests.mutations.mutant import Edit, Mutant


TRAINER = "training/trainer.py"
MODELING = "modeling_slimspec.py"
LOSSES = "training/losses.py"
UNROLL = "tests/training/test_trainer.py::test_ttt_loss_equals_drafting_position_by_position[low_rank]"
UNROLL_TRIMMED = "tests/training/test_trainer.py::test_ttt_loss_equals_drafting_position_by_position[trimmed]"
UNROLL_HASS = "tests/training/test_trainer.py::test_ttt_loss_equals_drafting_position_by_position[low_rank+hass]"
FAMILY_STEP = (
    "tests/training/test_trainer_families.py::test_one_step_trains_the_drafter_and_leaves_the_target_untouched"
)

MUTANTS = [
    Mutant(
        name="training: the teacher's logits are one position late",
        edits=(
            Edit(
                TRAINER,
                "teacher = final_hidden[batch_idx, teacher_pos]  # (N, d_t)",
                "teacher = final_hidden[batch_idx, (teacher_pos + 1).clamp(max=final_hidden.shape[1] - 1)]",
            ),
        ),
        tests=(UNROLL,),
    ),
    Mutant(
        name="training: every TTT step reads the next token instead of the one k+1 ahead",
        edits=(
            Edit(
                MODELING,
                "shifted[:, :kept] = inputs_embeds[:, k + 1 : k + 1 + kept]",
                "shifted[:, :kept] = inputs_embeds[:, 1 : 1 + kept]",
            ),
        ),
        tests=(UNROLL,),
    ),
    Mutant(
        name="training: every TTT step reads step 0's states instead of the previous step's",
        edits=(
            Edit(
                MODELING,
                '{"hidden_states": self.feedback(states[-1])}',
                '{"hidden_states": self.feedback(states[0])}',
            ),
        ),
        tests=(UNROLL,),
    ),
    Mutant(
        name="training: later TTT steps read the target's features again instead of the drafter's own states",
        edits=(
            Edit(
                MODELING,
                'fed = {"target_features": target_features} if k == 0 else {"hidden_states": self.feedback(states[-1])}',
                'fed = {"target_features": target_features}',
            ),
        ),
        tests=(UNROLL,),
    ),
    Mutant(
        name="training: the TTT steps' RoPE positions do not advance with the step",
        edits=(
            Edit(
                MODELING,
                "cos, sin = self.rotary_emb(hidden_states, position_ids + step)",
                "cos, sin = self.rotary_emb(hidden_states, position_ids)",
            ),
        ),
        tests=(UNROLL,),
    ),
    Mutant(
        name="training: real positions attend to left-padding keys in the unroll",
        edits=(
            Edit(
                MODELING,
                "self.ttt_step(shifted, position_ids, k, context, attention_mask, **fed)",
                "self.ttt_step(shifted, position_ids, k, context, None, **fed)",
            ),
        ),
        tests=(UNROLL,),
    ),
    Mutant(
        name="training: the step weights are uniform instead of decaying",
        edits=(
            Edit(
                LOSSES, "return decay ** torch.arange(num_steps, dtype=torch.float32)", "return torch.ones(num_steps)"
            ),
        ),
        tests=("tests/training/test_losses.py::test_step_weights_are_the_powers_of_the_decay_from_one",),
    ),
    Mutant(
        name="training: the step weights decay in reverse (the last step weighs most)",
        edits=(
            Edit(
                LOSSES,
                "return decay ** torch.arange(num_steps, dtype=torch.float32)",
                "return decay ** torch.arange(num_steps - 1, -1, -1, dtype=torch.float32)",
            ),
        ),
        tests=(UNROLL,),
    ),
    Mutant(
        name="training: the KL is reverse, KL(drafter ‖ target), instead of forward",
        edits=(
            Edit(
                LOSSES,
                "kl = teacher.neg_entropy - torch.linalg.vecdot(teacher.probs, z) + lse",
                "kl = torch.linalg.vecdot(q, z - lse[:, None] - teacher.probs.clamp_min(1e-30).log())",
            ),
        ),
        tests=(UNROLL,),
    ),
    Mutant(
        name="training: the loss mask is read one position early (the teacher's own token, not the next)",
        edits=(
            Edit(
                LOSSES,
                "label[:, :-1] = loss_mask[:, 1:].bool() & attention_mask[:, 1:].bool()",
                "label[:, :-1] = loss_mask[:, :-1].bool() & attention_mask[:, 1:].bool()",
            ),
        ),
        tests=(UNROLL,),
    ),
    Mutant(
        name="training: each step's KL is averaged over all rows, valid or not",
        edits=(
            Edit(
                TRAINER,
                "batch_idx, teacher_pos, student_pos, valid = ttt_targets(attention_mask, loss_mask, self.ttt_steps)",
                "batch_idx, teacher_pos, student_pos, valid = ttt_targets(attention_mask, loss_mask, self.ttt_steps)\n"
                "        valid = torch.ones_like(valid)",
            ),
        ),
        tests=(UNROLL,),
    ),
    Mutant(
        name="training: the drafter's final norm gets no gradient",
        edits=(
            Edit(
                TRAINER,
                "params = [*drafter.norm.parameters(), *([]",
                "params = [*([]",
            ),
        ),
        tests=(UNROLL,),
    ),
    Mutant(
        name="training: a trimmed head's teacher is not renormalised over the kept tokens",
        edits=(
            Edit(
                LOSSES,
                "logits = _as_float(teacher_head(teacher_hidden))  # (n, V), fp32: the KL is sensitive to the tail",
                "logits = _as_float(teacher_head(teacher_hidden))\n    full_logz = logits.logsumexp(-1, keepdim=True)",
            ),
            Edit(LOSSES, "logp = torch.log_softmax(logits, dim=-1)", "logp = logits - full_logz"),
        ),
        tests=(UNROLL_TRIMMED,),
    ),
    Mutant(
        name="training: the HASS top-k term is left out of the loss",
        edits=(Edit(TRAINER, "top_k=self.distill_top_k,", "top_k=0,"),),
        tests=(UNROLL_HASS,),
    ),
    Mutant(
        name="training: the teacher ignores the target's logit soft-capping",
        edits=(Edit(TRAINER, "return logits if not cap else cap * torch.tanh(logits / cap)", "return logits"),),
        tests=(f"{FAMILY_STEP}[gemma3]",),
    ),
    Mutant(
        name="training: the acceptance rate's gradient leaves out the mass the drafter over-proposes (LK losses)",
        edits=(
            Edit(
                LOSSES,
                "d_alpha = q * (below.to(q.dtype) - (q * below).sum(-1, keepdim=True))",
                "d_alpha = q * below.to(q.dtype)",
            ),
        ),
        tests=("tests/training/test_lk_losses.py::test_lk_losses_match_the_naive_reference",),
    ),
    Mutant(
        name="training: lk_lambda's weight λ rises with the acceptance rate instead of falling",
        edits=(
            Edit(
                LOSSES,
                "lam = torch.exp(-objective.eta * alpha)[:, None]",
                "lam = torch.exp(objective.eta * (alpha - 1))[:, None]",
            ),
        ),
        tests=("tests/training/test_lk_losses.py::test_lk_losses_match_the_naive_reference",),
    ),
    Mutant(
        name="training: the configured loss_type is ignored (the trainer always trains the KL)",
        edits=(Edit(TRAINER, "            objective=self.objective,\n", ""),),
        tests=(
            "tests/training/test_trainer.py::test_ttt_loss_equals_drafting_position_by_position[low_rank+lk_alpha]",
        ),
    ),
    Mutant(
        name="conversion: the drafter embeds with the checkpoint's stored (bf16) embedding instead of the target's",
        edits=(
            Edit(
                "interop/convert.py",
                "    return drafter.attach_target(target)\n",
                "    drafter.attach_target(target)\n"
                "    if ckpt.embed_tokens is not None:\n"
                "        drafter.set_input_embeddings(torch.nn.Embedding.from_pretrained(ckpt.embed_tokens.float()))\n"
                "    return drafter\n",
            ),
        ),
        tests=("tests/interop/test_convert.py::test_bf16_copy_of_target_embedding_is_accepted",),
    ),
    Mutant(
        name="continual run: every epoch reuses the first epoch's shuffle",
        edits=(Edit("training/continual.py", "manual_seed(seed + epoch)", "manual_seed(seed)"),),
        tests=(
            "tests/training/test_continual.py::test_the_data_order_reaches_any_position_without_replaying_the_ones_before",
        ),
    ),
    Mutant(
        name="continual run: a session starts again at the first conversation instead of where the last one stopped",
        edits=(Edit("training/continual.py", "            position=self.state.position + conversations,\n", ""),),
        tests=("tests/training/test_continual.py::test_two_sessions_continue_one_run_through_the_folder",),
    ),
    Mutant(
        name="continual run: a training set that grew keeps the position counted in the old, smaller order",
        edits=(Edit(TRAINER, "    elif state.rows and state.rows != len(train_dataset):", "    elif False:"),),
        tests=("tests/training/test_continual.py::test_a_training_set_that_grew_starts_a_new_order_over_all_of_it",),
    ),
    Mutant(
        name="continual run: a session starts from `drafter_model` instead of the run folder's weights",
        edits=(
            Edit(
                TRAINER,
                "            model = args.continual_dir  # the run's latest weights",
                "            pass  # the run's latest weights",
            ),
        ),
        tests=("tests/training/test_continual.py::test_two_sessions_continue_one_run_through_the_folder",),
    ),
    Mutant(
        name="continual run: recording the recipe at a save resets accelerate's state under the running Trainer",
        edits=(
            Edit(
                "training/card_inputs.py",
                "with warnings.catch_warnings(), _accelerate_state_kept():",
                "with warnings.catch_warnings():",
            ),
        ),
        tests=("tests/training/test_continual.py::test_a_session_writes_the_folder_at_every_save_and_trains_on",),
    ),
    Mutant(
        name="continual run: the run folder's config records the fp32 master weights' dtype over bf16 weights",
        edits=(Edit("training/continual.py", '        config["dtype"] = "bfloat16"', "        pass"),),
        tests=("tests/training/test_continual.py::test_two_sessions_continue_one_run_through_the_folder",),
    ),
    Mutant(
        name="training init: the drafter's final norm copies Gemma's stored offsets, not the scale 1 + w they stand for",
        edits=(
            Edit(
                "training/head_init.py",
                "drafter.norm.weight.copy_(effective_norm_scale(target_norm))",
                "drafter.norm.weight.copy_(target_norm.weight.float())",
            ),
        ),
        tests=("tests/training/test_trainer_families.py::test_auto_layer_init_starts_on_the_targets_deepest_state",),
    ),
    Mutant(
        name="training init: a layer that cannot be copied starts random instead of passing the target's state through",
        edits=(Edit("training/head_init.py", "        initialise_layer_as_passthrough(drafter)\n", ""),),
        tests=("tests/training/test_trainer_families.py::test_auto_layer_init_starts_on_the_targets_deepest_state",),
    ),
    Mutant(
        name="head layout: the faster memory order is timed but never kept",
        edits=(
            Edit(
                "heads_slimspec.py",
                "weight.data, kernel, weight._weight_group = kernels[min(range(len(kernels)), key=times.__getitem__)]",
                "weight.data, kernel, weight._weight_group = kernels[0]",
            ),
        ),
        tests=("tests/test_heads_slimspec.py::test_a_heads_weight_is_kept_in_the_layout_that_runs_faster_here[row]",),
    ),
    Mutant(
        name="head kernel: a half-precision head never runs with the weight first",
        edits=(Edit("heads_slimspec.py", "    if data.dtype in HALF_DTYPES:\n", "    if False:\n"),),
        tests=(
            "tests/test_heads_slimspec.py::test_a_half_precision_head_runs_with_the_weight_first_where_that_is_faster_here[True]",
        ),
    ),
    Mutant(
        name="head kernel: the weight-first kernel is chosen but the head runs F.linear",
        edits=(
            Edit(
                "heads_slimspec.py",
                "    return weight_first(hidden, weight, weight._weight_group)",
                "    return F.linear(hidden, weight)",
            ),
        ),
        tests=(
            "tests/test_heads_slimspec.py::test_a_half_precision_head_runs_with_the_weight_first_where_that_is_faster_here[True]",
        ),
    ),
    Mutant(
        name="head kernel: one row's grouped product pairs the weight's rows with the wrong logits",
        edits=(Edit("heads_slimspec.py", "@ blocks).reshape(1, -1)", "@ blocks).t().reshape(1, -1)"),),
        tests=(
            "tests/test_heads_slimspec.py::test_a_half_precision_head_runs_with_the_weight_first_where_that_is_faster_here[True]",
        ),
    ),
    Mutant(
        name="head layout: a training drafter's weight is re-laid out under the optimiser",
        edits=(Edit(MODELING, "elif not self.training and hasattr", "elif hasattr"),),
        tests=("tests/test_heads_slimspec.py::test_a_heads_weight_is_kept_in_the_layout_that_runs_faster_here[row]",),
    ),
    Mutant(
        name="CPU training leaves large tensors to fresh mappings (each page-faulted in: half the tokens/s on Gemma-3)",
        edits=(
            Edit(
                TRAINER,
                "    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and",
                "    return bool(libc.mallopt(_M_MMAP_MAX, 65536)) and",
            ),
        ),
        tests=(
            "tests/training/test_trainer.py::"
            "test_on_a_cpu_a_loss_sized_tensor_comes_from_the_reused_heap_not_a_fresh_mapping",
        ),
    ),
]
