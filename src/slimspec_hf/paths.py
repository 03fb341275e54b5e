# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Where things live: the cache, the shared data, the shipped drafters. Each has an environment variable, and a
default that works both from a source checkout and after `pip install` (where there is no checkout around the
package, the defaults fall back to the cache folder)."""

import os
from functools import lru_cache
from pathlib import Path


EMBEDDED_DRAFTER_NAME = "smollm2-135m-instruct-slimspec"


def cache_dir() -> Path:
    """Dequantised targets and offline features: `$SLIMSPEC_CACHE`, else `~/.cache/slimspec_hf`."""
    return Path(os.environ.get("SLIMSPEC_CACHE", Path.home() / ".cache" / "slimspec_hf"))


@lru_cache(maxsize=1)
def source_checkout() -> Path | None:
    """The repository holding this package when it runs from a source checkout (editable install), else None."""
    for folder in Path(__file__).resolve().parents:
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and 'name = "slimspec-hf"' in pyproject.read_text(encoding="utf-8"):
            return folder
    return None


def data_dir() -> Path:
    """The shared data (prompts, Spec-Bench, MT-Bench): `$SLIMSPEC_DATA`, else `<checkout>/../shared/data`, else
    `<cache>/data`."""
    if "SLIMSPEC_DATA" in os.environ:
        return Path(os.environ["SLIMSPEC_DATA"])
    checkout = source_checkout()
    return checkout.parent / "shared" / "data" if checkout is not None else cache_dir() / "data"


def drafters_dir() -> Path:
    """The shipped drafters: `$SLIMSPEC_DRAFTERS`, else `<checkout>/drafters`, else `<cache>/drafters`."""
    if "SLIMSPEC_DRAFTERS" in os.environ:
        return Path(os.environ["SLIMSPEC_DRAFTERS"])
    checkout = source_checkout()
    return checkout / "drafters" if checkout is not None else cache_dir() / "drafters"


def looks_like_path(value: "str | os.PathLike") -> bool:
    """Whether `value` reads as a local path rather than a Hub repo id (`name` or `org/name`): absolute, starting
    with `.` or `~`, or with more than one separator."""
    text = str(value)
    if os.path.isabs(text) or text.startswith((".", "~")):
        return True
    parts = text.replace(os.sep, "/").split("/")
    return len(parts) > 2 or (len(parts) == 2 and not all(parts))


def embedded_drafter_dir() -> Path:
    """The drafter trained for the embedded SmolLM2 target."""
    return drafters_dir() / EMBEDDED_DRAFTER_NAME


__all__ = ["looks_like_path", "cache_dir", "source_checkout", "data_dir", "drafters_dir", "embedded_drafter_dir"]
