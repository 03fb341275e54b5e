# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Integrations with serving engines. Each imports its engine lazily: nothing here is needed by transformers users."""
