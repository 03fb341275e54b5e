"""Hub integration: model cards, `push_to_hub`, loading by repo id with and without the package.

Everything that talks to the Hub goes through the real `huggingface_hub`/`transformers` clients against the loopback
server `HubServer` (testing_utils.py). `HF_ENDPOINT` is read when huggingface_hub is imported, so the client code runs
in fresh interpreters (the `_scenario_*` functions below, run by `_run_client`) with a dummy token, telemetry off and a
fresh `HF_HOME`; the pytest process only inspects what they report and what the server holds.
"""

import dataclasses
import json
import re
import subprocess
import sys
import warnings
from fnmatch import fnmatch
from pathlib import Path

import pytest
import torch
import yaml

from ..testing_utils import REPO_ROOT, RESULT_MARK, HubServer, hub_client_env


DRAFTER_REPO = "org/tiny-drafter"
SETTINGS_REPO = "org/tiny-drafter-settings"
RESULTS = {"acceptance_length": 3.1, "rho_tau": 0.99, "speedup": 2.0, "nu": 0.2, "dataset": "Spec-Bench"}
RECIPE = {"head_type": "low_rank", "head_rank": 4, "ttt_steps": 6, "learning_rate": 4e-4, "hub_token": "secret"}

# Makes `slimspec_hf` unimportable in a child interpreter although it is installed (editable) in the venv.
BLOCK_PACKAGE = """
import importlib.abc, sys
class _BlockSlimSpec(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "slimspec_hf" or name.startswith("slimspec_hf."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by test_hub)", name=name)
        return None
sys.meta_path.insert(0, _BlockSlimSpec())
"""


# ----------------------------------------------------------------------------------------------------------------
# Running client code in a fresh interpreter pointed at the test server
# ----------------------------------------------------------------------------------------------------------------


def _run_client(hub: HubServer, home: Path, scenario: str, *args, block_package: bool = False) -> dict:
    boot = (BLOCK_PACKAGE if block_package else "") + (
        "import json, sys\n"
        f"sys.path.insert(0, {str(REPO_ROOT)!r})\n"
        "from tests.interop import test_hub\n"
        f"result = test_hub.{scenario}(*{list(args)!r})\n"
        f"print('\\n' + {RESULT_MARK!r} + json.dumps(result))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", boot],
        env=hub_client_env(hub, home),
        stdin=subprocess.DEVNULL,  # transformers' trust_remote_code prompt must not wait for input
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if proc.returncode != 0 or not lines:
        pytest.fail(
            f"{scenario} failed (rc {proc.returncode}).\nstderr:\n{proc.stderr[-6000:]}\nstdout:\n{proc.stdout[-2000:]}"
            f"\nserver errors: {hub.errors}\nlast requests: {hub.requests[-15:]}"
        )
    return json.loads(lines[-1][len(RESULT_MARK) :])


def _probe_inputs(config):
    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(0, config.vocab_size, (1, 7), generator=generator)
    features = torch.randn(1, 7, 3 * config.target_hidden_size, generator=generator)
    return ids, features


def _card_summary(card) -> dict:
    text = str(card)
    data = card.data.to_dict()
    return {
        "text": text,
        "base_model": data.get("base_model"),
        "tags": data.get("tags"),
        "datasets": data.get("datasets"),
        "metrics": {r.metric_type: r.metric_value for r in card.data.eval_results or []},
        "pinned": (re.search(r'revision="([0-9a-f]{40})"', text) or [None, None])[1],
    }


def _hub_json(api, repo_id: str, name: str) -> dict | None:
    """The JSON file `name` of `repo_id` on the Hub, or None when the repo has no such file."""
    from huggingface_hub.errors import EntryNotFoundError

    try:
        return json.loads(Path(api.hf_hub_download(repo_id, name)).read_text())
    except EntryNotFoundError:
        return None


