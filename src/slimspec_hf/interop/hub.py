# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Model cards and Hub publishing for SlimSpec drafters.

- [`render_model_card`] fills the template shipped in `slimspec_hf/model_cards/drafter_card.md` (front matter with
  `base_model`, tags, datasets and measured results as `model-index`; quick start, the `trust_remote_code=True`
  variant with a pinned revision, head details, recipe, results, limitations, citations).
- [`write_model_card`] writes it as the folder's `README.md` (atomically) and records its inputs in
  `slimspec_card.json`, so that later calls (the benchmark adding results, `slimspec push` adding the repo id and the
  pinned revision) re-render it without losing what the trainer recorded.
- [`push_to_hub`] publishes a drafter folder (or a model): weights, config, the remote-code files named by
  `auto_map`, and the card, whose `trust_remote_code` snippet pins the commit that holds this code and these weights.
- [`load_drafter`] loads by repo id or path, failing clearly when the repo is not a SlimSpec drafter.
- `slimspec push DIR REPO_ID` is [`main`].
"""

import dataclasses
import importlib.resources
import json
import logging
import math
import os
import re
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import CommitOperationAdd, EvalResult, HfApi, ModelCard, ModelCardData, hf_hub_download
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

from .. import configuration_slimspec, generation_slimspec, modeling_slimspec
from ..configuration_slimspec import SlimSpecDrafterConfig


logger = logging.getLogger(__name__)

MODEL_TYPE = SlimSpecDrafterConfig.model_type
TEMPLATE_NAME = "drafter_card.md"
CARD_INPUTS_FILE = "slimspec_card.json"
BASE_TAGS = ("speculative-decoding", "eagle3", "slimspec")
HEAD_TAGS = {"low_rank": ("low-rank-head",), "trimmed": ("vocabulary-trimming",)}
REMOTE_CODE = {
    "AutoConfig": (configuration_slimspec, "SlimSpecDrafterConfig"),
    "AutoModelForCausalLM": (modeling_slimspec, "SlimSpecDrafterForCausalLM"),
}
# The remote-code unit: every file `save_pretrained` copies next to the weights (the auto_map's modules and the
# siblings they import relatively).
REMOTE_CODE_MODULES = (configuration_slimspec, modeling_slimspec, generation_slimspec)
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
# results key -> (metric name in the card, digits)
METRICS = {
    "acceptance_length": ("Acceptance length τ", 2),
    "rho_tau": ("ρτ (τ relative to the full head)", 3),
    "speedup": ("Speed-up over the target alone", 2),
    "tokens_per_second": ("Tokens per second", 1),
    "nu": ("ν (head time / full-head time)", 3),
    "kappa": ("κ (full-head time / rest of the drafter step)", 3),
}
RESULT_FIELDS = ("dataset", "dataset_type", "dataset_config", "dataset_split", "task")
RECIPE_HIGHLIGHTS = (
    "target_model",
    "drafter_model",
    "head_type",
    "head_rank",
    "head_init",
    "draft_vocab_size",
    "target_layer_ids",
    "ttt_steps",
    "step_loss_decay",
    "features",
    "max_length",
    "learning_rate",
    "lr_scheduler_type",
    "weight_decay",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_grad_norm",
    "bf16",
    "seed",
)
# Keys never copied from a recipe into a public card: local paths and credentials.
RECIPE_PRIVATE = re.compile(r"(token|secret|password|_dir$|^output_dir$|^logging_dir$|^resume_from_checkpoint$)")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
PINNED = re.compile(r'revision="([0-9a-f]{40})"')
PLACEHOLDER_TARGET = "<target-model-id>"
PLACEHOLDER_REPO = "<your-org>/<drafter-name>"
PLACEHOLDER_REVISION = "<commit-sha>"


# ----------------------------------------------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------------------------------------------


def template_text() -> str:
    """The drafter card template, read from the installed package (works from a wheel or a zip)."""
    return (
        importlib.resources.files("slimspec_hf")
        .joinpath("interop", "model_cards", TEMPLATE_NAME)
        .read_text(encoding="utf-8")
    )


def _read_config(model_dir_or_config: Any) -> tuple[dict, str | None]:
    """(config dict, folder name or None) of a SlimSpec drafter given as a folder, a config or a model."""
    name = None
    if hasattr(model_dir_or_config, "config") and hasattr(model_dir_or_config.config, "to_dict"):
        model_dir_or_config = model_dir_or_config.config  # a model
    if hasattr(model_dir_or_config, "to_dict"):
        config = model_dir_or_config.to_dict()
    elif isinstance(model_dir_or_config, Mapping):
        config = dict(model_dir_or_config)
    elif isinstance(model_dir_or_config, (str, os.PathLike)):
        folder = Path(model_dir_or_config)
        path = folder / "config.json" if folder.is_dir() else folder
        if not path.is_file():
            raise FileNotFoundError(
                f"`model_dir` ({model_dir_or_config}) has no config.json: pass a folder written by "
                "`drafter.save_pretrained(...)` (or the trainer), or the drafter's config."
            )
        config = json.loads(path.read_text(encoding="utf-8"))
        name = (folder if folder.is_dir() else folder.parent).resolve().name
    else:
        raise TypeError(
            f"`model_dir_or_config` must be a folder, a SlimSpecDrafterConfig, a config dict or a drafter, got "
            f"{type(model_dir_or_config).__name__}."
        )
    model_type = config.get("model_type")
    if model_type != MODEL_TYPE:
        raise ValueError(
            f"{model_dir_or_config if name else 'The config'} is not a SlimSpec drafter: its model_type is "
            f"{model_type!r}, expected {MODEL_TYPE!r}. Model cards and pushes here are for drafters saved by "
            "`SlimSpecDrafterForCausalLM.save_pretrained` (convert EAGLE-3 checkpoints with `slimspec convert`)."
        )
    return config, name


def _hub_id(name: str | None) -> str | None:
    """`name` if it reads as a Hub repo id (`org/name`) rather than a local path, else None."""
    if not name or not HUB_ID.match(str(name)) or Path(str(name)).exists():
        return None
    return str(name)


def _plain(value: Any) -> Any:
    """A YAML/JSON-safe copy of a recipe value."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "value") and isinstance(value.value, (str, int)):  # enums
        return value.value
    return str(value)


