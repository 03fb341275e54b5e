# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec bench-head` runs end to end on tiny shapes; its fast low-rank path computes the same logits.

No timing is asserted: speeds depend on the machine. What is checked is that the script runs, prints one row per
(shape, dtype, batch, head, layout) with the right MAC limits, writes consistent JSON, and rejects bad input."""

import json
import re

import pytest
import torch
import torch.nn.functional as F

from slimspec_hf import cli
from slimspec_hf.commands.bench_head import main
from slimspec_hf.evaluation.cost_model import mac_limit_low_rank, mac_limit_trimmed
from slimspec_hf.evaluation.heads import fast_low_rank_logits
from slimspec_hf.modeling_slimspec import store_column_major


def test_fast_low_rank_logits_matches_two_linears():
    torch.manual_seed(0)
    down, up = torch.randn(4, 32), torch.randn(200, 4)  # (r, d), (V, r)
    h = torch.randn(2, 3, 32)  # (B, T, d)
    reference = F.linear(F.linear(h, down), up)
    up_cm = up.clone()
    store_column_major(up_cm)
    assert up_cm.shape == up.shape and up_cm.stride() == (1, 200) and torch.equal(up_cm, up)
    assert up_cm.t().is_contiguous()
    torch.testing.assert_close(fast_low_rank_logits(h, down, up_cm.t()), reference)
    torch.testing.assert_close(fast_low_rank_logits(h[0, 0], down, up.t().contiguous()), reference[0, 0])
    # an nn.Linear holding the column-major weight computes the same logits through F.linear
    linear = torch.nn.Linear(4, 200, bias=False)
    linear.weight.data = up_cm
    torch.testing.assert_close(linear(F.linear(h, down)), reference)


def test_fast_low_rank_logits_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"`down_weight` must be \(r, d\).*\(4, 32\) and \(5, 200\)"):
        fast_low_rank_logits(torch.randn(1, 32), torch.randn(4, 32), torch.randn(5, 200))
    with pytest.raises(ValueError, match=r"last dimension \(16\) must equal d = 32"):
        fast_low_rank_logits(torch.randn(1, 16), torch.randn(4, 32), torch.randn(4, 200))


def test_mac_limits():
    # Llama-3.1-8B: d=4096, V=128256, r=512
    assert mac_limit_low_rank(4096, 128256, 512) == pytest.approx(4096 * 128256 / (512 * 4096 + 128256 * 512))
    assert mac_limit_low_rank(4096, 128256, 512) == pytest.approx(7.75, abs=0.01)
    assert mac_limit_trimmed(128256, 32768) == pytest.approx(3.914, abs=1e-3)


def test_bench_head_runs_end_to_end_and_prints_its_table(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["--shapes", "tiny=32,256", "--batch-sizes", "1", "16", "--dtypes", "float32", "bfloat16"]
    argv += ["--rounds", "3", "--rounds-large", "2", "--warmup", "1", "--json", str(out)]
    assert cli.main(["bench-head", *argv]) == 0
    printed = capsys.readouterr().out
    assert "MAC limit" in printed and "of limit" in printed
    table_rows = [line for line in printed.splitlines() if line.startswith("tiny ")]
    # 2 dtypes × 2 batches × 3 heads × 2 layouts, plus the 3 bf16 "no oneDNN" heads at batch 1; printed once
    # while running and once in the summary
    assert len(table_rows) == 2 * 27
    payload = json.loads(out.read_text())
    assert payload["command"].startswith("slimspec bench-head --shapes tiny=32,256")
    rows = payload["measurements"]
    assert len(rows) == 27
    for dtype, batch_size, layouts in (
        ("float32", 1, ("as stored", "T-layout")),
        ("float32", 16, ("as stored", "T-layout")),
        ("bfloat16", 1, ("as stored", "T-layout", "no oneDNN")),
        ("bfloat16", 16, ("as stored", "T-layout")),  # ATen's bf16 GEMM is only timed at small batches
    ):
        cell = {(m["head"], m["layout"]) for m in rows if m["dtype"] == dtype and m["batch_size"] == batch_size}
        assert cell == {(head, layout) for head in ("full", "low-rank", "trimmed") for layout in layouts}
    for m in rows:
        assert m["rounds"] == (3 if m["batch_size"] == 1 else 2) == len(m["times_ms"])
        assert m["p25_ms"] <= m["median_ms"] <= m["p75_ms"] and m["median_ms"] > 0
        if m["head"] == "low-rank":  # r = 32 // 8 = 4
            assert m["rank"] == 4 and m["mac_limit"] == pytest.approx(32 * 256 / (4 * 32 + 256 * 4))
            assert m["macs"] == m["batch_size"] * (4 * 32 + 256 * 4)
        elif m["head"] == "trimmed":  # K = min(32768, 256 // 3) = 85
            assert m["draft_vocab_size"] == 85 and m["mac_limit"] == pytest.approx(256 / 85)
        else:
            assert m["mac_limit"] == 1.0
        assert m["fraction_of_limit"] == pytest.approx(m["speedup"] / m["mac_limit"])
    # within each cell, the faster full layout is the baseline: its per-round ratios to itself are all 1
    cell = [m for m in rows if m["dtype"] == "float32" and m["batch_size"] == 1 and m["head"] == "full"]
    best = min(cell, key=lambda m: m["median_ms"])
    assert best["speedup"] == 1.0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--shapes", "tiny=32"], "neither a known shape"),
        (["--shapes", "tiny=4,256"], r"rank d // --rank-divisor = 4 // 8 = 0"),
        (["--shapes", "tiny=32,256", "--trim-k", "256"], r"`--trim-k` \(256\) must satisfy 0 < K < V = 256"),
        (["--shapes", "tiny=32,256", "--batch-sizes", "0"], r"`--batch-sizes` must all be >= 1, got \[0\]"),
        (["--shapes", "tiny=32,256", "--rounds", "0"], r"`--rounds` must be >= 1, got 0"),
    ],
)
def test_bench_head_rejects_bad_arguments(argv, message, tmp_path, capsys):
    out = tmp_path / "never.json"
    with pytest.raises((ValueError, SystemExit)) as excinfo:
        main([*argv, "--json", str(out)])
    text = str(excinfo.value) if excinfo.type is ValueError else capsys.readouterr().err
    assert excinfo.type is ValueError or excinfo.value.code == 2
    assert re.search(message, text), text
    assert not out.exists()


def test_bench_head_model_head_times_the_package_lowrankhead_in_both_layouts(tmp_path):
    out = tmp_path / "bench.json"
    argv = ["--shapes", "tiny=32,256", "--batch-sizes", "1", "--dtypes", "float32", "--rounds", "2"]
    assert main([*argv, "--model-head", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["measurements"]
    model_rows = {m["layout"]: m for m in rows if m["head"] == "LowRankHead"}
    assert set(model_rows) == {"as stored", "T-layout"}
    for m in model_rows.values():
        assert m["rank"] == 4 and m["mac_limit"] == pytest.approx(32 * 256 / (4 * 32 + 256 * 4))
