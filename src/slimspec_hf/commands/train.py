# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec train --config recipes/<target>/slimspec/config_<variant>.yaml [--key value ...]`.

Arguments are [`SlimSpecConfig`] plus the LoRA fields of trl's `ModelConfig` (`use_peft`, `lora_r`, ...), parsed by
trl's `TrlParser`: the YAML sets the defaults, the command line overrides them. Unknown keys fail with the closest
known ones; `ModelConfig`'s other fields (`model_name_or_path`, `dtype`, `attn_implementation`, `load_in_4bit`, ...)
are refused with what to set instead, since the target is `target_model` and the drafter is built here. Runs under
`accelerate launch` as well (`recipes/accelerate_configs/`).
"""

import dataclasses
import difflib
import logging
import os
import sys

from trl import ModelConfig, TrlParser, get_peft_config

from ..training.config import SlimSpecConfig
from .common import CommandError


logger = logging.getLogger(__name__)

# The ModelConfig fields `trl.get_peft_config` reads: the only ones `slimspec train` exposes.
PEFT_FIELDS = (
    "use_peft",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "lora_target_parameters",
    "lora_modules_to_save",
    "lora_task_type",
    "use_rslora",
    "use_dora",
)
_MODEL_CONFIG_FIELDS = {f.name: f for f in dataclasses.fields(ModelConfig)}
# The ModelConfig fields that are refused, and what to set instead.
REFUSED_MODEL_FIELDS = {
    "model_name_or_path": "set `target_model` (the frozen target) and, to start from an existing drafter, "
    "`drafter_model`",
    "dtype": "set `target_dtype` (the target's dtype; the drafter trains in fp32, or `bf16: true` for mixed precision)",
    "torch_dtype": "set `target_dtype`",
    "model_revision": "put the revision in `target_model_init_kwargs: {revision: ...}`",
    "trust_remote_code": "put it in `target_model_init_kwargs: {trust_remote_code: true}`",
    "attn_implementation": "put it in `target_model_init_kwargs: {attn_implementation: ...}`",
    "load_in_8bit": "quantised targets are not supported for training (the features must be exact)",
    "load_in_4bit": "quantised targets are not supported for training (the features must be exact)",
}


def _copy_field(name: str):
    """ModelConfig's field `name` (type, default, help) for a dataclass of our own."""
    source = _MODEL_CONFIG_FIELDS[name]
    if source.default is not dataclasses.MISSING:
        return name, source.type, dataclasses.field(default=source.default, metadata=source.metadata)
    return name, source.type, dataclasses.field(default_factory=source.default_factory, metadata=source.metadata)


PeftArguments = dataclasses.make_dataclass(
    "PeftArguments", [_copy_field(name) for name in PEFT_FIELDS if name in _MODEL_CONFIG_FIELDS]
)
PeftArguments.__doc__ = "The LoRA fields of trl's `ModelConfig` (the drafter's backbone gets the adapter)."


def make_parser() -> TrlParser:
    return TrlParser((SlimSpecConfig, PeftArguments))


def _known_keys() -> list[str]:
    return [f.name for dataclass in (SlimSpecConfig, PeftArguments) for f in dataclasses.fields(dataclass) if f.init]


def _unknown_keys(strings: list[str]) -> list[str]:
    """The keys (`--key` or `--key=value`) among TrlParser's remaining strings."""
    keys = []
    for item in strings:
        if item.startswith("--"):
            keys.append(item[2:].split("=", 1)[0].replace("-", "_"))
        elif item.startswith("-") and len(item) > 1 and not item[1].isdigit():
            keys.append(item.lstrip("-").split("=", 1)[0])
    return keys


def _refuse(keys: list[str], where: str) -> None:
    if not keys:
        return
    known = _known_keys()
    for key in keys:
        if key in REFUSED_MODEL_FIELDS or key in _MODEL_CONFIG_FIELDS:
            reason = REFUSED_MODEL_FIELDS.get(key, "`slimspec train` builds the drafter itself and does not use it")
            raise CommandError(
                f"`{key}` ({where}) is a trl ModelConfig field that `slimspec train` does not use: {reason}."
            )
    key = keys[0]
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(f'`{c}`' for c in close)}?" if close else "see `slimspec train --help`."
    others = f" (and {len(keys) - 1} more: {', '.join(keys[1:])})" if len(keys) > 1 else ""
    raise CommandError(f"unknown key `{key}` {where}{others}; {hint}")