def _recipe_dict(recipe: Any) -> dict | None:
    """A recipe as a dict: a mapping, a YAML/JSON file, or a (Training)arguments dataclass (non-default fields)."""
    if recipe is None:
        return None
    if isinstance(recipe, (str, os.PathLike)):
        path = Path(recipe)
        if not path.is_file():
            raise FileNotFoundError(f"`recipe` ({recipe}) is not a file; pass a YAML recipe, a dict or the config.")
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(loaded, Mapping):
            raise ValueError(f"`recipe` ({recipe}) must hold a YAML mapping, got {type(loaded).__name__}.")
        recipe = loaded
    elif dataclasses.is_dataclass(recipe) and not isinstance(recipe, type):
        recipe = _changed_fields(recipe)
    elif not isinstance(recipe, Mapping):
        raise TypeError(
            f"`recipe` must be a dict, a path to a YAML recipe or a config dataclass, got {type(recipe).__name__}."
        )
    return {str(k): _plain(v) for k, v in recipe.items() if not RECIPE_PRIVATE.search(str(k))}


def _changed_fields(args: Any) -> dict:
    """The init fields of a dataclass instance that differ from a default instance of its class.

    The baseline is built by the class itself (from the required fields only) so that what its post-init normalises
    (TrainingArguments turns `report_to=None` into `[]`, fills `accelerator_config`, ...) does not count as a change;
    if that fails, the declared field defaults are the baseline.
    """
    fields = [f for f in dataclasses.fields(args) if f.init]
    required = {
        f.name: getattr(args, f.name)
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            baseline = type(args)(**required)
        defaults = {f.name: getattr(baseline, f.name) for f in fields}
    except Exception:  # noqa: BLE001 - any failure falls back to the declared defaults
        defaults = {
            f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
            for f in fields
            if f.name not in required
        }
    return {
        f.name: getattr(args, f.name)
        for f in fields
        if f.name in required or _plain(getattr(args, f.name)) != _plain(defaults.get(f.name))
    }


def _results_list(results: Any) -> list[dict] | None:
    """Results as a list of dicts: one mapping, a list of them, or a JSON file holding either — or the
    `results.json` of `slimspec bench` (`PATH#NAME` picks drafter NAME; the name may be left out when the
    benchmark had a single drafter)."""
    if results is None:
        return None
    if isinstance(results, (str, os.PathLike)):
        path, _, name = str(results).partition("#")
        if not Path(path).is_file():
            raise FileNotFoundError(f"`results` ({results}) is not a file; pass a JSON file or a dict of metrics.")
        results = json.loads(Path(path).read_text(encoding="utf-8"))
        if isinstance(results, Mapping) and isinstance(results.get("model_index"), Mapping):
            index = results["model_index"]
            if not name and len(index) == 1:
                name = next(iter(index))
            if name not in index:
                raise ValueError(
                    f"`results` {path} is a `slimspec bench` report with drafters {sorted(index)}; got "
                    f"{name or 'no name'}. Pass `{path}#<drafter name>`."
                )
            results = index[name]
    entries = [results] if isinstance(results, Mapping) else results
    if not isinstance(entries, Sequence) or not all(isinstance(e, Mapping) for e in entries):
        raise TypeError(f"`results` must be a dict of metrics or a list of them, got {type(results).__name__}.")
    cleaned = []
    for entry in entries:
        entry = dict(entry)
        found = [key for key in METRICS if entry.get(key) is not None]
        if not found:
            raise ValueError(
                f"`results` entry {entry} holds none of the known metrics {list(METRICS)}; give at least one, "
                'e.g. {"acceptance_length": 3.1, "speedup": 2.0, "dataset": "Spec-Bench"}.'
            )
        for key in found:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"`results[{key!r}]` must be a finite number, got {value!r}.")
        if not entry.get("dataset"):
            raise ValueError(
                f"`results` entry {entry} has no `dataset`: name the benchmark the metrics were measured on "
                '(e.g. "dataset": "Spec-Bench").'
            )
        cleaned.append(_plain(entry))
    return cleaned


