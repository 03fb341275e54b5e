# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Breaks of publishing and of `convert --recover`: the pushed card's draft settings and the pushed
generation_config.json (caught through the real Hub client against the loopback server, and through `slimspec push`
of the shipped drafter); the recovery's teacher, its batched target answers and its resume."""

from tests.mutations.mutant import Edit, Mutant


HUB = "interop/hub.py"
RECOVER = "interop/recover.py"
HUB_TESTS = "tests/interop/test_hub.py"
PUSH_SHIPPED = "tests/commands/test_push.py::test_pushed_card_of_the_shipped_drafter_states_its_generation_config"
PUSHED_CARD = f"{HUB_TESTS}::test_pushed_card_states_the_folders_draft_settings"
PUSHED_SETTINGS = f"{HUB_TESTS}::test_pushed_generation_config_is_uploaded_and_loaded"
RECOVER_TESTS = "tests/interop/test_recover.py"
RECOVER_TEACHER = f"{RECOVER_TESTS}::test_convert_recover_fits_the_source_head_not_the_targets"
RECOVER_BATCH = f"{RECOVER_TESTS}::test_target_answers_in_a_batch_equal_each_prompt_answered_alone"
RECOVER_RESUME = f"{RECOVER_TESTS}::test_a_resumed_fit_equals_one_that_never_stopped"

MUTANTS = [
    Mutant(
        name="push: the card is rendered from config.json alone (the folder's generation_config ignored)",
        edits=(
            Edit(
                HUB,
                "    card = render_model_card(folder, repo_id=repo_id, revision=pinned, tags=tags, **card_inputs)\n",
                "    card = render_model_card(\n"
                '        json.loads((folder / "config.json").read_text()), repo_id=repo_id, revision=pinned, tags=tags,\n'
                "        **card_inputs,\n"
                "    )\n",
            ),
        ),
        tests=(PUSHED_CARD, PUSH_SHIPPED),
        each=True,
    ),
    Mutant(
        name="push: generation_config.json is not uploaded (a drafter loaded from the Hub loses its draft settings)",
        edits=(Edit(HUB, '    "generation_config.json",\n', ""),),
        tests=(PUSHED_SETTINGS, PUSH_SHIPPED),
        each=True,
    ),
    Mutant(
        name="recover: the low-rank head is fitted to the target's LM head instead of the source's dense head",
        edits=(
            Edit(
                RECOVER,
                "record = fit_low_rank_head(drafter.lm_head, teacher_w, states, settings, work, progress=bar)",
                "record = fit_low_rank_head(\n"
                "            drafter.lm_head, target.get_output_embeddings().weight.detach(), states, settings, work,\n"
                "            progress=bar,\n"
                "        )",
            ),
        ),
        tests=(RECOVER_TEACHER,),
    ),
    Mutant(
        name="recover: the target's answers are generated right-padded in a batch",
        edits=(Edit(RECOVER, 'padding_side="left"', 'padding_side="right"'),),
        tests=(RECOVER_BATCH,),
    ),
    Mutant(
        name="recover: batched answers keep the padding after their end-of-sequence token",
        edits=(Edit(RECOVER, "            if ends.numel():\n", "            if False:\n"),),
        tests=(RECOVER_BATCH,),
    ),
    Mutant(
        name="recover: a resumed fit restarts Adam's moments",
        edits=(
            Edit(
                RECOVER,
                'optimizer.load_state_dict(_adam_state(optimizer, saved, record["adam_step"]))',
                "optimizer.load_state_dict(optimizer.state_dict())",
            ),
        ),
        tests=(RECOVER_RESUME,),
    ),
    Mutant(
        name="recover: a resumed fit draws its batches from the start of the sequence again",
        edits=(Edit(RECOVER, '        generator.set_state(saved["generator"])\n', "        pass\n"),),
        tests=(RECOVER_RESUME,),
    ),
    Mutant(
        name="files are written private to their owner (a server run as another user cannot read a saved drafter)",
        edits=(
            Edit(
                "utils.py",
                "        os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())\n",
                "",
            ),
        ),
        tests=("tests/test_utils.py::test_a_new_file_gets_the_mode_a_plain_write_gives",),
    ),
]
