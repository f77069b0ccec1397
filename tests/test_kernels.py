"""The trainer's kernels against their naive references: values and gradients.

Tolerances: float64 inputs must agree to 1e-10 (the chunked path is the same math, only
split differently); float32 to 1e-4 absolute on log-probs/entropies and 1e-4 relative on
gradients (different summation orders); compiled vs eager float32 to 1e-4.
"""

import warnings

import pytest
import torch

from agentgym_budget.train import kernels
from agentgym_budget.train.kernels import (
    compiled,
    policy_loss,
    policy_loss_reference,
    token_logprobs,
    token_logprobs_reference,
)

torch.set_num_threads(1)


def _inputs(n=37, h=16, v=101, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g, dtype=dtype).requires_grad_()
    weight = torch.randn(v, h, generator=g, dtype=dtype).requires_grad_()
    targets = torch.randint(0, v, (n,), generator=g)
    upstream = torch.randn(n, generator=g, dtype=dtype), torch.randn(n, generator=g, dtype=dtype)
    return hidden, weight, targets, upstream


def _values_and_grads(fn, hidden, weight, targets, upstream, **kwargs):
    logp, entropy = fn(hidden, weight, targets, **kwargs)
    grads = torch.autograd.grad((logp * upstream[0]).sum() + (entropy * upstream[1]).sum(), [hidden, weight])
    return logp, entropy, *grads


@pytest.mark.parametrize("chunk_size", [1, 8, 36, 37, 512])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_logprobs_equal_naive_in_float64(chunk_size, temperature):
    hidden, weight, targets, upstream = _inputs()
    fused = _values_and_grads(token_logprobs, hidden, weight, targets, upstream, chunk_size=chunk_size,
                              temperature=temperature)
    naive = _values_and_grads(token_logprobs_reference, hidden, weight, targets, upstream, temperature=temperature)
    for a, b in zip(fused, naive):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


def test_chunked_logprobs_float32_and_gradcheck():
    hidden, weight, targets, upstream = _inputs(dtype=torch.float32)
    fused = _values_and_grads(token_logprobs, hidden, weight, targets, upstream, chunk_size=5)
    naive = _values_and_grads(token_logprobs_reference, hidden, weight, targets, upstream)
    for a, b in zip(fused, naive):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    h, w, t, _ = _inputs(n=6, h=3, v=7)
    assert torch.autograd.gradcheck(lambda h, w: token_logprobs(h, w, t, chunk_size=4), (h, w))


def test_float32_entropy_is_accurate_over_a_real_sized_vocabulary():
    """49,152 classes (SmolLM2's vocabulary): the fused entropy in float32 stays within 5e-5 nats of
    float64, as the naive path's does; a ``bmm`` dot product (sequential sum) was off by 4e-4 here."""
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(16, 64, generator=g), torch.randn(49_152, 64, generator=g) * 0.5
    targets = torch.randint(0, 49_152, (16,), generator=g)
    exact_logp, exact_entropy = token_logprobs_reference(hidden.double(), weight.double(), targets)
    logp, entropy = token_logprobs(hidden, weight, targets, chunk_size=8)
    assert float((entropy.double() - exact_entropy).abs().max()) < 5e-5
    assert float((logp.double() - exact_logp).abs().max()) < 5e-5


def test_logprobs_are_log_probabilities_and_entropy_is_bounded():
    hidden, weight, targets, _ = _inputs(v=50)
    all_targets = torch.arange(50).repeat(hidden.shape[0])
    logp, entropy = token_logprobs(hidden.repeat_interleave(50, 0), weight, all_targets, chunk_size=64)
    torch.testing.assert_close(logp.exp().view(-1, 50).sum(-1), torch.ones(hidden.shape[0], dtype=torch.float64))
    assert (entropy >= 0).all() and (entropy <= torch.log(torch.tensor(50.0)) + 1e-9).all()


def test_bf16_hidden_keeps_float32_softmax():
    hidden, weight, targets, _ = _inputs(dtype=torch.float32)
    logp, _ = token_logprobs(hidden.bfloat16(), weight.bfloat16(), targets, chunk_size=8)
    ref, _ = token_logprobs_reference(hidden, weight, targets)
    assert logp.dtype == torch.float32
    torch.testing.assert_close(logp, ref.detach(), atol=0.15, rtol=0.05)


def test_logprobs_reject_bad_shapes():
    with pytest.raises(ValueError, match="shape mismatch"):
        token_logprobs(torch.randn(3, 4), torch.randn(5, 4), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="chunk_size"):
        token_logprobs(torch.randn(3, 4), torch.randn(5, 4), torch.zeros(3, dtype=torch.long), chunk_size=0)


