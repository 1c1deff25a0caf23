"""Every public op and creation function called with junk in each positional argument, as a new user
might (None, strings, floats where ints go, bools, ragged lists, objects, tensors of the wrong shape,
dtype or rank, empty and 0-d tensors, negative sizes): each call either returns or raises a clear
ValueError / TypeError / IndexError from sciml's own code; never a Taichi- or numpy-internal traceback,
never another exception type, never a crash."""
import inspect
import traceback
import warnings

import numpy as np
import pytest

import sciml as sm

NAMES = ["abs", "add", "astype", "broadcast_to", "clip", "concat", "cos", "div", "dot", "equal", "exp", "floor",
         "gelu", "greater", "log", "log_softmax", "logsumexp", "matmul", "max", "maximum", "mean", "min", "minimum",
         "moveaxis", "mul", "neg", "pow", "reciprocal", "relu", "reshape", "scatter_add", "sigmoid", "sign", "silu",
         "sin", "softmax", "softplus", "split", "sqrt", "square", "squeeze", "stack", "sub", "sum", "take",
         "take_along_axis", "tanh", "transpose", "unsqueeze", "var", "where", "arange", "as_tensor", "eye", "full",
         "linspace", "ones", "ones_like", "rand", "randn", "tensor", "zeros", "zeros_like"]
GOOD_ARGS = {"concat": {0: "pair"}, "stack": {0: "pair"}, "reshape": {1: (3, 2)}, "broadcast_to": {1: (2, 2, 3)},
             "moveaxis": {1: 0, 2: 1}, "split": {1: 2}, "scatter_add": {1: [0, 1], 2: 3}, "take": {1: [0]},
             "take_along_axis": {1: [[0], [1]], 2: 1}, "unsqueeze": {1: 0}, "full": {0: (2,), 1: 1.0},
             "arange": {0: 0, 1: 3}, "linspace": {0: 0, 1: 3}, "eye": {0: 2}, "ones": {0: 2}, "zeros": {0: 2},
             "rand": {0: 2}, "randn": {0: 2}, "where": {0: "mask"}}


def bad_values():
    return {"None": None, "str": "a", "float": 2.5, "True": True, "ragged": [[1.0], [2.0, 3.0]], "object": object(),
            "t23": sm.tensor(np.ones((2, 3))), "t4": sm.tensor(np.ones(4)), "int32": sm.tensor([1, 2, 3]),
            "empty": sm.zeros(0), "0-d": sm.tensor(1.0), "negative": -1, "dict": {"a": 1}}


@pytest.mark.parametrize("name", NAMES)
def test_junk_arguments_get_clear_errors(name):
    fn = getattr(sm, name)
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    good = sm.tensor(np.arange(1.0, 7.0).reshape(2, 3))
    problems = []
    for pos in range(len(params)):
        for label, bad in bad_values().items():
            args = [p.default if p.default is not inspect.Parameter.empty else good for p in params]
            for i, v in GOOD_ARGS.get(name, {}).items():
                args[i] = [good, good] if v == "pair" else good > 2 if v == "mask" else v
            args[pos] = bad
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fn(*args)
            except (ValueError, TypeError, IndexError) as e:
                internal = [f"{f.filename.split('site-packages/')[-1]}:{f.lineno}"
                            for f in traceback.extract_tb(e.__traceback__) if "site-packages" in f.filename]
                if internal:
                    problems.append(f"{name} arg {pos} = {label}: {type(e).__name__} from {internal[-1]}: {e}")
            except Exception as e:  # noqa: BLE001 - any other type is the failure being hunted
                problems.append(f"{name} arg {pos} = {label}: {type(e).__name__}: {e}")
    assert not problems, "\n".join(problems)
