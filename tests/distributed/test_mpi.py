"""2-rank runs under mpirun (subprocess) compared with 1 rank on the same global batch, in float64."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from . import mpi_job

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="mpirun not found: install OpenMPI (Debian: apt-get install "
                                  "openmpi-bin libopenmpi-dev) and mpi4py (pip install 'sciml[mpi]'); .ci/run does")


def _mpirun(args, timeout):
    pytest.importorskip("mpi4py", reason="mpi4py not installed (pip install 'sciml[mpi]'); .ci/run installs it")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    cmd = [MPIRUN, "-np", "2", sys.executable, os.path.join(HERE, "mpi_job.py"), *args]
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("mpi") / "train.npz"
    r = _mpirun(["train", str(out)], timeout=240)
    assert r.returncode == 0, f"mpirun failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    d = dict(np.load(out))
    d["checkpoint"] = str(out) + ".ckpt.npz"
    return d


@pytest.fixture(scope="module")
def one_rank():
    return mpi_job.run_train()


def _close(a, b, name):
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=name)


@needs_mpirun
def test_collectives_on_two_ranks(two_ranks):
    d = two_ranks
    assert int(d["world_size"]) == 2
    _close(d["coll_mean_t"], [1.5, 1.0], "mean")
    _close(d["coll_mean_a"], [[0.5]], "mean of a float32 array")
    assert int(d["coll_sum_n"]) == 7
    _close(d["coll_max"], [1.0, 0.0], "max")
    _close(d["coll_wmean"], [(0 * 1 + 10 * 2) / 3], "weighted mean")
    _close(d["coll_bcast_t"], [1.0, 1.0, 1.0], "broadcast from the last rank")
    assert float(d["coll_bcast_s"]) == 5.0


@needs_mpirun
@pytest.mark.parametrize("method", ["sgd", "adam"])
def test_two_ranks_train_like_one_rank_on_the_global_batch(two_ranks, one_rank, method):
    for k in ("W0", "b0", "W1", "b1"):
        _close(two_ranks[f"{method}_{k}"], one_rank[f"{method}_{k}"], f"{method} {k} after 10 steps")
    _close(two_ranks[f"{method}_losses"], one_rank[f"{method}_losses"], f"{method} losses")
    assert one_rank[f"{method}_losses"][-1] < one_rank[f"{method}_losses"][0]


@needs_mpirun
def test_sciml_adam_with_broadcast_parameters_and_reduced_aux(two_ranks, one_rank):
    for k in ("W0", "b0", "W1", "b1"):
        _close(two_ranks[f"smadam_{k}"], one_rank[f"smadam_{k}"], f"sciml.optim.Adam {k} after 10 steps")
        _close(two_ranks[f"smadam_{k}"], one_rank[f"adam_{k}"], f"sciml.optim.Adam vs textbook Adam {k}")
    assert abs(float(two_ranks["aux_gap"])) < 1e-12  # aux reduced in the same call as loss and grads


@needs_mpirun
def test_trainer_on_two_ranks_matches_one_rank(two_ranks, one_rank):
    keys = [k for k in one_rank if k.startswith("trainer_")]
    assert len(keys) > 2
    for k in keys:
        _close(two_ranks[k], one_rank[k], k)


@needs_mpirun
def test_weighted_mean_over_unequal_shards_is_the_global_mean(two_ranks, one_rank):
    _close(two_ranks["w_loss"], one_rank["w_loss"], "loss")
    _close(two_ranks["w_loss2"], one_rank["w_loss"], "wrap_loss value")
    for k in ("W0", "b0", "W1", "b1"):
        _close(two_ranks[f"w_g_{k}"], one_rank[f"w_g_{k}"], f"value_and_grad {k}")
        _close(two_ranks[f"w_g2_{k}"], one_rank[f"w_g_{k}"], f"wrap_loss gradient {k}")


@needs_mpirun
def test_wrapped_loss_gradient_descent_and_hvp_match_one_rank(two_ranks, one_rank):
    for k in ("W0", "b0", "W1", "b1"):
        _close(two_ranks[f"gd_{k}"], one_rank[f"gd_{k}"], f"gradient descent {k}")
        _close(two_ranks[f"hvp_{k}"], one_rank[f"hvp_{k}"], f"Hessian-vector product {k}")
    _close(two_ranks["gd_losses"], one_rank["gd_losses"], "losses")


@needs_mpirun
def test_lbfgs_on_two_ranks_matches_one_rank(two_ranks, one_rank):
    for k in ("W0", "b0", "W1", "b1"):
        np.testing.assert_allclose(two_ranks[f"lbfgs_{k}"], one_rank[f"lbfgs_{k}"], rtol=1e-8, atol=1e-10,
                                   err_msg=f"L-BFGS {k}")
    assert float(two_ranks["lbfgs_loss"]) < one_rank["sgd_losses"][0]


@needs_mpirun
def test_pinn_solve_on_two_ranks_keeps_ranks_identical_and_its_checkpoint_resumes_on_one(two_ranks):
    assert float(two_ranks["solve_gap"]) == 0.0  # rank 1 ends with rank 0's parameters, bit for bit
    assert os.path.exists(two_ranks["checkpoint"])  # written by rank 0
    _, flat = mpi_job.pinn_solve(checkpoint=two_ranks["checkpoint"])  # 1 rank: resumes at the end
    np.testing.assert_array_equal(flat, two_ranks["solve_params"])


@needs_mpirun
def test_newton_cg_on_two_ranks_matches_one_rank(two_ranks, one_rank):
    for k in ("W0", "b0", "W1", "b1"):
        np.testing.assert_allclose(two_ranks[f"newton_{k}"], one_rank[f"newton_{k}"], rtol=1e-8, atol=1e-10,
                                   err_msg=f"Newton-CG {k}")
    assert float(two_ranks["newton_loss"]) < one_rank["sgd_losses"][0]


@needs_mpirun
def test_levenberg_marquardt_on_wrapped_residuals_matches_one_rank(two_ranks, one_rank):
    for k in ("W0", "b0", "W1", "b1"):
        np.testing.assert_allclose(two_ranks[f"lm_{k}"], one_rank[f"lm_{k}"], rtol=1e-8, atol=1e-10,
                                   err_msg=f"Levenberg-Marquardt {k}")
    np.testing.assert_allclose(two_ranks["lm_loss"], one_rank["lm_loss"], rtol=1e-10)


@needs_mpirun
def test_a_rank_that_leaves_makes_the_other_fail_with_a_timeout_message(tmp_path):
    out = tmp_path / "die.txt"
    r = _mpirun(["die", str(out)], timeout=180)  # the job sets a 3 s timeout once both ranks are up
    assert r.returncode != 0
    assert "timed out on rank 0 of 2 after 3 s" in r.stderr, r.stderr  # the watchdog (default)
    assert "Aborting the MPI job" in r.stderr
    text = out.read_text()
    assert text.startswith("raised: sciml.distributed: all_reduce(op='mean') of 1 numbers timed out on rank 0 of 2 "
                           "after 3 s"), text  # on_timeout="raise": polled, an exception
    assert "rank 0 was not stopped" not in text
