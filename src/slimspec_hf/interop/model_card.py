# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The model card of a SlimSpec drafter.

- [`render_model_card`] fills the template shipped in `slimspec_hf/interop/model_cards/drafter_card.md` (front
  matter with `base_model`, tags, datasets and measured results as `model-index`; quick start, the
  `trust_remote_code=True` variant with a pinned revision, head details, recipe, results, limitations, citations).
  The recipe table lists the [`SlimSpecConfig`] fields marked `card` in their metadata.
- [`write_model_card`] writes it as the folder's `README.md` (atomically) and records its inputs in
  `slimspec_card.json`, so that later calls (the trainer's `create_model_card`, the benchmark adding results,
  `slimspec push` adding the repo id and the pinned revision) re-render it without losing what came before.
"""

import dataclasses
import importlib.resources
import json
import math
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..configuration_slimspec import SlimSpecDrafterConfig
from ..drafting_slimspec import draft_generation_config
from ..prompt_formats import question_prompt
from ..targets import EMBEDDED_TARGETS, embedded_target, is_embedded
from ..training.card_inputs import CARD_INPUTS_FILE, load_card_inputs, plain, recipe_dict
from ..training.config import SlimSpecConfig, card_fields
from ..utils import atomic_write


MODEL_TYPE = SlimSpecDrafterConfig.model_type
HEAD_TAGS = {"low_rank": ("low-rank-head",), "trimmed": ("vocabulary-trimming",)}
BASE_TAGS = ("speculative-decoding", "eagle3", "slimspec")
TEMPLATE_NAME = "drafter_card.md"
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
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
PINNED = re.compile(r'revision="([0-9a-f]{40})"')
PLACEHOLDER_TARGET = "<target-model-id>"
PLACEHOLDER_REPO = "<your-org>/<drafter-name>"
PLACEHOLDER_REVISION = "<commit-sha>"
# Licences of targets whose card is known here; any other target's licence is read from the Hub at push time
# (`interop.hub.target_license`) or given with `slimspec push --license`.
KNOWN_TARGET_LICENSES = {spec.hub_id: spec.license for spec in EMBEDDED_TARGETS.values()}
KNOWN_TARGET_NOTICES = {spec.hub_id: spec.notice for spec in EMBEDDED_TARGETS.values() if spec.notice}
# base models (no chat template of their own): the plain format their drafters were trained on, and where it stops
BASE_TARGETS = {spec.hub_id: spec.stop_strings for spec in EMBEDDED_TARGETS.values() if spec.is_base_model}
# Recipe keys that describe the machine a run used, not the recipe: never shown in a card.
RECIPE_LOCAL = {
    "use_cpu",
    "cpu_threads",
    "dataloader_num_workers",
    "dataset_path",
    "eval_dataset_path",
    "feature_cache_dir",
    "dataset_num_proc",
    "report_to",
    "run_name",
    "push_to_hub",
    "hub_model_id",
    "overwrite_output_dir",
    "ddp_backend",
    "local_rank",
}
# TrainingArguments fields that belong to a recipe (optimisation); the others are run plumbing (logging, saving, ...).
RECIPE_TRAINING_FIELDS = {
    "learning_rate",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "optim",
    "lr_scheduler_type",
    "lr_scheduler_kwargs",
    "warmup_steps",
    "warmup_ratio",
    "max_grad_norm",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "bf16",
    "fp16",
    "tf32",
    "seed",
    "data_seed",
    "gradient_checkpointing",
}
# The prompt sources of `slimspec prepare-data` rows (their `source` field), as the card names them: the Hub
# dataset the prompts come from (None where the prompts have no Hub copy), the upstream repository and the prompts'
# licence. The prompts of `shared/data/train/prompts_mix.jsonl` and `prompts_extra_25k.jsonl`, which the SmolLM2
# recipes regenerate, carry these names (the karma-electric rows: CC-BY-SA-4.0 as that collection declares).
_KARMA = "via anicka-net/karma-electric-project"
_UNKNOWN_SOURCE = (None, None, None)  # (Hub id, upstream, licence) of a source not listed below
PROMPT_SOURCES = {
    "oasst": (None, "github.com/Open-Assistant/oasst-model-eval", "Apache-2.0"),
    "arena_hard_v0.1": ("lmarena-ai/arena-hard-auto-v0.1", "github.com/lmarena/arena-hard-auto", "Apache-2.0"),
    "ultrachat_ultra_eval": (None, "github.com/thunlp/UltraChat", "MIT"),
    "self_instruct_user_oriented": ("yizhongw/self_instruct", "github.com/yizhongw/self-instruct", "Apache-2.0"),
    "gpteacher_roleplay": (None, "github.com/teknium1/GPTeacher", "MIT"),
    "gpteacher_codegen": (None, "github.com/teknium1/GPTeacher", "MIT"),
    "gsm8k_train": ("openai/gsm8k", "github.com/openai/grade-school-math", "MIT"),
    "anicka-net/karma-electric-project:ultrafeedback": (
        "openbmb/UltraFeedback",
        f"UltraFeedback, {_KARMA}",
        "CC-BY-SA-4.0",
    ),
    "anicka-net/karma-electric-project:helpsteer2": ("nvidia/HelpSteer2", f"HelpSteer2, {_KARMA}", "CC-BY-SA-4.0"),
    "anicka-net/karma-electric-project:anthropic_helpful": (
        "Anthropic/hh-rlhf",
        f"hh-rlhf helpful, {_KARMA}",
        "CC-BY-SA-4.0",
    ),
    "anicka-net/karma-electric-project:oasst2": ("OpenAssistant/oasst2", f"OASST2, {_KARMA}", "CC-BY-SA-4.0"),
    "anicka-net/karma-electric-project:capybara": ("LDJnr/Capybara", f"Capybara, {_KARMA}", "CC-BY-SA-4.0"),
    "anicka-net/karma-electric-project:dolly": ("databricks/databricks-dolly-15k", f"Dolly, {_KARMA}", "CC-BY-SA-4.0"),
    "f/awesome-chatgpt-prompts": ("fka/awesome-chatgpt-prompts", "github.com/f/awesome-chatgpt-prompts", "CC0-1.0"),
    "yizhongw/self-instruct": (
        "yizhongw/self_instruct",
        "github.com/yizhongw/self-instruct (seed tasks)",
        "Apache-2.0",
    ),
    "exercism/problem-specifications": (None, "github.com/exercism/problem-specifications", "MIT"),
    "teknium1/GPTeacher": (None, "github.com/teknium1/GPTeacher (Toolformer)", "MIT"),
    "hendrycks/math (via MDX-0003/cs336-assignment5)": (None, "github.com/hendrycks/math (train problems)", "MIT"),
}
# (results key, label) of the measurement conditions shown with each result, in this order.
RESULT_CONTEXT = (
    ("temperature", "temperature"),
    ("num_assistant_tokens", "k (draft tokens per round)"),
    ("draft_shape", "draft shape"),
    ("reference", "ν against"),
    ("num_samples", "questions"),
    ("max_new_tokens", "max new tokens"),
    ("repeats", "repeats"),
    ("dtype", "dtype"),
    ("hardware", "hardware"),
)
# The draft settings the card states, read from the drafter's generation_config (else its defaults).
CARD_DRAFT_SETTINGS = ("num_assistant_tokens", "draft_lookup", "draft_tree_size", "draft_shape")


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


def read_drafter_config(model_dir_or_config: Any) -> tuple[dict, str | None]:
    """(config dict, folder name or None) of a SlimSpec drafter given as a folder, a config or a model."""
    name, settings = None, None
    if hasattr(model_dir_or_config, "config") and hasattr(model_dir_or_config.config, "to_dict"):
        generation_config = getattr(model_dir_or_config, "generation_config", None)  # a model
        settings = generation_config.to_dict() if generation_config is not None else None
        model_dir_or_config = model_dir_or_config.config
    if hasattr(model_dir_or_config, "to_dict"):
        config = model_dir_or_config.to_dict()
    elif isinstance(model_dir_or_config, Mapping):
        config = dict(model_dir_or_config)
        # a dict that holds draft settings (one this function returned) keeps them: reading it again changes nothing
        settings = {key: config[key] for key in CARD_DRAFT_SETTINGS if key in config}
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
        decoding = path.parent / "generation_config.json"  # the decoding defaults
        if decoding.is_file():
            settings = json.loads(decoding.read_text(encoding="utf-8"))
    else:
        raise TypeError(
            f"`model_dir_or_config` must be a folder, a SlimSpecDrafterConfig, a config dict or a drafter, got "
            f"{type(model_dir_or_config).__name__}."
        )
    # the drafter's defaults where its generation_config (or a bare config, or a folder without one) sets nothing
    defaults = draft_generation_config().to_dict()
    settings = {**defaults, **{key: value for key, value in (settings or {}).items() if value is not None}}
    if settings.get("num_assistant_tokens"):
        config["num_assistant_tokens"] = settings["num_assistant_tokens"]
    config["draft_lookup"] = bool(settings.get("draft_lookup"))
    config["draft_tree_size"] = int(settings.get("draft_tree_size") or 0)
    config["draft_shape"] = settings.get("draft_shape") or "fixed"
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


def _public_recipe(recipe: Mapping | None, target: str | None) -> dict | None:
    """What a card shows of a recipe: the SlimSpec settings and the optimisation ones, without the machine's
    (`use_cpu`, threads, local data paths) and with `target_model` as the target's Hub id."""
    if not recipe:
        return None
    own = {f.name for f in dataclasses.fields(SlimSpecConfig)} - _training_argument_fields()
    shown = {}
    for key, value in recipe.items():
        if key in RECIPE_LOCAL or (key not in own and key not in RECIPE_TRAINING_FIELDS and _is_training_field(key)):
            continue
        if key == "target_model":
            named = target or (
                embedded_target(value).hub_id if value is not None and is_embedded(value) else _hub_id(value)
            )
            if named is None:
                continue
            value = named
        elif key == "drafter_model" and value is not None and _hub_id(value) is None:
            continue  # a local warm start
        shown[key] = value
    return shown


