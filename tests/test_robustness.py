"""No crashes: a script of ~200 sciml calls (some failing on purpose) exits with status 0 every
time, and two Python threads calling sciml at once get the single-thread results."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sciml as sm
from sciml import runtime

_EXIT_SCRIPT = textwrap.dedent("""
    import atexit, sys, threading, time, warnings
    import numpy as np
    atexit.register(time.sleep, 0.3)  # other exit work: a handler registered before sciml's, run after it
    import sciml as sm
    sm.init(arch="cpu", dtype=sys.argv[1], seed=0)
    rng = np.random.default_rng(0)
    n = {"ok": 0, "err": 0}

    def ok(f, *a, **k):
        n["ok"] += 1
        return f(*a, **k)

    def bad(f, *a, **k):
        try:
            f(*a, **k)
        except Exception:
            n["err"] += 1

    x, y, v = (sm.tensor(rng.normal(size=s)) for s in ((4, 5), (5, 3), (7,)))
    big = sm.tensor(rng.normal(size=(96, 96)))
    f = lambda a: (sm.sin(a) * a).sum()
    g = lambda a: (sm.tanh(sm.matmul(a, y)) ** 2).sum()
    jf = sm.jit(lambda a, b: sm.tanh(sm.matmul(a, b)).sum())  # plans (launch contexts) alive at exit
    jg = sm.jit(sm.grad(g))
    for _ in range(6):                                        # few distinct kernels, many calls
        for u in (sm.sin, sm.exp, sm.tanh, sm.relu):
            ok(u, x).numpy()
        ok(sm.add, x, x * 2).numpy(); ok(sm.mul, x, 1.5).numpy(); ok(sm.sum, x, axis=0).numpy(); ok(sm.sum, x)
        ok(sm.matmul, x, y).numpy(); ok(sm.matmul, big, big).numpy()   # the second through the ctypes BLAS
        ok(sm.reshape, x, (5, 4)); ok(sm.transpose, x); ok(sm.zeros, (3, 3)); ok(sm.arange, 0, 10)
        ok(sm.grad(f), v).numpy(); ok(sm.grad(g), x).numpy(); ok(sm.hessian(f), v).numpy()
        ok(jf, x, y).numpy(); ok(jg, x).numpy()
        bad(sm.matmul, x, x); bad(sm.reshape, x, (7, 3)); bad(sm.add, x, v); bad(sm.tensor, "abc")
        bad(sm.concat, [x, v]); bad(sm.zeros, (-1,)); bad(sm.grad(lambda a: a), v); bad(sm.softmax, x, axis=5)
        bad(sm.take, v, sm.tensor([0, 99], dtype="int32")); bad(sm.sum, x, axis=3); bad(sm.hessian(f), x)
        bad(sm.jit(lambda a: float(a.sum()) * a), x); bad(sm.arange, 0, 1, 0); bad(sm.mean, sm.zeros((0,)))
    bad(lambda: sm.tensor([-3, 2]) ** 2); bad(sm.ones, (3,), "bool")   # (Taichi errors on main today)
    bad(sm.grad(lambda a: (a * a).sum()), sm.tensor([1, 2], dtype="int32"))

    def replay():  # daemon threads still replaying jit plans when the interpreter exits
        while True:
            jf(x, y); jg(x)
    for _ in range(2):
        threading.Thread(target=replay, daemon=True).start()
    time.sleep(0.2)
    print(n["ok"] + n["err"], "calls", n["err"], "failed", flush=True)
