# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Training a drafter: `SlimSpecConfig` (config.py) and `SlimSpecTrainer` (trainer.py), with the loss, data, offline
features, head initialisation and the model card they use."""