def _scenario_push_and_load(workdir: str) -> dict:
    """With the package installed: CLI push, loads by repo id, re-pushes, revisions, bad input, drafter.push_to_hub."""
    from huggingface_hub import HfApi, ModelCard
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from slimspec_hf import SlimSpecDrafterForCausalLM, cli
    from slimspec_hf.interop import hub
    from slimspec_hf.interop.model_card import write_model_card

    from ..testing_utils import make_tiny_drafter, make_tiny_target

    work, api, out = Path(workdir), HfApi(), {}
    out["push_is_the_drafters_own"] = "push_to_hub" in SlimSpecDrafterForCausalLM.__dict__

    target = make_tiny_target()
    target.generation_config.pad_token_id = 0
    target.save_pretrained(work / "target")
    drafter = make_tiny_drafter(target, target_model_name_or_path="org/tiny-target")
    ids, features = _probe_inputs(drafter.config)
    with torch.no_grad():
        ref1 = drafter(input_ids=ids, target_features=features).logits
    drafter.save_pretrained(work / "v1")
    write_model_card(work / "v1", recipe=RECIPE, results=RESULTS, datasets=["org/prompts"])

    # 1. `slimspec push DIR REPO_ID`, then what the Hub holds
    out["cli_rc"] = cli.main(["push", str(work / "v1"), DRAFTER_REPO])
    out["files_v1"] = sorted(api.list_repo_files(DRAFTER_REPO))
    card_v1 = _card_summary(ModelCard.load(DRAFTER_REPO))
    out["card_v1"] = card_v1
    out["head_v1"] = api.model_info(DRAFTER_REPO).sha

    # 2. load by repo id with the package installed: identical logits
    def logits_of(model):
        with torch.no_grad():
            return model.eval().attach_target(target)(input_ids=ids, target_features=features).logits

    loaded = AutoModelForCausalLM.from_pretrained(DRAFTER_REPO)
    out["loaded_class"] = f"{type(loaded).__module__}.{type(loaded).__qualname__}"
    out["roundtrip_max_diff"] = (logits_of(loaded) - ref1).abs().max().item()

    # 3. re-push of the unchanged folder: no commit
    hub.push_to_hub(work / "v1", DRAFTER_REPO)
    out["noop_push_head_unchanged"] = api.model_info(DRAFTER_REPO).sha == out["head_v1"]

    # 4. re-push new weights over the existing repo; the pinned v1 commit still loads v1
    with torch.no_grad():
        drafter.fc.weight.mul_(-1.5)
        ref2 = drafter(input_ids=ids, target_features=features).logits
    drafter.save_pretrained(work / "v2")
    write_model_card(work / "v2", results={**RESULTS, "acceptance_length": 3.4})
    info = hub.push_to_hub(work / "v2", DRAFTER_REPO, commit_message="v2 weights")
    out["v2_commit_url"] = info.commit_url
    card_v2 = _card_summary(ModelCard.load(DRAFTER_REPO))
    out["card_v2"] = {k: card_v2[k] for k in ("pinned", "metrics")}
    out["v2_differs_from_v1"] = (ref2 - ref1).abs().max().item()
    out["main_after_v2_max_diff"] = (
        (logits_of(AutoModelForCausalLM.from_pretrained(DRAFTER_REPO)) - ref2).abs().max().item()
    )
    pinned_v1 = AutoModelForCausalLM.from_pretrained(DRAFTER_REPO, revision=card_v1["pinned"])
    out["pinned_v1_max_diff"] = (logits_of(pinned_v1) - ref1).abs().max().item()
    pinned_v2 = AutoModelForCausalLM.from_pretrained(DRAFTER_REPO, revision=card_v2["pinned"])
    out["pinned_v2_max_diff"] = (logits_of(pinned_v2) - ref2).abs().max().item()

    # 5. a branch: push v1 to `stable`, main keeps v2
    hub.push_to_hub(work / "v1", DRAFTER_REPO, revision="stable")
    branch = AutoModelForCausalLM.from_pretrained(DRAFTER_REPO, revision="stable")
    out["branch_max_diff"] = (logits_of(branch) - ref1).abs().max().item()
    out["branch_card_pinned"] = _card_summary(
        ModelCard.load(api.hf_hub_download(DRAFTER_REPO, "README.md", revision="stable"))
    )["pinned"]

    # 6. bad input: a missing revision, a repo that is not a drafter, a folder that is not a drafter
    for key, call in {
        "missing_revision": lambda: hub.load_drafter(DRAFTER_REPO, revision="no-such-branch"),
        "not_a_drafter_load": lambda: hub.load_drafter("org/tiny-llama"),
        "not_a_drafter_push": lambda: hub.push_to_hub(work / "target", "org/should-not-exist"),
        "missing_repo": lambda: hub.load_drafter("org/no-such-repo"),
    }.items():
        if key == "not_a_drafter_load":
            api.create_repo("org/tiny-llama")
            api.upload_folder(repo_id="org/tiny-llama", folder_path=work / "target")
        try:
            call()
            out[key] = None
        except Exception as err:  # noqa: BLE001 - the test checks type and message
            out[key] = f"{type(err).__name__}: {err}"
    out["repo_created_by_bad_push"] = api.repo_exists("org/should-not-exist")

    # 7. speculative generation with the drafter loaded by repo id equals plain greedy decoding
    prompt = torch.tensor([[5, 17, 33, 2, 90, 41]])
    mask = torch.ones_like(prompt)
    greedy = target.generate(prompt, attention_mask=mask, max_new_tokens=20, do_sample=False)
    drafted_by = AutoModelForCausalLM.from_pretrained(DRAFTER_REPO).eval()
    spec = target.generate(prompt, attention_mask=mask, max_new_tokens=20, do_sample=False, assistant_model=drafted_by)
    out["generate_equal"] = torch.equal(greedy, spec)
    out["generate_rounds"] = drafted_by.last_generation_stats.rounds

    # 8. a folder whose draft settings (generation_config.json) are not a new drafter's: `slimspec push` uploads them,
    # the card states them, and the drafter loaded by repo id drafts with them
    drafter.generation_config.num_assistant_tokens = 2
    drafter.generation_config.draft_lookup = True
    drafter.save_pretrained(work / "settings")
    write_model_card(work / "settings", results=RESULTS)
    out["settings_cli_rc"] = cli.main(["push", str(work / "settings"), SETTINGS_REPO])
    out["settings_files"] = sorted(api.list_repo_files(SETTINGS_REPO))
    out["settings_card"] = str(ModelCard.load(SETTINGS_REPO))
    out["settings_on_hub"] = _hub_json(api, SETTINGS_REPO, "generation_config.json")
    out["settings_loaded"] = AutoModelForCausalLM.from_pretrained(SETTINGS_REPO).generation_config.to_dict()

    # 9. drafter.push_to_hub: the drafter's own override, which publishes through the package (SlimSpec card), with
    # the settings above
    drafter.push_to_hub("org/tiny-drafter-transformers")
    out["transformers_push_card"] = str(ModelCard.load("org/tiny-drafter-transformers"))
    out["transformers_push_files"] = sorted(api.list_repo_files("org/tiny-drafter-transformers"))
    config_path = api.hf_hub_download("org/tiny-drafter-transformers", "config.json")
    out["transformers_push_auto_map"] = json.loads(Path(config_path).read_text())["auto_map"]
    out["transformers_push_card_tags"] = ModelCard.load("org/tiny-drafter-transformers").data.tags
    drafter.push_to_hub("org/tiny-drafter-hook", results=RESULTS)
    out["hook_push_files"] = sorted(api.list_repo_files("org/tiny-drafter-hook"))
    hook_card = _card_summary(ModelCard.load("org/tiny-drafter-hook"))
    out["hook_push_card"] = {k: hook_card[k] for k in ("tags", "metrics", "pinned")}

    save_file({"ids": ids, "features": features, "ref2": ref2.contiguous()}, str(work / "expected.safetensors"))
    out["pinned_v2"] = card_v2["pinned"]
    return out


