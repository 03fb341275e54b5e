"""Drafter cards as Hub drafter cards are (issue #21): licence, no widget, a chat-template quick start with real ids,
a recipe without the machine's values, results with their conditions, slowdowns called so; the metric cards and the
benchmark questions ship in the package."""

import json
import os
from fnmatch import fnmatch
from pathlib import Path

import pytest
import yaml

import slimspec_hf
from slimspec_hf.interop.model_card import render_model_card


PACKAGE = Path(slimspec_hf.__file__).parent
REPO_ROOT = PACKAGE.parents[1]
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _config(**overrides) -> dict:
    return {
        "model_type": "slimspec_drafter",
        "head_type": "low_rank",
        "head_rank": 72,
        "hidden_size": 576,
        "vocab_size": 49152,
        "target_layer_ids": [2, 15, 27],
        "target_model_name_or_path": SMOLLM2,
        **overrides,
    }


def _front_matter(text: str) -> dict:
    return yaml.safe_load(text.split("---")[1])


def test_front_matter_has_licence_and_no_widget():
    card = str(render_model_card(_config(), repo_id="org/smol-drafter", datasets=["org/prompts"]))
    meta = _front_matter(card)
    assert meta["license"] == "apache-2.0"  # the target's
    assert "pipeline_tag" not in meta and meta["inference"] is False
    assert {"speculative-decoding", "eagle3", "slimspec"} <= set(meta["tags"])
    assert meta["datasets"] == ["org/prompts"]
    assert "## License" in card and "`apache-2.0`" in card


def test_explicit_licence_wins_and_unknown_target_licence_says_so():
    meta = _front_matter(str(render_model_card(_config(), license="mit")))
    assert meta["license"] == "mit"
    card = str(render_model_card(_config(target_model_name_or_path="org/other")))
    assert "license" not in _front_matter(card) and "slimspec push --license" in card


def test_quick_start_uses_the_chat_template_and_the_real_ids():
    card = str(render_model_card(_config(), repo_id="org/smol-drafter", revision="b" * 40))
    assert "apply_chat_template" in card and 'tokenizer("Speculative decoding is"' not in card
    assert f'from_pretrained("{SMOLLM2}", dtype="auto", device_map="auto")' in card
    assert 'from_pretrained("org/smol-drafter", dtype=target.dtype).to(target.device)' in card
    assert "<your-org>" not in card and "<commit-sha>" not in card and "<target-model-id>" not in card


def test_a_gemma_drafters_card_carries_the_terms_notice_and_a_quick_start_without_a_chat_template():
    """Gemma-3-270M is a base model (no chat template) under the Gemma Terms of Use: its drafter's card says so in its
    licence section and prompts it the way the drafter was trained (the plain question format), with code that runs."""
    import ast

    config = _config(target_model_name_or_path="google/gemma-3-270m", vocab_size=262144, hidden_size=640)
    card = str(render_model_card(config, repo_id="org/gemma-drafter", revision="c" * 40))
    assert _front_matter(card)["license"] == "gemma"
    assert "Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms" in card
    assert "apply_chat_template" not in card and "Question: Explain speculative decoding" in card
    quick_start = card.split("```python")[1].split("```")[0]
    ast.parse(quick_start)
    assert "stop_strings=['\\nQuestion:']" in quick_start
    smollm2 = str(render_model_card(_config()))
    assert "Gemma" not in smollm2 and "apply_chat_template" in smollm2


def test_a_card_says_how_an_auto_drafter_drafts_and_what_a_continual_run_trained_on(tmp_path):
    from slimspec_hf.interop.model_card import write_model_card

    folder = tmp_path / "drafter"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_config()))
    (folder / "generation_config.json").write_text(json.dumps({"draft_shape": "auto", "draft_lookup": True}))
    state = {"steps": 626, "conversations": 2504, "tokens": 498568, "seconds": 23453.0, "sessions": [{}] * 5}
    (folder / "continual_state.json").write_text(json.dumps(state))
    card = write_model_card(folder, recipe={"learning_rate": 5e-4, "max_steps": 100000}).read_text()
    assert 'It picks each round\'s draft on your machine (`draft_shape="auto"`' in card
    assert "with hybrid prompt lookup" in card and "It drafts 6 tokens per round" not in card
    assert "cut into 5 time-boxed calls on one CPU core: 626\nsteps, 2,504 conversations, 0.50M tokens, 6.5 h" in card
    (folder / "generation_config.json").write_text(json.dumps({"draft_shape": "fixed"}))
    (folder / "continual_state.json").unlink()
    card = write_model_card(folder).read_text()
    assert "It drafts 6 tokens per round" in card and "draft_shape" not in card and "continual run" not in card


