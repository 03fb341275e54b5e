# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Runs one vLLM engine (a target, with or without an EAGLE-3 drafter) over prompts at several batch sizes and
writes what it measured as JSON: the texts (greedy), tokens/s, spec-decode counters, and what the loaded drafter's
head is made of. One engine per process: `scripts/bench_vllm.py` and `tests/integrations/test_vllm.py` start one per
setting. With `--interleave DRAFT...` it keeps one engine per drafter alive instead and times them in turns
(throughput only).

    .venv-vllm/bin/python scripts/vllm_runner.py --target DIR [--draft DIR] --prompts FILE --out result.json

Lab tooling, not part of the package (the package's vLLM plugin and export are `slimspec_hf.integrations.vllm`).
vLLM spawns workers, so this script does its work under `__main__` only.
"""

import argparse
import json
import os
import signal
import subprocess
import time


SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
)


def run_in_own_session(cmd, timeout, **kwargs) -> subprocess.CompletedProcess:
    """Runs an engine process in its own session (vLLM tears down its process group on exit, which would take
    the caller with it); on timeout the whole group, workers included, is killed: no engine is left running."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise RuntimeError(
            f"{' '.join(map(str, cmd))} ran past {timeout} s and was killed:\n{stderr[-4000:]}"
        ) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def describe_drafter(worker, probe_seed: int = 0, probe_rows: int = 2) -> dict | None:
    """Runs inside a vLLM worker (collective_rpc): the draft model's class, its head's layers, and the head's logits
    on a fixed probe (seeded normal hidden states), which a test compares with the checkpoint's factors.

    Parameter shapes are not reported: vLLM's CPU backend repacks linear weights for oneDNN after loading and leaves
    empty placeholders behind; the layers keep their sizes."""
    import torch

    drafter = getattr(getattr(worker, "model_runner", None), "drafter", None)
    model = getattr(drafter, "model", None)
    if model is None:
        return None
    head = model.lm_head
    layers = {}
    for name, module in head.named_modules():
        sizes = [getattr(module, a, None) for a in ("input_size", "output_size", "embedding_dim", "num_embeddings")]
        if any(v is not None for v in sizes):
            layers[name or "."] = {"class": type(module).__name__, **dict(zip(("in", "out", "dim", "rows"), sizes))}
    hidden_size = model.config.hidden_size
    dtype = next(model.model.norm.parameters()).dtype
    probe = torch.randn(probe_rows, hidden_size, generator=torch.Generator().manual_seed(probe_seed)).to(dtype)
    fc_input = getattr(model.model, "fc_input_size", None)  # the target's concatenated states, EAGLE-3.1 norms first
    features = torch.randn(probe_rows, fc_input or 1, generator=torch.Generator().manual_seed(probe_seed + 1))
    with torch.no_grad():
        logits = model.compute_logits(probe).float()
        fused = model.combine_hidden_states(features.to(dtype)).float() if fc_input else None
    return {
        "class": type(model).__name__,
        "lm_head_class": type(head).__name__,
        "lm_head_layers": layers,
        "probe_seed": probe_seed,
        "probe_logits": logits.tolist(),
        "fused_probe": None if fused is None else fused.tolist(),  # `fc` (and its norms) on seeded features
        "norm_output": bool(getattr(model.model, "norm_output", False)),
    }


def _counters(llm) -> dict:
    totals = {name: 0.0 for name in SPEC_COUNTERS}
    per_pos = {}
    for metric in llm.get_metrics():
        if metric.name in totals:
            totals[metric.name] += float(metric.value)
        elif metric.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            for i, value in enumerate(metric.values):
                per_pos[i] = per_pos.get(i, 0.0) + float(value)
    totals["per_pos"] = [per_pos[i] for i in sorted(per_pos)]
    return totals