def _scenario_remote_code(workdir: str, repo_id: str, revision: str) -> dict:
    """Where `slimspec_hf` cannot be imported: trust_remote_code=True at the card's pinned revision, then generate."""
    import importlib.util

    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    work, out = Path(workdir), {}
    try:
        importlib.util.find_spec("slimspec_hf")
        out["package_importable"] = True
    except ModuleNotFoundError:
        out["package_importable"] = False
    try:
        AutoModelForCausalLM.from_pretrained(repo_id, revision=revision)
        out["without_trust_error"] = None
    except Exception as err:  # noqa: BLE001
        out["without_trust_error"] = f"{type(err).__name__}: {err}"

    target = AutoModelForCausalLM.from_pretrained(work / "target").eval()
    target.generation_config.pad_token_id = 0
    drafter = AutoModelForCausalLM.from_pretrained(repo_id, trust_remote_code=True, revision=revision).eval()
    out["drafter_module"] = type(drafter).__module__
    expected = load_file(str(work / "expected.safetensors"))
    with torch.no_grad():
        logits = drafter.attach_target(target)(input_ids=expected["ids"], target_features=expected["features"]).logits
    out["max_diff"] = (logits - expected["ref2"]).abs().max().item()

    prompt = torch.tensor([[5, 17, 33, 2, 90, 41]])
    mask = torch.ones_like(prompt)
    greedy = target.generate(prompt, attention_mask=mask, max_new_tokens=20, do_sample=False)
    spec = target.generate(prompt, attention_mask=mask, max_new_tokens=20, do_sample=False, assistant_model=drafter)
    out["generate_equal"] = torch.equal(greedy, spec)
    out["generate_rounds"] = drafter.last_generation_stats.rounds
    drafter.last_generation_stats = None
    recipe = target.generate(  # transformers' route: the repo's custom_generate/generate.py
        prompt,
        attention_mask=mask,
        max_new_tokens=20,
        do_sample=False,
        custom_generate=repo_id,
        trust_remote_code=True,
        assistant_model=drafter,
        draft_tree_size=6,
        draft_tree_depth=3,
        draft_tree_top_k=2,
    )
    out["custom_generate_equal"] = torch.equal(greedy, recipe)
    out["custom_generate_rounds"] = drafter.last_generation_stats.rounds
    out["custom_generate_modules"] = sorted(m for m in sys.modules if "custom_generate" in m)
    out["slimspec_modules_loaded"] = sorted(m for m in sys.modules if m.startswith("slimspec_hf"))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Tests through the real client against the loopback server
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hub_server():
    with HubServer() as server:
        yield server
    assert not server.errors, f"the test hub server raised: {server.errors}"