""")


def test_script_with_failing_calls_exits_cleanly_every_time(tmp_path):
    script = tmp_path / "ops.py"
    script.write_text(_EXIT_SCRIPT)
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    runs = []
    for i in range(0, 6, 2):   # 6 runs, two at a time, both dtypes, different hash seeds (teardown order)
        procs = [subprocess.Popen([sys.executable, str(script), dt], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=dict(env, PYTHONHASHSEED=str(i + j)))
                 for j, dt in enumerate(("float64", "float32"))]
        runs += [(p.wait(), *p.communicate()) for p in procs]
    for rc, out, err in runs:
        assert rc == 0, f"exit status {rc}\n{out}\n{err[-3000:]}"
        assert "calls" in out and int(out.split()[0]) >= 180, out
        assert "Exception ignored" not in err and "Fatal Python error" not in err, err[-3000:]


_THREADS = textwrap.dedent("""
    import threading, numpy as np, sciml as sm
    sm.init(arch="cpu", dtype="float64")
    rng = np.random.default_rng(0)
    A, B, v0 = rng.normal(size=(24, 16)), rng.normal(size=(16, 8)), rng.normal(size=5)
    f = lambda a: (sm.sin(a) * a ** 2).sum()
    g = lambda a: (sm.tanh(sm.matmul(a, sm.tensor(B))) ** 2).mean()
    jg = sm.jit(sm.grad(g))

    def work():
        return [sm.grad(f)(sm.tensor(v0)).numpy(), sm.hessian(f)(sm.tensor(v0)).numpy(),
                sm.grad(g)(sm.tensor(A)).numpy(), sm.matmul(sm.tensor(A), sm.tensor(B)).numpy(),
                sm.hessian(lambda a: (sm.exp(sm.tanh(a)) * a).sum())(sm.tensor(v0)).numpy(),
                jg(sm.tensor(A)).numpy(), jg(sm.tensor(A[:6])).numpy()]
    results, errors = {0: [], 1: []}, []

    def run(t):
        try:
            for _ in range(6):
                results[t].append(work())
        except BaseException as e:
            errors.append(f"thread {t}: {type(e).__name__}: {e}")
    ts = [threading.Thread(target=run, args=(t,)) for t in (0, 1)]   # first calls (compilation) race too
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors, errors
    ref = work()                                                      # single thread
    for t in (0, 1):
        assert len(results[t]) == 6
        for r in results[t]:
            for k, (a, b) in enumerate(zip(r, ref)):
                assert a.shape == b.shape and np.allclose(a, b, rtol=1e-12, atol=1e-13), (t, k, abs(a - b).max())
    print("threads ok", flush=True)
""")


def test_two_threads_get_single_thread_results():
    r = subprocess.run([sys.executable, "-c", _THREADS], capture_output=True, text=True)
    assert r.returncode == 0 and "threads ok" in r.stdout, r.stdout + r.stderr[-4000:]


def test_two_threads_in_process():
    """Threads in an already running process (kernels compiled or not) agree with the main thread."""
    import threading
    rng = np.random.default_rng(1)
    a = rng.normal(size=(9, 7))
    fun = lambda t: (sm.softplus(sm.matmul(t, sm.transpose(t))) * 0.5).sum()
    ref = (sm.grad(fun)(sm.tensor(a)).numpy(), sm.hessian(lambda u: (sm.cos(u) * u).sum())(sm.tensor(a[0])).numpy())
    out, errors = [], []

    def run():
        try:
            for _ in range(5):
                out.append((sm.grad(fun)(sm.tensor(a)).numpy(),
                            sm.hessian(lambda u: (sm.cos(u) * u).sum())(sm.tensor(a[0])).numpy()))
        except BaseException as e:   # pragma: no cover - the failure being tested
            errors.append(e)
    ts = [threading.Thread(target=run) for _ in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors and len(out) == 10
    for g, h in out:
        np.testing.assert_allclose(g, ref[0], rtol=1e-13)
        np.testing.assert_allclose(h, ref[1], rtol=1e-13)


def test_grad_flags_are_per_thread():
    """no_grad in one thread does not switch recording off in another."""
    import threading
    seen = []
    inside, done = threading.Event(), threading.Event()

    def other():
        with sm.no_grad():
            inside.set()
            done.wait(5)
    t = threading.Thread(target=other)
    t.start()
    inside.wait(5)
    seen.append(sm.is_grad_enabled())
    g = sm.grad(lambda u: (u * u).sum())(sm.tensor([1.0, 2.0])).numpy()
    done.set()
    t.join()
    assert seen == [True]
    np.testing.assert_array_equal(g, [2.0, 4.0])


def test_launch_lock_is_installed():
    from taichi.lang import impl
    from taichi.lang.kernel_impl import Kernel
    sm.ones((2,)).numpy()
    assert getattr(type(impl.get_runtime().prog).launch_kernel, "sciml_raw", None) is not None
    assert getattr(Kernel.__call__, "sciml_raw", None) is not None
    launch = impl.get_runtime().prog.launch_kernel
    assert runtime.unlocked(launch) is not launch
    assert not isinstance(runtime.LAUNCH_LOCK, type(None))


def test_runtime_stopped_at_exit_refuses_clearly():
    code = ("import atexit, sciml as sm\n"
            "def late():\n"
            "    try:\n        sm.ones((2,)).numpy()\n"
            "    except RuntimeError as e:\n        print('refused:', e)\n"
            "atexit.register(late)\n"          # registered before sciml starts: runs after its shutdown
            "sm.ones((2,)).numpy()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "refused: sciml: the Taichi runtime was stopped at interpreter exit" in r.stdout, r.stdout + r.stderr