def test_ignore_index_positions_score_zero_and_get_no_gradient():
    hidden, weight, targets, upstream = _inputs()
    ignored = torch.zeros_like(targets, dtype=torch.bool)
    ignored[[0, 5, 6, 36]] = True
    logp, entropy, g_h, g_w = _values_and_grads(token_logprobs, hidden, weight, targets.masked_fill(ignored, -100),
                                                upstream, chunk_size=8)
    assert logp[ignored].tolist() == [0.0] * 4 and entropy[ignored].tolist() == [0.0] * 4
    assert g_h[ignored].abs().sum() == 0
    # The kept rows equal the naive path on the kept rows alone (values and both gradients).
    keep = ~ignored
    kept_upstream = (upstream[0][keep], upstream[1][keep])
    ref = _values_and_grads(lambda h, w, t: token_logprobs_reference(h[keep], w, t[keep]), hidden, weight, targets,
                            kept_upstream)
    fused = _values_and_grads(lambda h, w, t: tuple(x[keep] for x in token_logprobs(h, w, t, chunk_size=8)),
                              hidden, weight, targets.masked_fill(ignored, -100), kept_upstream)
    for a, b in zip(fused, ref):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


def test_out_of_range_targets_are_refused_unless_ignored():
    hidden, weight = torch.randn(3, 4), torch.randn(5, 4)
    with pytest.raises(ValueError, match=r"token ids in \[0, 5\)"):
        token_logprobs(hidden, weight, torch.tensor([0, 5, 1]))
    with pytest.raises(ValueError, match="ignore_index=None"):
        token_logprobs(hidden, weight, torch.tensor([0, -100, 1]), ignore_index=None)


def test_zero_tokens_give_empty_outputs_and_zero_gradients():
    hidden = torch.randn(0, 4, requires_grad=True)
    weight = torch.randn(5, 4, requires_grad=True)
    logp, entropy = token_logprobs(hidden, weight, torch.zeros(0, dtype=torch.long))
    assert logp.shape == entropy.shape == (0,) and logp.dtype == torch.float32
    (logp.sum() + entropy.sum()).backward()
    assert weight.grad is not None and weight.grad.abs().sum() == 0 and hidden.grad.shape == (0, 4)