@pytest.fixture(scope="module")
def pushed(hub_server, tmp_path_factory):
    work = tmp_path_factory.mktemp("hub-work")
    home = tmp_path_factory.mktemp("hf-home-installed")
    return _run_client(hub_server, home, "_scenario_push_and_load", str(work)), work


def test_cli_push_publishes_weights_config_remote_code_and_card(pushed, hub_server):
    out, _ = pushed
    assert out["cli_rc"] == 0
    for name in ("config.json", "model.safetensors", "configuration_slimspec.py", "modeling_slimspec.py", "README.md"):
        assert name in out["files_v1"]
    assert {"custom_generate/generate.py", "custom_generate/README.md"} <= set(out["files_v1"])
    recipe = hub_server.files(DRAFTER_REPO, out["head_v1"])["custom_generate/generate.py"]
    assert recipe == (REPO_ROOT / "src/slimspec_hf/custom_generate/generate.py").read_bytes()
    assert "slimspec_card.json" not in out["files_v1"]  # the card's inputs stay local
    config = json.loads(hub_server.files(DRAFTER_REPO, out["head_v1"])["config.json"])
    assert config["auto_map"] == {
        "AutoConfig": "configuration_slimspec.SlimSpecDrafterConfig",
        "AutoModelForCausalLM": "modeling_slimspec.SlimSpecDrafterForCausalLM",
    }
    card = out["card_v1"]
    assert card["base_model"] == "org/tiny-target"
    assert {"speculative-decoding", "eagle3", "slimspec", "low-rank-head"} <= set(card["tags"])
    assert card["datasets"] == ["org/prompts"]
    assert card["metrics"] == {k: v for k, v in RESULTS.items() if k != "dataset"}
    # The card pins the commit that holds the weights and code, made just before the card commit.
    files_at_pin = hub_server.files(DRAFTER_REPO, card["pinned"])
    assert files_at_pin["model.safetensors"] == hub_server.files(DRAFTER_REPO, out["head_v1"])["model.safetensors"]
    assert f'"{DRAFTER_REPO}", trust_remote_code=True, revision="{card["pinned"]}"' in card["text"]
    assert "hub_token" not in card["text"] and "secret" not in card["text"]


