# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The `slimspec` command. Each sub-command lives in `slimspec_hf/commands/` and is imported lazily.

`main` runs each sub-command inside `commands.common.run_command`: an expected failure prints
`slimspec <command>: error: <message>` and exits 2; `slimspec --debug <command> ...` (or `SLIMSPEC_DEBUG=1`) shows the
traceback instead.
"""

import importlib
import os
import sys


# sub-command -> (module:function taking argv and returning an exit code, one-line help)
COMMANDS = {
    "generate": (
        "slimspec_hf.commands.generate:main",
        "generate with a drafter (streamed; --compare times target alone)",
    ),
    "prepare-data": (
        "slimspec_hf.commands.prepare_data:main",
        "regenerate responses to prompts with the target (resumable)",
    ),
    "train": ("slimspec_hf.commands.train:main", "train a drafter from a YAML recipe (TrlParser; accelerate-ready)"),
    "bench": (
        "slimspec_hf.commands.bench:main",
        "Spec-Bench / MT-Bench: greedy, sampled and batched tokens/s, acceptance length, speed-up",
    ),
    "bench-head": (
        "slimspec_hf.commands.bench_head:main",
        "time LM heads (full, low-rank, trimmed) against MAC limits",
    ),
    "bench-verify": (
        "slimspec_hf.commands.bench_verify:main",
        "time the target verifying 1..N tokens, fp32 vs bf16 (what makes speculation pay)",
    ),
    "choose-rank": (
        "slimspec_hf.commands.choose_rank:main",
        "pick the head rank that maximises predicted speed-up",
    ),
    "convert": (
        "slimspec_hf.commands.convert:main",
        "convert an EAGLE-3 drafter (SafeAILab / speculators) to SlimSpec",
    ),
    "export": (
        "slimspec_hf.commands.export:main",
        "export a SlimSpec drafter to the speculators format (vLLM)",
    ),
    "push": ("slimspec_hf.commands.push:main", "push a drafter folder to the Hub with its model card"),
    "compare-runs": (
        "slimspec_hf.commands.compare_runs:main",
        "compare training runs on their logged acceptance at equal steps",
    ),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: slimspec [--debug] <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += [
        "",
        "Run `slimspec <command> --help` for a command's options. `--debug` (or SLIMSPEC_DEBUG=1) shows tracebacks.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in argv:  # anywhere on the line, before or after the command; for this call only
        argv.remove("--debug")
        previous = os.environ.get("SLIMSPEC_DEBUG")
        os.environ["SLIMSPEC_DEBUG"] = "1"
        try:
            return main(argv)
        finally:
            if previous is None:
                del os.environ["SLIMSPEC_DEBUG"]
            else:
                os.environ["SLIMSPEC_DEBUG"] = previous
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"slimspec: unknown command {name!r}; valid commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    from .commands.common import run_command

    def command(args: list[str]) -> int:
        module_name, function_name = COMMANDS[name][0].split(":")
        return getattr(importlib.import_module(module_name), function_name)(args)

    return run_command(f"slimspec {name}", command, rest)


if __name__ == "__main__":
    sys.exit(main())