def test_recipe_shows_no_local_values_and_names_the_target():
    recipe = {
        "target_model": "embedded",
        "dataset_path": "data/smollm2/balanced_4k",
        "feature_cache_dir": "/home/me/cache",
        "use_cpu": True,
        "cpu_threads": 1,
        "dataloader_num_workers": 0,
        "logging_steps": 10,
        "save_steps": 100,
        "head_type": "low_rank",
        "head_rank": 72,
        "learning_rate": 4e-4,
        "ttt_steps": 6,
    }
    card = str(render_model_card(_config(), recipe=recipe))
    for local in ("use_cpu", "cpu_threads", "embedded", "balanced_4k", "/home/me", "dataloader", "save_steps"):
        assert local not in card, local
    assert f"| `target_model` | `{SMOLLM2}` |" in card and "| `head_rank` | `72` |" in card
    assert "ttt_steps: 6" in card


def test_recipe_from_the_trainer_config_lists_no_training_argument_plumbing(tmp_path):
    from slimspec_hf.training.config import SlimSpecConfig

    args = SlimSpecConfig(output_dir=str(tmp_path), use_cpu=True, target_model="embedded", head_rank=36, seed=7)
    card = str(render_model_card(_config(), recipe=args))
    full = card.split("```yaml")[1].split("```")[0]
    assert "head_rank: 36" in full and "seed: 7" in full and f"target_model: {SMOLLM2}" in full
    assert "use_cpu" not in full and "output_dir" not in full and "logging" not in full
    assert len(full.strip().splitlines()) < 30


def test_results_carry_conditions_and_call_a_slowdown_a_slowdown():
    results = {
        "dataset": "MT-Bench",
        "acceptance_length": 2.1,
        "speedup": 0.82,
        "temperature": 0.0,
        "num_assistant_tokens": 4,
        "num_samples": 80,
        "dtype": "float32",
        "hardware": "CPU (x86_64, 1 threads)",
    }
    card = str(render_model_card(_config(), results=results))
    assert "0.82× (a slowdown: the target alone is 1.22× faster here)" in card
    assert "| k (draft tokens per round) | 4 |" in card and "| questions | 80 |" in card
    assert "| dtype | float32 |" in card and "1 thread)" in card and "1 threads" not in card
    faster = str(render_model_card(_config(), results={**results, "speedup": 1.5}))
    assert (
        "1.50×" in faster
        and "slowdown"
        not in faster.split("## Results")[1].split("## License")[0].split("(below 1 it is a slowdown)")[1]
    )


def test_results_from_a_bench_report_take_its_conditions(tmp_path):
    report = {
        "config": {
            "num_questions": 80,
            "num_assistant_tokens": None,
            "max_new_tokens": 256,
            "dtype": "torch.bfloat16",
        },
        "model_index": {"slimspec": [{"dataset": "MT-Bench", "acceptance_length": 3.0, "speedup": 1.3}]},
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps(report))
    card = str(render_model_card(_config(), results=f"{path}#slimspec"))
    assert "| questions | 80 |" in card and "| dtype | bfloat16 |" in card and "| max new tokens | 256 |" in card
    assert "| k (draft tokens per round) | 6 (the drafter's default) |" in card


def test_push_offers_license(capsys):
    from slimspec_hf import cli

    with pytest.raises(SystemExit):
        cli.main(["push", "--help"])
    assert "--license" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["acceptance_length", "rho_tau"])
def test_metric_cards_ship(name):
    text = (PACKAGE / "evaluation" / "evaluate_metrics" / name / "README.md").read_text()
    meta = _front_matter(text)
    assert "metric" in meta["tags"] and meta["description"]
    for section in ("## Metric description", "## How to use", "### Inputs", "### Output values", "## Limitations"):
        assert section in text


def test_benchmark_questions_ship_as_package_data(monkeypatch):
    from slimspec_hf.evaluation.benchmark import default_questions_path, load_questions

    tomllib = pytest.importorskip("tomllib")
    patterns = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    monkeypatch.delenv("SLIMSPEC_DATA", raising=False)
    for dataset, rows in (("mt_bench", 80), ("spec_bench", 480)):
        path = default_questions_path(dataset)
        assert path.is_relative_to(PACKAGE) and path.is_file()
        relative = str(path.relative_to(PACKAGE))
        assert any(fnmatch(relative, p) for p in patterns["slimspec_hf"])
        assert len(load_questions(path, dataset=dataset)) == rows
    for name in ("README.md", "FastChat.LICENSE", "Spec-Bench.LICENSE"):
        assert (PACKAGE / "evaluation" / "data" / name).is_file()
    monkeypatch.setenv("SLIMSPEC_DATA", "/elsewhere")
    assert default_questions_path("mt_bench") == Path("/elsewhere/eval/mt_bench/question.jsonl")
    assert os.environ["SLIMSPEC_DATA"] == "/elsewhere"


def test_card_states_the_decoding_defaults_of_the_folder(tmp_path):
    """The drafter's generation_config.json (its decoding defaults) wins over the config's k in the card."""
    import json

    (tmp_path / "config.json").write_text(json.dumps(_config()))
    card = str(render_model_card(tmp_path))
    assert "It drafts 6 tokens per round;" in card and "prompt lookup" not in card
    (tmp_path / "generation_config.json").write_text(json.dumps({"num_assistant_tokens": 1, "draft_lookup": True}))
    card = str(render_model_card(tmp_path))
    assert "It drafts 1 token per round, or, where the latest tokens" in card and "hybrid prompt lookup" in card
    (tmp_path / "generation_config.json").write_text(json.dumps({"draft_tree_size": 8}))
    assert "It drafts a dynamic tree of 8 tokens per round" in str(render_model_card(tmp_path))


