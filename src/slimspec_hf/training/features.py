# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Offline target features: computed once per conversation, cached on disk in bf16, read back per batch.

A conversation's file is `<root>/<key[:2]>/<key>.safetensors`, `key` its token-id hash ([`~data.feature_key`]);
`root` names the target, its layers and vocabulary, so runs on the same data and target share the cache.
"""

import re
from pathlib import Path

import torch

from ..paths import cache_dir
from ..utils import atomic_path
from .config import SlimSpecConfig


def feature_cache_root(args: SlimSpecConfig, target, layer_ids) -> Path:
    """The cache folder of `target` at `layer_ids` (`args.feature_cache_dir`, else `<cache>/features`)."""
    root = Path(args.feature_cache_dir) if args.feature_cache_dir else cache_dir() / "features"
    name = getattr(target.config, "_name_or_path", None) or type(target).__name__
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", str(name).strip("/"))[-80:]
    return root / f"{slug}-layers{'_'.join(map(str, layer_ids))}-V{target.config.get_text_config().vocab_size}"


def write_features(path: Path, features: torch.Tensor, final: torch.Tensor) -> None:
    """One conversation's fused features (T, 3·d_t) and final hidden states (T, d_t), in bf16, atomically."""
    from safetensors.torch import save_file

    tensors = {
        "features": features.to(torch.bfloat16).contiguous().cpu(),
        "final": final.to(torch.bfloat16).contiguous().cpu(),
    }
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp))


def read_features(paths, length: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The cached features of a batch, zero-padded to `length` positions, in fp32 on `device`."""
    from safetensors.torch import load_file

    loaded = [load_file(str(p)) for p in paths]
    features = torch.zeros(len(paths), length, loaded[0]["features"].shape[-1], dtype=torch.float32)
    final = torch.zeros(len(paths), length, loaded[0]["final"].shape[-1], dtype=torch.float32)
    for i, item in enumerate(loaded):
        n = item["features"].shape[0]
        features[i, :n] = item["features"].float()
        final[i, :n] = item["final"].float()
    return features.to(device), final.to(device)


def feature_path(root: Path, key: str) -> Path:
    return root / key[:2] / f"{key}.safetensors"


__all__ = ["feature_cache_root", "feature_path", "write_features", "read_features"]
