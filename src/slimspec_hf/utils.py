# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Small helpers shared by every layer: the atomic writer, and the extras an optional import belongs to.

A reader (another process, a resumed run, a crash) must see a file either whole or not at all: everything the
package writes goes to a temporary file in the same folder (so the rename stays on one filesystem) and is then
moved over the destination with `os.replace`, which is atomic on POSIX and Windows.
"""

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


# The optional packages and the extra of `pip install "slimspec-hf[EXTRA]"` that installs each. The core (torch,
# transformers, huggingface_hub, safetensors, tqdm) loads a drafter and runs `generate()`; the rest is opt-in.
EXTRAS = {
    "trl": "train",
    "peft": "train",
    "accelerate": "train",
    "datasets": "train",
    "jinja2": "train",
    "evaluate": "eval",
    "matplotlib": "eval",
    "gguf": "gguf",
}


def missing_extra(err: ImportError) -> str | None:
    """For an import of an optional package that failed, the one line that says which extra installs it; else None."""
    name = (getattr(err, "name", None) or "").split(".")[0]
    if name not in EXTRAS:
        return None
    return f'this needs `{name}`, which is not installed: pip install "slimspec-hf[{EXTRAS[name]}]"'


def _umask() -> int:
    """The process's file-creation mask: from /proc where Linux shows it, else by setting it and back at once (which
    another thread creating a file in between would see)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yields a temporary path beside `path`; when the block succeeds it replaces `path`, else it is removed.

    For writers that take a file name (`safetensors.save_file`, `fig.savefig`): `suffix` (default: `path`'s own)
    keeps the extension such writers read the format from. Missing parent folders are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=path.suffix if suffix is None else suffix, dir=path.parent
    )
    os.close(fd)
    try:
        yield Path(tmp)
        # mkstemp makes the file private (0600); give it the mode a plain `open(path, "w")` would have
        os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def atomic_write(path: str | os.PathLike, data: str | bytes, encoding: str = "utf-8") -> Path:
    """Writes `data` (text or bytes) to `path` atomically; returns `path` as a `Path`."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode(encoding) if isinstance(data, str) else data)
    return Path(path)


def atomic_write_json(path: str | os.PathLike, obj: Any, **dumps_kwargs) -> Path:
    """`json.dumps(obj, **dumps_kwargs)` written atomically, ending in a newline (`indent=2` unless given)."""
    dumps_kwargs.setdefault("indent", 2)
    return atomic_write(path, json.dumps(obj, **dumps_kwargs) + "\n")


__all__ = ["atomic_path", "atomic_write", "atomic_write_json"]
