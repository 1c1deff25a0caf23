"""Recurrent layers as PyTorch has them: RNN, LSTM, GRU (several layers, bidirectional, batch_first) and their
cells, as fused Taichi kernels (differentiable to any order).

Parameters carry PyTorch's names and layouts (``weight_ih_l0`` (gates * hidden, input), ``weight_hh_l0``,
``bias_ih_l0``, ``bias_hh_l0``, ``..._reverse`` for the backward direction; gate order i, f, g, o for the LSTM
and r, z, n for the GRU) and PyTorch's initialisation U(-1/sqrt(hidden), 1/sqrt(hidden)), so a PyTorch
``state_dict`` loads as is (:func:`sciml.serialization.from_torch_state_dict`). Each direction of each
layer is one fused primitive (``_rnn_fused.rnn_layer``): one GEMM for all steps' input projections, per step
one GEMM and one cell kernel, and in the backward pass one GEMM per weight over all steps (the float32 LSTM on
CPU: the whole step loop in one kernel each way, ``kernels/lstm_host.py``); the cells run the same primitive
with one step. Derivatives of every order (higher orders through the same recurrence in
composed ops).

    >>> lstm = sm.models.LSTM(8, 32, num_layers=2, batch_first=True)
    >>> out, (h, c) = lstm(x)                 # x (batch, time, 8) -> out (batch, time, 32)
"""
from __future__ import annotations

import math

from ..autodiff.ops import concat, reshape, stack, transpose
from ..autodiff.tensor import Tensor, as_tensor, zeros
from . import _check as C
from . import init as I
from .module import Module, Parameter

__all__ = ["RNNCell", "LSTMCell", "GRUCell", "RNN", "LSTM", "GRU"]

_GATES = {"RNN": 1, "LSTM": 4, "GRU": 3}


def _uniform(shape, hidden, seed, dtype):
    b = 1.0 / math.sqrt(hidden)
    return Parameter(I.uniform(shape, seed=seed, low=-b, high=b, dtype=dtype))


def _kind_of(kind, nonlinearity):
    return "RNN_" + nonlinearity.upper() if kind == "RNN" else kind


def _fused_layer(kind, x, W_ih, b_ih, W_hh, b_hh, h0, c0, reverse=False, batch_first=False, x_batch_first=False):
    """One direction of one layer through the fused primitive (``_rnn_fused.rnn_layer``): x (T, B, I) (or
    (B, T, I) with ``x_batch_first``) -> (y (T, B, H) or (B, T, H), h_T, c_T or None)."""
    from ._rnn_fused import rnn_layer, rnn_outputs
    T, B = (x.shape[1], x.shape[0]) if x_batch_first else x.shape[:2]
    H = W_hh.shape[1]
    if kind == "GRU":
        b = concat([b_ih, b_hh], 0) if b_ih is not None else zeros((6 * H,), x.dtype)
    else:
        b = b_ih + b_hh if b_ih is not None else zeros((W_hh.shape[0],), x.dtype)
    P = rnn_layer(x, W_ih, b, W_hh, h0, c0, kind=kind, reverse=reverse, batch_first=batch_first,
                  x_batch_first=x_batch_first)
    return rnn_outputs(P, T, B, H, kind, batch_first)


