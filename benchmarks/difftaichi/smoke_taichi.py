# DiffTaichi's smoke_taichi.py (github.com/taichi-dev/difftaichi, examples/smoke_taichi.py at commit 9f4ee52),
# kept runnable as the reference for examples/physics/smoke_taichi.py. Changes, all marked "sciml:": precision,
# arch and sizes from the environment (DIFFTAICHI_F64=1, DIFFTAICHI_ARCH=cpu, DIFFTAICHI_N_GRID,
# DIFFTAICHI_STEPS, DIFFTAICHI_JACOBI), cv2 optional (headless: no windows, no frames), the target image
# read with PIL (taichi.png next to this file), and a --bench-out mode (fixed start velocity, gradient,
# time per iteration, peak memory) used by benchmarks/difftaichi/bench.py. The simulation and its Tape
# are unchanged.
import taichi as ti
import argparse
import os
import numpy as np
try:  # sciml: cv2 is optional (only for the live window and the frames)
    import cv2
except ImportError:
    cv2 = None

real = ti.f64 if os.environ.get("DIFFTAICHI_F64") else ti.f32  # sciml: was ti.f32
ti.init(default_fp=real, arch=getattr(ti, os.environ.get("DIFFTAICHI_ARCH", "cuda")),  # sciml: was ti.cuda
        flatten_if=True)

n_grid = int(os.environ.get("DIFFTAICHI_N_GRID", 128))  # sciml: was 128
dx = 1.0 / n_grid
num_iterations_gauss_seidel = int(os.environ.get("DIFFTAICHI_JACOBI", 10))  # sciml: was 10
p_dims = num_iterations_gauss_seidel + 1
steps = int(os.environ.get("DIFFTAICHI_STEPS", 100))  # sciml: was 100
learning_rate = 400

scalar = lambda: ti.field(dtype=real)
vector = lambda: ti.Vector.field(2, dtype=real)

v = vector()
div = scalar()
p = scalar()
v_updated = vector()
target = scalar()
smoke = scalar()
loss = scalar()

ti.root.dense(ti.i, steps * p_dims).dense(ti.jk, n_grid).place(p)
ti.root.dense(ti.i, steps).dense(ti.jk, n_grid).place(v, v_updated, smoke, div)
ti.root.dense(ti.ij, n_grid).place(target)
ti.root.place(loss)
ti.root.lazy_grad()


# Integer modulo operator for positive values of n
@ti.func
def imod(n, divisor):
    ret = n % divisor
    if ret < 0:
        ret += divisor
    return ret


@ti.func
def dec_index(index):
    new_index = index - 1
    if new_index < 0:
        new_index = n_grid - 1
    return new_index


@ti.func
def inc_index(index):
    new_index = index + 1
    if new_index >= n_grid:
        new_index = 0
    return new_index


@ti.kernel
def compute_div(t: ti.i32):
    for y in range(n_grid):
        for x in range(n_grid):
            div[t, y, x] = -0.5 * dx * (v_updated[t, inc_index(y), x][0] -
                                        v_updated[t, dec_index(y), x][0] +
                                        v_updated[t, y, inc_index(x)][1] -
                                        v_updated[t, y, dec_index(x)][1])


@ti.kernel
def compute_p(t: ti.i32, k: ti.i32):
    for y in range(n_grid):
        for x in range(n_grid):
            a = k + t * num_iterations_gauss_seidel
            p[a + 1, y,
              x] = (div[t, y, x] + p[a, dec_index(y), x] +
                    p[a, inc_index(y), x] + p[a, y, dec_index(x)] +
                    p[a, y, inc_index(x)]) / 4.0


@ti.kernel
def update_v(t: ti.i32):
    for y in range(n_grid):
        for x in range(n_grid):
            a = num_iterations_gauss_seidel * t - 1
            v[t, y, x][0] = v_updated[t, y, x][0] - 0.5 * (
                p[a, inc_index(y), x] - p[a, dec_index(y), x]) / dx
            v[t, y, x][1] = v_updated[t, y, x][1] - 0.5 * (
                p[a, y, inc_index(x)] - p[a, y, dec_index(x)]) / dx


@ti.kernel
def advect(field: ti.template(), field_out: ti.template(),
           t_offset: ti.template(), t: ti.i32):
    """Move field smoke according to x and y velocities (vx and vy)
     using an implicit Euler integrator."""
    for y in range(n_grid):
        for x in range(n_grid):
            center_x = y - v[t + t_offset, y, x][0]
            center_y = x - v[t + t_offset, y, x][1]

            # Compute indices of source cell
            left_ix = ti.cast(ti.floor(center_x), ti.i32)
            top_ix = ti.cast(ti.floor(center_y), ti.i32)

            rw = center_x - left_ix  # Relative weight of right-hand cell
            bw = center_y - top_ix  # Relative weight of bottom cell

            # Wrap around edges
            # TODO: implement mod (%) operator
            left_ix = imod(left_ix, n_grid)
            right_ix = inc_index(left_ix)
            top_ix = imod(top_ix, n_grid)
            bot_ix = inc_index(top_ix)

            # Linearly-weighted sum of the 4 surrounding cells
            field_out[t, y, x] = (1 - rw) * (
                (1 - bw) * field[t - 1, left_ix, top_ix] +
                bw * field[t - 1, left_ix, bot_ix]) + rw * (
                    (1 - bw) * field[t - 1, right_ix, top_ix] +
                    bw * field[t - 1, right_ix, bot_ix])


