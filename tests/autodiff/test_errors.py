"""Bad input gets a clear error naming the argument, what was seen and what was expected."""
import numpy as np
import pytest

import sciml as sm
from sciml import runtime


def test_mismatched_shapes():
    with pytest.raises(ValueError, match=r"mul: shapes \(3,\), \(4,\) cannot be broadcast together"):
        sm.tensor([1.0, 2.0, 3.0]) * sm.zeros(4)
    with pytest.raises(ValueError, match=r"matmul: shapes \(2, 3\) and \(2, 3\) do not align"):
        sm.zeros((2, 3)) @ sm.zeros((2, 3))
    with pytest.raises(ValueError, match=r"broadcast_to: shapes \(3,\), \(2, 4\) cannot be broadcast"):
        sm.broadcast_to(sm.zeros(3), (2, 4))
    with pytest.raises(ValueError, match=r"concat: tensor 1 has shape \(2, 2\), incompatible with \(3, 2\)"):
        sm.concat([sm.zeros((3, 2)), sm.zeros((2, 2))], axis=1)
    with pytest.raises(ValueError, match=r"stack: tensor 1 has shape \(3,\); expected \(2,\)"):
        sm.stack([sm.zeros(2), sm.zeros(3)])
    with pytest.raises(ValueError, match=r"broadcast_to: cannot broadcast shape \(3,\) to \(3, 1\)"):
        sm.broadcast_to(sm.zeros(3), (3, 1))
    with pytest.raises(ValueError, match="matmul: operands must have at least 1 dimension"):
        sm.matmul(sm.tensor(1.0), sm.zeros(2))
    with pytest.raises(ValueError, match=r"where: shapes .* cannot be broadcast"):
        sm.where(sm.zeros(3) > 0, sm.zeros(3), sm.zeros(2))


def test_wrong_dtypes():
    a, b = sm.zeros(3, "float32"), sm.zeros(3, "float64")
    with pytest.raises(TypeError, match="add: operands have dtypes float32 and float64; sciml does not promote"):
        a + b
    with pytest.raises(TypeError, match="matmul: operands have dtypes float64 and float32"):
        sm.zeros((2, 2)) @ sm.zeros((2, 2), "float32")
    with pytest.raises(TypeError, match="concat: tensor 1 has dtype float32; expected float64"):
        sm.concat([sm.zeros(2), sm.zeros(2, "float32")])
    with pytest.raises(TypeError, match="dtype: got 'float16'; expected one of"):
        sm.zeros(2, "float16")
    with pytest.raises(TypeError, match="mul: got an operand of type str"):
        sm.zeros(2) * "a"
    with pytest.raises(TypeError, match="mean: got a Tensor of dtype int32; expected float32 or float64"):
        sm.mean(sm.arange(3))
    with pytest.raises(TypeError, match=r"sciml.tensor\(data\): got numpy dtype <U1"):
        sm.tensor(["a"])


def test_grad_needs_scalar_output():
    with pytest.raises(ValueError, match=r"grad\(f\) needs f to return a scalar, got shape \(2,\)"):
        sm.grad(lambda x: x * 2.0)(sm.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="vjp: f returned a leaf of type float; expected Tensors"):
        sm.grad(lambda x: 1.0)(sm.tensor([1.0]))
    with pytest.raises(ValueError, match=r"backward\(\) on a Tensor of shape \(2,\) needs `gradient`"):
        (sm.tensor([1.0, 2.0]).requires_grad_() * 2.0).backward()


def test_non_tensor_leaf():
    with pytest.raises(TypeError, match="vjp: got a leaf of type str; expected Tensors"):
        sm.grad(lambda x: x)("hello")
    with pytest.raises(TypeError, match="vjp: got a leaf of type str"):
        sm.grad(lambda p: p["w"].sum())({"w": sm.zeros(2), "name": "layer"})
    with pytest.raises(TypeError, match="jvp: got a leaf of type str"):
        sm.jvp(lambda x: x, ("s",), (sm.zeros(1),))
    with pytest.raises(TypeError, match="vjp: f returned a leaf of type str"):
        sm.vjp(lambda x: "nope", sm.zeros(1))