def _training_argument_fields() -> set[str]:
    from transformers import TrainingArguments

    return {f.name for f in dataclasses.fields(TrainingArguments)}


def _is_training_field(key: str) -> bool:
    return key in _training_argument_fields()


def read_results(results: Any) -> list[dict] | None:
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
            config = results.get("config") or {}
            conditions = {
                "num_assistant_tokens": config.get("num_assistant_tokens"),
                "num_samples": config.get("num_questions"),
                "max_new_tokens": config.get("max_new_tokens"),
                "repeats": config.get("repeats"),
                "dtype": str(config["dtype"]).removeprefix("torch.") if config.get("dtype") else None,
            }
            results = [
                {**{k: v for k, v in conditions.items() if v is not None}, **entry}
                for entry in ([index[name]] if isinstance(index[name], Mapping) else index[name])
            ]
    entries = [results] if isinstance(results, Mapping) else results
    if not isinstance(entries, Sequence) or not all(isinstance(e, Mapping) for e in entries):
        raise TypeError(f"`results` must be a dict of metrics or a list of them, got {type(results).__name__}.")
    cleaned = []
    for entry in entries:
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
        cleaned.append(plain(entry))
    return cleaned


def prompt_sources(dataset_path: str | os.PathLike | None) -> dict[str, int] | None:
    """Conversations per prompt source (the rows' `source` field) of a recipe's `dataset_path`: prepare-data folders
    or .jsonl files, several separated by commas. None when a part is not on this machine (the card then names only
    the datasets it was given)."""
    if not dataset_path:
        return None
    counts: dict[str, int] = {}
    for part in str(dataset_path).split(","):
        path = Path(part.strip())
        if path.is_dir() and (path / "data").is_dir():
            files = sorted((path / "data").glob("*.jsonl"))
        elif path.is_file() and path.suffix == ".jsonl":
            files = [path]
        else:
            return None
        for file in files:
            with open(file, encoding="utf-8") as f:
                for line in f:
                    try:
                        source = json.loads(line).get("source")
                    except json.JSONDecodeError:  # a truncated last line of an interrupted prepare-data
                        continue
                    if source:
                        counts[str(source)] = counts.get(str(source), 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1])) or None


