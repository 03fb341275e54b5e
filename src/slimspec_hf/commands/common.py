# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""What the `slimspec` commands share: the runtime arguments (`--dtype`, `--threads`), the draft length
(`--num-assistant-tokens`), loading a target with its drafters for inference, the line that says how they run,
checking paths and Hub ids given on the command line, and the error boundary (`run_command`, used by
`slimspec_hf.cli.main`).

Expected failures (bad input, missing files, unknown repos) end as one line on stderr,
`slimspec <command>: error: <message>`, and exit code 2; `--debug` (or `SLIMSPEC_DEBUG=1`) shows the traceback.

The timed `generate` pieces (prompt encoding, sampling kwargs, timed generate) live in
[`~evaluation.timing`], below the benchmark library that uses them too.
"""

import argparse
import functools
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ..paths import looks_like_path
from ..targets import DTYPE_CHOICES, is_embedded, load_target
from ..utils import missing_extra


DEBUG_ENV = "SLIMSPEC_DEBUG"
HUB_FILE_PREFIX = "hf://"


class CommandError(ValueError):
    """An expected failure of a command; its message names the parameter, what was received and what to do."""


def _extra_user_errors() -> tuple[type[Exception], ...]:
    try:  # a truncated or corrupt .safetensors file
        from safetensors import SafetensorError

        return (SafetensorError,)
    except ImportError:  # pragma: no cover - safetensors ships with transformers
        return ()


# What a command reports as a user error (one line on stderr, exit code 2) instead of a traceback. huggingface_hub's
# validation and HTTP errors are ValueError / OSError subclasses.
USER_ERRORS = (CommandError, ValueError, TypeError, OSError, ImportError, *_extra_user_errors())
USER_ERROR_CODE = 2


def debug_enabled() -> bool:
    """Whether `SLIMSPEC_DEBUG` asks for tracebacks (set by `slimspec --debug`)."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def error_line(prog: str, err: BaseException) -> str:
    """`prog: error: message`, on one line (multi-line library messages are joined)."""
    message = " ".join(str(err).split()) or type(err).__name__
    return f"{prog}: error: {message}"


