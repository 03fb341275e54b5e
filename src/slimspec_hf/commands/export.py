# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec export`: a SlimSpec drafter as a speculators EAGLE-3 checkpoint (merged dense head) for vLLM."""

import argparse

from ..interop.export import EXPORT_FORMATS, export_speculators
from ..modeling_slimspec import SlimSpecDrafterForCausalLM
from ..targets import DTYPE_CHOICES, resolve_dtype
from .common import error_boundary


@error_boundary("slimspec export", code=1)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="slimspec export",
        description="Export a SlimSpec drafter as a speculators EAGLE-3 checkpoint (merged dense head) for vLLM.",
    )
    parser.add_argument("--to", dest="fmt", choices=EXPORT_FORMATS, required=True, help="output format")
    parser.add_argument("src", help="folder of the SlimSpec drafter")
    parser.add_argument("out", help="output folder")
    parser.add_argument(
        "--dtype", choices=DTYPE_CHOICES, default="auto", help="weight dtype (default auto: the drafter's own)"
    )
    parser.add_argument("--verifier", default=None, help="target name recorded in the checkpoint (default: config's)")
    args = parser.parse_args(argv)
    drafter = SlimSpecDrafterForCausalLM.from_pretrained(args.src)
    dtype = None if args.dtype == "auto" else resolve_dtype(args.dtype)
    out = export_speculators(drafter, args.out, dtype=dtype, verifier_name_or_path=args.verifier)
    head = drafter.config.head_type
    note = " (low-rank head merged into a dense V×d head)" if head == "low_rank" else ""
    print(f"exported {args.src} as a speculators EAGLE-3 checkpoint{note}: {out}")
    return 0