def _load_card_inputs(folder: Path) -> dict:
    path = folder / CARD_INPUTS_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        warnings.warn(
            f"Ignoring {path}: not valid JSON ({err}); the card is rendered from the arguments only.", stacklevel=3
        )
        return {}
    return data if isinstance(data, dict) else {}


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ----------------------------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _head_facts(config: dict) -> dict:
    head_type = config.get("head_type", "low_rank")
    d, vocab = int(config["hidden_size"]), int(config["vocab_size"])
    rank, kept = config.get("head_rank"), config.get("draft_vocab_size")
    if head_type == "low_rank":
        params = int(rank) * (d + vocab)
        summary = f"low-rank, `z = W_up · W_down · h` with rank r = {rank} (W_down r×d, W_up V×r)"
        details = (
            "The head factorises the V×d projection through an r-dimensional bottleneck, so it costs r·(d + V) "
            "multiply-adds per token instead of d·V while every token of the vocabulary stays reachable."
        )
    elif head_type == "full":
        params = d * vocab
        summary = "a dense V×d projection (the full-head baseline)"
        details = "The usual dense head, trained with the drafter: the baseline SlimSpec heads are compared to."
    elif head_type == "trimmed":
        params = d * int(kept)
        summary = f"a dense head over the K = {kept} most frequent tokens (the VocabTrim baseline)"
        details = "Tokens outside the K kept ones get logit -inf and are never drafted."
    else:
        params = 0
        summary = "the target's own frozen LM head, borrowed at run time (not stored here)"
        details = "The head is the target's: the checkpoint holds the backbone only."
    return {
        "head_type": head_type,
        "head_rank": rank if head_type == "low_rank" else None,
        "rank_ratio": _fmt(d / int(rank), 1) if head_type == "low_rank" else None,
        "draft_vocab_size": kept if head_type == "trimmed" else None,
        "head_params": f"{params:,}",
        "head_params_fraction": f"{params / (d * vocab):.1%}",
        "head_summary": summary,
        "head_details": details,
    }


