"""sciml.random: Threefry known answers, key algebra, statistics (moments, KS with fixed keys), jit, errors.
Vulkan draws are checked bit for bit in tests/arrays_vulkan_check.py."""
import numpy as np
import pytest
from scipy import stats

import sciml as sm
from sciml import random as R

M32 = 0xFFFFFFFF


def threefry_ref(k0, k1, c0, c1):
    """Threefry-2x32-20 in plain Python (Salmon et al. 2011)."""
    rot = (13, 15, 26, 6, 17, 29, 16, 24)
    ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
    x0, x1 = (c0 + ks[0]) & M32, (c1 + ks[1]) & M32
    for g in range(5):
        for r in range(4):
            x0 = (x0 + x1) & M32
            s = rot[(g % 2) * 4 + r]
            x1 = ((x1 << s) | (x1 >> (32 - s))) & M32
            x1 ^= x0
        x0 = (x0 + ks[(g + 1) % 3]) & M32
        x1 = (x1 + ks[(g + 2) % 3] + g + 1) & M32
    return x0, x1


def words(t):
    return [int(w) for w in np.asarray(t.numpy(), np.int32).view(np.uint32).reshape(-1)]


def test_threefry_known_answer_and_split():
    # Random123's known-answer test for threefry2x32_20
    assert threefry_ref(0x13198A2E, 0x03707344, 0x243F6A88, 0x85A308D3) == (0xC4923A9C, 0x483DF7A0)
    k = R.key(0x13198A2E03707344)
    assert words(k) == [0x13198A2E, 0x03707344]
    ks = R.split(k, 3)
    want = [w for i in range(3) for w in threefry_ref(0x13198A2E, 0x03707344, 1, i)]
    assert words(ks) == want
    assert words(R.fold_in(k, 7)) == list(threefry_ref(0x13198A2E, 0x03707344, 2, 7))
    u = R.uniform(k, (4,), dtype="float32").numpy()
    want_u = [(threefry_ref(0x13198A2E, 0x03707344, 0, i)[0] >> 8) / 2.0 ** 24 for i in range(4)]
    np.testing.assert_array_equal(u, np.float32(want_u))


def test_same_key_same_draw_new_key_new_draw():
    k = R.key(1)
    a, b = R.normal(k, (50,)).numpy(), R.normal(k, (50,)).numpy()
    np.testing.assert_array_equal(a, b)
    k1, k2 = R.split(k)
    assert not np.allclose(R.normal(k1, (50,)).numpy(), R.normal(k2, (50,)).numpy())
    assert words(k1) != words(k2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_statistics(dtype):
    k = R.key(2024)
    ks = R.split(k, 6)
    n = 5000
    u = R.uniform(ks[0], (n,), dtype).numpy()
    assert u.dtype == np.dtype(dtype) and u.min() >= 0 and u.max() < 1
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    z = R.normal(ks[1], (n,), dtype).numpy()
    assert abs(z.mean()) < 4 / np.sqrt(n) and abs(z.std() - 1) < 0.03
    assert stats.kstest(z, "norm").pvalue > 1e-3
    t = R.truncated_normal(ks[2], -0.5, 1.5, (n,), dtype).numpy()
    assert t.min() >= -0.5 and t.max() <= 1.5
    assert stats.kstest(t, stats.truncnorm(-0.5, 1.5).cdf).pvalue > 1e-3
    u2 = R.uniform(ks[3], (n,), dtype, minval=-2.0, maxval=3.0).numpy()
    assert u2.min() >= -2 and u2.max() < 3 and abs(u2.mean() - 0.5) < 0.05


def test_discrete_draws():
    ks = R.split(R.key(7), 5)
    n = 5000
    b = R.bernoulli(ks[0], 0.3, (n,)).numpy()
    assert b.dtype == np.bool_ and abs(b.mean() - 0.3) < 0.02
    r = R.randint(ks[1], (n,), -3, 4).numpy()
    assert r.dtype == np.int32 and r.min() == -3 and r.max() == 3
    assert stats.chisquare(np.bincount(r + 3)).pvalue > 1e-3
    p = R.permutation(ks[2], 100).numpy()
    assert sorted(p.tolist()) == list(range(100)) and (p != np.arange(100)).any()
    x = sm.tensor(np.arange(12.0).reshape(4, 3))
    px = R.permutation(ks[3], x).numpy()
    assert sorted(px[:, 0].tolist()) == [0, 3, 6, 9] and (px[:, 1] - px[:, 0] == 1).all()
    logits = np.log(np.array([0.2, 0.5, 0.3]))
    c = R.categorical(ks[4], sm.tensor(logits), shape=(n,)).numpy()
    freq = np.bincount(c, minlength=3) / n
    np.testing.assert_allclose(freq, [0.2, 0.5, 0.3], atol=0.02)
    cb = R.categorical(ks[4], sm.tensor(np.log([[0.999, 0.001], [0.001, 0.999]]))).numpy()
    assert cb.shape == (2,)


def test_draws_inside_jit_use_the_key_argument():
    f = sm.jit(lambda key, x: x * 2.0 + R.normal(key, x.shape))
    x = sm.tensor(np.zeros(5))
    outs = []
    for s in range(3):
        k = R.key(s)
        y = f(k, x).numpy()
        np.testing.assert_array_equal(y, R.normal(k, (5,)).numpy())
        outs.append(y)
    assert not np.allclose(outs[0], outs[1]) and not np.allclose(outs[1], outs[2])

    def dropout(key, x):
        keep = R.bernoulli(R.split(key)[1], 0.5, x.shape)
        return sm.where(keep, x / 0.5, 0.0)
    g = sm.jit(dropout)
    x = sm.tensor(np.ones(64))
    d0, d1 = g(R.key(0), x).numpy(), g(R.key(1), x).numpy()
    np.testing.assert_array_equal(d0, dropout(R.key(0), x).numpy())
    assert (d0 != d1).any() and set(np.unique(d0)) <= {0.0, 2.0}


def test_errors():
    with pytest.raises(TypeError, match="expected a key"):
        R.normal(sm.tensor([1.0, 2.0]), (3,))
    with pytest.raises(TypeError, match="Pick one row"):
        R.normal(R.split(R.key(0)), (3,))
    with pytest.raises(TypeError, match="seed"):
        R.key(1.5)
    with pytest.raises(ValueError, match="minval"):
        R.randint(R.key(0), (3,), 5, 5)
    with pytest.raises(ValueError, match="probability"):
        R.bernoulli(R.key(0), 1.5)
    with pytest.raises(ValueError, match="lower < upper"):
        R.truncated_normal(R.key(0), 1.0, -1.0)