def hub_datasets(sources: Mapping[str, int] | None) -> list[str]:
    """The Hub dataset ids of `sources` (see `PROMPT_SOURCES`), each once, in order of conversations."""
    ids = []
    for source in sources or ():
        hub_id = PROMPT_SOURCES.get(source, _UNKNOWN_SOURCE)[0]
        if hub_id and hub_id not in ids:
            ids.append(hub_id)
    return ids


# ----------------------------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _plurals(text: str) -> str:
    """ "1 threads" → "1 thread" (and the like) in text written by other tools."""
    return re.sub(r"\b1 (thread|question|repeat|token|sample)s\b", r"1 \1", text)


def _speedup(value: float) -> str:
    if value < 1:
        return f"{value:.2f}× (a slowdown: the target alone is {1 / value:.2f}× faster here)"
    return f"{value:.2f}×"


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
        args = {k: entry[k] for k in ("temperature", "max_new_tokens", "num_assistant_tokens") if k in entry}
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


def _card_target(config: dict) -> str | None:
    """The target's Hub id recorded in the drafter's config; None (with a warning: the card then has no
    `base_model` and placeholder snippets) when it records none or a local path."""
    recorded = config.get("target_model_name_or_path")
    target = _hub_id(recorded)
    if target is None:
        reason = "records no target" if not recorded else f"records the target as {recorded!r}, not a Hub repo id"
        warnings.warn(
            f"The drafter config {reason} (`target_model_name_or_path`), so the model card has no `base_model` and "
            f"its snippets use the placeholder {PLACEHOLDER_TARGET!r}. Set `config.target_model_name_or_path` to the "
            "target's Hub id (e.g. 'HuggingFaceTB/SmolLM2-135M-Instruct') before saving.",
            UserWarning,
            stacklevel=3,
        )
    return target


