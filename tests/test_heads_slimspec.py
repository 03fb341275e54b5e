"""The heads module (`heads_slimspec`): the low-rank head multiplied out into a dense one."""

import pytest
import torch

from slimspec_hf.heads_slimspec import FullHead, LowRankHead, with_merged_head

from .testing_utils import make_tiny_drafter


def test_a_merged_head_drafts_what_the_low_rank_head_drafts(tiny_target):
    drafter = make_tiny_drafter(tiny_target, head_type="low_rank", head_rank=4)
    merged = with_merged_head(drafter)
    assert isinstance(merged.lm_head, FullHead) and isinstance(drafter.lm_head, LowRankHead)  # the original kept
    assert merged.config.head_type == "full" and drafter.config.head_type == "low_rank"
    assert merged.get_input_embeddings() is drafter.get_input_embeddings()  # borrowed, not copied
    hidden = torch.randn(3, drafter.config.hidden_size)
    torch.testing.assert_close(merged.lm_head(hidden), drafter.lm_head(hidden), rtol=1e-5, atol=1e-5)
    ids = torch.tensor([[5, 9, 17, 3, 22, 8]])
    kwargs = dict(max_new_tokens=12, do_sample=False, num_assistant_tokens=3)
    out = tiny_target.generate(ids, assistant_model=drafter, **kwargs)
    low_rank = drafter.last_generation_stats.as_dict()
    assert torch.equal(tiny_target.generate(ids, assistant_model=merged, **kwargs), out)
    assert merged.last_generation_stats.as_dict() == low_rank  # the same drafts: the same acceptance


def test_only_a_low_rank_head_merges(tiny_target):
    with pytest.raises(ValueError, match="low-rank head to merge, got head_type='full'"):
        with_merged_head(make_tiny_drafter(tiny_target, head_type="full"))