def _eval_results(results: list[dict], model_name: str) -> list[EvalResult]:
    evals = []
    for entry in results:
        dataset = str(entry["dataset"])
        dataset_type = str(entry.get("dataset_type") or re.sub(r"[^a-z0-9]+", "-", dataset.lower()).strip("-"))
        args = {k: entry[k] for k in ("temperature", "max_new_tokens", "num_speculative_tokens") if k in entry}
        for key, (label, _) in METRICS.items():
            if entry.get(key) is None:
                continue
            evals.append(
                EvalResult(
                    task_type="text-generation",
                    task_name=entry.get("task") or "Speculative decoding",
                    dataset_type=dataset_type,
                    dataset_name=dataset,
                    dataset_config=entry.get("dataset_config"),
                    dataset_split=entry.get("dataset_split"),
                    dataset_args=args or None,
                    metric_type=key,
                    metric_name=label,
                    metric_value=entry[key],
                )
            )
    # The Hub groups metrics by (task, dataset type, config, split, revision): two runs of one benchmark that
    # differ only in, say, temperature would merge; ask for a `dataset_config` that tells them apart.
    seen: dict[tuple, set] = {}
    for result in evals:
        metrics = seen.setdefault(result.unique_identifier, set())
        if result.metric_type in metrics:
            raise ValueError(
                f"`results` holds {result.metric_type!r} twice for dataset {result.dataset_name!r} with the same "
                "task, config and split; give each entry a distinct `dataset_config` (e.g. 'greedy', 'temperature-1')."
            )
        metrics.add(result.metric_type)
    return evals


