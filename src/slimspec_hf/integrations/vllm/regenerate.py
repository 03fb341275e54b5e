# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec prepare-data --engine vllm`: the target answers the training prompts through vLLM.

Same job, same shards as `training.data.regenerate` (the `transformers` engine), but vLLM's continuous batching
starts a new prompt the moment one finishes, where `generate()` keeps a padded batch running until its longest
answer ends. Two halves:

- `regenerate_with_vllm(...)` runs in the package's own environment: it picks the pending prompts (the same
  selection as the `transformers` engine), writes them to a temporary file and starts this module under the vLLM
  environment's python (vLLM pins another transformers, so it lives in its own venv: `make install-vllm`);
- `python -m slimspec_hf.integrations.vllm.regenerate ...` (the child) answers them in chunks and appends each
  chunk's rows to a new shard, flushed and fsynced: a killed run loses at most the chunk in flight; rerun to go on.

The child reports progress and its final counts on stdout as `SLIMSPEC {json}` lines; vLLM's own log goes to a
temporary file whose tail is shown if the child fails.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


MARK = "SLIMSPEC "


# ----------------------------------------------------------------------------------------------------------------
# Parent side (the package's environment; no vLLM import)
# ----------------------------------------------------------------------------------------------------------------


def find_vllm_python(explicit: str | None = None) -> str:
    """The python that runs vLLM: `explicit`, else `$SLIMSPEC_VLLM_PYTHON`, else this interpreter when it imports
    vLLM, else `.venv-vllm/bin/python` under the working directory (`make install-vllm`). Raises `ValueError` with
    the fix when none is there."""
    candidate = explicit or os.environ.get("SLIMSPEC_VLLM_PYTHON")
    if candidate:
        if not Path(candidate).is_file():
            raise ValueError(f"`--vllm-python`: no python at {candidate!r}; run `make install-vllm` or pass its path.")
        return candidate
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    default = Path(".venv-vllm/bin/python")
    if default.is_file():
        return str(default)
    raise ValueError(
        "`--engine vllm` needs a python with vLLM: none at .venv-vllm/bin/python; run `make install-vllm` "
        "or pass `--vllm-python PATH`."
    )


class EngineError(RuntimeError):
    """The vLLM child failed; `log_tail` is the end of its log (vLLM's own messages), `returncode` its exit."""

    def __init__(self, returncode: int | None, log_tail: str):
        super().__init__(f"the vLLM engine failed (exit {returncode})")
        self.returncode, self.log_tail = returncode, log_tail


def _raise_system_exit(signum, frame):
    raise SystemExit(128 + signum)


def regenerate_with_vllm(
    target_dir: str | os.PathLike,
    tokenizer,
    prompts: list[dict],
    out_dir: str | os.PathLike,
    vllm_python: str,
    max_new_tokens: int = 512,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    dtype: str = "bfloat16",
    max_prompt_length: int | None = 2048,
    max_num_seqs: int = 128,
    chunk_size: int = 512,
    threads: int | None = None,
    kv_cache_gib: float = 4.0,
    max_seconds: float | None = None,
    progress: bool = True,
) -> dict:
    """Has the target (an HF folder vLLM can load) answer every prompt not yet answered under `out_dir`; returns
    the same stats as `training.data.regenerate` ({"done", "skipped", "new_tokens", "seconds", "too_long",
    "left"}). `max_num_seqs` answers are in flight at once; rows are written `chunk_size` prompts at a time."""
    from ...training.data import new_shard_path, pending_prompts

    pending, stats = pending_prompts(prompts, out_dir, tokenizer, max_prompt_length)
    if not pending:
        return stats
    shard = new_shard_path(out_dir)
    env = _child_env(threads, kv_cache_gib)
    with tempfile.TemporaryDirectory(prefix="slimspec-vllm-") as tmp:
        pending_file = Path(tmp) / "pending.jsonl"
        pending_file.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pending), encoding="utf-8")
        log_file = Path(tmp) / "vllm.log"
        cmd = [vllm_python, "-m", "slimspec_hf.integrations.vllm.regenerate"]
        cmd += ["--target", str(target_dir), "--prompts", str(pending_file), "--shard", str(shard)]
        cmd += ["--max-new-tokens", str(max_new_tokens), "--temperature", str(temperature), "--top-p", str(top_p)]
        cmd += ["--seed", str(seed), "--dtype", dtype, "--max-num-seqs", str(max_num_seqs)]
        cmd += ["--chunk-size", str(chunk_size)]
        if max_seconds is not None:
            cmd += ["--max-seconds", str(max_seconds)]
        returncode, final = _run_child(cmd, env, log_file, len(pending), progress)
        if returncode != 0 or final is None:
            raise EngineError(returncode, log_file.read_text(errors="replace")[-3000:])
    for key in ("done", "new_tokens", "seconds", "left"):
        stats[key] = final[key]
    return stats


