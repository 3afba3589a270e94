"""mixp.torch: a PyTorch Linear in mixp's FP8/MX gives mixp's own FP8 Linear's forward values
(amp::fp8_linear through mixp._mixp.fp8_linear), and the state follows TE's delayed scaling."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import mixp  # noqa: E402
import mixp.torch as mt  # noqa: E402
from mixp import _mixp  # noqa: E402


def data(seed=0, batch=24, k=96, n=40):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, k, generator=g) * 3
    lin = torch.nn.Linear(k, n)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=g) * 0.05)
        lin.bias.copy_(torch.randn(n, generator=g))
    return x, lin


@pytest.mark.parametrize("precision", ["fp8", "fp8-current", "mxfp8"])
def test_forward_equals_mixp_fp8_linear(precision):
    x, lin = data()
    y = mt.Fp8Linear(lin, precision)(x).detach().numpy()
    ref = _mixp.fp8_linear(x.numpy(), lin.weight.detach().numpy(), lin.bias.detach().numpy(), precision)
    # exact products of FP8 codes; only the fp32 summation order differs (oneDNN vs PyTorch)
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=2e-6)
    # and FP8 is not a no-op: the bf16/fp32 result differs by far more
    full = lin(x).detach().numpy()
    assert np.max(np.abs(full - ref)) > 100 * np.max(np.abs(y - ref)) + 1e-4


def test_fp8_cast_is_mixp_round_saturating():
    x = np.random.default_rng(1).standard_normal(5000).astype(np.float32) * 100
    codes, amax = _mixp.fp8_cast(x, "fp8_e4m3", 3.5)
    assert amax == np.max(np.abs(x))
    want = mixp.round(x * np.float32(3.5), "fp8_e4m3", saturate=True)
    np.testing.assert_array_equal(codes, want)


def test_delayed_scaling_follows_te_state_machine():
    x, lin = data(2)
    layer = mt.Fp8Linear(lin, "fp8", amax_history_len=4)
    amaxes = []
    for step in range(3):
        xs = x * (step + 1)
        layer(xs).sum().backward()
        amaxes.append(float(xs.abs().max()))
        st = layer.meta.states["input"]
        want = _mixp.fp8_scale_from_amax(max(amaxes), "fp8_e4m3", 0, 1.0)
        assert st.scale == pytest.approx(want, rel=0, abs=0)
        assert st.amax_history[0] == 0  # slot 0 zeroed for the next pass
    g = layer.meta.states["grad_output"]
    assert g.scale != 1.0  # updated after each backward, from E5M2's max
    with torch.no_grad():  # evaluation leaves the state alone
        before = layer.meta.states["input"].amax_history
        layer.eval()(x)
        assert layer.meta.states["input"].amax_history == before


def test_backward_matches_te_formulas():
    x, lin = data(3)
    x.requires_grad_(True)
    meta = mt.Fp8Meta("fp8-current")
    y = mt.fp8_linear(x, lin.weight, lin.bias, meta)
    gy = torch.randn_like(y)
    y.backward(gy)
    qg, sg = meta.cast(gy, "grad_output")
    qw, sw = meta.cast(lin.weight, "weight")
    qx, sx = meta.cast(x, "input")
    np.testing.assert_allclose(x.grad.numpy(), ((qg @ qw) * float(sg * sw)).numpy(), rtol=1e-6)
    np.testing.assert_allclose(lin.weight.grad.numpy(), ((qg.t() @ qx) * float(sg * sx)).numpy(), rtol=1e-6)
    np.testing.assert_allclose(lin.bias.grad.numpy(), gy.sum(0).numpy(), rtol=1e-6)


def test_convert_skips_and_trains():
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("fc1", torch.nn.Linear(16, 32))
    model.add_module("act", torch.nn.ReLU())
    model.add_module("lm_head", torch.nn.Linear(32, 4))
    keys = set(model.state_dict())
    mt.convert(model, precision="fp8", skip=["lm_head"])
    assert isinstance(model.fc1, mt.Fp8Linear) and type(model.lm_head) is torch.nn.Linear
    assert set(model.state_dict()) == keys
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    x, t = torch.randn(64, 16), torch.randint(0, 4, (64,))
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), t)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.8
    with pytest.raises(ValueError):
        mt.convert(model, precision="fp9")