def render_model_card(
    model_dir_or_config: Any,
    *,
    recipe: Any = None,
    results: Any = None,
    datasets: str | Sequence[str] | None = None,
    revision: str | None = None,
    repo_id: str | None = None,
    tags: Sequence[str] | None = None,
) -> ModelCard:
    """Renders the model card of a SlimSpec drafter from the template in `slimspec_hf/model_cards/`.

    Args:
        model_dir_or_config: a drafter folder (reads its `config.json`), a `SlimSpecDrafterConfig`, a config dict or a
            drafter. Anything whose `model_type` is not `"slimspec_drafter"` is refused.
        recipe: the training recipe: a dict, a path to its YAML file, or the trainer's config dataclass (then only
            the fields that differ from their defaults are listed). Paths and credentials are never copied.
        results: measured results, `{"acceptance_length": 3.1, "rho_tau": 0.99, "speedup": 2.0, "nu": 0.2,
            "dataset": "Spec-Bench", ...}`, a list of such dicts, or a JSON file; they become `model-index` entries.
        datasets: Hub ids of the training data, for the front matter.
        revision: the commit the `trust_remote_code=True` snippet pins (a placeholder when unknown).
        repo_id: the drafter's repo id for the snippets (a placeholder when unknown).
        tags: extra tags, added to the SlimSpec ones.

    A config without `target_model_name_or_path` (or with a local path there) renders with a placeholder target and
    no `base_model`, with a warning.
    """
    config, folder_name = _read_config(model_dir_or_config)
    recipe_dict = _recipe_dict(recipe)
    results_list = _results_list(results)
    datasets = [datasets] if isinstance(datasets, str) else list(datasets or [])

    recorded = config.get("target_model_name_or_path")
    target = _hub_id(recorded)
    if target is None:
        reason = "records no target" if not recorded else f"records the target as {recorded!r}, not a Hub repo id"
        warnings.warn(
            f"The drafter config {reason} (`target_model_name_or_path`), so the model card has no `base_model` and "
            f"its snippets use the placeholder {PLACEHOLDER_TARGET!r}. Set `config.target_model_name_or_path` to the "
            "target's Hub id (e.g. 'HuggingFaceTB/SmolLM2-135M-Instruct') before saving.",
            UserWarning,
            stacklevel=2,
        )
    model_name = (repo_id or folder_name or "slimspec-drafter").split("/")[-1]
    head = _head_facts(config)
    head_type = head["head_type"]
    card_tags = list(BASE_TAGS) + list(HEAD_TAGS.get(head_type, ())) + [t for t in tags or () if t]

    nu_values = [e["nu"] for e in results_list or () if e.get("nu") is not None]
    if nu_values:
        nu = ", ".join(_fmt(v, 3) for v in nu_values) + " (measured)"
    elif head_type == "full":
        nu = "1 (by definition)"
    else:
        nu = "not measured (`slimspec bench-head` measures it)"

    card_data = ModelCardData(
        base_model=target,
        library_name="transformers",
        pipeline_tag="text-generation",
        tags=card_tags,
        datasets=datasets or None,
        model_name=model_name if results_list else None,
        eval_results=_eval_results(results_list, model_name) if results_list else None,
    )

    recipe_rows = []
    if recipe_dict:
        # settings that did not take effect: the head init of a warm start; the epochs under a step budget, else
        # the unset (≤ 0) step budget
        unused = {"head_init"} if recipe_dict.get("drafter_model") is not None else set()
        unused.add("num_train_epochs" if (recipe_dict.get("max_steps") or 0) > 0 else "max_steps")
        highlighted = [k for k in RECIPE_HIGHLIGHTS if recipe_dict.get(k) is not None and k not in unused]
        recipe_rows = [(k, _fmt(recipe_dict[k], 6)) for k in highlighted]
        if not recipe_rows:
            recipe_rows = [(k, _fmt(v, 6)) for k, v in list(recipe_dict.items())[:12] if not isinstance(v, dict)]
    result_rows = []
    for entry in results_list or ():
        context = ", ".join(
            f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}"
            for k, v in entry.items()
            if k not in METRICS and k not in RESULT_FIELDS and isinstance(v, (int, float, str)) and v != ""
        )
        metrics = [
            (label, _fmt(entry[k], digits)) for k, (label, digits) in METRICS.items() if entry.get(k) is not None
        ]
        result_rows.append({"dataset": entry["dataset"], "context": context, "metrics": metrics})

    card = ModelCard.from_template(
        card_data,
        template_str=template_text(),
        model_id=model_name,
        repo_id=repo_id or PLACEHOLDER_REPO,
        target=target or PLACEHOLDER_TARGET,
        target_known=target is not None,
        revision=revision or PLACEHOLDER_REVISION,
        revision_known=revision is not None,
        target_layer_ids=config.get("target_layer_ids"),
        target_hidden_size=config.get("target_hidden_size") or config.get("hidden_size"),
        target_num_hidden_layers=config.get("target_num_hidden_layers"),
        num_speculative_tokens=config.get("num_speculative_tokens"),
        hidden_size=config.get("hidden_size"),
        vocab_size=config.get("vocab_size"),
        nu=nu,
        recipe_rows=recipe_rows,
        recipe_yaml=yaml.safe_dump(recipe_dict, sort_keys=False, allow_unicode=True).strip() if recipe_dict else "",
        results=result_rows,
        datasets=datasets,
        **head,
    )
    # The template's optional sections leave runs of blank lines behind; markdown needs at most one.
    return ModelCard(re.sub(r"\n{3,}", "\n\n", str(card)))


