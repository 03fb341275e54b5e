# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Drafters in and out: the Hub (push, load), EAGLE-3 checkpoints in (convert) and out (export)."""
