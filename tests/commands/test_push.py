"""`slimspec push` writes the card's front matter (licence, datasets, base model) for any drafter folder."""

import json
from types import SimpleNamespace

import yaml

from slimspec_hf import cli

from ..conftest import make_tiny_drafter, make_tiny_target


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