def write_model_card(
    model_dir: str | os.PathLike,
    *,
    recipe: Any = None,
    results: Any = None,
    datasets: str | Sequence[str] | None = None,
    repo_id: str | None = None,
    revision: str | None = None,
) -> Path:
    """Writes the drafter's card as `model_dir/README.md` (atomically) and returns its path.

    The inputs are recorded in `model_dir/slimspec_card.json`; an argument left as None keeps what an earlier call
    recorded, so the trainer's recipe survives the benchmark adding results, and `slimspec push` re-renders both.
    """
    folder = Path(model_dir)
    _read_config(folder)  # fail before writing anything if this is not a drafter folder
    stored = _load_card_inputs(folder)
    inputs = {
        "recipe": _recipe_dict(recipe) if recipe is not None else stored.get("recipe"),
        "results": _results_list(results) if results is not None else stored.get("results"),
        "datasets": ([datasets] if isinstance(datasets, str) else list(datasets))
        if datasets is not None
        else stored.get("datasets"),
    }
    card = render_model_card(folder, repo_id=repo_id, revision=revision, **inputs)
    _atomic_write(folder / CARD_INPUTS_FILE, (json.dumps(inputs, indent=2, ensure_ascii=False) + "\n").encode())
    path = folder / "README.md"
    _atomic_write(path, str(card).encode("utf-8"))
    return path


# ----------------------------------------------------------------------------------------------------------------
# Publishing and loading
# ----------------------------------------------------------------------------------------------------------------


def _remote_code_files(config: dict) -> dict[str, str]:
    """{module file: source} for the `auto_map` of a drafter, from the installed package."""
    return {
        f"{module.__name__.rsplit('.', 1)[-1]}.py": Path(module.__file__).read_text(encoding="utf-8")
        for module in REMOTE_CODE_MODULES
    }


def _collect_files(folder: Path, config: dict) -> dict[str, Path | bytes]:
    """{path in repo: local file or content} to publish from a drafter folder."""
    files: dict[str, Path | bytes] = {}
    skipped = []
    auto_map = config.get("auto_map") or {}
    code_files = {f"{ref.split('.')[0]}.py" for ref in auto_map.values() if isinstance(ref, str)}
    code_files |= {f"{module.__name__.rsplit('.', 1)[-1]}.py" for module in REMOTE_CODE_MODULES}
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            continue
        if any(fnmatch(path.name, p) for p in UPLOAD_PATTERNS) or path.name in code_files:
            files[path.name] = path
        elif path.name.endswith(PICKLE_SUFFIXES):
            skipped.append(path.name)
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
        config["auto_map"] = {
            auto: f"{module.__name__.rsplit('.', 1)[-1]}.{cls}" for auto, (module, cls) in REMOTE_CODE.items()
        }
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


