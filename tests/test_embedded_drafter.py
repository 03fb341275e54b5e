"""The shipped drafter of the embedded default (`drafters/smollm2-135m-instruct-slimspec`): its files, its loading,
and lossless, accelerated drafting on the real SmolLM2-135M-Instruct."""

import dataclasses
import json

import pytest
import torch
from safetensors import safe_open

from slimspec_hf import SlimSpecDrafterForCausalLM, load_embedded_drafter
from slimspec_hf.targets import EMBEDDED_DRAFTER_DIR, resolve_dtype


# τ on the three prompts below (greedy, 48 new tokens, fp32) with the shipped fixed shape (tree 4/1/4 and prompt
# lookup): 1.85 for the shipped drafter; greedy decoding is deterministic. (Three short answers: too few tokens to
# rank drafters, which the benchmarks do.)
TAU_FLOOR = 1.5


def test_shipped_folder_is_complete_small_and_bf16():
    folder = EMBEDDED_DRAFTER_DIR
    from slimspec_hf.interop.hub import REMOTE_CODE_FILES

    for name in ("config.json", "model.safetensors", "README.md", *REMOTE_CODE_FILES):
        assert (folder / name).is_file(), name

    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    assert size <= 20 * 2**20, f"{size / 2**20:.1f} MiB"
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        keys = list(f.keys())
        dtypes = {f.get_slice(k).get_dtype() for k in keys}
    assert dtypes == {"BF16"}
    assert not any("embed" in k for k in keys)  # the embedding is borrowed from the target, never saved
    config = json.loads((folder / "config.json").read_text())
    assert config["head_type"] == "low_rank" and config["head_rank"] == 72
    # the decoding defaults measured fastest on this CPU in bf16 (docs/results.md): k = 1 + prompt lookup
    settings = json.loads((folder / "generation_config.json").read_text())
    assert settings["num_assistant_tokens"] == 1 and settings["draft_lookup"] is True
    assert config["auto_map"]["AutoModelForCausalLM"].endswith("SlimSpecDrafterForCausalLM")


def test_loads_with_auto_class_and_helper():
    from transformers import AutoModelForCausalLM

    helper = load_embedded_drafter()
    auto = AutoModelForCausalLM.from_pretrained(EMBEDDED_DRAFTER_DIR)
    assert isinstance(helper, SlimSpecDrafterForCausalLM) and isinstance(auto, SlimSpecDrafterForCausalLM)
    # bf16 on disk; "auto" by default, as the target: bf16 where the CPU computes it natively, else fp32
    assert helper.dtype == resolve_dtype("auto")
    assert load_embedded_drafter(dtype="float32").dtype == torch.float32
    helper_state, auto_state = helper.state_dict(), auto.state_dict()
    assert list(helper_state) == list(auto_state)
    for name, value in helper_state.items():
        torch.testing.assert_close(value.float(), auto_state[name].float(), msg=name)


@pytest.mark.integration
def test_shipped_drafter_is_lossless_and_accepts_on_smollm2(embedded_target):
    model, tokenizer = embedded_target
    drafter = load_embedded_drafter(target=model)  # fp32, as the target: greedy output must be identical
    accepted = rounds = 0
    for question in ["What is the capital of France?", "List three uses of a paperclip.", "Explain what a CPU is."]:
        inputs = tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        plain = model.generate(**inputs, max_new_tokens=48, do_sample=False)
        # the default ("auto") picks its shape from this machine's timings, down to plain decoding: lossless whatever
        # it picks; acceptance is measured with the shipped fixed shape, so it does not depend on the machine
        auto = model.generate(**inputs, max_new_tokens=48, do_sample=False, assistant_model=drafter)
        assert auto.tolist() == plain.tolist(), question
        fixed = model.generate(
            **inputs, max_new_tokens=48, do_sample=False, assistant_model=drafter, draft_shape="fixed"
        )
        assert fixed.tolist() == plain.tolist(), question
        stats = drafter.last_generation_stats
        accepted, rounds = accepted + stats.accepted_tokens, rounds + stats.rounds
    tau = (accepted + rounds) / rounds
    assert tau >= TAU_FLOOR, tau


