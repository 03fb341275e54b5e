import json

import pytest

from slimspec_hf import HEAD_TYPES, SlimSpecDrafterConfig

from .testing_utils import tiny_target_config


def test_defaults_derive_from_hidden_size_and_target_layers():
    config = SlimSpecDrafterConfig(hidden_size=576, num_attention_heads=9, target_num_hidden_layers=30)
    assert config.head_rank == 72
    assert config.target_layer_ids == [2, 15, 27]
    assert config.target_hidden_size == 576
    assert config.ttt_steps is None  # decoding settings are the drafter's generation_config
    assert config.head_dim == 64


def test_from_target_config_copies_backbone():
    target = tiny_target_config(num_hidden_layers=12)
    config = SlimSpecDrafterConfig.from_target_config(target, head_type="full")
    assert (config.vocab_size, config.hidden_size, config.intermediate_size) == (128, 32, 64)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (4, 2, 8)
    assert config.target_layer_ids == [2, 6, 9]
    assert config.head_type == "full"
    assert config.rope_parameters["rope_theta"] == target.rope_parameters["rope_theta"]


def test_round_trip(tmp_path):
    config = SlimSpecDrafterConfig.from_target_config(tiny_target_config(), head_rank=3, target_layer_ids=[1, 3, 5])
    config.save_pretrained(tmp_path)
    loaded = SlimSpecDrafterConfig.from_pretrained(tmp_path)
    assert loaded.to_dict() == config.to_dict()
    assert loaded.model_type == "slimspec_drafter"


def test_config_json_of_an_earlier_release_gives_its_depth_as_ttt_steps(tmp_path):
    """Checkpoints written before `ttt_steps` hold it as `num_speculative_tokens`, kept readable (the default
    draft length of a drafter without generation_config.json)."""
    config = SlimSpecDrafterConfig.from_target_config(tiny_target_config(), target_layer_ids=[1, 3, 5])
    values = {k: v for k, v in config.to_dict().items() if k != "ttt_steps"}
    (tmp_path / "config.json").write_text(json.dumps({**values, "num_speculative_tokens": 4}))
    loaded = SlimSpecDrafterConfig.from_pretrained(tmp_path)
    assert loaded.ttt_steps == 4 and loaded.num_speculative_tokens == 4
    assert SlimSpecDrafterConfig(num_speculative_tokens=4, ttt_steps=2).ttt_steps == 2  # the current name wins


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"head_rank": 0}, "head_rank` (0)"),
        ({"head_rank": 32}, "head_rank` (32)"),
        ({"head_rank": 640, "hidden_size": 576, "num_attention_heads": 9}, "head_rank` (640)"),
        ({"head_type": "tiny"}, "'tiny'"),
        ({"head_type": "trimmed"}, "draft_vocab_size"),
        ({"target_layer_ids": [1, 2]}, "three indices"),
        ({"target_layer_ids": [1, 2, 99]}, "[99]"),
        ({"ttt_steps": 0}, "ttt_steps"),
    ],
)
def test_bad_values_raise_clear_errors(kwargs, message):
    values = dict(vocab_size=128, hidden_size=32, num_attention_heads=4, target_num_hidden_layers=6)
    values.update(kwargs)
    with pytest.raises(ValueError) as err:
        SlimSpecDrafterConfig(**values)
    assert message in str(err.value)


def test_unknown_head_type_lists_valid_ones():
    with pytest.raises(ValueError) as err:
        SlimSpecDrafterConfig(head_type="dense")
    for name in HEAD_TYPES:
        assert name in str(err.value)
