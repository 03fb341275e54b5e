# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Hub publishing for SlimSpec drafters (the card itself is rendered by [`~interop.model_card`]).

- [`push_to_hub`] publishes a drafter folder (or a model): weights, config, the remote-code files named by
  `auto_map`, the `custom_generate/` recipe, and the card, whose `trust_remote_code` snippet pins the commit that holds this code and these weights.
- [`load_drafter`] loads by repo id or path, failing clearly when the repo is not a SlimSpec drafter.
- [`download_repo`] and [`download_hub_file`] fetch what a command takes as a path from the Hub instead
  (`snapshot_download` / `hf_hub_download`, so `HF_ENDPOINT`, tokens and the cache apply).
- `slimspec push DIR REPO_ID` is `slimspec_hf.commands.push`.
"""

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

from ..configuration_slimspec import SlimSpecDrafterConfig
from .model_card import PINNED, load_card_inputs, read_drafter_config, render_model_card


logger = logging.getLogger(__name__)

MODEL_TYPE = SlimSpecDrafterConfig.model_type
REMOTE_CODE = {
    "AutoConfig": "configuration_slimspec.SlimSpecDrafterConfig",
    "AutoModelForCausalLM": "modeling_slimspec.SlimSpecDrafterForCausalLM",
}
# The remote-code unit: every file `save_pretrained` copies next to the weights (the auto_map's modules and the
# siblings they import relatively), read from the installed package by name (the model's `push_to_hub` imports this
# module, so this module imports no model code).
PACKAGE_DIR = Path(__file__).resolve().parents[1]
REMOTE_CODE_FILES = (
    "configuration_slimspec.py",
    "modeling_slimspec.py",
    "heads_slimspec.py",
    "cache_slimspec.py",
    "generation_slimspec.py",
    "drafting_slimspec.py",
    "verification_slimspec.py",
    "decoding_slimspec.py",
    "shapes_slimspec.py",
    "acceptance_slimspec.py",
    "costs_slimspec.py",
    "calls_slimspec.py",
    "stats_slimspec.py",
)
# Top-level files of a drafter folder that are published; everything else (optimizer states, trainer logs,
# checkpoints, pickles) stays local. The `.py` files named by `auto_map` are added to these.
UPLOAD_PATTERNS = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "*.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
# transformers' layout for a decoding recipe: `generate(..., custom_generate="<repo>", trust_remote_code=True)` runs
# the repo's `custom_generate/generate.py` (a folder's own copy is published, else the installed package's).
CUSTOM_GENERATE_DIR = "custom_generate"
CUSTOM_GENERATE_FILES = ("generate.py", "README.md")
# ----------------------------------------------------------------------------------------------------------------
# Publishing and loading
# ----------------------------------------------------------------------------------------------------------------


def _remote_code_files(config: dict) -> dict[str, str]:
    """{module file: source} for the `auto_map` of a drafter, from the installed package."""
    return {name: (PACKAGE_DIR / name).read_text(encoding="utf-8") for name in REMOTE_CODE_FILES}


def _collect_files(folder: Path, config: dict) -> dict[str, Path | bytes]:
    """{path in repo: local file or content} to publish from a drafter folder."""
    files: dict[str, Path | bytes] = {}
    skipped = []
    auto_map = config.get("auto_map") or {}
    code_files = {f"{ref.split('.')[0]}.py" for ref in auto_map.values() if isinstance(ref, str)}
    code_files |= set(REMOTE_CODE_FILES)
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            continue
        if any(fnmatch(path.name, p) for p in UPLOAD_PATTERNS) or path.name in code_files:
            files[path.name] = path
        elif path.name.endswith(PICKLE_SUFFIXES):
            skipped.append(path.name)
    for name in CUSTOM_GENERATE_FILES:
        own = folder / CUSTOM_GENERATE_DIR / name
        files[f"{CUSTOM_GENERATE_DIR}/{name}"] = own if own.is_file() else PACKAGE_DIR / CUSTOM_GENERATE_DIR / name
    if skipped:
        logger.warning(
            "Not publishing %s: pickled files are not loaded from the Hub (weights are safetensors).", skipped
        )
    if not any(name.endswith(".safetensors") for name in files):
        raise FileNotFoundError(
            f"`model_dir` ({folder}) holds no safetensors weights; save the drafter with "
            "`drafter.save_pretrained(model_dir)` (safetensors is the default) before pushing."
        )
    missing_code = not all(key in auto_map for key in REMOTE_CODE) or any(
        not (folder / name).is_file() for name in code_files
    )
    if missing_code:
        # A folder saved without the Auto-class registration (or stripped of its .py files): add the installed
        # package's modelling code so that `trust_remote_code=True` users can load it.
        logger.warning("%s has no complete remote code (auto_map + .py files); adding the installed copy.", folder)
        config = dict(config)
        config["auto_map"] = {auto: reference for auto, reference in REMOTE_CODE.items()}
        for name, source in _remote_code_files(config).items():
            files[name] = source.encode("utf-8")
        files["config.json"] = (json.dumps(config, indent=2, sort_keys=True) + "\n").encode("utf-8")
    return files


def _remote_pinned_revision(api: HfApi, repo_id: str, branch: str) -> str | None:
    """The commit the repo's current card pins, if it has a SlimSpec card."""
    try:
        path = hf_hub_download(repo_id, "README.md", revision=branch, token=api.token, endpoint=api.endpoint)
    except EntryNotFoundError:
        return None
    match = PINNED.search(Path(path).read_text(encoding="utf-8"))
    return match.group(1) if match else None


