"""`slimspec bench`: question loading, aggregation, and an end-to-end run on a tiny target."""

import json

import pytest

from slimspec_hf.commands.bench import main
from slimspec_hf.evaluation.benchmark import (
    OVERALL,
    acceptance_cost_points,
    aggregate,
    load_questions,
    render_markdown,
    report_category,
)
from slimspec_hf.evaluation.cost_model import speedup
from slimspec_hf.interop.model_card import render_model_card

from ..testing_utils import make_char_tokenizer, make_tiny_drafter, make_tiny_target


def _drafter(target, k: int, **overrides):
    """A tiny drafter trained (`ttt_steps`) and set (`num_assistant_tokens`) to draft k tokens per round."""
    drafter = make_tiny_drafter(target, ttt_steps=k, **overrides)
    drafter.generation_config.num_assistant_tokens = k
    return drafter


def _questions_file(path):
    rows = [
        {"question_id": 81, "category": "writing", "turns": ["Write a poem about the sea.", "Now shorter."]},
        {"question_id": 82, "category": "coding", "turns": ["Sort a list in Python."]},
        {"question_id": 161, "category": "translation", "turns": ["Translate: Guten Morgen!"]},
        {"question_id": 162, "category": "translation", "turns": ["Translate: Bonjour."]},
        {"question_id": 321, "category": "qa", "turns": ["Who wrote Hamlet?"]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_load_questions_groups_filters_and_limits(tmp_path):
    path = _questions_file(tmp_path / "q.jsonl")
    questions = load_questions(path)
    assert [q["category"] for q in questions] == ["mt_bench", "mt_bench", "translation", "translation", "qa"]
    assert questions[0]["prompt"] == "Write a poem about the sea."  # first turn only
    assert [q["id"] for q in load_questions(path, limit=1)] == [81, 161, 321]
    assert [q["id"] for q in load_questions(path, categories=["coding", "qa"])] == [82, 321]
    assert [q["id"] for q in load_questions(path, categories=["mt_bench"])] == [81, 82]
    with pytest.raises(ValueError, match="unknown \\['poetry'\\]"):
        load_questions(path, categories=["poetry"])
    with pytest.raises(FileNotFoundError, match="--data"):
        load_questions(tmp_path / "missing.jsonl")
    assert report_category("math") == "mt_bench" and report_category("math_reasoning") == "math_reasoning"


def test_spec_bench_file_has_six_reported_categories(shared_data):
    questions = load_questions(shared_data / "eval/spec_bench/question.jsonl")
    assert len(questions) == 480
    assert {q["category"] for q in questions} == {
        "mt_bench",
        "translation",
        "summarization",
        "qa",
        "math_reasoning",
        "rag",
    }


def _record(system, qid, category, tokens, seconds, repeat=0, stats=None, temperature=0.0):
    return {
        "question_id": qid,
        "category": category,
        "system": system,
        "temperature": temperature,
        "repeat": repeat,
        "new_tokens": tokens,
        "time_s": seconds,
        "stats": stats,
    }


def test_aggregate_medians_speedup_and_pooled_tau():
    records = [
        # target: q1 runs at 10, 20 (median pick: lower median = 10 tok/s → 10 tokens in 1 s), q2: 20 tokens in 1 s
        _record("target", 1, "a", 10, 1.0, 0),
        _record("target", 1, "a", 10, 0.5, 1),
        _record("target", 2, "b", 20, 1.0, 0),
        _record("target", 2, "b", 20, 1.0, 1),
        # drafter: twice as fast everywhere; τ pooled over all its rounds: (6 + 4) accepted over (2 + 2) rounds
        _record("d", 1, "a", 10, 0.5, 0, {"accepted_tokens": 3, "rounds": 1}),
        _record("d", 1, "a", 10, 0.25, 1, {"accepted_tokens": 3, "rounds": 1}),
        _record("d", 2, "b", 20, 0.5, 0, {"accepted_tokens": 2, "rounds": 1}),
        _record("d", 2, "b", 20, 0.5, 1, {"accepted_tokens": 2, "rounds": 1}),
        _record("full", 1, "a", 10, 0.5, 0, {"accepted_tokens": 4, "rounds": 1}),
        _record("full", 1, "a", 10, 0.5, 1, {"accepted_tokens": 4, "rounds": 1}),
        _record("full", 2, "b", 20, 1.0, 0, {"accepted_tokens": 4, "rounds": 1}),
        _record("full", 2, "b", 20, 1.0, 1, {"accepted_tokens": 4, "rounds": 1}),
    ]
    rows = aggregate(records, ["target", "d", "full"], (0.0,), reference="full")
    get = {(r["system"], r["category"]): r for r in rows}
    assert get["target", "a"]["tokens_per_s"] == pytest.approx(10.0)
    assert get["target", OVERALL]["tokens_per_s"] == pytest.approx(30 / 2.0)
    assert get["d", OVERALL]["tokens_per_s"] == pytest.approx(30 / 1.0)
    assert get["d", OVERALL]["speedup"] == pytest.approx(2.0)
    assert get["target", OVERALL]["speedup"] == pytest.approx(1.0)
    assert get["d", OVERALL]["tau"] == pytest.approx((10 + 4) / 4)
    assert get["d", "a"]["tau"] == pytest.approx(4.0)
    assert get["full", OVERALL]["tau"] == pytest.approx(5.0)
    assert get["d", OVERALL]["rho_tau"] == pytest.approx(3.5 / 5.0)
    assert get["target", OVERALL]["tau"] is None and "rho_tau" not in get["target", OVERALL]


def test_bench_end_to_end_on_tiny_target(tmp_path):
    target = make_tiny_target(eos_token_id=1)
    tokenizer = make_char_tokenizer()
    target_dir, low_dir, full_dir, out = (tmp_path / n for n in ("target", "low", "full", "out"))
    target.save_pretrained(target_dir)
    tokenizer.save_pretrained(target_dir)
    _drafter(target, 3).save_pretrained(low_dir)
    _drafter(target, 3, seed=2, head_type="full").save_pretrained(full_dir)
    questions = _questions_file(tmp_path / "q.jsonl")

    rc = main(
        [
            "--target",
            str(target_dir),
            "--drafter",
            str(low_dir),
            "--drafter",
            str(full_dir),
            "--prompt-lookup",
            "3",
            "--data",
            str(questions),
            "--categories",
            "qa",
            "translation",
            "--limit",
            "1",
            "--max-new-tokens",
            "8",
            "--output-dir",
            str(out),
            "--timing-repeats",
            "2",
            "--context-length",
            "16",
            "--no-progress",
        ]
    )
    assert rc == 0
    for name in ("results.json", "results.md", "speedup.png", "acceptance_length.png", "acceptance_cost.png"):
        assert (out / name).stat().st_size > 0, name
    report = json.loads((out / "results.json").read_text())
    assert report["config"]["systems"] == ["target", "low", "full", "prompt_lookup"]
    assert report["config"]["reference"] == "full"  # the full-head drafter is found automatically
    # 2 questions (one per category) × 4 systems × 2 temperatures × 1 repeat
    assert len(report["records"]) == 2 * 4 * 2
    overall = {(r["system"], r["temperature"]): r for r in report["results"] if r["category"] == OVERALL}
    for temperature in (0.0, 1.0):
        assert overall["target", temperature]["speedup"] == pytest.approx(1.0)
        for name in ("low", "full"):
            row = overall[name, temperature]
            assert 1.0 <= row["tau"] <= 4.0  # k = 3 drafts + the target's own token per round
            assert row["tokens_per_s"] > 0 and row["speedup"] > 0
        assert overall["full", temperature]["rho_tau"] == pytest.approx(1.0)
        assert overall["prompt_lookup", temperature]["tau"] is None
    for name in ("low", "full"):
        cost = report["head_costs"][name]
        assert cost["t_head"] > 0 and cost["t_head_full"] > 0 and cost["t_backbone"] > 0 and cost["t_verify"] > 0
        assert cost["kappa"] == pytest.approx(3 * cost["t_head_full"] / (cost["t_verify"] + 3 * cost["t_backbone"]))
        entries = report["model_index"][name]
        assert [e["temperature"] for e in entries] == [0.0, 1.0]
        assert entries[0]["dataset"] == "Spec-Bench"
        assert entries[0]["acceptance_length"] == pytest.approx(overall[name, 0.0]["tau"])
        assert {"rho_tau", "speedup", "nu", "kappa"} <= set(entries[0])
        # one config per temperature: the two-temperature report reads into one card (the Hub groups by config)
        assert [e["dataset_config"] for e in entries] == ["greedy", "temperature-1"]
        assert all(e.get("reference") == ("full" if name == "low" else None) for e in entries)
        card = str(
            render_model_card({"low": low_dir, "full": full_dir}[name], results=f"{out / 'results.json'}#{name}")
        )
        assert "config: greedy" in card and "config: temperature-1" in card
    # ν and κ of the prediction both refer to the reference's own head, so ν·κ is the low-rank head's share
    full, low = report["head_costs"]["full"], report["head_costs"]["low"]
    kappa_ref = 3 * full["t_head"] / full["t_non_head"]
    for temperature in (0.0, 1.0):
        row = overall["low", temperature]
        assert row["nu"] == pytest.approx(low["t_head"] / full["t_head"])
        assert row["kappa"] == pytest.approx(kappa_ref)
        assert row["predicted_speedup_vs_reference"] == pytest.approx(speedup(row["rho_tau"], row["nu"], kappa_ref))
    points, plot_kappa = acceptance_cost_points(report)  # the figure's iso-lines use the predictions' κ
    assert plot_kappa == pytest.approx(kappa_ref) and {p["name"] for p in points} == {"low", "full"}
    markdown = (out / "results.md").read_text()
    assert "| **overall** |" in markdown and "Drafter-step breakdown" in markdown
    assert "| full | full |" in markdown and "| low | low_rank r=" in markdown  # no rank shown for a dense head


def test_greedy_records_same_tokens_for_every_system(tmp_path):
    """Greedy speculative decoding is lossless: every system (confidence-stopped drafting too) generates the same
    number of tokens per question."""
    from slimspec_hf.evaluation.benchmark import BenchmarkSettings, run_benchmark

    target = make_tiny_target(eos_token_id=1)
    drafter = _drafter(target, 2)
    questions = load_questions(_questions_file(tmp_path / "q.jsonl"), categories=["qa"])
    settings = BenchmarkSettings(
        temperatures=(0.0,),
        max_new_tokens=10,
        prompt_lookup=2,
        confidence_thresholds=(0.5,),
        context_length=8,
        timing_repeats=1,
        progress=False,
    )
    report = run_benchmark(target, make_char_tokenizer(), {"low": drafter}, questions, settings)
    assert report["config"]["systems"] == ["target", "low", "low@p0.5", "prompt_lookup"]
    assert report["config"]["confidence_thresholds"] == [0.5]
    # the variant shares its drafter's head costs and gets its own model-index entry
    assert set(report["head_costs"]) == {"low"}
    entry = report["model_index"]["low@p0.5"][0]
    assert entry["kappa"] == pytest.approx(report["head_costs"]["low"]["kappa"])
    by_question = {}
    for r in report["records"]:
        by_question.setdefault(r["question_id"], set()).add(r["new_tokens"])
    assert all(len(v) == 1 for v in by_question.values()), by_question


def test_draft_tree_rows_sit_beside_the_chain_rows_and_stay_lossless(tmp_path):
    """`--draft-tree 4/2/2 --draft-lookup`: per drafter a chain, a hybrid chain, a tree and a hybrid tree, all
    generating the target's greedy tokens."""
    from slimspec_hf.evaluation.benchmark import BenchmarkSettings, run_benchmark
    from slimspec_hf.evaluation.systems import build_systems

    target = make_tiny_target(eos_token_id=1)
    drafter = _drafter(target, 2)
    systems = build_systems({"low": drafter}, draft_lookup=True, draft_trees=((4, 2, 2), (8, 3, 4)))
    assert [s.name for s in systems] == [
        "target",
        "low+lookup",
        "low",
        "low+tree4/2/2",
        "low+tree4/2/2+lookup",
        "low+tree8/3/4",
        "low+tree8/3/4+lookup",
    ]
    by_name = {s.name: s.generate_kwargs for s in systems}
    assert by_name["low+tree8/3/4+lookup"] == {
        "assistant_model": drafter,
        "draft_lookup": True,
        "draft_tree_size": 8,
        "draft_tree_depth": 3,
        "draft_tree_top_k": 4,
    }
    assert by_name["low+tree4/2/2"]["draft_lookup"] is False
    # the chain rows are chains even for a drafter whose generation_config drafts a tree by default
    assert by_name["low"]["draft_tree_size"] == 0 and by_name["low+lookup"]["draft_tree_size"] == 0
    alone = build_systems({"low": drafter}, draft_trees=((4, 2, 2),))  # no --draft-lookup: the drafter's defaults
    assert [s.name for s in alone] == ["target", "low", "low+tree4/2/2"] and "draft_lookup" not in alone[
        2
    ].generate_kwargs

    questions = load_questions(_questions_file(tmp_path / "q.jsonl"), categories=["qa", "coding"])
    settings = BenchmarkSettings(
        temperatures=(0.0,),
        max_new_tokens=10,
        draft_lookup=True,
        draft_trees=((4, 2, 2),),
        draft_shapes=("auto",),
        context_length=8,
        timing_repeats=1,
        progress=False,
    )
    report = run_benchmark(target, make_char_tokenizer(), {"low": drafter}, questions, settings)
    assert report["config"]["draft_trees"] == [[4, 2, 2]]
    assert report["config"]["systems"] == [
        "target",
        "low+lookup",
        "low",
        "low+tree4/2/2",
        "low+tree4/2/2+lookup",
        "low@auto",
    ]
    by_question = {}
    for r in report["records"]:
        by_question.setdefault(r["question_id"], set()).add(r["new_tokens"])
    assert all(len(v) == 1 for v in by_question.values()), by_question
    overall = {r["system"]: r for r in report["results"] if r["category"] == OVERALL}
    assert overall["low+tree4/2/2"]["tau"] >= 1.0
    assert overall["low@auto"]["shapes"] and not overall["low"]["shapes"]
    assert (
        f'Shapes chosen (`draft_shape="auto"`, each call\'s last round): low@auto: {overall["low@auto"]["shapes"]}'
        in (render_markdown(report))
    )


def test_draft_shape_rows_sit_beside_the_others_and_name_the_shapes_chosen():
    """`--draft-shape auto fixed`: rows NAME@auto and NAME@fixed pass `draft_shape` (nothing else changes), and
    the table names the shapes auto calls ended with, most frequent first."""
    from slimspec_hf.commands.bench import build_parser
    from slimspec_hf.evaluation.systems import build_systems, chosen_shapes

    drafter = object()
    systems = build_systems({"low": drafter}, draft_shapes=("auto", "fixed"))
    assert [s.name for s in systems] == ["target", "low", "low@auto", "low@fixed"]
    assert systems[2].generate_kwargs == {"assistant_model": drafter, "draft_shape": "auto"}
    assert systems[3].base == "low" and systems[3].generate_kwargs["draft_shape"] == "fixed"
    # beside --draft-lookup's chain rows (lookup off) and -k: the shape rows keep the drafter's own settings
    systems = build_systems({"low": drafter}, draft_lookup=True, num_assistant_tokens=3, draft_shapes=("auto",))
    assert [s.name for s in systems] == ["target", "low+lookup", "low", "low@auto"]
    assert systems[2].generate_kwargs["draft_lookup"] is False
    assert systems[3].generate_kwargs == {"assistant_model": drafter, "draft_shape": "auto"}
    calls = [{"draft_shape": {"shape": "chain 3"}}, None, {"rounds": 4}, {"draft_shape": {"shape": "plain"}}]
    calls.append({"draft_shape": {"shape": "plain"}})
    assert chosen_shapes(calls) == "plain ×2, chain 3 ×1" and chosen_shapes([None, {}]) == ""
    assert build_parser().parse_args(["--draft-shape", "auto", "fixed"]).draft_shape == ["auto", "fixed"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--draft-shape", "big"])


def test_draft_tree_flag_parses_shapes_and_refuses_others(capsys):
    from slimspec_hf.commands.bench import build_parser

    args = build_parser().parse_args(["--draft-tree", "16/4/4", "--draft-tree", "8/3/4"])
    assert args.draft_tree == [(16, 4, 4), (8, 3, 4)]
    for bad in ("16/4", "16/0/4", "a/b/c"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--draft-tree", bad])
        assert (
            f"expected SIZE/DEPTH/TOPK, three positive integers (e.g. 16/4/4), got '{bad}'" in capsys.readouterr().err
        )


@pytest.mark.parametrize("flag", ["--num-assistant-tokens", "-k"])
def test_draft_length_flag_sets_num_assistant_tokens(flag):
    from slimspec_hf.commands.bench import build_parser

    assert build_parser().parse_args([]).num_assistant_tokens is None  # each drafter's own
    args = build_parser().parse_args([flag, "3"])
    assert args.num_assistant_tokens == 3


def test_bench_batch_sizes_end_to_end_on_tiny_target(tmp_path, capsys):
    """`--batch-sizes` with greedy and sampled temperatures, `--top-p` and a tree row: one table on stdout, the
    summary and every timed batch in batch_sweep.json; greedy drafter batches equal plain batched greedy."""
    target = make_tiny_target(eos_token_id=1)
    target_dir, low_dir, out = tmp_path / "target", tmp_path / "low", tmp_path / "out"
    target.save_pretrained(target_dir)
    make_char_tokenizer().save_pretrained(target_dir)
    _drafter(target, 2).save_pretrained(low_dir)
    argv = [
        "--target",
        str(target_dir),
        "--drafter",
        str(low_dir),
        "--data",
        str(_questions_file(tmp_path / "q.jsonl")),
    ]
    argv += ["--batch-sizes", "1", "2", "--temperatures", "0", "0.8", "--top-p", "0.9", "--draft-tree", "4/2/2"]
    argv += ["--draft-shape", "auto", "fixed", "--save-acceptance"]
    argv += ["--max-new-tokens", "6", "--dtype", "float32", "--output-dir", str(out), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "temperatures 0, 0.8, sampled with top-p 0.9 (no top-k)" in printed
    assert "| T | B | system | tok/s | vs plain batched generate() | τ | identical batches | shapes chosen" in printed
    sweep = json.loads((out / "batch_sweep.json").read_text())
    assert sweep["config"]["top_p"] == 0.9 and sweep["config"]["temperatures"] == [0.0, 0.8]
    summary = {(r["temperature"], r["batch_size"], r["system"]): r for r in sweep["summary"]}
    names = ("target", "low", "low+tree4/2/2", "low@auto", "low@fixed")
    assert set(summary) == {(t, b, s) for t in (0.0, 0.8) for b in (1, 2) for s in names}
    assert summary[0.0, 2, "low"]["identical"] == "2/2" and summary[0.0, 1, "low+tree4/2/2"]["identical"] == "5/5"
    assert summary[0.0, 2, "low@auto"]["identical"] == "2/2" and summary[0.0, 1, "low@auto"]["identical"] == "5/5"
    assert summary[0.8, 2, "low"]["identical"] is None and summary[0.8, 2, "target"]["speedup"] == pytest.approx(1.0)
    # every auto batch names the shape it ended with; fixed rows choose none
    assert all(r["shape"] for r in sweep["rows"] if r["system"] == "low@auto")
    assert summary[0.0, 1, "low@auto"]["shapes"] and not summary[0.0, 1, "low@fixed"]["shapes"]
    assert len(sweep["rows"]) == 2 * (5 + 2) * len(names)  # temperatures × (batches of 1 + batches of 2) × systems
    # --save-acceptance: the auto rows' per-depth counts, in the folder's generation config, read back on load
    from transformers import AutoModelForCausalLM

    stored = json.loads((low_dir / "generation_config.json").read_text())["draft_acceptance"]
    assert set(stored) == {"greedy", "sampled"} and sum(stored["greedy"]["counts"][0]) > 0
    reloaded = AutoModelForCausalLM.from_pretrained(low_dir)
    assert reloaded.generation_config.draft_acceptance == stored
    from slimspec_hf.commands.common import CommandError

    with pytest.raises(CommandError, match=r"`--save-acceptance` writes into local drafter folders; got \['org/re"):
        main(argv[:2] + ["--drafter", "org/remote", "--save-acceptance"])


def test_merged_drafters_multiply_out_low_rank_heads_only():
    """`add_merged_drafters`: after each low-rank drafter a distinct copy with a dense head giving the same logits;
    other heads are not merged; no low-rank drafter, or a taken name, is refused."""
    import torch

    from slimspec_hf.evaluation.benchmark import BenchmarkSettings, _check_benchmark_inputs
    from slimspec_hf.evaluation.systems import add_merged_drafters
    from slimspec_hf.heads_slimspec import FullHead, LowRankHead

    target = make_tiny_target(eos_token_id=1)
    low, full = _drafter(target, 2), _drafter(target, 2, seed=2, head_type="full")
    drafters, merged_from = add_merged_drafters({"low": low, "full": full})
    assert list(drafters) == ["low", "low-merged", "full"] and merged_from == {"low-merged": "low"}
    merged = drafters["low-merged"]
    assert merged is not low and isinstance(merged.lm_head, FullHead) and merged.config.head_type == "full"
    assert isinstance(low.lm_head, LowRankHead) and low.config.head_type == "low_rank"  # the original is untouched
    states = torch.randn(2, 3, low.config.hidden_size)
    torch.testing.assert_close(merged.compute_logits(states), low.compute_logits(states), rtol=1e-5, atol=1e-5)
    # the reference: a trained full head before any merged one
    assert _check_benchmark_inputs(drafters, [{}], BenchmarkSettings(), merged_from) == "full"
    assert _check_benchmark_inputs({"low-merged": merged}, [{}], BenchmarkSettings(), merged_from) == "low-merged"
    with pytest.raises(ValueError, match=r"--merged-head.*no drafter has one.*'full': 'full'"):
        add_merged_drafters({"full": full})
    with pytest.raises(ValueError, match=r"\['low-merged'\] is already a drafter's name"):
        add_merged_drafters({"low": low, "low-merged": full})


def test_bench_merged_head_row_drafts_the_same_and_is_the_reference(tmp_path):
    """`--merged-head` without a trained full head: the row low-merged (head "full (merged)") drafts what low drafts
    (fp32 greedy: the same τ, round for round) and is the reference of ρτ and ν; the target-head drafter is not
    merged, and the merged row gets no model-card entry."""
    import torch

    target = make_tiny_target(eos_token_id=1)
    low = _drafter(target, 3)
    with torch.no_grad():  # the target always says token 0; the drafter drafts it about half the time: τ says which
        target.lm_head.weight.zero_()
        low.lm_head.up.weight[0] *= -10
    target_dir, low_dir, borrowed_dir, out = (tmp_path / n for n in ("target", "low", "borrowed", "out"))
    target.save_pretrained(target_dir)
    make_char_tokenizer().save_pretrained(target_dir)
    low.save_pretrained(low_dir)
    _drafter(target, 3, seed=2, head_type="target").save_pretrained(borrowed_dir)
    argv = ["--target", str(target_dir), "--drafter", str(low_dir), "--drafter", str(borrowed_dir), "--merged-head"]
    argv += ["--data", str(_questions_file(tmp_path / "q.jsonl")), "--categories", "qa", "translation"]
    argv += ["--temperatures", "0", "--max-new-tokens", "12", "--dtype", "float32", "--output-dir", str(out)]
    argv += ["--timing-repeats", "2", "--context-length", "16", "--no-progress"]
    assert main(argv) == 0
    report = json.loads((out / "results.json").read_text())
    assert report["config"]["systems"] == ["target", "low", "low-merged", "borrowed"]
    assert report["config"]["merged_heads"] == {"low-merged": "low"}
    assert report["config"]["reference"] == "low-merged"
    costs = report["head_costs"]
    assert costs["low-merged"]["head"] == "full (merged)" and costs["low-merged"]["merged_from"] == "low"
    assert costs["low-merged"]["head_type"] == "full" and costs["low"]["head"].startswith("low_rank r=")
    assert costs["borrowed"]["head"] == "target" and "merged_from" not in costs["borrowed"]
    rounds = {}
    for r in report["records"]:
        if r["stats"] is not None:
            rounds.setdefault(r["question_id"], {})[r["system"]] = (
                r["stats"]["accepted_tokens"],
                r["stats"]["rounds"],
            )
    assert all(by_system["low-merged"] == by_system["low"] for by_system in rounds.values()), rounds
    overall = {r["system"]: r for r in report["results"] if r["category"] == OVERALL}
    assert 1.2 < overall["low"]["tau"] < 3.8  # some drafts accepted, some not
    assert overall["low-merged"]["tau"] == overall["low"]["tau"] and overall["low"]["rho_tau"] == 1.0
    # ν and κ against the merged head inside its own drafter step
    assert overall["low"]["nu"] == pytest.approx(costs["low"]["t_head"] / costs["low-merged"]["t_head"])
    kappa_ref = 3 * costs["low-merged"]["t_head"] / costs["low-merged"]["t_non_head"]
    assert overall["borrowed"]["kappa"] == pytest.approx(kappa_ref) and overall["low-merged"]["nu"] == 1.0
    assert set(report["model_index"]) == {"low", "borrowed"}
    # the card says what ν is against; ρτ against its own merged head (the same drafts) is no head's quality
    (low_entry,), (borrowed_entry,) = report["model_index"]["low"], report["model_index"]["borrowed"]
    assert low_entry["reference"] == "the same head merged to a dense V×d one" and "rho_tau" not in low_entry
    assert borrowed_entry["reference"] == "low-merged" and borrowed_entry["rho_tau"] == overall["borrowed"]["rho_tau"]
    markdown = (out / "results.md").read_text()
    assert "| low-merged | full (merged) |" in markdown and "Against the merged head `low-merged`" in markdown


def test_bench_merged_head_needs_a_low_rank_drafter(tmp_path):
    target = make_tiny_target(eos_token_id=1)
    target_dir, full_dir = tmp_path / "target", tmp_path / "full"
    target.save_pretrained(target_dir)
    make_char_tokenizer().save_pretrained(target_dir)
    _drafter(target, 2, head_type="full").save_pretrained(full_dir)
    argv = ["--target", str(target_dir), "--drafter", str(full_dir), "--merged-head", "--no-progress"]
    with pytest.raises(ValueError, match="merges low-rank heads, but no drafter has one"):
        main(argv + ["--data", str(_questions_file(tmp_path / "q.jsonl")), "--output-dir", str(tmp_path / "out")])
