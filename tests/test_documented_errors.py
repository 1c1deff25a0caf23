"""One test per documented error: bad input gets a clear error naming the argument, what was seen and
what was expected, raised before any kernel runs (issue 13, item 2). Each row: an id, the call, the
exception type and a regex its message must match."""
import numpy as np
import pytest

import sciml as sm
from sciml.data import DataLoader, train_test_split


def x23():
    return sm.tensor(np.arange(6.0).reshape(2, 3))


def v3():
    return sm.tensor([1.0, 2.0, 3.0])


AXIS = sm.AxisError

ERRORS = [
    # axes: numpy semantics, negative allowed, out of range is an AxisError (a ValueError and an IndexError)
    ("sum-axis-out-of-range", lambda: x23().sum(axis=2), AXIS,
     r"sum: axis 2 is out of range for a Tensor with 2 dimension\(s\) \(expected -2 <= axis < 2\)"),
    ("sum-0d-axis0", lambda: sm.sum(sm.tensor(1.0), axis=0), AXIS,
     r"sum: axis 0 is out of range for a Tensor with 0 dimension\(s\)"),
    ("sum-axis-float", lambda: x23().sum(axis=1.0), TypeError,
     r"sum: axis=1.0 \(float\); expected an int, a tuple of ints or None"),
    ("sum-axis-bool", lambda: x23().sum(axis=True), TypeError, r"sum: axis=True \(bool\)"),
    ("sum-repeated-axis", lambda: x23().sum(axis=(0, -2)), ValueError, r"sum: repeated axis in axis=\(0, -2\)"),
    ("mean-axis", lambda: sm.mean(x23(), axis=-3), AXIS, r"mean: axis -3 is out of range"),
    ("var-axis", lambda: sm.var(x23(), axis=2), AXIS, r"var: axis 2 is out of range"),
    ("max-axis", lambda: sm.max(x23(), axis=5), AXIS, r"max: axis 5 is out of range"),
    ("max-empty", lambda: sm.max(sm.zeros(0)), ValueError, r"max: cannot reduce over axis 0 of size 0"),
    ("concat-axis", lambda: sm.concat([x23(), x23()], axis=2), AXIS,
     r"concat: axis 2 is out of range for a Tensor with 2 dimension\(s\)"),
    ("concat-not-a-list", lambda: sm.concat(3.0), TypeError, r"concat: got float; expected a list or tuple"),
    ("concat-empty", lambda: sm.concat([]), ValueError, r"concat: got an empty list of tensors"),
    ("concat-0d", lambda: sm.concat([sm.tensor(1.0)]), ValueError, r"concat: zero-dimensional tensors"),
    ("stack-axis", lambda: sm.stack([v3(), v3()], axis=3), AXIS,
     r"stack: axis 3 is out of range for stacking 1-d Tensors \(the result has 2 dimensions\)"),
    ("moveaxis-source", lambda: sm.moveaxis(x23(), 2, 0), AXIS,
     r"moveaxis: source 2 is out of range for a Tensor with 2 dimension\(s\)"),
    ("moveaxis-destination", lambda: sm.moveaxis(x23(), 0, -3), AXIS, r"moveaxis: destination -3 is out of range"),
    ("moveaxis-lengths", lambda: sm.moveaxis(x23(), (0, 1), (1,)), ValueError,
     r"moveaxis: source=\(0, 1\) and destination=\(1,\) have different lengths"),
    ("moveaxis-repeated", lambda: sm.moveaxis(x23(), (0, 0), (0, 1)), ValueError, r"moveaxis: repeated axis"),
    ("unsqueeze-axis", lambda: sm.unsqueeze(v3(), 5), AXIS,
     r"unsqueeze: axis 5 is out of range for a 1-d Tensor \(the result has 2 dimensions\) "
     r"\(expected -2 <= axis < 2\)"),
    ("unsqueeze-float", lambda: sm.unsqueeze(v3(), 0.5), TypeError, r"unsqueeze: axis=0.5 \(float\); expected an integer"),
    ("squeeze-axis", lambda: sm.squeeze(x23(), 4), AXIS, r"squeeze: axis 4 is out of range"),
    ("squeeze-not-one", lambda: x23().squeeze(1), ValueError, r"squeeze: axis 1 of shape \(2, 3\) has size 3, not 1"),
    ("transpose-axes", lambda: x23().transpose(0, 2), AXIS, r"transpose: axes entry 2 is out of range"),
    ("transpose-perm", lambda: x23().transpose(0, 0), ValueError, r"transpose: axes \(0, 0\) are not a permutation"),
    ("split-axis", lambda: sm.split(x23(), 2, axis=2), AXIS, r"split: axis 2 is out of range"),
    ("split-sections-float", lambda: sm.split(v3(), 1.5), TypeError,
     r"split: indices_or_sections=1.5 \(float\); expected an integer"),
    ("split-unequal", lambda: sm.split(v3(), 2), ValueError, r"split: axis 0 of size 3 cannot be split into 2"),
    # shapes and sizes: integers only, at most one -1, sizes must match
    ("reshape-negative", lambda: sm.reshape(x23(), (-2, -3)), ValueError,
     r"reshape: shape=\(-2, -3\); expected sizes >= 0 and at most one -1"),
    ("reshape-two-minus-one", lambda: x23().reshape(-1, -1), ValueError, r"at most one -1"),
    ("reshape-float", lambda: sm.reshape(x23(), (2.0, 3)), TypeError, r"reshape: shape=\(2.0, 3\); expected an int"),
    ("reshape-bool", lambda: sm.reshape(sm.zeros(1), (True,)), TypeError, r"reshape: shape=\(True,\)"),
    ("reshape-size", lambda: x23().reshape(4, 2), ValueError,
     r"reshape: cannot reshape \(2, 3\) \(6 elements\) into \(4, 2\)"),
    ("broadcast_to-shape", lambda: sm.broadcast_to(v3(), (2.5, 3)), TypeError,
     r"broadcast_to: shape=\(2.5, 3\) holds 2.5 \(float\); expected integers"),
    ("broadcast_to-negative", lambda: sm.broadcast_to(v3(), (-1, 3)), ValueError,
     r"broadcast_to: shape=\(-1, 3\) has a negative size -1"),
    ("broadcast_to-incompatible", lambda: sm.broadcast_to(v3(), (2, 4)), ValueError,
     r"broadcast_to: shapes \(3,\), \(2, 4\) cannot be broadcast"),
    ("zeros-float-size", lambda: sm.zeros((2.5,)), TypeError, r"zeros: shape=\(2.5,\) holds 2.5 \(float\)"),
    ("zeros-string", lambda: sm.zeros("3"), TypeError, r"zeros: shape='3' \(str\); expected an int or a tuple"),
    ("zeros-bool", lambda: sm.zeros(True), TypeError, r"zeros: shape=True \(bool\)"),
    ("zeros-negative", lambda: sm.zeros((2, -1)), ValueError, r"zeros: shape=\(2, -1\) has a negative size -1"),
    ("ones-float-size", lambda: sm.ones(2.0), TypeError, r"ones: shape=2.0 \(float\)"),
    ("full-value", lambda: sm.full((2,), "a"), TypeError, r"full: fill value 'a' \(str\); expected a real number"),
    ("full-nan-int", lambda: sm.full((2,), float("nan"), "int32"), ValueError,
     r"full: fill value nan cannot be stored in dtype int32"),
    ("full-int-range", lambda: sm.full((2,), 2**40, "int32"), ValueError, r"full: fill value .* does not fit in int32"),
    ("rand-shape", lambda: sm.rand(2, 2.5), TypeError, r"rand: shape=\(2, 2.5\) holds 2.5"),
    ("rand-seed", lambda: sm.rand(2, seed=1.5), TypeError, r"rand: seed=1.5 \(float\); expected a non-negative"),
    ("randn-dtype", lambda: sm.randn(2, dtype="int32"), TypeError, r"randn: dtype='int32'; expected float32"),
    ("arange-step-zero", lambda: sm.arange(0, 1, 0), ValueError, r"arange: step=0; expected a nonzero step"),
    ("arange-string", lambda: sm.arange("3"), TypeError, r"arange: start='3' \(str\); expected a real number"),
    ("arange-inf", lambda: sm.arange(0, float("inf")), ValueError, r"arange: stop=inf; expected a finite number"),
    ("arange-too-long", lambda: sm.arange(0, 3e9), ValueError, r"arange: 3000000000 elements"),
    ("linspace-num", lambda: sm.linspace(0, 1, 2.5), TypeError, r"linspace: num=2.5 \(float\); expected an integer"),
    ("linspace-negative", lambda: sm.linspace(0, 1, -1), ValueError, r"linspace: num=-1; expected an integer >= 0"),
    ("eye-n", lambda: sm.eye(2.5), TypeError, r"eye: n=2.5 \(float\)"),
    ("eye-m", lambda: sm.eye(2, -1), ValueError, r"eye: m=-1; expected an integer >= 0"),
    # dtypes
    ("dtype-unknown", lambda: sm.ones((3,), "float16"), TypeError,
     r"dtype: got 'float16'; expected one of float32, float64, int32, bool"),
    ("tensor-strings", lambda: sm.tensor(["a"]), TypeError, r"sciml.tensor\(data\): got numpy dtype <U1"),
    ("tensor-ragged", lambda: sm.tensor([[1.0, 2.0], [3.0]]), ValueError,
     r"sciml.tensor\(data\): could not make an array of list data"),
    ("tensor-nan-int", lambda: sm.tensor([np.nan], "int32"), ValueError,
     r"NaN or infinite values cannot be stored in dtype int32"),
    ("tensor-int-range", lambda: sm.tensor([2**40]), ValueError, r"integer values do not fit in int32"),
    ("mean-int", lambda: sm.mean(sm.arange(3)), TypeError, r"mean: got a Tensor of dtype int32; expected float32"),
    ("var-int", lambda: sm.var(sm.arange(3)), TypeError, r"var: got a Tensor of dtype int32"),
    ("matmul-int", lambda: sm.matmul(sm.zeros((2, 2), "int32"), sm.zeros((2, 2), "int32")), TypeError,
     r"matmul: got a Tensor of dtype int32"),
    # binary ops, matmul, dot
    ("mul-broadcast", lambda: v3() * sm.zeros(4), ValueError, r"mul: shapes \(3,\), \(4,\) cannot be broadcast together"),
    ("add-None", lambda: v3() + None, TypeError, r"add: got an operand of type NoneType"),
    ("matmul-align", lambda: sm.zeros((2, 3)) @ sm.zeros((2, 3)), ValueError,
     r"matmul: shapes \(2, 3\) and \(2, 3\) do not align \(inner dimensions 3 != 2\)"),
    ("matmul-batch", lambda: sm.matmul(sm.zeros((2, 2, 3)), sm.zeros((3, 3, 4))), ValueError,
     r"matmul \(batch dimensions\): shapes \(2,\), \(3,\) cannot be broadcast"),
    ("matmul-flag", lambda: sm.matmul(x23(), x23(), transpose_b="yes"), TypeError,
     r"matmul: transpose_b='yes' \(str\); expected True or False"),
    ("sum-keepdims", lambda: x23().sum(keepdims="no"), TypeError, r"sum: keepdims='no' \(str\); expected True or False"),
    ("zeros-too-many", lambda: sm.zeros((2**16, 2**16)), ValueError,
     r"zeros: shape \(65536, 65536\) holds 4294967296 elements; sciml kernels index with int32"),
    ("scatter_add-too-many", lambda: sm.scatter_add(sm.ones((1,)), [0], 10**12), ValueError,
     r"scatter_add: shape \(1000000000000,\) holds"),
    ("sum-int32-overflow", lambda: sm.sum(sm.tensor([2**31 - 1, 1])), OverflowError,
     r"sum: the int32 sum of a Tensor of shape \(2,\) overflows int32 \(exact value 2147483648\)"),
    ("matmul-0d", lambda: sm.matmul(sm.tensor(1.0), sm.zeros(2)), ValueError,
     r"matmul: operands must have at least 1 dimension"),
    ("dot-align", lambda: sm.dot(v3(), sm.zeros(4)), ValueError,
     r"dot: shapes \(3,\) and \(4,\) do not align \(last dimensions 3 != 4\)"),
    ("dot-0d", lambda: sm.dot(sm.tensor(1.0), sm.tensor(2.0)), ValueError, r"dot: operands must have at least 1"),
    # index ranges
    ("getitem-range", lambda: x23()[2], IndexError, r"index 2 is out of range for axis 0 with size 2"),
    ("getitem-range-axis1", lambda: x23()[0, -4], IndexError, r"index -4 is out of range for axis 1 with size 3"),
    ("getitem-array-range", lambda: x23()[:, [0, 3]], IndexError,
     r"Tensor indexing: index 3 is out of range for axis 1 with size 3 \(expected -3 <= index < 3\)"),
    ("getitem-too-many", lambda: x23()[0, 0, 0], IndexError, r"too many indices \(3\) for a Tensor of shape \(2, 3\)"),
    ("getitem-ellipsis", lambda: x23()[..., ...], IndexError, r"at most one Ellipsis"),
    ("getitem-float", lambda: x23()[1.5], IndexError, r"unsupported index 1.5 of type float"),
    ("getitem-float-tensor", lambda: x23()[sm.tensor([0.0])], IndexError,
     r"index Tensor has dtype float\d\d; expected int32 \(or bool for a mask\)"),
    ("getitem-float-array", lambda: x23()[np.array([0.5])], IndexError, r"index array has dtype float64"),
    ("getitem-mask-shape", lambda: x23()[np.array([True, False, True])], IndexError,
     r"boolean mask of shape \(3,\) does not match the indexed axes \(2,\) of shape \(2, 3\)"),
    ("getitem-broadcast", lambda: x23()[[0, 1], [0, 1, 2]], IndexError,
     r"shape mismatch: the index arrays cannot be broadcast together \(shapes \(2,\) \(3,\)\)"),
    ("getitem-ragged", lambda: x23()[[[0], [0, 1]]], IndexError, r"is not a rectangular array"),
    ("take-range", lambda: sm.take(v3(), [5]), IndexError, r"take: index 5 is out of range for axis 0 with size 3"),
    ("take-0d", lambda: sm.take(sm.tensor(1.0), [0]), IndexError, r"take: cannot index a 0-d Tensor"),
    ("take-bool", lambda: sm.take(v3(), True), IndexError, r"take: got a boolean index; expected integers"),
    ("scatter_add-range", lambda: sm.scatter_add(sm.ones((2,)), [0, 5], 3), IndexError,
     r"scatter_add: index 5 is out of range for axis 0 with size 3 \(expected -3 <= index < 3\)"),
    ("scatter_add-negative-range", lambda: sm.scatter_add(sm.ones((2,)), [0, -4], 3), IndexError,
     r"scatter_add: index -4 is out of range"),
    ("scatter_add-rows", lambda: sm.scatter_add(sm.ones((2,)), [0, 1], 2.5), TypeError,
     r"scatter_add: rows=2.5 \(float\); expected an integer"),
    ("scatter_add-shape", lambda: sm.scatter_add(v3(), [[0, 1]], 3), ValueError,
     r"scatter_add: values of shape \(3,\) do not start with the index shape \(1, 2\)"),
    ("take_along_axis-ndim", lambda: sm.take_along_axis(x23(), [0, 1], 1), ValueError,
     r"take_along_axis: indices of shape \(2,\) \(1-d\) for x of shape \(2, 3\) \(2-d\)"),
    ("take_along_axis-range", lambda: sm.take_along_axis(x23(), [[0, 5]], 1), IndexError,
     r"take_along_axis: index 5 is out of range for axis 1 with size 3"),
    ("take_along_axis-axis", lambda: sm.take_along_axis(x23(), [[0]], 2), AXIS, r"take_along_axis: axis 2 is out"),
    ("take_along_axis-broadcast", lambda: sm.take_along_axis(x23(), [[0], [1], [2]], 1), ValueError,
     r"take_along_axis: indices of shape \(3, 1\) do not broadcast against x of shape \(2, 3\) on axis 0"),
    ("take_along_axis-float", lambda: sm.take_along_axis(x23(), [[0.5]], 1), IndexError,
     r"take_along_axis: index array has dtype float64"),
    ("at-broadcast", lambda: x23().at[0].set(sm.zeros(4)), ValueError,
     r"at\[...\].set: values of shape \(4,\) cannot be broadcast to the indexed shape \(3,\)"),
    ("at-dtype", lambda: sm.arange(3).at[0].set(sm.tensor(1.5)), TypeError,
     r"at\[...\].set: values of dtype float\d\d for a Tensor of dtype int32"),
    ("at-range", lambda: x23().at[:, 3].add(1.0), IndexError, r"index 3 is out of range for axis 1 with size 3"),
    # transforms
    ("grad-int-input", lambda: sm.grad(lambda a: (a * a).sum())(sm.tensor([1, 2])), TypeError,
     r"grad: got a Tensor of dtype int32 to differentiate with respect to; expected float32 or "
     r"float64"),
    ("grad-int-output", lambda: sm.grad(lambda a: (a > 0).astype("int32").sum())(v3()), TypeError,
     r"grad\(f\) needs f to return a float scalar, got dtype int32"),
    ("grad-argnums-type", lambda: sm.grad(lambda a: a.sum(), argnums="0")(v3()), TypeError,
     r"grad: argnums='0'; expected an int or a non-empty tuple of ints"),
    ("grad-argnums-range", lambda: sm.grad(lambda a: a.sum(), argnums=2)(v3()), ValueError,
     r"grad: argnums=2 but the function got 1 positional argument"),
    ("jacrev-int-input", lambda: sm.jacrev(lambda a: a * 2)(sm.tensor([1, 2])), TypeError,
     r"jacrev: got a Tensor of dtype int32"),
    ("jacfwd-int-input", lambda: sm.jacfwd(lambda a: a * 2)(sm.tensor([1, 2])), TypeError,
     r"jacfwd: got a Tensor of dtype int32"),
    ("hessian-int-input", lambda: sm.hessian(lambda a: (a * a).sum())(sm.tensor([1, 2])), TypeError,
     r"got a Tensor of dtype int32 to differentiate with respect to"),
    ("jvp-int-primal", lambda: sm.jvp(lambda a: a * 2, (sm.tensor([1, 2]),), (sm.tensor([1, 1]),)), TypeError,
     r"jvp: got a Tensor of dtype int32"),
    ("jvp-tangent-dtype", lambda: sm.jvp(sm.sin, (sm.zeros(2, "float64"),), (sm.zeros(2, "float32"),)), TypeError,
     r"jvp: tangent of dtype float32 for a primal of dtype float64"),
    ("vjp-int-primal", lambda: sm.vjp(lambda a: a * 2, sm.tensor([1, 2])), TypeError, r"vjp: got a Tensor of dtype int32"),
    ("hvp-not-tuples", lambda: sm.hvp(lambda a: (a * a).sum(), v3(), v3()), TypeError,
     r"hvp\(f, primals, tangents\): primals and tangents must be tuples"),
    ("jacfwd-chunk", lambda: sm.jacfwd(sm.sin, chunk_size=0)(v3()), ValueError, r"jacfwd: chunk_size=0"),
    ("jacfwd-chunk-float", lambda: sm.jacfwd(sm.sin, chunk_size=2.5)(v3()), ValueError, r"jacfwd: chunk_size=2.5"),
    ("jacrev-int-output", lambda: sm.jacrev(lambda a: (a > 1).astype("int32"))(v3()), TypeError,
     r"jacrev: f returned a Tensor of dtype int32; an integer or bool output has no derivative"),
    ("grad-not-callable", lambda: sm.grad(3), TypeError, r"grad\(f\): f=3 \(int\); expected a function of Tensors"),
    ("hessian-not-callable", lambda: sm.hessian("f"), TypeError, r"hessian\(f\): f='f' \(str\)"),
    # data
    ("DataLoader-batch-float", lambda: DataLoader(np.zeros((4, 2)), batch_size=2.5), TypeError,
     r"DataLoader: batch_size=2.5 \(float\); expected a positive integer"),
    ("DataLoader-batch-bool", lambda: DataLoader(np.zeros((4, 2)), batch_size=True), TypeError,
     r"DataLoader: batch_size=True \(bool\)"),
    ("DataLoader-batch-zero", lambda: DataLoader(np.zeros((4, 2)), batch_size=0), ValueError,
     r"DataLoader: batch_size=0; expected a positive integer"),
    ("DataLoader-rows", lambda: DataLoader(np.zeros(3), np.zeros(4)), ValueError,
     r"DataLoader: array 1 has shape \(4,\); expected first dimension 3"),
    ("DataLoader-strings", lambda: DataLoader(np.array(["a", "b"])), TypeError,
     r"DataLoader: array 0 has dtype <U1; expected numbers"),
    ("DataLoader-seed", lambda: DataLoader(np.zeros(3), seed="a"), TypeError, r"DataLoader: seed='a' \(str\)"),
    ("train_test_split-fraction", lambda: train_test_split(np.zeros((4, 2)), test_size=1.5), ValueError,
     r"train_test_split: test_size=1.5; expected a fraction in \(0, 1\) or a whole number of rows in \[0, 4\]"),
    ("train_test_split-rows", lambda: train_test_split(np.zeros((4, 2)), test_size=5), ValueError,
     r"train_test_split: test_size=5 rows; expected 0 <= test_size <= 4"),
    ("train_test_split-type", lambda: train_test_split(np.zeros(3), test_size="a"), TypeError,
     r"train_test_split: test_size='a' \(str\)"),
    ("train_test_split-mismatch", lambda: train_test_split(np.zeros(4), np.zeros(3)), ValueError,
     r"train_test_split: array 1 has shape \(3,\); expected first dimension 4"),
    ("train_test_split-none", lambda: train_test_split(), ValueError, r"train_test_split: got no arrays"),
]


@pytest.mark.parametrize("call, exc, pattern", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_documented_error(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_axis_error_is_value_and_index_error():
    """As numpy's AxisError: code catching either ValueError or IndexError keeps working."""
    with pytest.raises(ValueError):
        sm.sum(sm.zeros(2), axis=1)
    with pytest.raises(IndexError):
        sm.sum(sm.zeros(2), axis=1)

