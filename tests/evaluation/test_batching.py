"""`slimspec bench --batch-sizes`: SlimSpec decoding against plain batched `generate()` on the same batches."""

import pytest

from slimspec_hf.evaluation.batching import batch_systems, render_sweep, run_batch_sweep, summarize
from slimspec_hf.evaluation.benchmark import BenchmarkSettings, load_questions, run_benchmark
from slimspec_hf.evaluation.systems import build_systems

from ..testing_utils import make_char_tokenizer, make_tiny_drafter, make_tiny_target


PROMPTS = ["Write a poem about the sea.", "Sort a list in Python.", "Who wrote Hamlet?", "Translate: Bonjour."]


def _drafter(target, k: int = 2, **generation):
    drafter = make_tiny_drafter(target, ttt_steps=k)
    drafter.generation_config.num_assistant_tokens = k
    for key, value in generation.items():
        setattr(drafter.generation_config, key, value)
    return drafter


def _spy_on_generate(target) -> list[dict]:
    """Records the keywords of every `target.generate` call (the instance attribute shadows the class's method)."""
    calls, original = [], target.generate

    def generate(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    target.generate = generate
    return calls


def test_batched_drafters_generate_plain_batched_greedy_tokens_in_fp32():
    """In fp32, every drafter row (chain, tree, and the row drafting above its batch limit) returns plain batched
    greedy's tokens, batch for batch; a system that generates otherwise is counted as differing."""
    target = make_tiny_target(eos_token_id=1).float()
    drafter = _drafter(target, draft_max_batch_size=1)  # drafts at B = 1 only; `@any-batch` drafts at every B
    systems = batch_systems(build_systems({"low": drafter}, draft_trees=((4, 2, 2),)))
    assert list(systems) == ["low", "low@any-batch", "low+tree4/2/2"]
    assert systems["low@any-batch"]["draft_max_batch_size"] == 0
    systems["shorter"] = {"max_new_tokens": 3}  # not the target's output: must not count as identical
    sweep = run_batch_sweep(target, make_char_tokenizer(), systems, PROMPTS, [1, 2], max_new_tokens=12)
    assert sweep["identical"] == {
        **{f"{name}@1": [4, 4] for name in ("low", "low@any-batch", "low+tree4/2/2")},
        **{f"{name}@2": [2, 2] for name in ("low", "low@any-batch", "low+tree4/2/2")},
        "shorter@1": [0, 4],
        "shorter@2": [0, 2],
    }
    rows = {(r["batch_size"], r["system"]): r for r in summarize(sweep)}
    assert rows[2, "target"]["speedup"] == pytest.approx(1.0) and rows[2, "target"]["identical"] is None
    assert rows[2, "low"]["identical"] == "2/2"
    assert rows[2, "low"]["tau"] is None  # above its batch limit the drafter stays out: plain decoding
    assert rows[2, "low@any-batch"]["tau"] >= 1.0 and rows[1, "low"]["tau"] >= 1.0
    for size, count in ((1, 4), (2, 2)):  # every system generates every batch, in a rotating order
        assert [r["system"] for r in sweep["rows"] if r["batch_size"] == size].count("target") == count
    table = render_sweep(summarize(sweep), "header")
    assert "| T | B | system | tok/s | vs plain batched generate() | τ | identical batches |" in table
    assert "| 0 | 2 | low | " in table and "| 2/2 |" in table


def test_sampled_runs_pass_top_p_and_no_top_k_to_every_call():
    """Batched and one at a time, a sampled run samples with the given top-p and no top-k cut (transformers' default
    top-k of 50 would otherwise apply), the same for the target alone and the drafter; greedy runs do not sample."""
    target = make_tiny_target(eos_token_id=1)
    drafter = _drafter(target)
    calls = _spy_on_generate(target)
    sweep = run_batch_sweep(
        target, make_char_tokenizer(), {"low": {"assistant_model": drafter}}, PROMPTS, [2], 6, (0.0, 0.7), 0.5
    )
    timed = calls[2:]  # after one warm-up call per system
    assert len(timed) == 2 * 2 * 2  # 2 temperatures × 2 batches × 2 systems
    sampled = [c for c in timed if c.get("do_sample")]
    assert len(sampled) == 4 and sum("assistant_model" in c for c in sampled) == 2
    assert all((c["temperature"], c["top_p"], c["top_k"]) == (0.7, 0.5, 0) for c in sampled)
    greedy = [c for c in timed if not c.get("do_sample")]
    assert len(greedy) == 4 and all(c["do_sample"] is False and "top_p" not in c for c in greedy)
    assert {r["temperature"] for r in summarize(sweep)} == {0.0, 0.7}
    assert "low@2" in sweep["identical"] and sweep["identical"]["low@2"][1] == 2  # greedy batches only

    calls.clear()
    questions = [{"id": i, "category": "qa", "subcategory": "qa", "prompt": p} for i, p in enumerate(PROMPTS[:2])]
    settings = BenchmarkSettings(temperatures=(0.7,), top_p=0.5, max_new_tokens=6, context_length=8, timing_repeats=1)
    report = run_benchmark(target, make_char_tokenizer(), {"low": drafter}, questions, settings)
    sampled = [c for c in calls if c.get("do_sample")]
    assert len(sampled) == 2 * 2  # 2 questions × 2 systems (the warm-up runs greedy)
    assert all((c["temperature"], c["top_p"], c["top_k"]) == (0.7, 0.5, 0) for c in sampled)
    assert report["config"]["top_p"] == 0.5


def test_summary_pools_tau_over_all_rounds_and_compares_with_plain_batched_generate():
    def row(system, batch, tokens, seconds, rounds=0, accepted=0):
        return dict(temperature=0.0, batch_size=2, batch=batch, system=system, new_tokens=tokens, seconds=seconds,
                    rounds=rounds, accepted_tokens=accepted)  # fmt: skip

    sweep = {
        "rows": [
            row("target", 0, 10, 1.0),
            row("target", 1, 10, 1.0),
            row("low", 0, 10, 0.5, rounds=2, accepted=6),  # τ 4 on this batch
            row("low", 1, 10, 0.5, rounds=8, accepted=0),  # τ 1 on this one: pooled (6 + 10) / 10, not their mean
        ],
        "identical": {"low@2": [1, 2]},
    }
    rows = {r["system"]: r for r in summarize(sweep)}
    assert rows["target"]["tokens_per_second"] == pytest.approx(10.0) and rows["target"]["tau"] is None
    assert rows["low"]["speedup"] == pytest.approx(2.0) and rows["low"]["tau"] == pytest.approx(1.6)
    assert rows["low"]["identical"] == "1/2"


def _one_question(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question_id": 1, "category": "qa", "turns": ["Who wrote Hamlet?"]}\n')
    return path


def test_batched_sweep_refuses_what_cannot_run_in_batches(tmp_path):
    target = make_tiny_target(eos_token_id=1)
    with pytest.raises(ValueError, match="`prompt_lookup` \\(prompt_lookup\\) does not decode batches"):
        batch_systems(build_systems({}, prompt_lookup=3))
    with pytest.raises(ValueError, match=r"`batch_sizes` must be at least 1 each, got \[0\]"):
        run_batch_sweep(target, make_char_tokenizer(), {}, PROMPTS, [0])
    with pytest.raises(ValueError, match="`top_p` must be in \\(0, 1\\], got 0.0"):
        questions = load_questions(_one_question(tmp_path))
        run_benchmark(target, make_char_tokenizer(), {}, questions, BenchmarkSettings(top_p=0.0))
