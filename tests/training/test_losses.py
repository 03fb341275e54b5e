"""The TTT loss against independent naive implementations on random tensors."""

import pytest
import torch

from slimspec_hf.training.losses import forward_kl, step_weights, ttt_kl_loss, ttt_targets


def naive_loss(student_hidden, teacher_hidden, valid, head_w, teacher_w, weights, compact_ids=None):
    """Materialises every (S, N, V) logit and uses `torch.nn.functional.kl_div`."""
    steps = []
    teacher_probs = torch.softmax(teacher_hidden @ teacher_w.T, dim=-1)  # (N, V)
    if compact_ids is not None:
        teacher_probs = teacher_probs[:, compact_ids]
        teacher_probs = teacher_probs / teacher_probs.sum(-1, keepdim=True)
    for k in range(student_hidden.shape[0]):
        student_logp = torch.log_softmax(student_hidden[k] @ head_w.T, dim=-1)
        kl = torch.nn.functional.kl_div(student_logp, teacher_probs, reduction="none").sum(-1)  # (N,)
        mask = valid[k].float()
        steps.append((kl * mask).sum() / mask.sum().clamp(min=1))
    return sum(w * s for w, s in zip(weights, steps)), torch.stack(steps)


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 100])
def test_ttt_kl_loss_matches_naive(chunk_size):
    g = torch.Generator().manual_seed(0)
    num_steps, rows, width, vocab = 3, 11, 8, 50
    hidden = torch.randn(num_steps, rows, width, generator=g, dtype=torch.float64)
    teacher_hidden = torch.randn(rows, width, generator=g, dtype=torch.float64)
    teacher_w = torch.randn(vocab, width, generator=g, dtype=torch.float64)
    head_w = torch.randn(vocab, width, generator=g, dtype=torch.float64)
    valid = torch.rand(num_steps, rows, generator=g) > 0.3
    valid[2] = False  # a step without any valid row contributes nothing
    weights = step_weights(num_steps, 0.8).double()

    h1 = hidden.clone().requires_grad_(True)
    w1 = head_w.clone().requires_grad_(True)
    out = ttt_kl_loss(
        h1,
        teacher_hidden,
        valid,
        lambda h: h @ w1.T,
        lambda h: h @ teacher_w.T,
        weights,
        chunk_size=chunk_size,
        params=[w1],
    )
    out.loss.backward()

    h2 = hidden.clone().requires_grad_(True)
    w2 = head_w.clone().requires_grad_(True)
    ref, ref_steps = naive_loss(h2, teacher_hidden, valid, w2, teacher_w, weights)
    ref.backward()

    torch.testing.assert_close(out.loss.double(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.step_kl.double(), ref_steps.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h1.grad, h2.grad, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-5, atol=1e-8)
    assert out.step_count.tolist() == valid.sum(-1).tolist()
    # top-1 agreement, brute force
    for k in range(num_steps):
        agree = ((hidden[k] @ head_w.T).argmax(-1) == (teacher_hidden @ teacher_w.T).argmax(-1)) & valid[k]
        assert int(out.step_correct[k]) == int(agree.sum())


def test_ttt_kl_loss_no_grad_path_agrees():
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(2, 9, 4, generator=g)
    teacher_hidden = torch.randn(9, 4, generator=g)
    w = torch.randn(30, 4, generator=g)
    tw = torch.randn(30, 4, generator=g)
    valid = torch.rand(2, 9, generator=g) > 0.2
    weights = step_weights(2, 0.5)
    with torch.no_grad():
        plain = ttt_kl_loss(hidden, teacher_hidden, valid, lambda h: h @ w.T, lambda h: h @ tw.T, weights, 4)
    ref, _ = naive_loss(hidden, teacher_hidden, valid, w, tw, weights)
    torch.testing.assert_close(plain.loss, ref, rtol=1e-5, atol=1e-6)


def test_ttt_kl_loss_trimmed_vocabulary():
    g = torch.Generator().manual_seed(2)
    num_steps, rows, width, vocab = 2, 10, 6, 40
    compact_ids = torch.tensor([3, 7, 1, 20, 33, 0])
    hidden = torch.randn(num_steps, rows, width, generator=g, dtype=torch.float64, requires_grad=True)
    teacher_hidden = torch.randn(rows, width, generator=g, dtype=torch.float64)
    teacher_w = torch.randn(vocab, width, generator=g, dtype=torch.float64)
    head_w = torch.randn(len(compact_ids), width, generator=g, dtype=torch.float64)
    valid = torch.ones(num_steps, rows, dtype=torch.bool)
    weights = step_weights(num_steps, 0.8).double()
    out = ttt_kl_loss(
        hidden,
        teacher_hidden,
        valid,
        lambda h: h @ head_w.T,
        lambda h: h @ teacher_w.T,
        weights,
        chunk_size=4,
        compact_ids=compact_ids,
    )
    (grad,) = torch.autograd.grad(out.loss, hidden)
    h2 = hidden.detach().clone().requires_grad_(True)
    ref, _ = naive_loss(h2, teacher_hidden, valid, head_w, teacher_w, weights, compact_ids=compact_ids)
    (grad_ref,) = torch.autograd.grad(ref, h2)
    torch.testing.assert_close(out.loss.double(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, grad_ref, rtol=1e-5, atol=1e-8)
    teacher_top1 = (teacher_hidden @ teacher_w.T).argmax(-1)
    student_top1 = compact_ids[(hidden.detach()[0] @ head_w.T).argmax(-1)]
    assert int(out.step_correct[0]) == int((teacher_top1 == student_top1).sum())


def test_forward_kl_is_zero_on_itself_and_positive_otherwise():
    logits = torch.randn(5, 17)
    torch.testing.assert_close(forward_kl(logits, logits), torch.zeros(5), atol=1e-6, rtol=0)
    assert (forward_kl(logits, torch.randn(5, 17)) > 0).all()


def test_step_weights_are_the_powers_of_the_decay_from_one():
    """Step k weighs decay**k: step 0 (the target's own features) counts most, literal values."""
    assert step_weights(4, 0.5).tolist() == [1.0, 0.5, 0.25, 0.125]
    torch.testing.assert_close(step_weights(3, 0.8), torch.tensor([1.0, 0.8, 0.64]), rtol=0, atol=1e-7)
    assert step_weights(1, 0.3).tolist() == [1.0]
    assert step_weights(3, 1.0).tolist() == [1.0, 1.0, 1.0]
    assert step_weights(2, 0.8).dtype == torch.float32


def test_ttt_targets_brute_force():
    g = torch.Generator().manual_seed(3)
    batch, seq_len, num_steps = 3, 12, 4
    attention = torch.ones(batch, seq_len, dtype=torch.long)
    attention[1, :3] = 0  # left padding
    attention[2, 9:] = 0  # right padding
    loss_mask = (torch.rand(batch, seq_len, generator=g) > 0.3).long() * attention
    batch_idx, teacher_pos, student_pos, valid = ttt_targets(attention, loss_mask, num_steps)
    found = {(k, int(b), int(s)) for k in range(num_steps) for b, s, ok in zip(batch_idx, teacher_pos, valid[k]) if ok}
    expected = set()
    for b in range(batch):
        for k in range(num_steps):
            for t in range(seq_len):
                s = t + k + 1  # teacher position; it predicts x_{s+1} = x_{t+k+2}
                if s + 1 < seq_len and attention[b, t] and attention[b, s + 1] and loss_mask[b, s + 1]:
                    expected.add((k, b, s))
    assert found == expected
    for k in range(num_steps):
        ok = valid[k]
        assert torch.equal(student_pos[k][ok], teacher_pos[ok] - k - 1)


def test_bad_arguments_name_the_parameter(tmp_path):
    from slimspec_hf.training.config import SlimSpecConfig

    with pytest.raises(ValueError, match="step_loss_decay"):  # validated once, where the setting is defined
        SlimSpecConfig(output_dir=str(tmp_path), step_loss_decay=1.5)
    with pytest.raises(ValueError, match="ttt_steps"):
        SlimSpecConfig(output_dir=str(tmp_path), ttt_steps=0)
    with pytest.raises(ValueError, match="kl_chunk_size"):
        ttt_kl_loss(
            torch.zeros(1, 2, 3),
            torch.zeros(2, 3),
            torch.ones(1, 2, dtype=torch.bool),
            lambda h: h,
            lambda h: h,
            torch.ones(1),
            chunk_size=0,
        )


def test_cpu_chunks_stay_under_the_mmap_threshold_but_keep_64_rows():
    from slimspec_hf.training.losses import effective_chunk_size

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert effective_chunk_size(256, 49152, cpu) == 85  # 85 rows × 49,152 fp32 ≤ 16 MiB
    assert effective_chunk_size(32, 49152, cpu) == 32
    assert effective_chunk_size(256, 262144, cpu) == 64  # Gemma-3: 16 rows would fit; a chunk keeps 64
    assert effective_chunk_size(16, 262144, cpu) == 16
    assert effective_chunk_size(256, 49152, cuda) == 256


def test_bf16_logits_give_the_fp32_loss_and_gradients():
    """Under bf16 autocast the head's logits are bf16; the softmax maths still runs in fp32 (close results)."""
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(2, 9, 16, generator=g)
    teacher_hidden = torch.randn(9, 16, generator=g)
    teacher_w, head_w = torch.randn(300, 16, generator=g), torch.randn(300, 16, generator=g)
    valid = torch.ones(2, 9, dtype=torch.bool)
    results = []
    for dtype in (torch.float32, torch.bfloat16):
        h = hidden.clone().requires_grad_(True)
        w = head_w.clone().requires_grad_(True)
        out = ttt_kl_loss(
            h,
            teacher_hidden,
            valid,
            lambda x, w=w, dtype=dtype: (x @ w.T).to(dtype),
            lambda x: x @ teacher_w.T,
            step_weights(2, 0.8),
            chunk_size=4,
            params=[w],
        )
        out.loss.backward()
        results.append((out.loss.detach(), h.grad, w.grad, out.step_correct))
    (l32, h32, w32, c32), (l16, h16, w16, c16) = results
    torch.testing.assert_close(l16, l32, rtol=0.02, atol=0.02)
    torch.testing.assert_close(h16, h32, rtol=0.05, atol=0.05)
    torch.testing.assert_close(w16, w32, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("grad", [True, False])
def test_hass_top_k_term_matches_naive(grad):
    """KL + w·(−Σ_{top-k of p} p log q), against autograd over materialised logits (and the no-grad path)."""
    g = torch.Generator().manual_seed(3)
    num_steps, rows, width, vocab, top_k, w = 2, 7, 8, 40, 5, 0.7
    hidden = torch.randn(num_steps, rows, width, generator=g, dtype=torch.float64)
    teacher_hidden = torch.randn(rows, width, generator=g, dtype=torch.float64)
    teacher_w, head_w = (torch.randn(vocab, width, generator=g, dtype=torch.float64) for _ in range(2))
    valid = torch.rand(num_steps, rows, generator=g) > 0.2
    weights = step_weights(num_steps, 0.8).double()

    h1, w1 = hidden.clone().requires_grad_(grad), head_w.clone().requires_grad_(grad)
    out = ttt_kl_loss(
        h1,
        teacher_hidden,
        valid,
        lambda h: h @ w1.T,
        lambda h: h @ teacher_w.T,
        weights,
        chunk_size=3,
        params=[w1],
        top_k=top_k,
        top_k_weight=w,
    )

    h2, w2 = hidden.clone().requires_grad_(True), head_w.clone().requires_grad_(True)
    p = torch.softmax(teacher_hidden @ teacher_w.T, -1)
    top_p, top_ids = p.topk(top_k, -1)
    ref, ref_kl = 0, []
    for k in range(num_steps):
        logq = torch.log_softmax(h2[k] @ w2.T, -1)
        kl = (p * (p.log() - logq)).sum(-1)
        term = -(top_p * logq.gather(-1, top_ids)).sum(-1)
        mask = valid[k].double()
        ref = ref + weights[k] * ((kl + w * term) * mask).sum() / mask.sum()
        ref_kl.append((kl * mask).sum() / mask.sum())
    torch.testing.assert_close(out.loss.double(), ref.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.step_kl.double(), torch.stack(ref_kl).detach(), rtol=1e-5, atol=1e-6)
    if grad:
        out.loss.backward()
        ref.backward()
        torch.testing.assert_close(h1.grad, h2.grad, rtol=1e-5, atol=1e-8)
        torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-5, atol=1e-8)
