"""Textbook first-order updates in numpy (PyTorch's conventions), shared by the optimizer tests."""
import numpy as np


def textbook(kind, kw, p0, gs):
    """``p0`` after the updates of optimizer ``kind`` with options ``kw`` for gradients ``gs``, in float64."""
    p = p0.astype(np.float64).copy()
    m = np.zeros_like(p); v = np.zeros_like(p); b = np.zeros_like(p)
    lr, wd = kw.get("lr"), kw.get("weight_decay", 0.0)
    for t, g in enumerate(gs, start=1):
        g = g.astype(np.float64) * kw.get("_gscale", 1.0)
        if kind == "sgd":
            g = g + wd * p
            mu, damp = kw.get("momentum", 0.0), kw.get("dampening", 0.0)
            d = g
            if mu:
                b = g.copy() if t == 1 else mu * b + (1 - damp) * g
                d = g + mu * b if kw.get("nesterov") else b
            p = p - lr * d
        elif kind in ("adam", "adamw"):
            b1, b2 = kw.get("betas", (0.9, 0.999)); eps = kw.get("eps", 1e-8)
            if kind == "adamw":
                p = p * (1 - lr * wd)
            else:
                g = g + wd * p
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            p = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
        elif kind == "rmsprop":
            a = kw.get("alpha", 0.99); eps = kw.get("eps", 1e-8); mu = kw.get("momentum", 0.0)
            g = g + wd * p
            v = a * v + (1 - a) * g * g
            d = g / (np.sqrt(v) + eps)
            if mu:
                b = mu * b + d
                d = b
            p = p - lr * d
        elif kind == "adagrad":
            g = g + wd * p
            v = v + g * g
            p = p - lr * g / (np.sqrt(v) + kw.get("eps", 1e-10))
    return p

