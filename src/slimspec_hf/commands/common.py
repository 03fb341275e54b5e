# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""What the `slimspec` commands share: the runtime arguments (`--dtype`, `--threads`), loading a target with its
drafters for inference, the line that says how they run, and the error boundary.

The timed `generate` pieces (prompt encoding, sampling kwargs, timed generate) live in
[`~evaluation.timing`], below the benchmark library that uses them too.
"""

import argparse
import functools
import sys
from collections.abc import Callable, Sequence

import torch

from ..targets import DTYPE_CHOICES, load_target


# What a command reports as a user error (one line on stderr and an exit code) instead of a traceback.
USER_ERRORS = (ValueError, TypeError, FileNotFoundError, OSError)


def add_runtime_arguments(parser: argparse.ArgumentParser, dtype_default: str = "auto") -> None:
    """`--dtype` (of the target; drafters follow it) and `--threads` (torch CPU threads)."""
    parser.add_argument(
        "--dtype",
        choices=list(DTYPE_CHOICES),
        default=dtype_default,
        help=f"target dtype, drafters follow it (default {dtype_default}: bf16 where the device computes it "
        "natively, else fp32)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is fastest on a busy machine)")


def load_models(
    target_name: str | None,
    drafter_paths: Sequence[str] = (),
    dtype: str | torch.dtype = "auto",
    device: str | torch.device | None = None,
    threads: int | None = None,
):
    """`(target, tokenizer, drafters)` for inference: the target through the one loader, each drafter (folder or
    Hub id) in the target's dtype and on its device, all in eval mode."""
    if threads:
        torch.set_num_threads(threads)
    from transformers import AutoModelForCausalLM

    import slimspec_hf  # noqa: F401  (registers the drafter classes and the generate() hook)

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    target, tokenizer = load_target(target_name, dtype=dtype, device=device)
    drafters = [
        AutoModelForCausalLM.from_pretrained(path, dtype=target.dtype).to(target.device).eval()
        for path in drafter_paths
    ]
    return target, tokenizer, drafters


def runtime_line(target) -> str:
    """`[runtime] device cpu, dtype bfloat16, 2 threads`: how the numbers that follow were measured."""
    dtype = str(target.dtype).removeprefix("torch.")
    return f"[runtime] device {target.device}, dtype {dtype}, {torch.get_num_threads()} threads"


def error_boundary(prog: str, code: int = 1, errors: tuple[type[Exception], ...] = USER_ERRORS) -> Callable:
    """Decorates a command's `main`: a user error (one of `errors`) becomes `prog: error: ...` on stderr and the
    exit `code`, not a traceback."""

    def decorate(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def wrapped(*args, **kwargs) -> int:
            try:
                return main(*args, **kwargs)
            except errors as err:
                print(f"{prog}: error: {err}", file=sys.stderr)
                return code

        return wrapped

    return decorate


__all__ = ["USER_ERRORS", "add_runtime_arguments", "load_models", "runtime_line", "error_boundary"]