@ti.kernel
def compute_loss():
    for i in range(n_grid):
        for j in range(n_grid):
            loss[None] += (target[i, j] - smoke[steps - 1, i, j])**2 * (1 / n_grid**2)


@ti.kernel
def apply_grad():
    # gradient descent
    for i in range(n_grid):
        for j in range(n_grid):
            v[0, i, j] -= learning_rate * v.grad[0, i, j]


@ti.ad.no_grad
@ti.kernel
def copy_smoke(t: ti.i32, arr: ti.types.ndarray()):
    for i, j in ti.ndrange(n_grid, n_grid):
        arr[i, j] = smoke[t, i, j]


def forward(output=None):
    for t in range(1, steps):
        advect(v, v_updated, -1, t)

        compute_div(t)
        for k in range(num_iterations_gauss_seidel):
            compute_p(t, k)

        update_v(t)
        advect(smoke, smoke, 0, t)

        if output and cv2 is not None:  # sciml: headless without cv2
            smoke_ = np.zeros(shape=(n_grid, n_grid), dtype=np.float32)
            copy_smoke(t, smoke_)
            cv2.imshow('smoke', smoke_)
            cv2.waitKey(1)
            os.makedirs(output, exist_ok=True)
            cv2.imwrite("{}/{:04d}.png".format(output, t), 255 * smoke_)
    compute_loss()


@ti.kernel
def init(target_img: ti.types.ndarray()):
    for i, j in ti.ndrange(n_grid, n_grid):
        target[i, j] = target_img[i, j]
        smoke[0, i, j] = (i // 16 + j // 16) % 2

@ti.ad.no_grad
@ti.kernel
def extract_velocity_field(arr: ti.types.ndarray()):
    s = 0.2
    b = 0.5
    for i, j in ti.ndrange(n_grid, n_grid):
        arr[i, j, 0] = v[0, i, j][0] * s + b
        arr[i, j, 1] = v[0, i, j][1] * s + b


def load_target():  # sciml: the target image without cv2 (PIL, bilinear resize; the port uses the same)
    from PIL import Image
    path = os.environ.get("DIFFTAICHI_TARGET", os.path.join(os.path.dirname(os.path.abspath(__file__)), "taichi.png"))
    img = Image.open(path).convert("RGB").getchannel("B")  # cv2's channel 0 is blue
    return np.asarray(img.resize((n_grid, n_grid), Image.BILINEAR), dtype=np.float64) / 255.0


@ti.kernel
def set_v0(arr: ti.types.ndarray()):  # sciml: the benchmark's start velocity
    for i, j in ti.ndrange(n_grid, n_grid):
        v[0, i, j] = [arr[i, j, 0], arr[i, j, 1]]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--iters', type=int, default=240)
    parser.add_argument('--bench-out', default=None)  # sciml: gradients + timing for the side-by-side benchmark
    options = parser.parse_args()

    target_img = load_target()  # sciml: was cv2.resize(cv2.imread('taichi.png'), (n_grid, n_grid))[:, :, 0] / 255.0

    init(target_img)
    if options.bench_out:  # sciml: the side-by-side benchmark
        import resource, time
        rng = np.random.default_rng(0)
        v0 = rng.standard_normal((n_grid, n_grid, 2)) * float(os.environ.get("DIFFTAICHI_V0_SCALE", 0.5))
        times = []
        for _ in range(options.iters):
            set_v0(v0)
            t0 = time.perf_counter()
            with ti.ad.Tape(loss):
                forward()
            times.append(time.perf_counter() - t0)
        np.savez(options.bench_out, loss=loss[None], g_v0=v.grad.to_numpy()[0], times=np.array(times),
                 peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, n_grid=n_grid, steps=steps)
        return
    for opt in range(options.iters):
        with ti.ad.Tape(loss):
            output = "outputs/opt{:03d}".format(opt) if opt % 10 == 0 else None
            forward(output)
            velocity_field = np.ones(shape=(n_grid, n_grid, 3), dtype=np.float32)
            extract_velocity_field(velocity_field)
            if cv2 is not None:  # sciml: headless without cv2
                cv2.imshow('velocity', velocity_field)
                cv2.waitKey(1)

        print('Iter', opt, ' Loss =', loss[None])
        apply_grad()

    forward("output")


if __name__ == '__main__':
    main()
