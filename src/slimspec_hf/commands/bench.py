# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec bench`: Spec-Bench / MT-Bench tokens/s, acceptance length and speed-up per category.

Greedy and sampled runs (`--temperatures`, `--top-p`) one question at a time against the target alone, or, with
`--batch-sizes`, batches of questions against plain batched `generate()`."""

import argparse
import json
import logging
from pathlib import Path

from ..evaluation.benchmark import (
    DATASETS,
    BenchmarkSettings,
    default_questions_path,
    load_questions,
    render_markdown,
    run_benchmark,
    write_outputs,
)
from ..evaluation.systems import add_merged_drafters
from .common import (
    CommandError,
    add_draft_length_argument,
    add_runtime_arguments,
    check_model_source,
    load_models,
    resolve_data_file,
    runtime_line,
)


logger = logging.getLogger(__name__)


def _tree_shape(text: str) -> tuple[int, int, int]:
    """`SIZE/DEPTH/TOPK` (e.g. 16/4/4): the nodes verified per round, drafter levels, children per node."""
    parts = text.split("/")
    if len(parts) != 3 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise argparse.ArgumentTypeError(
            f"expected SIZE/DEPTH/TOPK, three positive integers (e.g. 16/4/4), got {text!r}"
        )
    size, depth, top_k = (int(part) for part in parts)
    return size, depth, top_k


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="slimspec bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="embedded", help="target: Hub id, local folder, .gguf path or 'embedded'")
    p.add_argument(
        "--drafter", action="append", default=[], metavar="PATH", help="drafter folder or Hub id (repeatable)"
    )
    p.add_argument("--name", action="append", default=None, help="display name per --drafter (default: folder name)")
    add_row_arguments(p)
    add_question_arguments(p)
    add_draft_length_argument(p, None, "tokens drafted per round (default: each drafter's own)")
    p.add_argument(
        "--confidence-threshold",
        type=float,
        nargs="+",
        default=[],
        metavar="P",
        help="also run each drafter with assistant_confidence_threshold=P (rows named NAME@pP)",
    )
    p.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=None,
        metavar="B",
        help="batched decoding instead: plain batched generate() against each drafter row (as without it: -k, "
        "--draft-lookup, --draft-tree, --confidence-threshold; a drafter with a draft_max_batch_size also as "
        "NAME@any-batch, drafting at every B) at each batch size and temperature, batches of B questions "
        "interleaved; writes batch_sweep.json",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--context-length", type=int, default=256, help="cached positions in the step-time breakdown")
    p.add_argument("--timing-repeats", type=int, default=20)
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--output-dir", default="bench-results")
    add_runtime_arguments(p)
    p.add_argument("--no-progress", action="store_true")
    return p


def add_row_arguments(p: argparse.ArgumentParser) -> None:
    """The rows beside each drafter (merged heads, prompt lookup, hybrid lookup, trees) and the reference row."""
    p.add_argument(
        "--reference",
        default=None,
        help="name of the drafter ρτ and ν refer to (default: the first full-head drafter, else the first merged one)",
    )
    p.add_argument(
        "--merged-head",
        action="store_true",
        help="also run every low-rank drafter NAME with its head W_up·W_down multiplied out into one dense V×d head "
        "(row NAME-merged, head 'full (merged)': the same drafts at a full head's cost); without a trained full-head "
        "drafter it is the reference of ρτ and ν",
    )
    p.add_argument(
        "--prompt-lookup",
        nargs="?",
        type=int,
        const=10,
        default=None,
        metavar="N",
        help="also benchmark prompt-lookup decoding with N candidate tokens (default 10)",
    )
    p.add_argument(
        "--draft-lookup",
        action="store_true",
        help="run each drafter twice: as a chain (NAME) and hybrid with prompt lookup (NAME+lookup)",
    )
    p.add_argument(
        "--draft-tree",
        action="append",
        type=_tree_shape,
        default=[],
        metavar="SIZE/DEPTH/TOPK",
        help="also run each drafter drafting a dynamic tree of this shape, e.g. 16/4/4 (row NAME+tree16/4/4; with "
        "--draft-lookup also NAME+tree16/4/4+lookup); repeatable",
    )
    p.add_argument(
        "--draft-shape",
        nargs="+",
        choices=("auto", "fixed"),
        default=[],
        metavar="SHAPE",
        help="also run each drafter with draft_shape=SHAPE (row NAME@SHAPE): auto (chosen from this machine's "
        "measured costs; the table names the shapes chosen) or fixed (the drafter's own settings)",
    )
    p.add_argument(
        "--save-acceptance",
        action="store_true",
        help="write each drafter's per-depth acceptance, as its draft_shape=auto rounds counted it, into the "
        "drafter folder's generation_config.json (draft_acceptance): later auto calls start from it",
    )


def add_question_arguments(p: argparse.ArgumentParser) -> None:
    """Which questions are asked, and how they are answered and timed."""
    p.add_argument("--dataset", choices=sorted(DATASETS), default="spec_bench")
    p.add_argument(
        "--data",
        default=None,
        help="question jsonl: a local file or hf://datasets/ORG/NAME/PATH (default: $SLIMSPEC_DATA's copy of "
        "--dataset, else the copy shipped in the package)",
    )
    p.add_argument("--categories", nargs="+", default=None, help="keep these categories (e.g. mt_bench qa coding)")
    p.add_argument("--limit", type=int, default=None, help="first N questions of each category")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0], help="0 is greedy")
    p.add_argument(
        "--top-p",
        type=float,
        default=1.0,
        metavar="P",
        help="sampled runs keep the smallest set of tokens holding probability P (default 1: all; no top-k cut)",
    )
    p.add_argument("--repeats", type=int, default=1, help="runs per question and system; the median time is kept")


def batch_sweep(args, target, tokenizer, drafters: dict, questions: list[dict]) -> int:
    """`--batch-sizes`: the batched sweep, one table, `batch_sweep.json` in --output-dir."""
    import torch

    from ..evaluation.batching import batch_systems, render_sweep, run_batch_sweep, summarize
    from ..evaluation.systems import build_systems
    from ..utils import atomic_write_json

    systems = build_systems(
        drafters,
        num_assistant_tokens=args.num_assistant_tokens,
        confidence_thresholds=tuple(args.confidence_threshold),
        draft_lookup=args.draft_lookup,
        draft_trees=tuple(args.draft_tree),
        draft_shapes=tuple(args.draft_shape),
    )
    sweep = run_batch_sweep(
        target,
        tokenizer,
        batch_systems(systems),
        [q["prompt"] for q in questions],
        args.batch_sizes,
        max_new_tokens=args.max_new_tokens,
        temperatures=args.temperatures,
        top_p=args.top_p,
        seed=args.seed,
    )
    summary = summarize(sweep)
    sampling = f", sampled with top-p {args.top_p:g} (no top-k)" if any(args.temperatures) else ""
    header = (
        f"{len(questions)} questions × {args.max_new_tokens} new tokens, temperatures "
        f"{', '.join(f'{t:g}' for t in args.temperatures)}{sampling}; {target.dtype}, "
        f"{torch.get_num_threads()} thread(s), {target.device}"
    )
    path = Path(args.output_dir) / "batch_sweep.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {"target": args.target, "top_p": args.top_p, "temperatures": args.temperatures, "seed": args.seed}
    atomic_write_json(path, {"header": header, "config": config, "summary": summary, **sweep}, indent=1)
    logger.info("wrote %s", path)
    print(render_sweep(summary, header))
    return 0


def _check_arguments(args) -> None:
    """Refuses flag combinations `slimspec bench` cannot run, before any model is loaded."""
    if args.name is not None and len(args.name) != len(args.drafter):
        raise CommandError(f"`--name`: got {len(args.name)} for {len(args.drafter)} --drafter; give one per drafter.")
    if not 0.0 < args.top_p <= 1.0:
        raise CommandError(f"`--top-p` must be in (0, 1], got {args.top_p}.")
    if args.save_acceptance:
        remote = [path for path in args.drafter if not Path(path).is_dir()]
        if remote or not args.drafter:
            raise CommandError(
                f"`--save-acceptance` writes into local drafter folders; got {remote or 'no --drafter'}: download "
                "the drafter (`hf download`) and pass its folder."
            )
    if args.batch_sizes is None:
        return
    if min(args.batch_sizes) < 1 or not args.drafter:
        raise CommandError(
            f"`--batch-sizes`: got {args.batch_sizes} with {len(args.drafter)} --drafter; give batch sizes >= 1 "
            "and at least one --drafter."
        )
    if args.prompt_lookup:
        raise CommandError(
            "`--prompt-lookup` does not run with `--batch-sizes`: transformers' prompt lookup decodes one prompt at a "
            "time; drop one of them."
        )
    if args.repeats != 1:
        raise CommandError(
            f"`--repeats` ({args.repeats}) is not used with `--batch-sizes` (each batch runs once per system); drop it."
        )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)
    _check_arguments(args)
    data = resolve_data_file(args.data, "--data") if args.data else default_questions_path(args.dataset)
    check_model_source(args.target, "--target", allow_file=True)
    for path in args.drafter:
        check_model_source(path, "--drafter")
    questions = load_questions(data, args.categories, args.limit, args.dataset)
    target, tokenizer, loaded = load_models(args.target, args.drafter, args.dtype, args.device, args.threads)
    logger.info(runtime_line(target))
    if "auto" in args.draft_shape:
        from ..costs_slimspec import costs_root

        root = costs_root()
        kept = f"kept in {root} (earlier runs' costs are used)" if root else "not kept (SLIMSPEC_DRAFT_COSTS is off)"
        logger.info("[auto] measured draft costs: %s", kept)
    drafters = {}
    for i, (path, drafter) in enumerate(zip(args.drafter, loaded)):
        name = args.name[i] if args.name else Path(path).name
        if name in drafters or name in ("target", "prompt_lookup"):
            name = f"{name}-{i}"
        drafters[name] = drafter
    if args.batch_sizes is not None:
        batched = add_merged_drafters(drafters)[0] if args.merged_head else drafters  # no reference in batches
        code = batch_sweep(args, target, tokenizer, batched, questions)
        save_acceptance(args, drafters)
        return code
    logger.info(
        "bench: %d questions × %d systems × %d temperatures × %d repeats",
        len(questions),
        _system_count(args, drafters),
        len(args.temperatures),
        args.repeats,
    )
    settings = BenchmarkSettings(
        temperatures=tuple(args.temperatures),
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        repeats=args.repeats,
        seed=args.seed,
        prompt_lookup=args.prompt_lookup,
        num_assistant_tokens=args.num_assistant_tokens,
        confidence_thresholds=tuple(args.confidence_threshold),
        draft_lookup=args.draft_lookup,
        draft_trees=tuple(args.draft_tree),
        draft_shapes=tuple(args.draft_shape),
        merged_head=args.merged_head,
        reference=args.reference,
        context_length=args.context_length,
        timing_repeats=args.timing_repeats,
        dataset=args.dataset,
        progress=not args.no_progress,
    )
    report = run_benchmark(target, tokenizer, drafters, questions, settings)
    report["config"]["target"] = args.target
    for path in write_outputs(report, args.output_dir):
        logger.info("wrote %s", path)
    print(render_markdown(report))
    save_acceptance(args, drafters)
    return 0


def _system_count(args, drafters: dict) -> int:
    """The rows a single-question run times: the target, each drafter's (merged heads included) and prompt lookup."""
    merged = sum(d.config.head_type == "low_rank" for d in drafters.values()) if args.merged_head else 0
    per_drafter = len(args.confidence_threshold) + len(args.draft_shape)
    per_drafter += (1 + len(args.draft_tree)) * (1 + args.draft_lookup)
    return 1 + (len(drafters) + merged) * per_drafter + bool(args.prompt_lookup)


def save_acceptance(args, drafters: dict) -> None:
    """`--save-acceptance`: each drafter's per-depth acceptance counted by this run's `draft_shape="auto"` rounds,
    into its folder's generation_config.json (`draft_acceptance`, per mode counted; the other mode kept)."""
    if not args.save_acceptance:
        return
    from ..acceptance_slimspec import measured_acceptance
    from ..utils import atomic_write_json

    for path, drafter in zip(args.drafter, drafters.values()):
        measured = measured_acceptance(drafter)
        if not measured:
            logger.info("%s: no draft_shape=auto round drafted; nothing saved", path)
            continue
        file = Path(path) / "generation_config.json"
        stored = json.loads(file.read_text()) if file.is_file() else {}
        stored["draft_acceptance"] = {**(stored.get("draft_acceptance") or {}), **measured}
        atomic_write_json(file, stored, indent=2, sort_keys=True)
        logger.info("%s: saved the per-depth acceptance (%s)", file, ", ".join(measured))