def test_push_then_load_by_repo_id_gives_identical_logits(pushed):
    out, _ = pushed
    assert out["loaded_class"] == "slimspec_hf.modeling_slimspec.SlimSpecDrafterForCausalLM"
    assert out["roundtrip_max_diff"] == 0.0


def test_repush_unchanged_folder_makes_no_commit(pushed):
    assert pushed[0]["noop_push_head_unchanged"] is True


def test_repush_over_existing_repo_updates_weights_and_card(pushed, hub_server):
    out, _ = pushed
    assert out["v2_differs_from_v1"] > 1e-3  # the check below can tell the versions apart
    assert out["main_after_v2_max_diff"] == 0.0
    assert out["card_v2"]["metrics"]["acceptance_length"] == 3.4
    assert out["card_v2"]["metrics"]["rho_tau"] == 0.99  # kept from the recorded inputs
    assert out["card_v2"]["pinned"] != out["card_v1"]["pinned"]
    history = hub_server.history(DRAFTER_REPO)
    assert history[:2] == ["v2 weights: model card", "v2 weights"]
    assert history[-1] == "initial commit" and len(history) == 5  # v1 files + card, v2 files + card, creation


def test_pinned_revision_loads_that_commit(pushed):
    out, _ = pushed
    assert out["pinned_v1_max_diff"] == 0.0
    assert out["pinned_v2_max_diff"] == 0.0


def test_push_to_branch(pushed, hub_server):
    out, _ = pushed
    assert out["branch_max_diff"] == 0.0
    assert out["branch_card_pinned"] in hub_server.state.repos[DRAFTER_REPO].commits
    assert (
        hub_server.files(DRAFTER_REPO, "stable")["model.safetensors"]
        != hub_server.files(DRAFTER_REPO)["model.safetensors"]
    )


def test_bad_input_gives_clear_errors(pushed):
    out, _ = pushed
    assert out["missing_revision"].startswith("ValueError")
    assert "'no-such-branch' does not exist" in out["missing_revision"]
    assert out["not_a_drafter_load"].startswith("ValueError")
    assert "model_type is 'llama'" in out["not_a_drafter_load"]
    assert out["not_a_drafter_push"].startswith("ValueError") and "not a SlimSpec drafter" in out["not_a_drafter_push"]
    assert out["repo_created_by_bad_push"] is False  # refused before anything reached the Hub
    assert out["missing_repo"].startswith("ValueError") and "org/no-such-repo" in out["missing_repo"]


def test_generate_with_drafter_loaded_by_repo_id(pushed):
    out, _ = pushed
    assert out["generate_equal"] is True
    assert out["generate_rounds"] > 0  # the SlimSpec generator really drafted


def test_transformers_push_to_hub_publishes_remote_code(pushed):
    out, _ = pushed
    for name in ("config.json", "model.safetensors", "configuration_slimspec.py", "modeling_slimspec.py", "README.md"):
        assert name in out["transformers_push_files"]
    assert out["transformers_push_auto_map"]["AutoModelForCausalLM"] == "modeling_slimspec.SlimSpecDrafterForCausalLM"


def test_push_hook_publishes_slimspec_card(pushed):
    out, _ = pushed
    assert {"configuration_slimspec.py", "modeling_slimspec.py", "model.safetensors"} <= set(out["hook_push_files"])
    card = out["hook_push_card"]
    assert "slimspec" in card["tags"] and card["metrics"]["speedup"] == 2.0
    assert card["pinned"] is not None


def test_drafter_push_to_hub_publishes_the_slimspec_card(pushed):
    out, _ = pushed
    assert out["push_is_the_drafters_own"] is True  # an override on the class, nothing patched from outside
    assert "slimspec" in (out["transformers_push_card_tags"] or [])


