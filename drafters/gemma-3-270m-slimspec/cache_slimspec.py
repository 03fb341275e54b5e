# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The KV cache of a SlimSpec drafter's single attention layer (part of the remote-code unit: imports only `torch`)."""

import torch


class SlimSpecDrafterCache:
    """Keys/values of the drafter's one attention layer, preallocated and croppable: positions computed from the
    target's features (committed) and, during a round, the drafter's own drafted positions."""

    def __init__(self):
        self.keys: torch.Tensor | None = None  # (B, H_kv, capacity, hd)
        self.values: torch.Tensor | None = None
        self.length = 0

    def get_seq_length(self) -> int:
        return self.length

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Appends keys/values (B, H_kv, T, hd) and returns all of them, the new ones last."""
        new = keys.shape[2]
        needed = self.length + new
        if self.keys is None or needed > self.keys.shape[2] or self.keys.dtype != keys.dtype:
            capacity = max(needed, 2 * (self.keys.shape[2] if self.keys is not None else 0), 64)
            grown_k = keys.new_empty((keys.shape[0], keys.shape[1], capacity, keys.shape[3]))
            grown_v = values.new_empty((values.shape[0], values.shape[1], capacity, values.shape[3]))
            if self.length:
                grown_k[:, :, : self.length] = self.keys[:, :, : self.length]
                grown_v[:, :, : self.length] = self.values[:, :, : self.length]
            self.keys, self.values = grown_k, grown_v
        self.keys[:, :, self.length : needed] = keys
        self.values[:, :, self.length : needed] = values
        self.length = needed
        return self.keys[:, :, :needed], self.values[:, :, :needed]

    def crop(self, length: int) -> None:
        """Keeps the first `length` positions (a negative `length` drops that many from the end)."""
        if length < 0:
            length = max(0, self.length + length)
        self.length = min(self.length, length)


__all__ = ["SlimSpecDrafterCache"]