def test_ship_script_writes_a_bf16_folder_with_the_drafting_settings(tmp_path):
    import importlib.util

    from .testing_utils import make_tiny_drafter, make_tiny_target

    script = EMBEDDED_DRAFTER_DIR.parents[1] / "scripts" / "ship_embedded_drafter.py"
    spec = importlib.util.spec_from_file_location("ship_embedded_drafter", script)
    ship = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ship)

    make_tiny_drafter(make_tiny_target(), target_model_name_or_path="org/target").save_pretrained(tmp_path / "trained")
    dest = tmp_path / "drafters" / "tiny-slimspec"
    argv = [str(tmp_path / "trained"), "--dest", str(dest), "--num-assistant-tokens", "3", "--draft-lookup"]
    sampling = ["--draft-sampling", '{"num_assistant_tokens": 1}']
    assert ship.main([*argv, "--confidence-threshold", "0", *sampling]) == 0
    settings = json.loads((dest / "generation_config.json").read_text())
    assert settings["num_assistant_tokens"] == 3 and settings["assistant_confidence_threshold"] == 0.0
    assert settings["draft_lookup"] is True and settings["draft_sampling"] == {"num_assistant_tokens": 1}
    assert (dest / "README.md").is_file()
    with safe_open(str(dest / "model.safetensors"), framework="pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    assert sorted(p.name for p in dest.parent.iterdir()) == ["tiny-slimspec"]  # no staging folder left behind
    # a bad setting fails before anything is replaced
    with pytest.raises(ValueError, match="num_assistant_tokens"):
        ship.main([str(tmp_path / "trained"), "--dest", str(dest), "--num-assistant-tokens", "0"])
    with pytest.raises(ValueError, match="draft_sampling.*tree_size"):
        ship.main([str(tmp_path / "trained"), "--dest", str(dest), "--draft-sampling", '{"tree_size": 2}'])
    assert json.loads((dest / "generation_config.json").read_text())["num_assistant_tokens"] == 3
    # a continual run's folder ships with its state (the run goes on from the shipped drafter), and `draft_shape`
    (tmp_path / "trained" / "continual_state.json").write_text('{"steps": 5}')
    assert ship.main([str(tmp_path / "trained"), "--dest", str(dest), "--draft-shape", "auto"]) == 0
    assert json.loads((dest / "continual_state.json").read_text()) == {"steps": 5}
    assert json.loads((dest / "generation_config.json").read_text())["draft_shape"] == "auto"


def test_shipped_settings_for_greedy_sampling_and_batches():
    from transformers import GenerationConfig

    from slimspec_hf import DraftSettings

    shipped = GenerationConfig.from_pretrained(EMBEDDED_DRAFTER_DIR)
    greedy = DraftSettings.resolve(shipped, do_sample=False)
    sampled = DraftSettings.resolve(shipped, do_sample=True)
    assert greedy.draft_tree_size > 0 and greedy.draft_lookup  # a tree with lookup
    # sampled: the same tree, every lookup match verified beside it (measured in bf16, docs/results.md)
    assert dataclasses.replace(sampled, draft_lookup_min_ngram=2, draft_lookup_branch_ngram=0) == greedy
    assert sampled.draft_lookup_branch_ngram == 1 and sampled.draft_lookup_min_ngram > greedy.draft_lookup_min_ngram
    batched = DraftSettings.resolve(shipped, batched=True)
    assert batched.draft_tree_size < greedy.draft_tree_size and batched.draft_lookup_num_tokens <= 3
    assert batched.draft_max_batch_size == 4
    # a caller's explicit setting beats the drafter's defaults; the caller's own draft_sampling beats both
    assert DraftSettings.resolve(shipped, {"draft_tree_size": 6}, do_sample=True).draft_tree_size == 6
    mine = {"draft_tree_size": 6, "draft_sampling": {"draft_tree_size": 2}}
    assert DraftSettings.resolve(shipped, mine, do_sample=True).draft_tree_size == 2
    assert DraftSettings.resolve(shipped, mine, do_sample=False).draft_tree_size == 6


@pytest.mark.integration
def test_shipped_folder_runs_as_remote_code_without_the_package(tmp_path, embedded_target):
    """The shipped folder's own code (model, heads, generation, tree) loaded with trust_remote_code=True where
    `slimspec_hf` cannot be imported: its default (hybrid), a chain and a tree give the target's fp32 greedy output."""
    from slimspec_hf.targets import embedded_target_dir

    from .testing_utils import run_without_package

    model, tokenizer = embedded_target
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "List three uses of a paperclip."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    ids = inputs["input_ids"].tolist()
    expected = model.generate(**inputs, max_new_tokens=24, do_sample=False)[0].tolist()
    script = f"""
        import torch
        from transformers import AutoModelForCausalLM
        drafter = AutoModelForCausalLM.from_pretrained(
            {str(EMBEDDED_DRAFTER_DIR)!r}, trust_remote_code=True, dtype=torch.float32
        ).eval()
        assert type(drafter).__module__.startswith("transformers_modules"), type(drafter).__module__
        assert drafter.generation_config.draft_lookup is True
        target = AutoModelForCausalLM.from_pretrained({str(embedded_target_dir())!r}, dtype=torch.float32).eval()
        ids = torch.tensor({ids})
        chain = {{"draft_lookup": False, "num_assistant_tokens": 3, "draft_tree_size": 0}}
        tree = {{"draft_tree_size": 8, "draft_tree_depth": 3, "draft_tree_top_k": 4}}
        for kwargs in ({{}}, chain, tree):
            out = target.generate(ids, max_new_tokens=24, do_sample=False, assistant_model=drafter, **kwargs)
            assert out[0].tolist() == {expected}, (kwargs, out)
            assert drafter.last_generation_stats.rounds > 0
        print("REMOTE-OK")
        """
    run_without_package(script, tmp_path, timeout=600)


def test_shipped_remote_code_is_the_package_code():
    """Every shipped folder carries the package's remote-code unit as it is (re-copy after changing it)."""
    from slimspec_hf.interop.hub import PACKAGE_DIR, REMOTE_CODE_FILES
    from slimspec_hf.paths import drafters_dir

    folders = [p.parent for p in drafters_dir().glob("*/config.json")]
    assert EMBEDDED_DRAFTER_DIR in folders and len(folders) >= 2
    for folder in folders:
        for name in REMOTE_CODE_FILES:
            assert (folder / name).read_text() == (PACKAGE_DIR / name).read_text(), (folder.name, name)
        assert sorted(p.name for p in folder.glob("*.py")) == sorted(REMOTE_CODE_FILES), folder.name


def test_every_shipped_folder_records_the_dtype_of_its_weights():
    from slimspec_hf.paths import drafters_dir

    folders = [p.parent for p in drafters_dir().glob("*/config.json")]
    assert folders
    names = {"BF16": "bfloat16", "F32": "float32", "F16": "float16"}
    for folder in folders:
        with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
            dtypes = {names[f.get_slice(k).get_dtype()] for k in f.keys()}
        assert dtypes == {json.loads((folder / "config.json").read_text())["dtype"]}, folder