class _Cell(Module):
    _kind = "RNN"

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", *, seed=None, dtype=None):
        name = type(self).__name__
        self.input_size = C.pos_int(name, "input_size", input_size)
        self.hidden_size = C.pos_int(name, "hidden_size", hidden_size)
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"{name}: nonlinearity={nonlinearity!r}; expected 'tanh' or 'relu'.")
        self.nonlinearity = nonlinearity
        G, H = _GATES[self._kind] * self.hidden_size, self.hidden_size
        s = I.split_seed(I.resolve_seed(seed, f"{name}(seed)"), 4)
        self.weight_ih = _uniform((G, self.input_size), H, s[0], dtype)
        self.weight_hh = _uniform((G, H), H, s[1], dtype)
        bias = C.boolean(name, "bias", bias)
        self.bias_ih = _uniform((G,), H, s[2], dtype) if bias else None
        self.bias_hh = _uniform((G,), H, s[3], dtype) if bias else None

    def forward(self, x, state=None):
        x = as_tensor(x)
        name = type(self).__name__
        if x.ndim != 2 or x.shape[1] != self.input_size:
            raise ValueError(f"{name}(input_size={self.input_size}): x has shape {x.shape}; expected "
                             f"(batch, {self.input_size}).")
        B, H = x.shape[0], self.hidden_size
        if self._kind == "LSTM":
            h, c = (zeros((B, H), x.dtype), zeros((B, H), x.dtype)) if state is None else state
            _check_state(name, "h", h, (B, H))
            _check_state(name, "c", c, (B, H))
        else:
            h, c = (zeros((B, H), x.dtype) if state is None else state), None
            _check_state(name, "h", h, (B, H))
        h2, c2 = _fused_layer(_kind_of(self._kind, self.nonlinearity), reshape(x, (1, B, self.input_size)),
                              self.weight_ih, self.bias_ih, self.weight_hh, self.bias_hh, h, c)[1:]
        return (h2, c2) if self._kind == "LSTM" else h2

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}"


def _check_state(where, name, t, shape):
    if not isinstance(t, Tensor) or t.shape != shape:
        raise ValueError(f"{where}: the initial state {name} has shape {getattr(t, 'shape', type(t).__name__)}; "
                         f"expected {shape}.")


class RNNCell(_Cell):
    """h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (or relu); forward(x (batch, input), h=None) -> h'."""
    _kind = "RNN"


class LSTMCell(_Cell):
    """LSTM cell (Hochreiter & Schmidhuber 1997; PyTorch's gate order i, f, g, o):
    forward(x (batch, input), (h, c)=None) -> (h', c')."""
    _kind = "LSTM"

    def __init__(self, input_size, hidden_size, bias=True, *, seed=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, seed=seed, dtype=dtype)


class GRUCell(_Cell):
    """GRU cell (Cho et al. 2014; PyTorch's form, gates r, z, n): forward(x, h=None) -> h'."""
    _kind = "GRU"

    def __init__(self, input_size, hidden_size, bias=True, *, seed=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, seed=seed, dtype=dtype)