@pytest.mark.parametrize("hidden_dtype, weight_dtype", [(torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)])
def test_mixed_dtypes_compute_in_the_wider_one_and_return_grads_in_each_own(hidden_dtype, weight_dtype):
    hidden, weight, targets, upstream = _inputs(dtype=torch.float32)
    h = hidden.detach().to(hidden_dtype).requires_grad_()
    w = weight.detach().to(weight_dtype).requires_grad_()
    logp, entropy, g_h, g_w = _values_and_grads(token_logprobs, h, w, targets, upstream, chunk_size=8)
    assert logp.dtype == torch.float32 and g_h.dtype == hidden_dtype and g_w.dtype == weight_dtype
    ref = _values_and_grads(token_logprobs_reference, h.float(), w.float(), targets,
                            (upstream[0].float(), upstream[1].float()))
    torch.testing.assert_close(logp, ref[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(g_w.float(), ref[3], atol=0.05, rtol=0.02)


def test_weight_gradient_accumulates_in_place_across_chunks(monkeypatch):
    # The backward adds each chunk into one [V, H] buffer: no chunk returns a [V, H] tensor.
    shapes = []
    original = kernels._chunk_grad_logits

    def spy(*args):
        out = original(*args)
        shapes.append(tuple(out.shape))
        return out

    monkeypatch.setattr(kernels, "_chunk_grad_logits", spy)
    hidden, weight, targets, upstream = _inputs(n=20, v=31)
    _values_and_grads(token_logprobs, hidden, weight, targets, upstream, chunk_size=8)
    assert shapes == [(8, 31), (8, 31), (4, 31)]


# -- policy loss ----------------------------------------------------------------------------
def test_policy_loss_matches_a_hand_computed_example():
    logp = torch.tensor([0.0, 0.5, -0.5, 0.1], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(4, dtype=torch.float64)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    loss, stats = policy_loss_reference(logp, old, None, adv, mask, epsilon_low=0.2, epsilon_high=0.3)
    # token 0: ratio 1 -> -1;  token 1: ratio e^.5 > 1.3, A>0 -> clipped -1.3;  token 2: ratio e^-.5 < .8, A<0 -> -(-.8)
    expected = (-1.0 - 1.3 + 0.8) / 3
    assert float(loss) == pytest.approx(expected)
    assert float(stats["clip_fraction"]) == pytest.approx(2 / 3)
    (grad,) = torch.autograd.grad(loss, logp)
    assert grad.tolist() == pytest.approx([-1 / 3, 0.0, 0.0, 0.0])  # clipped tokens and masked token: no gradient


def test_k3_kl_is_zero_at_the_reference_and_positive_elsewhere():
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    zeros, ones = torch.zeros(3), torch.ones(3)
    _, stats = policy_loss_reference(logp, logp.detach(), logp.detach(), zeros, ones, kl_coef=0.1)
    assert float(stats["kl"]) == 0.0
    ref = torch.tensor([-1.5, -1.0, -0.5])
    loss, stats = policy_loss_reference(logp, logp.detach(), ref, zeros, ones, kl_coef=0.1)
    diff = ref - logp.detach()
    assert float(stats["kl"]) == pytest.approx(float((diff.exp() - diff - 1).mean()))
    assert float(stats["kl"]) > 0 and float(loss) == pytest.approx(0.1 * float(stats["kl"]))


def test_micro_batches_with_a_global_normalizer_equal_the_full_batch():
    g = torch.Generator().manual_seed(1)
    logp = torch.randn(20, generator=g, requires_grad=True)
    old, ref, adv = torch.randn(20, generator=g), torch.randn(20, generator=g), torch.randn(20, generator=g)
    mask = torch.ones(20)
    full, _ = policy_loss_reference(logp, old, ref, adv, mask, kl_coef=0.05)
    (full_grad,) = torch.autograd.grad(full, logp)
    parts = [policy_loss_reference(logp[s], old[s], ref[s], adv[s], mask[s], kl_coef=0.05, normalizer=20.0)[0]
             for s in (slice(0, 7), slice(7, 20))]
    (part_grad,) = torch.autograd.grad(sum(parts), logp)
    torch.testing.assert_close(sum(parts), full)
    torch.testing.assert_close(part_grad, full_grad)


# -- compile with fallback --------------------------------------------------------------------
def _failing_backend(graph_module, example_inputs):
    raise RuntimeError("simulated: no C++ compiler")


def test_compile_failure_at_first_call_falls_back_to_eager_with_one_warning():
    def double_plus_one(x):
        return x * 2 + 1

    fn = compiled(double_plus_one, backend=_failing_backend)
    with pytest.warns(UserWarning, match="torch.compile failed for double_plus_one"):
        assert fn(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning: it stays eager
        assert fn(torch.zeros(2)).tolist() == [1.0, 1.0]


def test_compile_unavailable_falls_back_to_eager(monkeypatch):
    def unavailable(*args, **kwargs):
        raise RuntimeError("simulated: torch.compile is not supported on this Python")

    monkeypatch.setattr(torch, "compile", unavailable)
    with pytest.warns(UserWarning, match="torch.compile unavailable"):
        fn = compiled(lambda x: x + 1)
    assert fn(torch.ones(1)).item() == 2.0


def test_kernels_fall_back_when_their_compiled_versions_fail(monkeypatch):
    monkeypatch.setattr(kernels, "_compiled_policy_loss", compiled(policy_loss_reference, backend=_failing_backend))
    logp, old, adv, mask = torch.randn(5), torch.randn(5), torch.randn(5), torch.ones(5)
    with pytest.warns(UserWarning, match="running eagerly"):
        loss, _ = policy_loss(logp, old, None, adv, mask, compile=True)
    torch.testing.assert_close(loss, policy_loss_reference(logp, old, None, adv, mask)[0])


@pytest.mark.slow  # inductor compiles C++ for each kernel: ~30-60 s on 2 CPU cores
def test_compiled_kernels_match_eager():
    hidden, weight, targets, upstream = _inputs(n=300, h=32, v=257, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a silent fallback to eager would make this test vacuous
        fused = _values_and_grads(token_logprobs, hidden, weight, targets, upstream, chunk_size=128, compile=True)
    naive = _values_and_grads(token_logprobs_reference, hidden, weight, targets, upstream)
    for a, b in zip(fused, naive):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)

    g = torch.Generator().manual_seed(2)
    logp = torch.randn(64, generator=g, requires_grad=True)
    old, ref, adv = torch.randn(64, generator=g), torch.randn(64, generator=g), torch.randn(64, generator=g)
    mask = (torch.rand(64, generator=g) > 0.3).float()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss_c, stats_c = policy_loss(logp, old, ref, adv, mask, kl_coef=0.1, compile=True)
    loss_e, stats_e = policy_loss_reference(logp, old, ref, adv, mask, kl_coef=0.1)
    torch.testing.assert_close(loss_c, loss_e, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.autograd.grad(loss_c, logp)[0], torch.autograd.grad(loss_e, logp)[0],
                               atol=1e-5, rtol=1e-5)