def _draft_sentence(card: str) -> str:
    """The card's sentence that states the draft settings ("It drafts … ;")."""
    match = re.search(r"It drafts[^;]*;", card)
    assert match, "the card states no draft settings"
    return " ".join(match.group(0).split())


def _folder_settings(work: Path) -> dict:
    """The pushed folder's generation_config.json, checked to differ from a new drafter's draft settings."""
    from slimspec_hf import DraftSettings

    settings = json.loads((work / "settings" / "generation_config.json").read_text())
    assert settings["num_assistant_tokens"] != DraftSettings.num_assistant_tokens
    assert settings["draft_lookup"] is True and DraftSettings.draft_lookup is False
    return settings


def test_pushed_card_states_the_folders_draft_settings(pushed):
    """`slimspec push` and `drafter.push_to_hub`: the uploaded card states the generation_config's draft settings."""
    out, work = pushed
    settings = _folder_settings(work)
    assert out["settings_cli_rc"] == 0
    k = settings["num_assistant_tokens"]
    for card in (out["settings_card"], out["transformers_push_card"]):
        sentence = _draft_sentence(card)
        assert sentence.startswith(f"It drafts {k} tokens per round, or, where the latest tokens"), sentence
        assert "hybrid prompt lookup" in sentence  # draft_lookup
    assert f"| k (draft tokens per round) | {k} (the drafter's default) |" in out["settings_card"]


def test_pushed_generation_config_is_uploaded_and_loaded(pushed):
    """generation_config.json reaches the Hub unchanged, and the drafter loaded by repo id drafts with its settings."""
    out, work = pushed
    settings = _folder_settings(work)
    assert "generation_config.json" in out["settings_files"]
    assert out["settings_on_hub"] == settings
    assert {key: out["settings_loaded"].get(key) for key in settings} == settings


def test_remote_code_without_the_package(pushed, hub_server, tmp_path):
    out, work = pushed
    remote = _run_client(
        hub_server,
        tmp_path / "hf-home",
        "_scenario_remote_code",
        str(work),
        DRAFTER_REPO,
        out["pinned_v2"],
        block_package=True,
    )
    assert remote["package_importable"] is False
    assert remote["slimspec_modules_loaded"] == []
    assert "trust_remote_code" in remote["without_trust_error"]
    assert remote["drafter_module"].startswith("transformers_modules.")
    assert remote["max_diff"] == 0.0
    assert remote["generate_equal"] is True
    assert remote["generate_rounds"] > 0
    # `generate(custom_generate="org/name", trust_remote_code=True)`: the pushed recipe, lossless, the drafter's code
    assert remote["custom_generate_equal"] is True
    assert remote["custom_generate_rounds"] > 0
    assert any(m.startswith("transformers_modules.") for m in remote["custom_generate_modules"])


# ----------------------------------------------------------------------------------------------------------------
# Cards, in process (no Hub traffic)
# ----------------------------------------------------------------------------------------------------------------


def _tiny_drafter(**overrides):
    from ..testing_utils import make_tiny_drafter, make_tiny_target

    return make_tiny_drafter(make_tiny_target(), **overrides)


def _front_matter(text: str) -> dict:
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])