def _nu_text(results: list[dict] | None, head_type: str) -> str:
    """ν as the card states it: measured values, 1 for the full head, else how to measure it."""
    values = [e["nu"] for e in results or () if e.get("nu") is not None]
    if values:
        return ", ".join(_fmt(v, 3) for v in values) + " (measured)"
    return "1 (by definition)" if head_type == "full" else "not measured (`slimspec bench-head` measures it)"


def _recipe_rows(recipe: dict | None) -> list[tuple[str, str]]:
    """The recipe table: the fields marked `card` that took effect (else the first dozen plain settings)."""
    if not recipe:
        return []
    # settings that did not take effect: the head init of a warm start; the epochs under a step budget, else the
    # unset (≤ 0) step budget
    unused = {"head_init"} if recipe.get("drafter_model") is not None else set()
    unused.add("num_train_epochs" if (recipe.get("max_steps") or 0) > 0 else "max_steps")
    rows = [(k, _fmt(recipe[k], 6)) for k in card_fields() if recipe.get(k) is not None and k not in unused]
    return rows or [(k, _fmt(v, 6)) for k, v in list(recipe.items())[:12] if not isinstance(v, dict)]


def _result_row(entry: dict, config: dict) -> dict:
    """One results entry for the template: its dataset, its conditions (labelled) and its metrics."""
    values = dict(entry)
    if config.get("draft_shape") == "auto" and values.get("num_assistant_tokens") is None:
        values.setdefault("draft_shape", "auto (chosen on the machine)")  # no one k: each round's draft is chosen
    elif values.get("num_assistant_tokens") is None and config.get("num_assistant_tokens"):
        values["num_assistant_tokens"] = f"{config['num_assistant_tokens']} (the drafter's default)"
    labelled = dict(RESULT_CONTEXT)
    keys = [k for k, _ in RESULT_CONTEXT] + [k for k in values if k not in labelled]
    context = [
        (labelled.get(k, k), _plurals(f"{values[k]:g}" if isinstance(values[k], float) else str(values[k])))
        for k in keys
        if k in values
        and k not in METRICS
        and k not in RESULT_FIELDS
        and isinstance(values[k], (int, float, str))
        and values[k] != ""
    ]
    metrics = [
        (label, _speedup(entry[k]) if k == "speedup" else _fmt(entry[k], digits))
        for k, (label, digits) in METRICS.items()
        if entry.get(k) is not None
    ]
    return {"dataset": entry["dataset"], "context": context, "metrics": metrics}


