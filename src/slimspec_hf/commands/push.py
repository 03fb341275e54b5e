# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec push`: push a drafter folder to the Hub with its model card."""

import argparse
from pathlib import Path

from ..interop.hub import push_folder
from .common import CommandError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="slimspec push",
        description="Push a SlimSpec drafter folder to the Hub: weights, config, remote code and its model card.",
    )
    parser.add_argument("model_dir", help="folder written by save_pretrained or the trainer")
    parser.add_argument("repo_id", help="Hub repo id, org/name (created if missing)")
    parser.add_argument("--revision", default=None, help="branch to push to (default: main; created if missing)")
    parser.add_argument("--private", action="store_true", help="create the repo as private")
    parser.add_argument("--token", default=None, help="Hub token (default: HF_TOKEN or the stored login)")
    parser.add_argument("--commit-message", default=None)
    parser.add_argument(
        "--results",
        default=None,
        help="JSON file of measured results (model-index), or a `slimspec bench` results.json[#DRAFTER_NAME]",
    )
    parser.add_argument("--recipe", default=None, help="YAML training recipe to describe in the card")
    parser.add_argument("--dataset", action="append", default=None, help="training dataset id (repeatable)")
    parser.add_argument(
        "--license",
        default=None,
        help="licence of the card's front matter, e.g. apache-2.0 (default: the target's, read from its Hub card)",
    )
    parser.add_argument("--keep-card", action="store_true", help="publish the folder's README.md unchanged")
    args = parser.parse_args(argv)
    if not Path(args.model_dir).is_dir():
        raise CommandError(f"`model_dir`: no such folder: {args.model_dir} (pass a folder written by save_pretrained)")
    info, pinned = push_folder(
        args.model_dir,
        args.repo_id,
        revision=args.revision,
        private=args.private,
        token=args.token,
        commit_message=args.commit_message,
        results=args.results,
        recipe=args.recipe,
        datasets=args.dataset,
        update_card=not args.keep_card,
        license=args.license,
    )
    print(f"pushed {args.model_dir} to {info.commit_url}")
    print(f"pinned revision (trust_remote_code=True): {pinned}")
    return 0