def test_card_front_matter_parses_and_carries_the_metrics():
    from huggingface_hub import ModelCard

    from slimspec_hf.interop.model_card import render_model_card

    drafter = _tiny_drafter(target_model_name_or_path="HuggingFaceTB/SmolLM2-135M-Instruct")
    results = [
        {**RESULTS, "dataset_config": "greedy", "temperature": 0.0},
        {"acceptance_length": 2.5, "speedup": 1.4, "dataset": "Spec-Bench", "dataset_config": "temperature-1"},
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a recorded Hub target: no warning
        card = render_model_card(
            drafter, results=results, datasets="org/prompts", revision="a" * 40, repo_id="org/smol-drafter"
        )
    meta = _front_matter(str(card))
    assert meta["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert meta["library_name"] == "transformers" and "pipeline_tag" not in meta  # no widget that cannot work
    assert meta["inference"] is False and meta["license"] == "apache-2.0"  # the target's licence
    assert meta["tags"] == ["speculative-decoding", "eagle3", "slimspec", "low-rank-head"]
    assert meta["datasets"] == ["org/prompts"]
    (index,) = meta["model-index"]
    assert index["name"] == "smol-drafter"
    by_config = {r["dataset"]["config"]: {m["type"]: m["value"] for m in r["metrics"]} for r in index["results"]}
    assert by_config == {
        "greedy": {"acceptance_length": 3.1, "rho_tau": 0.99, "speedup": 2.0, "nu": 0.2},
        "temperature-1": {"acceptance_length": 2.5, "speedup": 1.4},
    }
    assert all(
        r["task"]["type"] == "text-generation" and r["dataset"]["name"] == "Spec-Bench" for r in index["results"]
    )
    # huggingface_hub reads it back the same way
    reparsed = ModelCard(str(card)).data
    assert sorted((r.dataset_config, r.metric_type, r.metric_value) for r in reparsed.eval_results) == sorted(
        (config, metric, value) for config, metrics in by_config.items() for metric, value in metrics.items()
    )
    text = str(card)
    assert 'AutoModelForCausalLM.from_pretrained("org/smol-drafter", dtype=target.dtype)' in text
    assert "apply_chat_template" in text and "<your-org>" not in text and "<target-model-id>" not in text
    assert f'revision="{"a" * 40}"' in text
    assert "| rank r | 4 (hidden size d = 32, d / r = 8.0) |" in text
    assert "0.200 (measured)" in text  # ν
    assert "arXiv" in text and "2605.10453" in text and "2503.01840" in text
    assert "\n\n\n" not in text


def test_card_without_a_target_warns_and_uses_a_placeholder():
    from slimspec_hf.interop.model_card import PLACEHOLDER_TARGET, render_model_card

    drafter = _tiny_drafter()
    assert drafter.config.target_model_name_or_path is None
    with pytest.warns(UserWarning, match="target_model_name_or_path"):
        card = render_model_card(drafter.config)
    assert "base_model" not in _front_matter(str(card))
    assert f'from_pretrained("{PLACEHOLDER_TARGET}")' in str(card)
    assert "Target not recorded" in str(card)
    with pytest.warns(UserWarning, match="not a Hub repo id"):
        render_model_card(_tiny_drafter(target_model_name_or_path="/local/path/to/target").config)


def test_card_refuses_configs_that_are_not_slimspec_drafters(tmp_path):
    from slimspec_hf.interop.model_card import render_model_card, write_model_card

    from ..testing_utils import make_tiny_target

    target = make_tiny_target()
    target.save_pretrained(tmp_path)
    for source in (tmp_path, target.config, target):
        with pytest.raises(ValueError, match="model_type is 'llama', expected 'slimspec_drafter'"):
            render_model_card(source)
    with pytest.raises(ValueError, match="not a SlimSpec drafter"):
        write_model_card(tmp_path)
    assert not (tmp_path / "README.md").exists()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        render_model_card(tmp_path / "missing")


@pytest.mark.parametrize(
    "results, match",
    [
        ({"acceptance_length": float("nan"), "dataset": "Spec-Bench"}, "must be a finite number"),
        ({"acceptance_length": "3.1", "dataset": "Spec-Bench"}, "must be a finite number"),
        ({"acceptance_length": 3.1}, "has no `dataset`"),
        ({"dataset": "Spec-Bench", "accuracy": 0.5}, "none of the known metrics"),
        ([{**RESULTS}, {**RESULTS}], "distinct `dataset_config`"),
    ],
)
def test_card_rejects_bad_results(results, match):
    from slimspec_hf.interop.model_card import render_model_card

    drafter = _tiny_drafter(target_model_name_or_path="org/target")
    with pytest.raises(ValueError, match=match):
        render_model_card(drafter, results=results)


def test_write_model_card_is_atomic_and_keeps_earlier_inputs(tmp_path):
    from slimspec_hf.interop.model_card import CARD_INPUTS_FILE, write_model_card

    drafter = _tiny_drafter(target_model_name_or_path="org/target")
    drafter.save_pretrained(tmp_path)
    recipe_file = tmp_path / "recipe.yaml"
    recipe_file.write_text(yaml.safe_dump({**RECIPE, "output_dir": "/home/me/run"}))
    path = write_model_card(tmp_path, recipe=recipe_file)  # as the trainer does on save
    assert path == tmp_path / "README.md"
    write_model_card(tmp_path, results=RESULTS)  # as the benchmark does later
    text = path.read_text()
    assert "| `ttt_steps` | `6` |" in text and "**Acceptance length τ** | **3.10**" in text
    assert "hub_token" not in text and "/home/me/run" not in text
    stored = json.loads((tmp_path / CARD_INPUTS_FILE).read_text())
    assert stored["recipe"]["head_rank"] == 4 and stored["results"][0]["speedup"] == 2.0
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_card_recipe_table_shows_the_settings_that_took_effect():
    from slimspec_hf.interop.model_card import render_model_card

    drafter = _tiny_drafter(target_model_name_or_path="org/target")
    cold = str(render_model_card(drafter, recipe={**RECIPE, "head_init": "activation_svd"}))
    warm = str(render_model_card(drafter, recipe={**RECIPE, "head_init": "random", "drafter_model": "org/drafter-v1"}))
    assert "| `head_init` | `activation_svd` |" in cold and "drafter_model" not in cold
    assert "| `drafter_model` | `org/drafter-v1` |" in warm and "`head_init`" not in warm.split("```yaml")[0]
    # a step budget overrides the epoch count, so the card's table shows only the one that set the schedule
    steps = str(render_model_card(drafter, recipe={**RECIPE, "num_train_epochs": 3.0, "max_steps": 200}))
    epochs = str(render_model_card(drafter, recipe={**RECIPE, "num_train_epochs": 2.0, "max_steps": -1}))
    assert "| `max_steps` | `200` |" in steps and "`num_train_epochs`" not in steps.split("```yaml")[0]
    assert "| `num_train_epochs` |" in epochs and "`max_steps`" not in epochs.split("```yaml")[0]


def test_recipe_dataclass_lists_only_changed_fields():
    from slimspec_hf.interop.model_card import render_model_card

    @dataclasses.dataclass
    class Args:
        learning_rate: float = 5e-5
        ttt_steps: int = 6
        head_init: str = "random"
        hub_token: str | None = None
        tags: list = dataclasses.field(default_factory=list)

    card = str(
        render_model_card(
            _tiny_drafter(target_model_name_or_path="org/t"),
            recipe=Args(learning_rate=4e-4, head_init="svd", hub_token="hf_secret"),
        )
    )
    assert "| `learning_rate` | `0.000400` |" in card and "| `head_init` | `svd` |" in card
    assert "ttt_steps" not in card and "hf_secret" not in card


def test_template_ships_in_the_wheel():
    from slimspec_hf.interop.model_card import TEMPLATE_NAME, template_text

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["slimspec_hf"]
    assert any(fnmatch(f"interop/model_cards/{TEMPLATE_NAME}", p) for p in patterns)
    assert (REPO_ROOT / "src" / "slimspec_hf" / "interop" / "model_cards" / TEMPLATE_NAME).is_file()
    assert "{{ card_data }}" in template_text()


def test_results_from_a_bench_report_pick_the_drafter(tmp_path):
    import json

    from slimspec_hf.interop.model_card import read_results

    entry = {"dataset": "Spec-Bench", "temperature": 0.0, "acceptance_length": 2.5, "speedup": 1.4}
    report = tmp_path / "results.json"
    report.write_text(json.dumps({"config": {}, "model_index": {"slim": [entry], "full": [dict(entry, speedup=1.1)]}}))
    assert read_results(f"{report}#slim")[0]["speedup"] == 1.4
    assert read_results(f"{report}#full")[0]["speedup"] == 1.1
    with pytest.raises(ValueError, match=r"drafters \['full', 'slim'\]"):
        read_results(str(report))
    report.write_text(json.dumps({"model_index": {"only": [entry]}}))
    assert read_results(str(report))[0]["acceptance_length"] == 2.5