def run_command(prog: str, function: Callable[[list[str]], int], argv: list[str]) -> int:
    """The error boundary: runs a command's `main(argv)`; a user error becomes one line on stderr and exit code 2,
    an interrupt exit code 130. With `SLIMSPEC_DEBUG=1` errors propagate with their traceback."""
    # Commands log at INFO; the Hub client's HTTP library would then log every request.
    for name in ("httpx", "httpcore", "httpx2", "httpcore2"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        return int(function(argv) or 0)
    except KeyboardInterrupt:
        if debug_enabled():
            raise
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as err:
        if debug_enabled():
            raise
        hint = missing_extra(err) if isinstance(err, ImportError) else None
        print(f"{prog}: error: {hint}" if hint else error_line(prog, err), file=sys.stderr)
        return USER_ERROR_CODE


# ----------------------------------------------------------------------------------------------------------------
# Paths and Hub ids on the command line
# ----------------------------------------------------------------------------------------------------------------


def check_model_source(value: str | None, param: str, *, allow_file: bool = False) -> str | None:
    """`value` for a model argument (`--drafter`, `--target`, ...): an existing local folder (or file, with
    `allow_file`, e.g. a `.gguf`), or a Hub repo id left to `from_pretrained`. A path-looking value that does not
    exist is refused here, before transformers reads it as a malformed repo id."""
    if value is None or is_embedded(value):
        return value
    path = Path(os.path.expanduser(str(value)))
    if path.exists():
        if path.is_dir() or allow_file:
            return str(path)
        raise CommandError(
            f"`{param}`: not a folder: {value} (pass the folder written by save_pretrained, or a Hub id)"
        )
    if looks_like_path(str(value)):
        raise CommandError(f"`{param}`: no such folder: {value} (pass an existing folder or a Hub id, org/name)")
    return str(value)


def resolve_model_folder(value: str, param: str, allow_patterns: Sequence[str] | None = None) -> Path:
    """A local folder for a model argument: the folder itself, or a Hub repo (`org/name`, `org/name@revision`)
    downloaded with `huggingface_hub.snapshot_download` (honours `HF_ENDPOINT` and the cache)."""
    checked = check_model_source(value, param)
    path = Path(checked)
    if path.is_dir():
        return path
    from ..interop.hub import download_repo

    repo_id, _, revision = checked.partition("@")
    return download_repo(repo_id, revision=revision or None, allow_patterns=allow_patterns)


def resolve_data_file(value: str, param: str) -> Path:
    """A local file for a data argument: an existing file, or a file of a Hub repo given as
    `hf://datasets/ORG/NAME[@REVISION]/PATH` (or `hf://ORG/NAME/PATH` for a model repo), downloaded with
    `huggingface_hub.hf_hub_download`."""
    text = str(value)
    if text.startswith(HUB_FILE_PREFIX):
        from ..interop.hub import download_hub_file

        return download_hub_file(text, param)
    path = Path(os.path.expanduser(text))
    if path.is_file():
        return path
    if path.is_dir():
        raise CommandError(f"`{param}`: {value} is a folder; pass a file (or hf://datasets/ORG/NAME/PATH)")
    raise CommandError(
        f"`{param}`: no such file: {value} (pass an existing file, or hf://datasets/ORG/NAME/PATH for a file of a "
        "Hub dataset)"
    )


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


def add_draft_length_argument(parser: argparse.ArgumentParser, default: int | None, help: str) -> None:
    """`--num-assistant-tokens` / `-k`, the tokens drafted per round (transformers' `num_assistant_tokens`)."""
    parser.add_argument("--num-assistant-tokens", "-k", type=int, default=default, help=help)


def load_models(
    target_name: str | None,
    drafter_paths: Sequence[str] = (),
    dtype: str | torch.dtype = "auto",
    device: str | torch.device | None = None,
    threads: int | None = None,
):
    """`(target, tokenizer, drafters)` for inference: the target through `targets.load_target`, each drafter (folder or
    Hub id) in the target's dtype and on its device, all in eval mode."""
    if threads:
        torch.set_num_threads(threads)
    from transformers import AutoModelForCausalLM

    import slimspec_hf  # noqa: F401  (registers the drafter classes and the generate() hook)

    target_name = check_model_source(target_name, "--target", allow_file=True)
    drafter_paths = [check_model_source(path, "--drafter") for path in drafter_paths]
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    target, tokenizer = load_target(target_name, dtype=dtype, device=device)
    drafters = [
        AutoModelForCausalLM.from_pretrained(path, dtype=target.dtype).to(target.device).eval()
        for path in drafter_paths
    ]
    return target, tokenizer, drafters


def runtime_line(target) -> str:
    """`[runtime] device cpu, dtype bfloat16, 2 threads` (or `1 thread`): how the numbers that follow were measured."""
    dtype = str(target.dtype).removeprefix("torch.")
    threads = torch.get_num_threads()
    return f"[runtime] device {target.device}, dtype {dtype}, {threads} thread{'' if threads == 1 else 's'}"


def error_boundary(
    prog: str, code: int = USER_ERROR_CODE, errors: tuple[type[Exception], ...] = USER_ERRORS
) -> Callable:
    """Decorates a command's `main` with the same boundary as `slimspec_hf.cli.main` (for entry points that are
    called directly, like `make demo`): a user error (one of `errors`) becomes `prog: error: ...` on one line of
    stderr and exit `code` (2, as everywhere), not a traceback; `SLIMSPEC_DEBUG=1` re-raises."""

    def decorate(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def wrapped(*args, **kwargs) -> int:
            try:
                return main(*args, **kwargs)
            except errors as err:
                if debug_enabled():
                    raise
                print(error_line(prog, err), file=sys.stderr)
                return code

        return wrapped

    return decorate


__all__ = [
    "USER_ERRORS",
    "CommandError",
    "add_draft_length_argument",
    "add_runtime_arguments",
    "check_model_source",
    "debug_enabled",
    "error_boundary",
    "error_line",
    "load_models",
    "looks_like_path",
    "resolve_data_file",
    "resolve_model_folder",
    "run_command",
    "runtime_line",
]