def parse_args(argv: list[str] | None = None):
    """`(SlimSpecConfig, PeftArguments)` from the recipe and the command line, refusing unknown and unused keys."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--config" in argv:
        index = argv.index("--config")
        config = argv[index + 1] if index + 1 < len(argv) else None
        if config is None or config.startswith("--"):
            raise CommandError("`--config`: expected a YAML recipe path after it.")
        if not os.path.isfile(config):
            raise CommandError(
                f"`--config`: no such file: {config} (pass a YAML recipe, e.g. recipes/*/slimspec/*.yaml)"
            )
    args, peft_args, from_config, from_cli = make_parser().parse_args_and_config(
        argv, return_remaining_strings=True, separate_remaining_strings=True
    )
    _refuse(_unknown_keys(from_config), "in the --config recipe")
    _refuse(_unknown_keys(from_cli), "on the command line")
    stray = [item for item in from_cli if not item.startswith("-")]
    if stray:
        raise CommandError(
            f"unexpected argument {stray[0]!r}; settings are `--key value` (see `slimspec train --help`)."
        )
    return args, peft_args


# oneDNN's AMX kernels (torch 2.13) crashed the bf16 backward pass of the drafter's head with a floating point
# exception a few steps into a run on an AMX CPU, where its AVX-512 bf16 kernels train the same run; oneDNN reads
# this variable at its first primitive, so setting it before the trainer builds anything takes effect.
AMX_SAFE_ISA = "AVX512_CORE_BF16"


def limit_onednn_isa_on_amx(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """On a CPU with AMX, caps oneDNN at AVX-512 bf16 for this process unless the user chose an ISA; returns whether
    it did."""
    if "ONEDNN_MAX_CPU_ISA" in os.environ or "DNNL_MAX_CPU_ISA" in os.environ:
        return False
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            flags = set(f.read().split())
    except OSError:
        return False
    if "amx_bf16" not in flags:
        return False
    os.environ["ONEDNN_MAX_CPU_ISA"] = AMX_SAFE_ISA
    logger.warning(
        "This CPU has AMX: training runs oneDNN's AVX-512 bf16 kernels (ONEDNN_MAX_CPU_ISA=%s), since its AMX "
        "kernels crashed the bf16 backward pass; set ONEDNN_MAX_CPU_ISA yourself to choose otherwise.",
        AMX_SAFE_ISA,
    )
    return True


def main(argv: list[str] | None = None) -> int:
    args, peft_args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.use_cpu or not _cuda_available():
        limit_onednn_isa_on_amx()
    from ..training.data import load_training_dataset
    from ..training.trainer import SlimSpecTrainer

    if args.dataset_path is None:
        raise CommandError("`dataset_path` is required: a `slimspec prepare-data` folder or a .jsonl file.")
    train_dataset = load_training_dataset(args.dataset_path)
    eval_dataset = load_training_dataset(args.eval_dataset_path) if args.eval_dataset_path else None
    trainer = SlimSpecTrainer(
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        peft_config=get_peft_config(ModelConfig(**dataclasses.asdict(peft_args))),
    )
    result = trainer.train(resume_from_checkpoint=_resume_value(args.resume_from_checkpoint))
    trainer.save_model(args.output_dir)
    if trainer.is_world_process_zero():  # the card, from the recipe the trainer recorded with the weights
        from ..interop.model_card import write_model_card

        write_model_card(args.output_dir)
    # train_results.json (runtime, steps/s, mean loss) and trainer_state.json (the logged loss/accuracy curve)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()
    if trainer.is_world_process_zero():
        logger.info("Drafter saved to %s", args.output_dir)
    return 0


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _resume_value(value):
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "latest"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "0", "no", ""):
        return None
    return value


if __name__ == "__main__":  # `accelerate launch -m slimspec_hf.commands.train ...`: the same error boundary
    from .common import run_command

    sys.exit(run_command("slimspec train", main, sys.argv[1:]))


__all__ = ["PeftArguments", "main", "make_parser", "parse_args"]
