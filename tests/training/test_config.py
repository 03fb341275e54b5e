"""Every recipe parses with the real parser (`slimspec train`'s TrlParser); unknown keys fail."""

from pathlib import Path

import pytest
import yaml

from slimspec_hf.commands.train import make_parser, parse_args
from slimspec_hf.training.config import SlimSpecConfig


RECIPES = Path(__file__).resolve().parents[2] / "recipes"
TRAIN_RECIPES = sorted([*RECIPES.glob("*/slimspec/config_*.yaml"), *RECIPES.glob("*/ablations/config_*.yaml")])
SMOLLM2 = RECIPES / "smollm2-135m-instruct" / "slimspec"
ABLATIONS = RECIPES / "smollm2-135m-instruct" / "ablations"


def parse(path, *extra):
    # The GPU recipes ask for bf16, which TrainingArguments refuses on a machine without a GPU unless `use_cpu`.
    on_cpu = [] if _has_gpu() else ["--use_cpu", "true"]
    return parse_args(["--config", str(path), *on_cpu, *extra])


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


# The shipped drafter's stages, in order; each stage after the first starts from the one before.
STAGES = tuple(f"config_embedded_v{n}.yaml" for n in range(1, 7))
CONTINUAL = "config_embedded_continual.yaml"  # the run that carries on from the last stage, session by session
SIDE_BY_SIDE = (
    "config_full_head.yaml",
    "config_trimmed.yaml",
    "config_target_head.yaml",
    "config_rank36.yaml",
    "config_rank144.yaml",
)


def test_expected_recipes_exist():
    assert {p.name for p in SMOLLM2.glob("config_*.yaml")} == {*STAGES, CONTINUAL}
    assert {p.name for p in ABLATIONS.glob("config_*.yaml")} == set(SIDE_BY_SIDE)
    ablations_readme = (ABLATIONS / "README.md").read_text()
    assert all(f"`{name}`" in ablations_readme for name in SIDE_BY_SIDE)
    for target in ("llama-3.1-8b-instruct", "gpt-oss-20b", "qwen3-30b-a3b", "smollm2-135m-instruct", "gemma-3-270m"):
        assert (RECIPES / target / "README.md").is_file()
        assert list((RECIPES / target / "slimspec").glob("config_*.yaml"))