def _push(
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
):
    """`push_to_hub`, returning (CommitInfo of the last commit, pinned revision)."""
    if create_pr:
        raise ValueError(
            "`create_pr=True` is not supported by the SlimSpec push (the card pins a commit of the target branch); "
            "push to a branch with `revision=...` and open the pull request from it."
        )
    if hasattr(model_dir, "save_pretrained"):
        with tempfile.TemporaryDirectory(prefix="slimspec-push-") as tmp:
            model_dir.save_pretrained(tmp, max_shard_size=max_shard_size)
            return _push(
                tmp,
                repo_id,
                revision=revision,
                private=private,
                token=token,
                commit_message=commit_message,
                commit_description=commit_description,
                recipe=recipe,
                results=results,
                datasets=datasets,
                tags=tags,
                update_card=update_card,
            )
    folder = Path(model_dir)
    config, _ = _read_config(folder)
    files = _collect_files(folder, config)
    if not update_card and (folder / "README.md").is_file():
        files["README.md"] = folder / "README.md"
    card_inputs = _load_card_inputs(folder)
    card_inputs = {
        "recipe": recipe if recipe is not None else card_inputs.get("recipe"),
        "results": results if results is not None else card_inputs.get("results"),
        "datasets": datasets if datasets is not None else card_inputs.get("datasets"),
    }
    if update_card:  # validate the inputs before anything is uploaded
        render_model_card(config, repo_id=repo_id, tags=tags, **card_inputs)

    api = HfApi(token=token)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    branch = revision or "main"
    if branch != "main":
        api.create_branch(repo_id, branch=branch, exist_ok=True)
    head_before = api.model_info(repo_id, revision=branch).sha
    message = commit_message or f"Upload SlimSpec drafter ({config.get('head_type', 'low_rank')} head)"
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=source) for name, source in files.items()]
    info = api.create_commit(
        repo_id, operations, commit_message=message, commit_description=commit_description, revision=branch
    )
    if not update_card:
        return info, info.oid
    # Pin the commit that holds this code and these weights: the one just made, or, if nothing changed, the one
    # the published card already pins (so re-pushing an unchanged folder makes no commit at all).
    pinned = info.oid if info.oid != head_before else (_remote_pinned_revision(api, repo_id, branch) or info.oid)
    card = render_model_card(config, repo_id=repo_id, revision=pinned, tags=tags, **card_inputs)
    card_info = api.create_commit(
        repo_id,
        [CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=str(card).encode("utf-8"))],
        commit_message=f"{message}: model card",
        revision=branch,
    )
    return card_info, pinned


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

    Uploads the weights (safetensors), `config.json` with `auto_map`, `configuration_slimspec.py` and
    `modeling_slimspec.py`, `generation_slimspec.py` (added from the installed package when the folder lacks them), and the model card. The
    card is rendered from the folder's recorded inputs (`slimspec_card.json`, written by [`write_model_card`]),
    overridden by `recipe=`, `results=`, `datasets=`, and pins the commit holding this code and these weights in its
    `trust_remote_code=True` snippet; that takes a second, card-only commit. Re-pushing an unchanged folder makes
    no commit. Optimizer states, trainer logs and pickles are never uploaded.

    Args:
        model_dir: a folder written by `save_pretrained` (or the trainer), or a drafter (saved to a temp folder).
        repo_id: `org/name` (created if missing, private if `private=True`).
        revision: the branch to push to (created from `main` if missing); default `main`.
        token, commit_message: as in `huggingface_hub`. Further keywords: `commit_description`, `recipe`,
            `results`, `datasets`, `tags`, `update_card` (False: publish the folder's README.md unchanged),
            `max_shard_size` (when given a model).
    """
    info, _ = _push(
        model_dir, repo_id, revision=revision, private=private, token=token, commit_message=commit_message, **kwargs
    )
    return info


def drafter_push_to_hub(self, repo_id: str, **kwargs):
    """`SlimSpecDrafterForCausalLM.push_to_hub`: publishes weights, config, remote code and the SlimSpec card.

    Accepts transformers' `push_to_hub` keywords (`commit_message`, `commit_description`, `private`, `token`,
    `revision`, `max_shard_size`, `tags`; `create_pr` is refused) and `recipe`, `results`, `datasets`.
    """
    return push_to_hub(self, repo_id, **kwargs)


def install_push_hook(cls: type | None = None) -> None:
    """Makes `drafter.push_to_hub(repo_id)` publish the SlimSpec card (transformers' own writes a generic one)."""
    cls = cls or modeling_slimspec.SlimSpecDrafterForCausalLM
    if cls.__dict__.get("push_to_hub") is not drafter_push_to_hub:
        cls.push_to_hub = drafter_push_to_hub


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
        _read_config(local)
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
        config, _ = _read_config(config_path)
        del config
    return AutoModelForCausalLM.from_pretrained(
        str(name_or_path), revision=revision, token=token, trust_remote_code=trust_remote_code, **kwargs
    )


__all__ = [
    "render_model_card",
    "write_model_card",
    "push_to_hub",
    "drafter_push_to_hub",
    "install_push_hook",
    "load_drafter",
    "template_text",
]
