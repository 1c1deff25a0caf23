"""Device paths on Vulkan, float32 (run by tests/optim/test_device_paths.py in its own process)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import sciml as sm  # noqa: E402

sm.init(arch=os.environ.get("SCIML_ARCH", "vulkan"), dtype="float32", seed=0)
from sciml import backend  # noqa: E402
from sciml.kernels import lbfgs as KL  # noqa: E402
from sciml.kernels import optim as KO  # noqa: E402

F = "float32"
rng = np.random.default_rng(0)


def dev(a, dt=F):
    return backend.from_numpy(np.asarray(a), dt)


def host(b, n, dt=F):
    return backend.to_numpy(b, (n,), dt).astype(np.float64)


# grouped Adam: 12 tensors (two launches) against numpy
sizes = [1, 5, 64, 300] * 3
arrs = [[rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n), rng.random(n)] for n in sizes]
bufs = [[dev(a) for a in t] for t in arrs]
sc, plain = KO.adam_scalars(1e-2, 0.9, 0.999, 1e-8, 0.1, 0.001)
KO.update_many("adam", F, [(b, n) for b, n in zip(bufs, sizes)], sc, plain)
for (p, g, m, v), b, n in zip(arrs, bufs, sizes):
    m2, v2 = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
    p2 = p - sc[0] * m2 / (np.sqrt(v2) * sc[4] + 1e-8)
    for ref, bb in ((p2, b[0]), (m2, b[2]), (v2, b[3])):
        np.testing.assert_allclose(host(bb, n), ref, rtol=2e-5, atol=2e-6)

# gather of scalars
vals = [dev([float(k) + 0.5]) for k in range(40)]
out = backend.zeros(50, F)
KO.gather_scalars(out, 3, vals, F)
assert np.array_equal(host(out, 50)[3:43], np.arange(40) + 0.5)

# device L-BFGS kernels against numpy
m, n = 3, 2000
S, Y = backend.zeros(m * n, F), backend.zeros(m * n, F)
st, ist, alpha, R = backend.zeros(m + 1, F), backend.zeros(m + 2, "int32"), backend.zeros(2 * m, F), backend.zeros(KL.RN, F)
Sh, Yh = np.zeros((m, n)), np.zeros((m, n))
slots, rho, gamma = [], np.zeros(m), 1.0
x, g = rng.standard_normal(n), rng.standard_normal(n)
for it in range(5):
    x_new = x + 0.1 * rng.standard_normal(n)
    g_new = g + 0.5 * (x_new - x) + 0.05 * rng.standard_normal(n)
    xf, xnf, gf, gnf = (a.astype(np.float32).astype(np.float64) for a in (x, x_new, g, g_new))
    KL.lbfgs_push(dev(x_new), dev(x), dev(g_new), dev(g), S, Y, st, ist, R, m, n, F)
    s, y = xnf - xf, gnf - gf
    slot = slots[0] if len(slots) == m else len(slots)
    Sh[slot], Yh[slot] = s, y
    slots = slots[1:] + [slot] if len(slots) == m else slots + [slot]
    rho[slot], gamma = 1 / (s @ y), (s @ y) / (y @ y)
    ih = backend.to_numpy(ist, (m + 2,), "int32")
    assert list(ih[:ih[m]]) == slots, (ih, slots)
    d = backend.empty(n, F)
    KL.lbfgs_direction(dev(g_new), S, Y, st, ist, alpha, d, R, m, n, F)
    q = -gnf.copy()
    al = {}
    for r in reversed(slots):
        al[r] = rho[r] * Sh[r] @ q
        q -= al[r] * Yh[r]
    q *= gamma
    for r in slots:
        q += (al[r] - rho[r] * Yh[r] @ q) * Sh[r]
    np.testing.assert_allclose(host(d, n), q, rtol=2e-3, atol=2e-4 * np.abs(q).max())
    rr = host(R, KL.RN)
    np.testing.assert_allclose(rr[KL.R_GTD], gnf @ q, rtol=1e-3)
    x, g = x_new, g_new

# split / join
sizes = [3, 1, 7, 5]
flat = rng.standard_normal(16)
pieces = [backend.zeros(k, F) for k in sizes]
KL.split(dev(flat), pieces, sizes, F)
back = backend.zeros(16, F)
KL.join(pieces, back, sizes, F)
np.testing.assert_allclose(host(back, 16), flat, rtol=1e-6)

# lbfgs on Rosenbrock (functional and the shell, with a state-dict round trip)
from sciml.models import Parameter  # noqa: E402
from sciml.optim import LBFGS, lbfgs  # noqa: E402


def rosen(x):
    x = x[0] if isinstance(x, list) else x
    return ((1 - x[:-1]) ** 2).sum() + 100 * ((x[1:] - x[:-1] ** 2) ** 2).sum()


x0 = np.array([-1.2, 1.0, -0.5, 0.8, 1.1], np.float32)
r = lbfgs(rosen, sm.tensor(x0), history=3, max_iter=200, gtol=1e-5)
np.testing.assert_allclose(r.params.numpy(), 1.0, atol=2e-3)
assert r.loss < 1e-6, r
opt = LBFGS([Parameter(sm.tensor(x0))], history=3, max_iter=8)
opt.step(rosen)
sd = opt.state_dict()
opt2 = LBFGS([Parameter(sm.tensor(x0))], history=3, max_iter=8)
opt2.load_state_dict(sd)
opt2._leaves[0]._assign(opt._leaves[0])
a, b = opt.step(rosen), opt2.step(rosen)
assert a.loss == b.loss and a.iterations == b.iterations, (a, b)
print("OK vulkan")