def push_folder(
    model_dir: Any,
    repo_id: str,
    *,
    revision: str | None = None,
    private: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
    commit_description: str | None = None,
    recipe: Any = None,
    results: Any = None,
    datasets: str | Sequence[str] | None = None,
    tags: Sequence[str] | None = None,
    update_card: bool = True,
    max_shard_size: int | str = "50GB",
    create_pr: bool = False,
    license: str | None = None,
):
    """`push_to_hub`, returning (CommitInfo of the last commit, pinned revision)."""
    if create_pr:
        raise ValueError(
            "`create_pr=True` is not supported by the SlimSpec push (the card pins a commit of the target branch); "
            "push to a branch with `revision=...` and open the pull request from it."
        )
    card_values = {"recipe": recipe, "results": results, "datasets": datasets, "license": license}
    if hasattr(model_dir, "save_pretrained"):
        with tempfile.TemporaryDirectory(prefix="slimspec-push-") as tmp:
            model_dir.save_pretrained(tmp, max_shard_size=max_shard_size)
            options = {"private": private, "token": token, "commit_description": commit_description, "tags": tags}
            return push_folder(
                tmp, repo_id, revision=revision, commit_message=commit_message, update_card=update_card,
                **options, **card_values,
            )  # fmt: skip
    folder = Path(model_dir)
    config, _ = read_drafter_config(folder)
    files = _collect_files(folder, config)
    if not update_card and (folder / "README.md").is_file():
        files["README.md"] = folder / "README.md"
    stored = load_card_inputs(folder)
    card_inputs = {key: value if value is not None else stored.get(key) for key, value in card_values.items()}
    card_inputs["license"] = license or stored.get("license") or target_license(config, token=token)
    # The card is rendered from the folder, not from `config`: the folder's generation_config.json holds the draft
    # settings the card states (and that a drafter loaded from the Hub uses).
    if update_card:  # validate the inputs before anything is uploaded
        render_model_card(folder, repo_id=repo_id, tags=tags, **card_inputs)

    api = HfApi(token=token)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    branch = revision or "main"
    message = commit_message or f"Upload SlimSpec drafter ({config.get('head_type', 'low_rank')} head)"
    info, head_before = _commit_files(api, repo_id, branch, files, message, commit_description)
    if not update_card:
        return info, info.oid
    # Pin the commit that holds this code and these weights: the one just made, or, if nothing changed, the one
    # the published card already pins (so re-pushing an unchanged folder makes no commit at all).
    pinned = info.oid if info.oid != head_before else (_remote_pinned_revision(api, repo_id, branch) or info.oid)
    card = render_model_card(folder, repo_id=repo_id, revision=pinned, tags=tags, **card_inputs)
    card_info = api.create_commit(
        repo_id,
        [CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=str(card).encode("utf-8"))],
        commit_message=f"{message}: model card",
        revision=branch,
    )
    return card_info, pinned


