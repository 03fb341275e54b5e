# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Breaks of the exports: a config.json that tells a serving engine another drafter than the weights beside it. The
outputs of `generate()` cannot see them and no engine runs in `make test`; the exports' configs read back as each
engine reads them (`engine_reads`, `vllm_reads`) do."""

from tests.mutations.mutant import Edit, Mutant


VLLM_EXPORT = "integrations/vllm/export.py"
EXPORT = "interop/export.py"
VLLM_READS = "tests/integrations/test_vllm_export.py::test_export_vllm_flags_read_back_as_vllm_reads_them"
ENGINE_READS = "tests/interop/test_eagle31_torchspec.py::test_every_export_reads_back_as_its_engines_read_it"

MUTANTS = [
    Mutant(
        name="export: `--to vllm` writes `fc_norm: false` next to the fc_norm weights",
        edits=(Edit(VLLM_EXPORT, "        fc_norm=bool(cfg.fc_norm),\n", "        fc_norm=False,\n"),),
        tests=(VLLM_READS,),
    ),
    Mutant(
        name="export: `--to speculators` writes `norm_output: false` for a drafter fed its post-norm state",
        edits=(Edit(EXPORT, '"norm_output": bool(cfg.norm_output),', '"norm_output": False,'),),
        tests=(ENGINE_READS,),
    ),
    Mutant(
        name="export: `--to eagle3` writes SGLang's layer ids as layer inputs, not outputs",
        edits=(Edit(EXPORT, "[int(i) - 1 for i in cfg.target_layer_ids]", "[int(i) for i in cfg.target_layer_ids]"),),
        tests=(ENGINE_READS,),
    ),
]
