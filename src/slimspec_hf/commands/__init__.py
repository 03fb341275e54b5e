# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""One module per `slimspec` subcommand (see `slimspec_hf.cli`), plus `common.py`, what they share."""
