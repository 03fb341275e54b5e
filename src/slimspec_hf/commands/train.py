# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec train --config recipes/<target>/slimspec/config_<variant>.yaml [--key value ...]`.

Arguments are [`SlimSpecConfig`] plus trl's `ModelConfig` (for `use_peft`, `lora_r`, ...), parsed by trl's
`TrlParser`: the YAML sets the defaults, the command line overrides them, unknown keys fail. Runs under
`accelerate launch` as well (`recipes/accelerate_configs/`).
"""

import logging
import sys

from trl import ModelConfig, TrlParser, get_peft_config

from ..training.config import SlimSpecConfig


logger = logging.getLogger(__name__)


def make_parser() -> TrlParser:
    return TrlParser((SlimSpecConfig, ModelConfig))


def _resume_value(value):
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "latest"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "0", "no", ""):
        return None
    return value


def main(argv: list[str] | None = None) -> int:
    args, model_args = make_parser().parse_args_and_config(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from ..training.data import load_training_dataset
    from ..training.trainer import SlimSpecTrainer

    if args.dataset_path is None:
        raise ValueError("`dataset_path` is required: a `slimspec prepare-data` folder or a .jsonl file.")
    if model_args.model_name_or_path is not None:
        raise ValueError(
            "`model_name_or_path` is not used by `slimspec train`: set `target_model` (the frozen target) and, to "
            "start from an existing drafter, `drafter_model`."
        )
    train_dataset = load_training_dataset(args.dataset_path)
    eval_dataset = load_training_dataset(args.eval_dataset_path) if args.eval_dataset_path else None
    trainer = SlimSpecTrainer(
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        peft_config=get_peft_config(model_args),
    )
    trainer.train(resume_from_checkpoint=_resume_value(args.resume_from_checkpoint))
    trainer.save_model(args.output_dir)
    if trainer.is_world_process_zero():
        logger.info("Drafter saved to %s", args.output_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "make_parser"]