@pytest.mark.parametrize("path", TRAIN_RECIPES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_recipe_parses(path):
    args, model_args = parse(path)
    assert isinstance(args, SlimSpecConfig)
    assert args.dataset_path and args.output_dir
    assert args.ttt_steps >= 1 and 0 < args.step_loss_decay <= 1
    assert not hasattr(model_args, "model_name_or_path")  # the target is `target_model`


def test_smollm2_ablations_differ_from_the_first_stage_only_in_the_head():
    head_keys = {"head_type", "head_rank", "head_init", "draft_vocab_size", "output_dir"}
    head_keys |= {"save_strategy", "save_steps", "save_total_limit"}  # checkpoints to resume from: not the training
    base = yaml.safe_load((SMOLLM2 / "config_embedded_v1.yaml").read_text())
    for name in SIDE_BY_SIDE:
        path = ABLATIONS / name
        other = yaml.safe_load(path.read_text())
        differing = {k for k in set(base) | set(other) if base.get(k) != other.get(k)}
        assert differing <= head_keys, (path.name, differing)
    assert parse(ABLATIONS / "config_rank36.yaml")[0].head_rank == 576 // 16
    assert parse(ABLATIONS / "config_rank144.yaml")[0].head_rank == 576 // 4
    assert parse(SMOLLM2 / "config_embedded_v1.yaml")[0].head_rank == 576 // 8


def test_gemma_ablations_differ_from_the_low_rank_run_only_in_the_head():
    folder = RECIPES / "gemma-3-270m" / "ablations"
    head_keys = {"head_type", "head_rank", "head_init", "draft_vocab_size", "output_dir"}
    head_keys |= {"save_strategy", "save_steps", "save_total_limit"}  # checkpoints to resume from: not the training
    base = yaml.safe_load((folder / "config_low_rank.yaml").read_text())
    names = {p.name for p in folder.glob("config_*.yaml")}
    heads = {"config_low_rank.yaml", "config_full_head.yaml", "config_target_head.yaml", "config_trimmed.yaml"}
    assert names == heads | {"config_low_rank_fc_norm.yaml"}
    for name in names:
        other = yaml.safe_load((folder / name).read_text())
        differing = {k for k in set(base) | set(other) if base.get(k) != other.get(k)}
        # the one backbone ablation: the low-rank run with each target layer normed before `fc`
        allowed = head_keys if name in heads else {"fc_norm", "output_dir"}
        assert differing <= allowed, (name, differing)
    assert parse(folder / "config_low_rank_fc_norm.yaml")[0].fc_norm
    assert parse(folder / "config_trimmed.yaml")[0].draft_vocab_size == 32768
    assert parse(folder / "config_low_rank.yaml")[0].head_rank == 640 // 8


def test_later_stages_warm_start_from_the_shipped_folder():
    """Stage n starts from `drafters/`, where stage n - 1 was shipped; the first stage starts a new drafter."""
    assert parse(SMOLLM2 / STAGES[0])[0].drafter_model is None
    for name in (*STAGES[1:], CONTINUAL):
        assert parse(SMOLLM2 / name)[0].drafter_model == "drafters/smollm2-135m-instruct-slimspec", name


def test_shipped_drafter_recipe_names_its_committed_data():
    args, _ = parse(SMOLLM2 / "config_embedded_v1.yaml")
    subset = Path(__file__).resolve().parents[2] / args.dataset_path
    rows = subset.read_text().splitlines()
    assert len(rows) == args.max_steps * args.per_device_train_batch_size == 1200  # one pass, no partial batch
    assert args.head_type == "low_rank" and args.head_rank == 72 and args.features == "offline"


@pytest.mark.parametrize("target", ["llama-3.1-8b-instruct", "gpt-oss-20b", "qwen3-30b-a3b"])
def test_paper_setups(target):
    (args, _) = parse(RECIPES / target / "slimspec" / "config_8xh200.yaml")
    assert args.learning_rate == 4e-4 and args.weight_decay == 0.0 and args.max_grad_norm == 0.5
    assert args.lr_scheduler_type.value == "cosine" and args.num_train_epochs == 10
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps * 8 == 64
    assert args.bf16 and args.ttt_steps == 6


def test_command_line_overrides_the_recipe():
    args, _ = parse(SMOLLM2 / "config_embedded_v1.yaml", "--max_steps", "7", "--head_rank", "36")
    assert args.max_steps == 7 and args.head_rank == 36


def test_unknown_keys_fail(tmp_path):
    recipe = yaml.safe_load((SMOLLM2 / "config_embedded_v1.yaml").read_text())
    recipe["head_rnak"] = 36
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(recipe))
    with pytest.raises(ValueError, match="head_rnak"):
        parse(bad)
    with pytest.raises((ValueError, SystemExit), match="no_such_flag|"):
        parse(SMOLLM2 / "config_embedded_v1.yaml", "--no_such_flag", "1")


def test_invalid_values_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="step_loss_decay"):
        parse(SMOLLM2 / "config_embedded_v1.yaml", "--step_loss_decay", "1.5")
    with pytest.raises(SystemExit):  # argparse choices
        parse(SMOLLM2 / "config_embedded_v1.yaml", "--head_init", "pca")


@pytest.mark.parametrize("name", ["ddp", "fsdp", "deepspeed_zero2"])
def test_accelerate_configs(name):
    config = yaml.safe_load((RECIPES / "accelerate_configs" / f"{name}.yaml").read_text())
    assert config["num_processes"] == 8 and config["mixed_precision"] == "bf16"
    expected = {"ddp": "MULTI_GPU", "fsdp": "FSDP", "deepspeed_zero2": "DEEPSPEED"}[name]
    assert config["distributed_type"] == expected


def test_card_fields_are_marked_on_the_config_and_stay_out_of_the_parsers():
    from transformers import HfArgumentParser

    from slimspec_hf.training.config import card_fields

    fields = card_fields()
    assert fields[:4] == ["target_model", "max_length", "drafter_model", "head_type"]
    assert {"head_rank", "ttt_steps", "learning_rate", "seed"} <= set(fields) and "output_dir" not in fields
    HfArgumentParser(SlimSpecConfig)  # the mark is no `add_argument` keyword
    make_parser()