def _commit_files(api, repo_id: str, branch: str, files: dict, message: str, description: str | None):
    """Commits `files` (name in the repo -> local path) to `branch` (created when missing); returns the commit's
    info and the branch's head before it."""
    if branch != "main":
        api.create_branch(repo_id, branch=branch, exist_ok=True)
    head_before = api.model_info(repo_id, revision=branch).sha
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=source) for name, source in files.items()]
    info = api.create_commit(
        repo_id, operations, commit_message=message, commit_description=description, revision=branch
    )
    return info, head_before


def target_license(config: dict, token: str | None = None) -> str | None:
    """The licence in the front matter of the drafter's target on the Hub (`target_model_name_or_path`), or None
    when the target is not a Hub repo, has no card, or cannot be reached."""
    target = config.get("target_model_name_or_path")
    if not target or Path(str(target)).exists():
        return None
    try:
        card_data = HfApi(token=token).model_info(str(target)).card_data
    except Exception:  # noqa: BLE001 - a card without a licence is fine; the card then asks for `--license`
        return None
    return getattr(card_data, "license", None) if card_data is not None else None


def push_to_hub(
    model_dir: Any,
    repo_id: str,
    *,
    revision: str | None = None,
    private: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
    **kwargs,
):
    """Publishes a SlimSpec drafter folder (or a drafter) to the Hub repo `repo_id` and returns the last CommitInfo.

    Uploads the weights (safetensors), `config.json` with `auto_map`, `generation_config.json` (the draft settings
    a drafter loaded from the Hub uses), `configuration_slimspec.py` and `modeling_slimspec.py` and their siblings
    (`REMOTE_CODE_FILES`, added from the installed package when the folder lacks them), and the model card. The
    card states the folder's draft settings (its generation_config.json), is rendered from its recorded inputs
    (`slimspec_card.json`, written by [`write_model_card`]) overridden by `recipe=`, `results=`, `datasets=`, and
    pins the commit holding this code and these weights in its `trust_remote_code=True` snippet; that takes a second,
    card-only commit. Re-pushing an unchanged folder makes no commit. Optimizer states, trainer logs and pickles are
    never uploaded.

    Args:
        model_dir: a folder written by `save_pretrained` (or the trainer), or a drafter (saved to a temp folder).
        repo_id: `org/name` (created if missing, private if `private=True`).
        revision: the branch to push to (created from `main` if missing); default `main`.
        token, commit_message: as in `huggingface_hub`. Further keywords: `commit_description`, `recipe`,
            `results`, `datasets`, `tags`, `update_card` (False: publish the folder's README.md unchanged),
            `max_shard_size` (when given a model).
    """
    info, _ = push_folder(
        model_dir, repo_id, revision=revision, private=private, token=token, commit_message=commit_message, **kwargs
    )
    return info


