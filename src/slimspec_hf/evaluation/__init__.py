# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Measuring drafters: metrics, the acceptance-cost model, the timer, Spec-Bench, head timings, rank choice."""
