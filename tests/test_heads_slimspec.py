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


@pytest.mark.parametrize("faster", ["row", "column"])
def test_a_heads_weight_is_kept_in_the_layout_that_runs_faster_here(monkeypatch, tiny_target, faster):
    """`attach_target` (every decoding call) times the drafter's head weight in both memory orders once per dtype
    and keeps the faster, values unchanged; a training drafter is left alone."""
    from slimspec_hf import heads_slimspec

    clock = [0.0]
    linear = heads_slimspec.F.linear

    def timed_linear(x, w):  # a CPU on which one layout costs 10× the other
        column = w.stride() == (1, w.shape[0]) and w.shape[1] > 1
        clock[0] += 1.0 if column == (faster == "column") else 10.0
        return linear(x, w)

    monkeypatch.setattr(heads_slimspec.F, "linear", timed_linear)
    monkeypatch.setattr(heads_slimspec.time, "perf_counter", lambda: clock[0])
    drafter = make_tiny_drafter(tiny_target, head_rank=8)
    weight = drafter.lm_head.up.weight
    weight.__dict__.pop("_fitted_layout", None)  # as loaded: column-major, not yet timed
    drafter.lm_head.store_column_major()
    values = weight.detach().clone()
    drafter.train()
    drafter.attach_target(tiny_target)
    assert weight.stride() == (1, weight.shape[0])  # training: as built (column-major)
    drafter.eval()
    drafter.attach_target(tiny_target)
    column = weight.stride() == (1, weight.shape[0])
    assert column == (faster == "column") and torch.equal(weight, values)
    ticks = clock[0]
    drafter.attach_target(tiny_target)
    assert clock[0] == ticks  # timed once for this dtype
    drafter.to(torch.float64)
    drafter.attach_target(tiny_target)
    assert clock[0] > ticks  # timed again for a new dtype


@pytest.mark.parametrize("faster", [True, False])
def test_a_half_precision_head_runs_with_the_weight_first_where_that_is_faster_here(monkeypatch, faster):
    """In bf16 `fit_layout` also times the weight first (a matrix-vector product at one row, `weight @ h.T` at
    several: oneDNN's bf16 `F.linear` pads one row to a tile) and the head keeps the faster kernel; its logits are
    `F.linear`'s either way. In fp32 the weight-first kernel is not a candidate."""
    from slimspec_hf import heads_slimspec
    from slimspec_hf.heads_slimspec import LowRankHead

    clock, calls = [0.0], []
    linear, weight_first = heads_slimspec.F.linear, heads_slimspec.weight_first

    def timed_linear(x, w, bias=None):
        clock[0] += 10.0 if faster else 1.0
        return linear(x, w, bias)

    def timed_weight_first(x, w, group=1):
        clock[0] += (1.0 if group > 1 else 2.0) if faster else 10.0  # grouped rows the fastest of all
        calls.append(x.shape)
        return weight_first(x, w, group)

    monkeypatch.setattr(heads_slimspec.F, "linear", timed_linear)
    monkeypatch.setattr(heads_slimspec, "weight_first", timed_weight_first)
    monkeypatch.setattr(heads_slimspec.time, "perf_counter", lambda: clock[0])
    torch.manual_seed(0)
    head = LowRankHead(32, 96, 8).to(torch.bfloat16).eval()  # 96 rows: 6 groups of 16
    hidden = torch.randn(2, 3, 32, dtype=torch.bfloat16)
    expected = [linear(linear(h, head.down.weight), head.up.weight).float() for h in (hidden[:1, :1], hidden)]
    head.fit_layout()
    calls.clear()
    got = [head(h).float() for h in (hidden[:1, :1], hidden)]
    assert (head.up.weight._weight_first == torch.bfloat16) == faster and head.up.weight.is_contiguous() == faster
    assert head.up.weight._weight_group == (16 if faster else 0)
    assert len(calls) == (2 if faster else 0)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and torch.allclose(g, e, rtol=2e-2, atol=2e-2)
    head.float()  # another dtype: F.linear until timed again
    calls.clear()
    assert torch.allclose(head(hidden.float()), linear(linear(hidden.float(), head.down.weight), head.up.weight))
    assert not calls
    head32 = LowRankHead(32, 96, 8).eval()
    head32.fit_layout()
    assert head32.up.weight._weight_first is None  # fp32: column- or row-major F.linear only
