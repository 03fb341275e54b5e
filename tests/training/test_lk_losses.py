"""The LK losses (acceptance-direct objectives) against a naive reference written with autograd, and their checks."""

import pytest
import torch

from slimspec_hf.training.config import SlimSpecConfig
from slimspec_hf.training.losses import LOSS_TYPES, Objective, step_weights, ttt_kl_loss

from ..testing_utils import naive_objective


def naive_loss(loss_type, hidden, teacher_hidden, valid, head_w, teacher_w, weights, **kwargs):
    p = torch.softmax(teacher_hidden @ teacher_w.T, dim=-1)
    total = 0
    for k in range(hidden.shape[0]):
        rows = naive_objective(loss_type, p, torch.log_softmax(hidden[k] @ head_w.T, dim=-1), **kwargs)
        mask = valid[k].to(rows.dtype)
        total = total + weights[k] * (rows * mask).sum() / mask.sum().clamp(min=1)
    return total


CASES = [
    ("lk_alpha", {}),
    ("lk_alpha", {"kl_weight": 0.3}),
    ("lk_lambda", {}),
    ("lk_lambda", {"eta": 1.0, "kl_weight": 0.5}),
    ("lk_greedy", {}),
]


@pytest.mark.parametrize("chunk_size", [1, 4, 100])
@pytest.mark.parametrize("loss_type,kwargs", CASES, ids=[f"{t}-{i}" for i, (t, _) in enumerate(CASES)])
def test_lk_losses_match_the_naive_reference(loss_type, kwargs, chunk_size):
    """Loss, per-step KL and gradients (hidden states and head) of the chunked closed-form path against autograd;
    a peaked teacher and student so that α spans (0, 1) rather than sitting near either end."""
    g = torch.Generator().manual_seed(0)
    num_steps, rows, width, vocab = 3, 9, 8, 40
    hidden = 2 * torch.randn(num_steps, rows, width, generator=g, dtype=torch.float64)
    teacher_hidden = 2 * torch.randn(rows, width, generator=g, dtype=torch.float64)
    teacher_w = torch.randn(vocab, width, generator=g, dtype=torch.float64)
    head_w = teacher_w + 0.7 * torch.randn(vocab, width, generator=g, dtype=torch.float64)  # near the teacher
    valid = torch.rand(num_steps, rows, generator=g) > 0.25
    weights = step_weights(num_steps, 0.8).double()

    h1, w1 = hidden.clone().requires_grad_(True), head_w.clone().requires_grad_(True)
    out = ttt_kl_loss(
        h1,
        teacher_hidden,
        valid,
        lambda h: h @ w1.T,
        lambda h: h @ teacher_w.T,
        weights,
        chunk_size=chunk_size,
        params=[w1],
        objective=Objective(loss_type, **kwargs),
    )
    out.loss.backward()
    h2, w2 = hidden.clone().requires_grad_(True), head_w.clone().requires_grad_(True)
    ref = naive_loss(loss_type, h2, teacher_hidden, valid, w2, teacher_w, weights, **kwargs)
    ref.backward()
    step0 = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    kl_only = naive_loss("kl", hidden, teacher_hidden, valid, head_w, teacher_w, step0)  # step 0's mean KL

    torch.testing.assert_close(out.loss.double(), ref.detach(), rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(h1.grad, h2.grad, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-6, atol=1e-9)
    assert float(out.step_kl[0]) == pytest.approx(float(kl_only), rel=1e-6)  # step_kl reports the KL whatever
    assert abs(ref.item() - float(naive_loss("kl", hidden, teacher_hidden, valid, head_w, teacher_w, weights))) > 1e-3
    with torch.no_grad():  # the evaluation path computes the same loss
        plain = ttt_kl_loss(
            hidden,
            teacher_hidden,
            valid,
            lambda h: h @ head_w.T,
            lambda h: h @ teacher_w.T,
            weights,
            chunk_size=chunk_size,
            objective=Objective(loss_type, **kwargs),
        )
    torch.testing.assert_close(plain.loss.double(), ref.detach(), rtol=1e-6, atol=1e-9)


def test_acceptance_rate_rises_under_lk_alpha_descent():
    """A few plain gradient steps on `lk_alpha` raise the mean α = Σ min(p, q) of the rows (what the loss is for)."""
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(1, 16, 6, generator=g)
    teacher_hidden, teacher_w = torch.randn(16, 6, generator=g), torch.randn(30, 6, generator=g)
    head_w = torch.randn(30, 6, generator=g).requires_grad_(True)
    valid = torch.ones(1, 16, dtype=torch.bool)

    def head(h):
        return h @ head_w.T

    def mean_alpha():
        p = torch.softmax(teacher_hidden @ teacher_w.T, -1)
        q = torch.softmax(hidden[0] @ head_w.detach().T, -1)
        return float(torch.minimum(p, q).sum(-1).mean())

    before = mean_alpha()
    for _ in range(20):
        out = ttt_kl_loss(
            hidden,
            teacher_hidden,
            valid,
            head,
            lambda h: h @ teacher_w.T,
            torch.ones(1),
            params=[head_w],
            objective=Objective("lk_alpha"),
        )
        (grad,) = torch.autograd.grad(out.loss, head_w)
        with torch.no_grad():
            head_w -= 0.5 * grad
    assert mean_alpha() > before + 0.05


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"loss_type": "tv"}, "`loss_type` must be one of ['kl', 'lk_alpha', 'lk_lambda', 'lk_greedy'], got 'tv'."),
        ({"loss_type": "lk_alpha", "lk_kl_weight": 1.5}, "`lk_kl_weight` (1.5) must lie in [0, 1]"),
        ({"loss_type": "lk_alpha", "lk_kl_weight": -0.1}, "`lk_kl_weight` (-0.1) must lie in [0, 1]"),
        ({"loss_type": "lk_lambda", "lk_eta": 0.0}, "`lk_eta` (0.0) must be > 0."),
    ],
)
def test_bad_loss_settings_fail_in_one_line_naming_the_field(tmp_path, overrides, message):
    with pytest.raises(ValueError) as err:
        SlimSpecConfig(output_dir=str(tmp_path), **overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_every_loss_type_is_a_config_choice():
    assert LOSS_TYPES == ("kl", "lk_alpha", "lk_lambda", "lk_greedy")
    field = SlimSpecConfig.__dataclass_fields__["loss_type"]
    assert list(field.metadata["choices"]) == list(LOSS_TYPES) and field.default == "kl"