def test_card_of_a_model_or_a_bare_config_states_its_decoding_defaults(tmp_path):
    """Rendered from a drafter object, the card reads the drafter's generation_config; from a config without any
    decoding settings, the defaults a new drafter gets — never "drafts None tokens"."""
    from slimspec_hf import DraftSettings, SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM

    config = SlimSpecDrafterConfig(
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=99,
        head_type="low_rank",
        head_rank=4,
        target_hidden_size=32,
        target_num_hidden_layers=4,
    )
    drafter = SlimSpecDrafterForCausalLM(config)
    drafter.generation_config.num_assistant_tokens = 3
    card = str(render_model_card(drafter))
    assert "It drafts 3 tokens per round" in card and "None" not in card.split("It drafts")[1][:40]
    drafter.generation_config.draft_tree_size = 5
    assert "It drafts a dynamic tree of 5 tokens per round" in str(render_model_card(drafter))
    bare = _config()  # no generation_config: a new drafter's defaults
    default = DraftSettings.num_assistant_tokens  # what a new drafter's generation_config gets
    assert default > 1 and f"It drafts {default} tokens per round" in str(render_model_card(bare))
    from transformers import GenerationConfig

    drafter.generation_config = GenerationConfig()  # one that sets no draft settings: the defaults, never "None"
    assert f"It drafts {default} tokens per round" in str(render_model_card(drafter))
    drafter.save_pretrained(tmp_path / "folder")  # a folder whose generation_config.json sets none either
    assert f"It drafts {default} tokens per round" in str(render_model_card(tmp_path / "folder"))


def _prompt_rows(path, sources):
    path.write_text(
        "".join(json.dumps({"id": f"{s}-{i}", "source": s, "messages": []}) + "\n" for i, s in enumerate(sources))
    )
    return path


def test_datasets_are_the_hub_datasets_of_the_recipes_prompt_sources(tmp_path):
    data = _prompt_rows(tmp_path / "part.jsonl", ["gsm8k_train", "gsm8k_train", "oasst", "arena_hard_v0.1"])
    card = str(render_model_card(_config(), recipe={"dataset_path": str(data), "head_rank": 72}))
    assert _front_matter(card)["datasets"] == ["openai/gsm8k", "lmarena-ai/arena-hard-auto-v0.1"]
    # every source is named in the body with its upstream, the ones without a Hub copy included
    assert "| `oasst` | github.com/Open-Assistant/oasst-model-eval | Apache-2.0 | 1 |" in card
    assert "| `gsm8k_train` | github.com/openai/grade-school-math | MIT | 2 |" in card
    # a source whose prompts carry a share-alike licence says so, with its upstream Hub dataset in the front matter
    share_alike = "anicka-net/karma-electric-project:helpsteer2"
    card = str(
        render_model_card(_config(), recipe={"dataset_path": str(_prompt_rows(tmp_path / "sa.jsonl", [share_alike]))})
    )
    assert f"| `{share_alike}` | HelpSteer2, via anicka-net/karma-electric-project | CC-BY-SA-4.0 | 1 |" in card
    assert _front_matter(card)["datasets"] == ["nvidia/HelpSteer2"]
    assert "carry their own licences" in card
    # given datasets win; data that is not on this machine adds nothing
    card = str(render_model_card(_config(), recipe={"dataset_path": str(data)}, datasets=["org/mine"]))
    assert _front_matter(card)["datasets"] == ["org/mine"]
    card = str(render_model_card(_config(), recipe={"dataset_path": str(tmp_path / "elsewhere.jsonl")}))
    assert "datasets" not in _front_matter(card)


def test_written_card_records_the_datasets_for_a_later_push(tmp_path):
    from slimspec_hf.interop.model_card import load_card_inputs, write_model_card

    folder = tmp_path / "drafter"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_config()))
    data = _prompt_rows(tmp_path / "part.jsonl", ["self_instruct_user_oriented", "gpteacher_roleplay"])
    write_model_card(folder, recipe={"dataset_path": str(data)})
    data.unlink()  # pushed from a machine without the data: the recorded ids stay
    assert load_card_inputs(folder)["datasets"] == ["yizhongw/self_instruct"]


def test_shipped_card_names_its_prompt_sources_and_licence():
    folder = REPO_ROOT / "drafters" / "smollm2-135m-instruct-slimspec"
    meta = _front_matter((folder / "README.md").read_text())
    assert meta["license"] == "apache-2.0"
    assert {"openai/gsm8k", "lmarena-ai/arena-hard-auto-v0.1", "yizhongw/self_instruct"} <= set(meta["datasets"])
    assert json.loads((folder / "slimspec_card.json").read_text())["datasets"] == meta["datasets"]
