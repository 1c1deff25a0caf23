"""Multi-head attention and the Transformer encoder layer, as PyTorch has them (names, layouts, defaults):
one GEMM for the q, k, v projections (self-attention) and the fused attention primitive
(``_attn_fused.attention``: one kernel forward, one backward, no head transposes); differentiable to any order.

    >>> mha = sm.models.MultiheadAttention(32, 4, batch_first=True)
    >>> y, w = mha(x, x, x)                   # x (batch, seq, 32); w (batch, seq, seq) averaged over heads
    >>> enc = sm.models.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
"""
from __future__ import annotations

import math

import numpy as np

from ..autodiff.ops import matmul, reshape, softmax, transpose, where
from ..autodiff.ops.conv import bias_act
from ..autodiff.tensor import Tensor, as_tensor, tensor
from . import _check as C
from . import init as I
from .layers import Linear, _activation
from .module import Module, Parameter
from ._attn_fused import attention, attention_weights
from .norm import Dropout, LayerNorm, _dropout_mask

__all__ = ["MultiheadAttention", "TransformerEncoderLayer", "scaled_dot_product_attention"]


def _mask_scores(scores, mask, where_):
    """scores + mask (float, additive) or -inf where mask is True (bool)."""
    m = mask.numpy() if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype == np.bool_ or (isinstance(mask, Tensor) and mask.dtype == "bool"):
        return where(tensor(np.broadcast_to(m, scores.shape).astype(bool)), float("-inf"), scores)
    if m.dtype.kind != "f":
        raise TypeError(f"{where_}: mask has dtype {m.dtype}; expected bool (True = masked) or float (added).")
    return scores + tensor(m, scores.dtype)


def _additive(m, name):
    """A bool mask (True = not attended) as 0 / -inf, a float mask as is."""
    if m.dtype == np.bool_:
        return np.where(m, -np.inf, 0.0)
    if m.dtype.kind != "f":
        raise TypeError(f"MultiheadAttention: {name} has dtype {m.dtype}; expected bool (True = masked) or float "
                        "(added).")
    return m.astype(np.float64)


def scaled_dot_product_attention(q, k, v, attn_mask=None, dropout=None):
    """softmax(q k^T / sqrt(d) + mask) v over the last two axes of (..., L, d), (..., S, d), (..., S, dv).
    Returns (output (..., L, dv), weights (..., L, S))."""
    d = q.shape[-1]
    scores = matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(d))
    if attn_mask is not None:
        scores = _mask_scores(scores, attn_mask, "scaled_dot_product_attention")
    w = softmax(scores, -1)
    wd = dropout(w) if dropout is not None else w
    return matmul(wd, v), w