def _card_data(target, license, tags, datasets, model_name, results) -> ModelCardData:
    """The card's front matter; no `pipeline_tag`: a drafter cannot generate on its own, so the Hub must not offer a
    text-generation widget."""
    return ModelCardData(
        base_model=target,
        license=license,
        library_name="transformers",
        inference=False,
        tags=tags,
        datasets=datasets or None,
        model_name=model_name if results else None,
        eval_results=_eval_results(results, model_name) if results else None,
    )


def _continual_run(model_dir_or_config: Any) -> dict | None:
    """What a continual run's state in a drafter folder (`continual_state.json`) says it trained on, for the card."""
    if not isinstance(model_dir_or_config, (str, os.PathLike)):
        return None
    path = Path(model_dir_or_config) / "continual_state.json"
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        return {
            "steps": f"{int(state['steps']):,}",
            "conversations": f"{int(state['conversations']):,}",
            "tokens": f"{int(state['tokens']) / 1e6:.2f}M",
            "hours": f"{float(state['seconds']) / 3600:.1f}",
            "calls": len(state.get("sessions") or ()),
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _template_values(config: dict, recipe: dict | None, results: list[dict] | None, sources, head: dict) -> dict:
    """The template's values read from the drafter's config, the public recipe, the results and the prompt sources
    (besides the card's identity: target, repo, revision, datasets, licence)."""
    values = {key: config.get(key) for key in ("target_layer_ids", "target_num_hidden_layers", "hidden_size")}
    values.update({key: config.get(key) for key in CARD_DRAFT_SETTINGS})
    return {
        **values,
        "vocab_size": config.get("vocab_size"),
        "target_hidden_size": config.get("target_hidden_size") or config.get("hidden_size"),
        "nu": _nu_text(results, head["head_type"]),
        "recipe_rows": _recipe_rows(recipe),
        "recipe_yaml": yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True).strip() if recipe else "",
        "results": [_result_row(entry, config) for entry in results or ()],
        "prompt_sources": [
            (name, *PROMPT_SOURCES.get(name, _UNKNOWN_SOURCE)[1:], f"{count:,}")
            for name, count in (sources or {}).items()
        ],
        **head,
    }