def test_transform_argument_errors():
    with pytest.raises(ValueError, match=r"grad: argnums=2 but the function got 1 positional argument"):
        sm.grad(lambda x: x.sum(), argnums=2)(sm.zeros(2))
    with pytest.raises(TypeError, match=r"jvp\(f, primals, tangents\): primals and tangents must be tuples"):
        sm.jvp(sm.sin, sm.zeros(2), sm.zeros(2))
    with pytest.raises(ValueError, match=r"jvp: tangent of shape \(3,\) for a primal of shape \(2,\)"):
        sm.jvp(sm.sin, (sm.zeros(2),), (sm.zeros(3),))
    with pytest.raises(ValueError, match="has_aux=True needs f to return a pair"):
        sm.grad(lambda x: x.sum(), has_aux=True)(sm.zeros(2))
    _, pull = sm.vjp(sm.sin, sm.zeros(2))
    with pytest.raises(ValueError, match=r"vjp_fn: cotangent of shape \(3,\) for an output of shape \(2,\)"):
        pull(sm.zeros(3))


def test_unknown_arch_and_dtype_in_init():
    with pytest.raises(ValueError, match=r"sciml.init\(arch=...\): got 'tpu'; expected one of 'cpu', 'vulkan'"):
        sm.init(arch="tpu")
    with pytest.raises(ValueError, match=r"sciml.init\(dtype=...\): got 'float16'; expected one of"):
        sm.init(dtype="float16")
    with pytest.raises(RuntimeError, match="sciml is already running on arch='cpu', dtype='float64'"):
        sm.init(arch="cpu", dtype="float32")
    assert sm.init(arch="cpu", dtype="float64") == "cpu" == runtime.arch()


def test_reshape_to_wrong_size():
    with pytest.raises(ValueError, match=r"reshape: cannot reshape \(2, 3\) \(6 elements\) into \(4, 2\)"):
        sm.zeros((2, 3)).reshape(4, 2)
    with pytest.raises(ValueError, match=r"reshape: cannot reshape \(2, 3\) \(6 elements\) into \(4, -1\)"):
        sm.zeros((2, 3)).reshape(4, -1)
    with pytest.raises(ValueError, match="at most one -1"):
        sm.zeros((2, 3)).reshape(-1, -1)


def test_bad_axis():
    x = sm.zeros((2, 3))
    with pytest.raises(ValueError, match=r"sum: axis 2 is out of range for a Tensor with 2 dimension"):
        x.sum(2)
    with pytest.raises(ValueError, match=r"max: axis -3 is out of range"):
        x.max(-3)
    with pytest.raises(ValueError, match="sum: repeated axis"):
        x.sum((0, -2))
    with pytest.raises(ValueError, match=r"transpose: axes \(0, 0\) are not a permutation"):
        x.transpose(0, 0)
    with pytest.raises(ValueError, match=r"squeeze: axis 1 of shape \(2, 3\) has size 3, not 1"):
        x.squeeze(1)
    with pytest.raises(ValueError, match="split: axis 1 of size 3 cannot be split into 2 equal sections"):
        sm.split(x, 2, axis=1)
    with pytest.raises(ValueError, match="max: cannot reduce over axis 0 of size 0"):
        sm.zeros((0, 2)).max(0)


def test_index_out_of_range():
    x = sm.zeros((2, 3))
    with pytest.raises(IndexError, match="index 2 is out of range for axis 0 with size 2"):
        x[2]
    with pytest.raises(IndexError, match="index -4 is out of range for axis 1 with size 3"):
        x[0, -4]
    with pytest.raises(IndexError, match=r"too many indices \(3\) for a Tensor of shape \(2, 3\)"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="take: index 5 is out of range for axis 0 with size 2"):
        x[sm.tensor([0, 5], "int32")]
    with pytest.raises(IndexError, match=r"boolean mask of shape \(3,\) does not match the indexed axes \(2,\)"):
        x[np.array([True, False, True])]
    with pytest.raises(IndexError, match="at most one Ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError, match="index Tensor has dtype float64; expected int32"):
        x[sm.tensor([0.0])]
    with pytest.raises(ValueError, match=r"item\(\) needs a Tensor with one element, got shape \(2, 3\)"):
        x.item()