class MultiheadAttention(Module):
    """Multi-head attention (Vaswani et al. 2017), PyTorch's module: ``in_proj_weight`` (3E, E) Glorot-uniform,
    ``in_proj_bias`` zeros, ``out_proj`` a Linear (bias zeros).

    Args:
        embed_dim, num_heads: E and h (E divisible by h).
        dropout: on the attention weights (training only).
        bias: projection biases.
        batch_first: inputs (batch, seq, E) instead of (seq, batch, E).
    forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True) -> (output, weights or None): masks as PyTorch (bool True = not attended, or
    float added to the scores); key_padding_mask (batch, S); attn_mask (L, S) or (batch * h, L, S).
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, batch_first=False, *, seed=None, dtype=None):
        self.embed_dim = C.pos_int("MultiheadAttention", "embed_dim", embed_dim)
        self.num_heads = C.pos_int("MultiheadAttention", "num_heads", num_heads)
        if self.embed_dim % self.num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim={embed_dim} is not divisible by num_heads={num_heads}.")
        self.head_dim = self.embed_dim // self.num_heads
        self.batch_first = C.boolean("MultiheadAttention", "batch_first", batch_first)
        s = I.split_seed(I.resolve_seed(seed, "MultiheadAttention(seed)"), 3)
        E = self.embed_dim
        # PyTorch: xavier_uniform_ on the (3E, E) matrix as a whole
        a = math.sqrt(6.0 / (E + 3 * E))
        self.in_proj_weight = Parameter(I.uniform((3 * E, E), seed=s[0], low=-a, high=a, dtype=dtype))
        self.in_proj_bias = Parameter(I.zeros((3 * E,), dtype=self.in_proj_weight.dtype)) if bias else None
        self.out_proj = Linear(E, E, bias=bias, seed=s[1], dtype=dtype)
        if self.out_proj.bias is not None:
            self.out_proj.bias._assign(np.zeros(E))
        self.dropout = C.prob("MultiheadAttention", "dropout", dropout)
        self.attn_drop = Dropout(self.dropout, seed=s[2]) if self.dropout else None

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True):
        self_attn = query is key and key is value
        q, k, v = as_tensor(query), as_tensor(key), as_tensor(value)
        E, h, d = self.embed_dim, self.num_heads, self.head_dim
        for nm, t in (("query", q), ("key", k), ("value", v)):
            if t.ndim != 3 or t.shape[2] != E:
                lead = "(batch, seq, " if self.batch_first else "(seq, batch, "
                raise ValueError(f"MultiheadAttention(embed_dim={E}): {nm} has shape {t.shape}; expected {lead}{E}).")
        if not self.batch_first:
            q = transpose(q, (1, 0, 2))
            k, v = (q, q) if self_attn else (transpose(k, (1, 0, 2)), transpose(v, (1, 0, 2)))
        B, L, S = q.shape[0], q.shape[1], k.shape[1]
        if k.shape[0] != B or v.shape[:2] != k.shape[:2]:
            raise ValueError(f"MultiheadAttention: query, key, value shapes {query.shape}, {key.shape}, {value.shape} "
                             "do not agree (same batch; key and value the same length).")
        if B * L * S == 0:
            raise ValueError(f"MultiheadAttention: empty batch or sequence (query {tuple(query.shape)}, key "
                             f"{tuple(key.shape)}); every axis must have at least one entry.")
        mask = self._mask(attn_mask, key_padding_mask, B, L, S, q.dtype)
        W, b = self.in_proj_weight, self.in_proj_bias
        if self_attn:  # one GEMM for q, k and v; the fused attention reads the heads in place
            y = matmul(reshape(q, (B * L, E)), W, transpose_b=True)
            qkv = reshape(y if b is None else bias_act(y, b), (B, L, 3 * E))
            ins = (qkv,)
        else:
            def proj(t, i, n):
                y = matmul(reshape(t, (B * n, E)), W[i * E:(i + 1) * E], transpose_b=True)
                return reshape(y if b is None else bias_act(y, b[i * E:(i + 1) * E]), (B, n, E))
            ins = (proj(q, 0, L), proj(k, 1, S), proj(v, 2, S))
        drop = None
        if self.attn_drop is not None and self.training:
            drop = _dropout_mask(self.attn_drop.rng_state, shape=(B, h, L, S), dtype=q.dtype, p=self.dropout)
        out = attention(*ins, num_heads=h, mask=mask, dropout=drop)                 # (B, L, E)
        out = self.out_proj(out)
        if not self.batch_first:
            out = transpose(out, (1, 0, 2))
        if not need_weights:
            return out, None
        w = attention_weights(*ins, num_heads=h, mask=mask)                          # (B, h, L, S)
        return out, (w.mean(1) if average_attn_weights else w)

    def _mask(self, attn_mask, key_padding_mask, B, L, S, dtype):
        """attn_mask and key_padding_mask as one additive float mask (B or 1, h or 1, L, S), or None."""
        h = self.num_heads
        mask = None
        if attn_mask is not None:
            m = attn_mask.numpy() if isinstance(attn_mask, Tensor) else np.asarray(attn_mask)
            if m.shape == (L, S):
                m = m[None, None]
            elif m.shape == (B * h, L, S):
                m = m.reshape(B, h, L, S)
            else:
                raise ValueError(f"MultiheadAttention: attn_mask has shape {m.shape}; expected ({L}, {S}) or "
                                 f"({B * h}, {L}, {S}).")
            mask = _additive(m, "attn_mask")
        if key_padding_mask is not None:
            kp = key_padding_mask.numpy() if isinstance(key_padding_mask, Tensor) else np.asarray(key_padding_mask)
            if kp.shape != (B, S):
                raise ValueError(f"MultiheadAttention: key_padding_mask has shape {kp.shape}; expected ({B}, {S}).")
            kp = _additive(kp[:, None, None, :], "key_padding_mask")
            mask = kp if mask is None else mask + kp
        if mask is None:
            return None
        if mask.shape[2:] != (L, S):
            mask = np.broadcast_to(mask, mask.shape[:2] + (L, S))
        return tensor(np.ascontiguousarray(mask), dtype)

    def extra_repr(self):
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


class TransformerEncoderLayer(Module):
    """PyTorch's TransformerEncoderLayer: self-attention and a feed-forward block (linear1, activation,
    dropout, linear2), each with a residual and LayerNorm (post-norm; ``norm_first=True`` pre-norm).

    Args: d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu" (or "gelu" / a function),
    layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True.
    forward(src, src_mask=None, src_key_padding_mask=None) -> same shape as src.
    """

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, *, seed=None, dtype=None):
        d_model = C.pos_int("TransformerEncoderLayer", "d_model", d_model)
        dff = C.pos_int("TransformerEncoderLayer", "dim_feedforward", dim_feedforward)
        p = C.prob("TransformerEncoderLayer", "dropout", dropout)
        s = I.split_seed(I.resolve_seed(seed, "TransformerEncoderLayer(seed)"), 6)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=p, bias=bias, batch_first=batch_first, seed=s[0],
                                            dtype=dtype)
        self.linear1 = Linear(d_model, dff, bias=bias, seed=s[1], dtype=dtype)
        self.linear2 = Linear(dff, d_model, bias=bias, seed=s[2], dtype=dtype)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, dtype=dtype)
        self.dropout = Dropout(p, seed=s[3])
        self.dropout1 = Dropout(p, seed=s[4])
        self.dropout2 = Dropout(p, seed=s[5])
        self.activation = _activation(activation)
        self.norm_first = C.boolean("TransformerEncoderLayer", "norm_first", norm_first)

    def _sa(self, x, mask, kpm):
        return self.dropout1(self.self_attn(x, x, x, key_padding_mask=kpm, need_weights=False, attn_mask=mask)[0])

    def _ff(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None):
        x = as_tensor(src)
        if self.norm_first:
            x = x + self._sa(self.norm1(x), src_mask, src_key_padding_mask)
            return x + self._ff(self.norm2(x))
        x = self.norm1(x + self._sa(x, src_mask, src_key_padding_mask))
        return self.norm2(x + self._ff(x))