def run(args) -> dict:
    """One engine (the target, with `--draft` if given) over the prompts at each of `--batch-sizes`: startup time,
    what the loaded drafter's head is made of, and one `_run_batch` result per batch size."""
    from vllm import LLM, SamplingParams

    prompts = [json.loads(line) for line in open(args.prompts)]
    prompts = [p["turns"][0] if isinstance(p, dict) else str(p) for p in prompts]
    kwargs = {}
    if args.draft:
        kwargs["speculative_config"] = {
            "method": "eagle3",
            "model": args.draft,
            "num_speculative_tokens": args.num_speculative_tokens,
        }
    started = time.perf_counter()
    llm = LLM(
        model=args.target,
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        max_num_seqs=max(args.batch_sizes),
        enforce_eager=True,
        disable_log_stats=False,
        seed=0,
        **kwargs,
    )
    startup_s = time.perf_counter() - started
    tokenizer = llm.get_tokenizer()
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    llm.generate(texts[:2], SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)  # warm-up
    result = {
        "target": args.target,
        "draft": args.draft,
        "dtype": args.dtype,
        "startup_s": startup_s,
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "drafter": llm.collective_rpc(describe_drafter)[0] if args.draft else None,
        "runs": [],
    }
    for batch in args.batch_sizes:
        # at least `rounds` generate() calls, and at least `min_requests` requests in all
        rounds = max(args.rounds, -(-args.min_requests // batch))
        result["runs"].append(_run_batch(llm, texts, params, batch, rounds))
    return result


def _run_batch(llm, texts: list[str], params, batch: int, rounds: int) -> dict:
    """`rounds` generate() calls of `batch` prompts in flight at once, over distinct prompts (cycling through
    `texts`): tokens/s, τ and per-position acceptance from the spec-decode counters, and the greedy outputs."""
    chosen = [texts[(batch * r + i) % len(texts)] for r in range(rounds) for i in range(batch)]
    before = _counters(llm)
    outputs, elapsed = [], 0.0
    for r in range(rounds):
        start = time.perf_counter()
        outputs += llm.generate(chosen[r * batch : (r + 1) * batch], params, use_tqdm=False)
        elapsed += time.perf_counter() - start
    after = _counters(llm)
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    drafts = after["vllm:spec_decode_num_drafts"] - before["vllm:spec_decode_num_drafts"]
    accepted = after["vllm:spec_decode_num_accepted_tokens"] - before["vllm:spec_decode_num_accepted_tokens"]
    per_pos = [
        a - (before["per_pos"][i] if i < len(before["per_pos"]) else 0.0) for i, a in enumerate(after["per_pos"])
    ]
    return {
        "batch": batch,
        "requests": len(outputs),
        "tokens": tokens,
        "seconds": elapsed,
        "tok_per_s": tokens / elapsed,
        # tau: tokens per target forward of a request = 1 (bonus/corrected token) + accepted drafts per round
        "tau": 1.0 + accepted / drafts if drafts else None,
        "acceptance_per_pos": [a / drafts for a in per_pos] if drafts else None,
        "texts": [o.outputs[0].text for o in outputs],
        "token_ids": [list(o.outputs[0].token_ids) for o in outputs],
    }


def run_interleaved(args) -> dict:
    """Several engines alive in one process, timed in turns: for each batch size and round, every engine generates
    the same requests, in an order rotated each round. On a shared CPU this pairs the settings under the same load,
    which sequential runs (one engine after another) cannot. Spec-decode counters are off here (vLLM's Prometheus
    collectors are per process, not per engine): take tau from sequential runs."""
    from vllm import LLM, SamplingParams

    prompts = [json.loads(line) for line in open(args.prompts)]
    prompts = [p["turns"][0] if isinstance(p, dict) else str(p) for p in prompts]
    engines = []
    for draft in args.interleave:
        kwargs = {}
        if draft != "none":
            kwargs["speculative_config"] = {
                "method": "eagle3",
                "model": draft,
                "num_speculative_tokens": args.num_speculative_tokens,
            }
        llm = LLM(
            model=args.target,
            dtype=args.dtype,
            max_model_len=args.max_model_len,
            max_num_seqs=max(args.batch_sizes),
            enforce_eager=True,
            seed=0,
            **kwargs,
        )
        engines.append(llm)
    tokenizer = engines[0].get_tokenizer()
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    for llm in engines:
        llm.generate(texts[:2], SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)  # warm-up
    result = {"target": args.target, "drafts": args.interleave, "dtype": args.dtype, "runs": []}
    for batch in args.batch_sizes:
        rounds = max(args.rounds, -(-args.min_requests // batch))
        tokens, seconds = [0] * len(engines), [0.0] * len(engines)
        for r in range(rounds):
            chosen = [texts[(batch * r + i) % len(texts)] for i in range(batch)]
            for j in range(len(engines)):
                e = (j + r) % len(engines)
                start = time.perf_counter()
                outputs = engines[e].generate(chosen, params, use_tqdm=False)
                seconds[e] += time.perf_counter() - start
                tokens[e] += sum(len(o.outputs[0].token_ids) for o in outputs)
        result["runs"].append(
            {
                "batch": batch,
                "rounds": rounds,
                "tokens": tokens,
                "seconds": seconds,
                "tok_per_s": [t / s for t, s in zip(tokens, seconds)],
            }
        )
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/vllm_runner.py", description=__doc__)
    parser.add_argument("--target", required=True, help="local HF folder of the target")
    parser.add_argument("--draft", default=None, help="EAGLE-3 drafter folder (speculators, SafeAILab or --to vllm)")
    parser.add_argument(
        "--interleave",
        nargs="+",
        default=None,
        metavar="DRAFT",
        help="throughput only: one engine per DRAFT folder ('none': no speculation), all alive, timed in turns",
    )
    parser.add_argument("--prompts", required=True, help="JSONL of MT-Bench questions ({'turns': [...]}) or strings")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1])
    parser.add_argument("--rounds", type=int, default=1, help="generate() calls per batch size (at least)")
    parser.add_argument("--min-requests", type=int, default=1, help="requests per batch size (at least)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--num-speculative-tokens", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--max-model-len", type=int, default=1024)
    args = parser.parse_args(argv)
    # describe_drafter is a callable sent to the worker process
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    result = run_interleaved(args) if args.interleave else run(args)
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
