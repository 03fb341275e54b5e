# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec export`: a SlimSpec drafter as an EAGLE-3 checkpoint for serving engines (speculators, eagle3, vllm)."""

import argparse

from ..interop.export import EXPORT_FORMATS, export_eagle3, export_speculators, export_torchspec
from ..modeling_slimspec import SlimSpecDrafterForCausalLM
from ..targets import DTYPE_CHOICES, embedded_target_dir, is_embedded, resolve_dtype
from .common import resolve_model_folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="slimspec export",
        description="Export a SlimSpec drafter as an EAGLE-3 checkpoint: speculators (merged dense head, vLLM), "
        "eagle3 (SafeAILab layout, merged head: SGLang, OpenVINO GenAI), vllm (speculators layout keeping the "
        "low-rank factors, served by the slimspec vLLM plugin) or torchspec (SafeAILab layout keeping the factors).",
    )
    parser.add_argument("--to", dest="fmt", choices=EXPORT_FORMATS, required=True, help="output format")
    parser.add_argument("src", help="folder or Hub id (org/name[@revision]) of the SlimSpec drafter")
    parser.add_argument("out", help="output folder")
    parser.add_argument(
        "--dtype", choices=DTYPE_CHOICES, default="auto", help="weight dtype (default auto: the drafter's own)"
    )
    parser.add_argument(
        "--verifier",
        default=None,
        help="target (Hub id or local folder) recorded in speculators_config.verifier.name_or_path, which the "
        "speculators library loads; 'embedded' writes the local folder of the embedded SmolLM2 (default: config's)",
    )
    args = parser.parse_args(argv)
    src = resolve_model_folder(args.src, "src")
    drafter = SlimSpecDrafterForCausalLM.from_pretrained(src)
    dtype = None if args.dtype == "auto" else resolve_dtype(args.dtype)
    verifier = args.verifier
    if verifier is not None and args.fmt != "eagle3":
        verifier = str(embedded_target_dir()) if is_embedded(verifier) else verifier
    if args.fmt == "speculators":
        out = export_speculators(drafter, args.out, dtype=dtype, verifier_name_or_path=verifier)
    elif args.fmt == "eagle3":
        out = export_eagle3(drafter, args.out, dtype=dtype)
    elif args.fmt == "torchspec":
        out = export_torchspec(drafter, args.out, dtype=dtype)
    else:
        from ..integrations.vllm.export import export_vllm

        out = export_vllm(drafter, args.out, dtype=dtype, verifier_name_or_path=verifier)
    merged = drafter.config.head_type == "low_rank" and args.fmt not in ("vllm", "torchspec")
    note = " (low-rank head merged into a dense V×d head)" if merged else ""
    layout = {
        "speculators": "speculators EAGLE-3",
        "eagle3": "SafeAILab EAGLE-3",
        "vllm": "SlimSpec vLLM",
        "torchspec": "TorchSpec low-rank EAGLE-3",
    }[args.fmt]
    print(f"exported {args.src} as a {layout} checkpoint{note}: {out}")
    return 0