def render_model_card(
    model_dir_or_config: Any,
    *,
    recipe: Any = None,
    results: Any = None,
    datasets: str | Sequence[str] | None = None,
    revision: str | None = None,
    repo_id: str | None = None,
    tags: Sequence[str] | None = None,
    license: str | None = None,
) -> ModelCard:
    """Renders the model card of a SlimSpec drafter from the template in `slimspec_hf/model_cards/`.

    Args:
        model_dir_or_config: a drafter folder (reads its `config.json`), a `SlimSpecDrafterConfig`, a config dict or a
            drafter. Anything whose `model_type` is not `"slimspec_drafter"` is refused.
        recipe: the training recipe: a dict, a path to its YAML file, or the trainer's config dataclass (then only
            the fields that differ from their defaults are listed). Paths and credentials are never copied.
        results: measured results, `{"acceptance_length": 3.1, "rho_tau": 0.99, "speedup": 2.0, "nu": 0.2,
            "dataset": "Spec-Bench", ...}`, a list of such dicts, or a JSON file; they become `model-index` entries.
        datasets: Hub ids of the training data, for the front matter. Left out, they are the Hub datasets of the
            prompt sources of the recipe's `dataset_path` when that data is on this machine (`PROMPT_SOURCES`).
        revision: the commit the `trust_remote_code=True` snippet pins (a placeholder when unknown).
        repo_id: the drafter's repo id for the snippets (a placeholder when unknown).
        tags: extra tags, added to the SlimSpec ones.
        license: the card's `license` (default: the target's, when known; `slimspec push` reads it from the Hub).

    A config without `target_model_name_or_path` (or with a local path there) renders with a placeholder target and
    no `base_model`, with a warning.
    """
    config, folder_name = read_drafter_config(model_dir_or_config)
    target = _card_target(config)
    base = target in BASE_TARGETS
    full_recipe = recipe_dict(recipe)
    public_recipe = _public_recipe(full_recipe, target)
    results_list = read_results(results)
    sources = prompt_sources((full_recipe or {}).get("dataset_path"))
    datasets = ([datasets] if isinstance(datasets, str) else list(datasets or [])) or hub_datasets(sources)
    model_name = (repo_id or folder_name or "slimspec-drafter").split("/")[-1]
    head = _head_facts(config)
    license = license or KNOWN_TARGET_LICENSES.get(target or "")
    tags = [*BASE_TAGS, *HEAD_TAGS.get(head["head_type"], ()), *(t for t in tags or () if t)]
    card = ModelCard.from_template(
        _card_data(target, license, tags, datasets, model_name, results_list),
        template_str=template_text(),
        model_id=model_name,
        repo_id=repo_id or PLACEHOLDER_REPO,
        target=target or PLACEHOLDER_TARGET,
        target_known=target is not None,
        revision=revision or PLACEHOLDER_REVISION,
        revision_known=revision is not None,
        datasets=datasets,
        license=license,
        notice=KNOWN_TARGET_NOTICES.get(target or ""),
        continual=_continual_run(model_dir_or_config),
        base_prompt=repr(question_prompt("Explain speculative decoding in two sentences.")) if base else None,
        stop_strings=repr(list(BASE_TARGETS.get(target or "", ()))),
        **_template_values(config, public_recipe, results_list, sources, head),
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
    license: str | None = None,
) -> Path:
    """Writes the drafter's card as `model_dir/README.md` (atomically) and returns its path.

    The inputs are recorded in `model_dir/slimspec_card.json`; an argument left as None keeps what an earlier call
    recorded, so the trainer's recipe survives the benchmark adding results, and `slimspec push` re-renders both.
    Without `datasets`, the Hub datasets of the recipe's prompt sources are recorded (when its data is here).
    """
    folder = Path(model_dir)
    read_drafter_config(folder)  # fail before writing anything if this is not a drafter folder
    stored = load_card_inputs(folder)
    inputs = {
        "recipe": recipe_dict(recipe) if recipe is not None else stored.get("recipe"),
        "results": read_results(results) if results is not None else stored.get("results"),
        "datasets": ([datasets] if isinstance(datasets, str) else list(datasets))
        if datasets is not None
        else stored.get("datasets"),
        "license": license if license is not None else stored.get("license"),
    }
    if not inputs["datasets"]:  # recorded, so that a push from a machine without the data still names them
        inputs["datasets"] = hub_datasets(prompt_sources((inputs["recipe"] or {}).get("dataset_path"))) or None
    card = render_model_card(folder, repo_id=repo_id, revision=revision, **inputs)
    atomic_write(folder / CARD_INPUTS_FILE, (json.dumps(inputs, indent=2, ensure_ascii=False) + "\n").encode())
    path = folder / "README.md"
    atomic_write(path, str(card).encode("utf-8"))
    return path


__all__ = [
    "CARD_INPUTS_FILE",
    "TEMPLATE_NAME",
    "PROMPT_SOURCES",
    "hub_datasets",
    "load_card_inputs",
    "prompt_sources",
    "read_drafter_config",
    "read_results",
    "render_model_card",
    "template_text",
    "write_model_card",
]