def load_drafter(
    name_or_path: str | os.PathLike,
    *,
    revision: str | None = None,
    token: str | None = None,
    trust_remote_code: bool = False,
    **kwargs,
):
    """Loads a SlimSpec drafter by Hub repo id or local path, after checking that it is one.

    Raises `ValueError` naming the repo when its config is not a SlimSpec drafter or when `revision` does not exist,
    instead of loading an unrelated model. Keywords go to `AutoModelForCausalLM.from_pretrained`.
    """
    from transformers import AutoModelForCausalLM

    local = Path(name_or_path)
    if local.is_dir():
        read_drafter_config(local)
    else:
        try:
            config_path = hf_hub_download(str(name_or_path), "config.json", revision=revision, token=token)
        except RevisionNotFoundError as err:
            raise ValueError(
                f"`revision` {revision!r} does not exist in {name_or_path!r}: pass a branch, tag or commit sha of "
                "that repo (its model card pins one)."
            ) from err
        except RepositoryNotFoundError as err:
            raise ValueError(
                f"{name_or_path!r} is neither a local folder nor a Hub repo this token can read."
            ) from err
        except EntryNotFoundError as err:
            raise ValueError(f"{name_or_path!r} has no config.json at revision {revision or 'main'!r}.") from err
        config, _ = read_drafter_config(config_path)
        del config
    return AutoModelForCausalLM.from_pretrained(
        str(name_or_path), revision=revision, token=token, trust_remote_code=trust_remote_code, **kwargs
    )


@contextlib.contextmanager
def _hub_errors(what: str, revision: str | None):
    """Turns huggingface_hub's typed errors into one-line `ValueError`s naming `what`."""
    try:
        yield
    except RevisionNotFoundError as err:
        raise ValueError(f"{what}: revision {revision!r} does not exist; pass a branch, tag or commit sha.") from err
    except RepositoryNotFoundError as err:
        raise ValueError(f"{what}: no such Hub repo (or this token cannot read it).") from err
    except EntryNotFoundError as err:
        raise ValueError(f"{what}: no such file in the repo at revision {revision or 'main'!r}.") from err


def download_repo(
    repo_id: str,
    *,
    revision: str | None = None,
    repo_type: str | None = None,
    allow_patterns: Sequence[str] | None = None,
    token: str | None = None,
) -> Path:
    """The local folder of a Hub repo (`snapshot_download`, cached), limited to `allow_patterns` when given."""
    with _hub_errors(f"{repo_id!r}", revision):
        return Path(
            snapshot_download(
                repo_id,
                revision=revision,
                repo_type=repo_type,
                allow_patterns=list(allow_patterns) if allow_patterns else None,
                token=token,
            )
        )


def parse_hub_file(uri: str) -> tuple[str, str, str | None, str]:
    """`(repo_id, repo_type, revision, filename)` of `hf://[datasets/|spaces/]ORG/NAME[@REVISION]/PATH`
    (huggingface_hub's `HfFileSystem` spelling)."""
    rest = uri.removeprefix("hf://")
    repo_type = "model"
    for prefix, kind in (("datasets/", "dataset"), ("spaces/", "space"), ("models/", "model")):
        if rest.startswith(prefix):
            rest, repo_type = rest[len(prefix) :], kind
            break
    parts = rest.split("/")
    if len(parts) < 3 or not all(parts):
        raise ValueError(
            f"{uri!r} is not a Hub file: write hf://datasets/ORG/NAME/PATH (or hf://datasets/ORG/NAME@REVISION/PATH)."
        )
    name, _, revision = parts[1].partition("@")
    return f"{parts[0]}/{name}", repo_type, revision or None, "/".join(parts[2:])


def download_hub_file(uri: str, param: str = "path", token: str | None = None) -> Path:
    """The local (cached) copy of one file of a Hub repo, given as `hf://datasets/ORG/NAME[@REVISION]/PATH`."""
    try:
        repo_id, repo_type, revision, filename = parse_hub_file(uri)
    except ValueError as err:
        raise ValueError(f"`{param}`: {err}") from err
    with _hub_errors(f"`{param}` {uri}", revision):
        return Path(hf_hub_download(repo_id, filename, repo_type=repo_type, revision=revision, token=token))


__all__ = [
    "target_license",
    "download_hub_file",
    "download_repo",
    "parse_hub_file",
    "push_to_hub",
    "load_drafter",
]
