"""`slimspec push` writes the card's front matter (licence, datasets, base model) for any drafter folder."""

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import yaml

from slimspec_hf import cli

from ..testing_utils import make_tiny_drafter, make_tiny_target


SHIPPED_DRAFTER = Path(__file__).resolve().parents[2] / "drafters" / "smollm2-135m-instruct-slimspec"


class RecordingApi:
    """Stands in for `huggingface_hub.HfApi`: records the commits, answers the target's card with a licence."""

    commits: list = []

    def __init__(self, token=None):
        pass

    def create_repo(self, repo_id, private=False, exist_ok=True):
        return SimpleNamespace(repo_id=repo_id)

    def create_branch(self, *args, **kwargs):
        pass

    def model_info(self, repo_id, revision=None):
        return SimpleNamespace(sha="a" * 40, card_data=SimpleNamespace(license="mit"))

    def create_commit(self, repo_id, operations, **kwargs):
        RecordingApi.commits.append({op.path_in_repo: op.path_or_fileobj for op in operations})
        return SimpleNamespace(oid="b" * 40, commit_url=f"https://hub.test/{repo_id}/commit/{'b' * 40}")


def _front_matter(text: str) -> dict:
    return yaml.safe_load(text.split("---")[1])


def test_push_writes_licence_and_prompt_datasets_for_any_drafter(tmp_path, monkeypatch, capsys):
    from slimspec_hf.interop import hub

    monkeypatch.setattr(hub, "HfApi", RecordingApi)
    RecordingApi.commits = []
    folder = tmp_path / "drafter"
    make_tiny_drafter(make_tiny_target(), target_model_name_or_path="org/target").save_pretrained(folder)
    data = tmp_path / "answers.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": str(i), "source": s, "messages": []}) + "\n"
            for i, s in enumerate(["gsm8k_train", "oasst"])
        )
    )
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"target_model: org/target\ndataset_path: {data}\nhead_rank: 8\n")

    assert cli.main(["push", str(folder), "org/tiny-drafter", "--recipe", str(recipe)]) == 0
    card = RecordingApi.commits[-1]["README.md"].decode()
    meta = _front_matter(card)
    assert meta["license"] == "mit"  # the target's, read from its card
    assert meta["datasets"] == ["openai/gsm8k"] and meta["base_model"] == "org/target"
    assert "| `oasst` | github.com/Open-Assistant/oasst-model-eval | Apache-2.0 | 1 |" in card
    assert "pinned revision" in capsys.readouterr().out

    # `--dataset` and `--license` win over what the recipe's data and the target say
    argv = [
        "push",
        str(folder),
        "org/tiny-drafter",
        "--recipe",
        str(recipe),
        "--dataset",
        "org/mine",
        "--license",
        "apache-2.0",
    ]
    assert cli.main(argv) == 0
    meta = _front_matter(RecordingApi.commits[-1]["README.md"].decode())
    assert meta["datasets"] == ["org/mine"] and meta["license"] == "apache-2.0"


def _draft_sentence(card: str) -> str:
    """The card's sentence that states the draft settings ("It drafts … ;", or with `auto` shapes "It picks … ;")."""
    match = re.search(r"It (?:drafts|picks)[^;]*;", card)
    assert match, "the card states no draft settings"
    return " ".join(match.group(0).split())


def test_pushed_card_of_the_shipped_drafter_states_its_generation_config(tmp_path, monkeypatch):
    """The card `slimspec push` uploads states the folder's generation_config.json settings (not the defaults a new
    drafter gets), as `render_model_card(folder)` does, and generation_config.json itself is uploaded."""
    from slimspec_hf import DraftSettings
    from slimspec_hf.interop import hub
    from slimspec_hf.interop.model_card import render_model_card

    monkeypatch.setattr(hub, "HfApi", RecordingApi)
    RecordingApi.commits = []
    folder = tmp_path / "drafter"
    shutil.copytree(SHIPPED_DRAFTER, folder)
    settings = json.loads((folder / "generation_config.json").read_text())
    assert settings["draft_tree_size"] > 0 and settings["draft_lookup"] is True  # not a new drafter's defaults
    assert not DraftSettings.draft_lookup and not DraftSettings.draft_tree_size

    assert cli.main(["push", str(folder), "org/smol-drafter", "--license", "apache-2.0"]) == 0
    uploaded, card_commit = RecordingApi.commits
    assert Path(uploaded["generation_config.json"]).read_bytes() == (folder / "generation_config.json").read_bytes()
    sentence = _draft_sentence(card_commit["README.md"].decode())
    assert settings["draft_shape"] == "auto"
    assert sentence.startswith("It picks each round's draft on your machine")
    assert f"starting from a dynamic tree of {settings['draft_tree_size']} tokens" in sentence
    assert "hybrid prompt lookup" in sentence  # draft_lookup
    assert sentence == _draft_sentence(str(render_model_card(folder)))