def _child_env(threads: int | None, kv_cache_gib: float) -> dict[str, str]:
    """The child's environment: this one, with its thread count, vLLM-CPU's KV-cache size and one engine process."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads or env.get("OMP_NUM_THREADS") or 1)
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{kv_cache_gib:g}")
    # engine, scheduler and model in one process: a separate engine-core process polls its worker and takes most
    # of a second core on CPU for nothing (measured: ~65% of a core beside the worker's 100%)
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return env


def _run_child(
    cmd: list[str], env: dict[str, str], log_file: Path, total: int, progress: bool
) -> tuple[int | None, dict | None]:
    """Runs the child to its end, vLLM's log to `log_file`, relaying its progress reports (out of `total`
    prompts) to stderr; returns its exit status and its final report (None when it sent none). The child, and
    every worker it started, is killed if this process is interrupted or terminated."""
    final = None
    with open(log_file, "w") as log:
        # own session: vLLM tears down its process group on exit, and Ctrl-C or SIGTERM here kills all its workers
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, start_new_session=True)
        # a SIGTERM to this process (kill, a job scheduler) must take the engine down with it
        previous = signal.signal(signal.SIGTERM, _raise_system_exit)
        try:
            for line in iter(proc.stdout.readline, ""):
                if not line.startswith(MARK):
                    continue
                report = json.loads(line[len(MARK) :])
                if report.get("final"):
                    final = report
                elif progress:
                    print(
                        f"prepare-data (vllm): {report['done']}/{total} answered, "
                        f"{report['new_tokens'] / max(report['seconds'], 1e-9):.1f} tokens/s",
                        file=sys.stderr,
                        flush=True,
                    )
            proc.wait()
        finally:
            signal.signal(signal.SIGTERM, previous)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return proc.returncode, final


# ----------------------------------------------------------------------------------------------------------------
# Child side (the vLLM environment)
# ----------------------------------------------------------------------------------------------------------------


def _report(**fields) -> None:
    print(MARK + json.dumps(fields), flush=True)


def _answer(llm, tokenizer, prompts: list[dict], params_for) -> tuple[list[list[dict]], list[str], int]:
    """Answers `prompts` turn by turn (`training.data.answer_turn_by_turn`), one `llm.generate` per turn; returns
    the conversations, their finish reasons and the number of new tokens."""
    from ...training.data import answer_turn_by_turn

    new_tokens = 0

    def generate_turn(active, turn, texts):
        nonlocal new_tokens
        outputs = llm.generate(texts, [params_for(i, turn) for i in active], use_tqdm=False)
        answers = []
        for output in outputs:
            completion = output.outputs[0]
            new_tokens += len(completion.token_ids)
            answers.append((completion.text, "length" if completion.finish_reason == "length" else "stop"))
        return answers

    conversations, finish = answer_turn_by_turn(tokenizer, prompts, generate_turn)
    return conversations, finish, new_tokens


def child_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slimspec_hf.integrations.vllm.regenerate")
    parser.add_argument("--target", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--shard", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max-num-seqs", type=int, default=128)
    parser.add_argument("--chunk-size", type=int, default=512)
    parser.add_argument("--max-seconds", type=float, default=None)
    args = parser.parse_args(argv)

    from vllm import LLM, SamplingParams

    from ...training.data import conversation_row, past_time_box

    prompts = [json.loads(line) for line in open(args.prompts, encoding="utf-8")]
    llm = LLM(
        model=args.target,
        dtype=args.dtype,
        max_num_seqs=args.max_num_seqs,
        enforce_eager=True,
        seed=args.seed,
        distributed_executor_backend="uni",
    )
    tokenizer = llm.get_tokenizer()

    def params_for(index: int, turn: int):
        if args.temperature > 0:
            # No per-request seed: vLLM-CPU 0.32 fails on one ("CPU Generator does not use offset"). The engine's
            # `seed` alone drives sampling, so a rerun draws the same answers only when the batches are the same.
            return SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_new_tokens)
        return SamplingParams(temperature=0.0, max_tokens=args.max_new_tokens)

    done = new_tokens = 0
    left = 0
    start = time.perf_counter()
    with open(args.shard, "a", encoding="utf-8") as out:
        for chunk_start in range(0, len(prompts), args.chunk_size):
            elapsed = time.perf_counter() - start
            if past_time_box(elapsed, done, args.chunk_size, args.max_seconds):
                left = len(prompts) - chunk_start
                break
            chunk = prompts[chunk_start : chunk_start + args.chunk_size]
            conversations, finish, tokens = _answer(
                llm, tokenizer, chunk, lambda i, turn, base=chunk_start: params_for(base + i, turn)
            )
            for prompt, conversation, reason in zip(chunk, conversations, finish):
                out.write(conversation_row(prompt, conversation, reason))
            out.flush()
            os.fsync(out.fileno())
            done += len(chunk)
            new_tokens += tokens
            _report(done=done, new_tokens=new_tokens, seconds=time.perf_counter() - start)
    _report(final=True, done=done, new_tokens=new_tokens, seconds=time.perf_counter() - start, left=left)
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