class _RNNBase(Module):
    _kind = "RNN"

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, *, seed=None, dtype=None):
        name = type(self).__name__
        self.input_size = C.pos_int(name, "input_size", input_size)
        self.hidden_size = C.pos_int(name, "hidden_size", hidden_size)
        self.num_layers = C.pos_int(name, "num_layers", num_layers)
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"{name}: nonlinearity={nonlinearity!r}; expected 'tanh' or 'relu'.")
        self.nonlinearity = nonlinearity
        self.batch_first = C.boolean(name, "batch_first", batch_first)
        self.bidirectional = C.boolean(name, "bidirectional", bidirectional)
        self.bias = C.boolean(name, "bias", bias)
        self.dropout = C.prob(name, "dropout", dropout)
        D, H = 2 if self.bidirectional else 1, self.hidden_size
        G = _GATES[self._kind] * H
        seeds = iter(I.split_seed(I.resolve_seed(seed, f"{name}(seed)"), 4 * D * self.num_layers + 1))
        for layer in range(self.num_layers):
            n_in = self.input_size if layer == 0 else D * H
            for d in range(D):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                setattr(self, "weight_ih" + sfx, _uniform((G, n_in), H, next(seeds), dtype))
                setattr(self, "weight_hh" + sfx, _uniform((G, H), H, next(seeds), dtype))
                if self.bias:
                    setattr(self, "bias_ih" + sfx, _uniform((G,), H, next(seeds), dtype))
                    setattr(self, "bias_hh" + sfx, _uniform((G,), H, next(seeds), dtype))
                else:
                    next(seeds), next(seeds)
        if self.dropout and self.num_layers > 1:
            from .norm import Dropout
            self.drop = Dropout(self.dropout, seed=next(seeds))
        else:
            self.drop = None

    def _param(self, kind, layer, d):
        return self.__dict__.get(f"{kind}_l{layer}" + ("_reverse" if d else ""))

    def forward(self, x, state=None):
        """x (time, batch, input) (or (batch, time, input) with batch_first); state: h0 (layers * D, batch, H)
        (for the LSTM a pair (h0, c0)) or None for zeros. Returns (output, h_n) / (output, (h_n, c_n));
        output (time, batch, D * H) (batch first if batch_first)."""
        x = as_tensor(x)
        name = type(self).__name__
        if x.ndim != 3 or x.shape[2] != self.input_size:
            lead = "(batch, time, " if self.batch_first else "(time, batch, "
            raise ValueError(f"{name}(input_size={self.input_size}): x has shape {x.shape}; expected "
                             f"{lead}{self.input_size}).")
        xbf = self.batch_first  # the first layer reads (batch, time, input) itself (rnn_layer's x_batch_first)
        T, B = (x.shape[1], x.shape[0]) if xbf else x.shape[:2]
        D, H, L = 2 if self.bidirectional else 1, self.hidden_size, self.num_layers
        if T == 0:
            raise ValueError(f"{name}: x has an empty time axis (shape {x.shape}).")
        lstm = self._kind == "LSTM"
        if state is None:
            h0 = c0 = None
        elif lstm:
            if not (isinstance(state, (tuple, list)) and len(state) == 2):
                raise TypeError(f"{name}: state must be a pair (h0, c0) of shape {(L * D, B, H)}.")
            h0, c0 = state
            _check_state(name, "h0", h0, (L * D, B, H))
            _check_state(name, "c0", c0, (L * D, B, H))
        else:
            h0, c0 = state, None
            _check_state(name, "h0", h0, (L * D, B, H))
        kind = _kind_of(self._kind, self.nonlinearity)
        hs, cs, inp = [], [], x
        for layer in range(L):
            bf = self.batch_first and layer == L - 1 and D == 1  # the last layer writes (batch, time, H) itself
            outs = []
            for d in range(D):
                k = layer * D + d
                W_ih, W_hh = self._param("weight_ih", layer, d), self._param("weight_hh", layer, d)
                b_ih, b_hh = self._param("bias_ih", layer, d), self._param("bias_hh", layer, d)
                hk = zeros((B, H), x.dtype) if state is None else h0[k]
                ck = (zeros((B, H), x.dtype) if state is None else c0[k]) if lstm else None
                y, h, c = _fused_layer(kind, inp, W_ih, b_ih, W_hh, b_hh, hk, ck, reverse=bool(d), batch_first=bf,
                                       x_batch_first=xbf and layer == 0)
                outs.append(y)
                hs.append(h)
                cs.append(c)
            inp = outs[0] if D == 1 else concat(outs, axis=2)
            if self.drop is not None and layer < L - 1:
                inp = self.drop(inp)
        out = transpose(inp, (1, 0, 2)) if self.batch_first and not bf else inp
        h_n = stack(hs, axis=0)
        return (out, (h_n, stack(cs, axis=0))) if lstm else (out, h_n)

    def extra_repr(self):
        r = f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}"
        if self.batch_first:
            r += ", batch_first=True"
        if self.bidirectional:
            r += ", bidirectional=True"
        return r


class RNN(_RNNBase):
    """Elman RNN (tanh or relu), PyTorch's arguments: RNN(input_size, hidden_size, num_layers=1,
    nonlinearity='tanh', bias=True, batch_first=False, dropout=0.0, bidirectional=False)."""
    _kind = "RNN"


class LSTM(_RNNBase):
    """LSTM, PyTorch's arguments: LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0.0, bidirectional=False). forward(x, (h0, c0)=None) -> (output, (h_n, c_n))."""
    _kind = "LSTM"

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, *, seed=None, dtype=None):
        super().__init__(input_size, hidden_size, num_layers, "tanh", bias, batch_first, dropout, bidirectional,
                         seed=seed, dtype=dtype)


class GRU(_RNNBase):
    """GRU, PyTorch's arguments: GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0.0, bidirectional=False). forward(x, h0=None) -> (output, h_n)."""
    _kind = "GRU"

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, *, seed=None, dtype=None):
        super().__init__(input_size, hidden_size, num_layers, "tanh", bias, batch_first, dropout, bidirectional,
                         seed=seed, dtype=dtype)
