"""Per-rank GPU selection (sciml.distributed.devices): a pure function of the launcher's environment,
tested on CPU with fake environments."""
import pytest

from sciml.distributed import devices as D


def test_local_rank_sources_and_order():
    assert D.local_rank({}) is None
    assert D.local_rank({"OMPI_COMM_WORLD_LOCAL_RANK": "3"}) == 3
    assert D.local_rank({"MPI_LOCALRANKID": "2"}) == 2
    assert D.local_rank({"SLURM_LOCALID": "1"}) == 1
    assert D.local_rank({"MV2_COMM_WORLD_LOCAL_RANK": "5", "SLURM_LOCALID": "0"}) == 5  # the MPI's own first
    assert D.local_rank({"OMPI_COMM_WORLD_LOCAL_RANK": "", "SLURM_LOCALID": "4"}) == 4
    assert D.local_size({"OMPI_COMM_WORLD_LOCAL_SIZE": "8"}) == 8
    with pytest.raises(ValueError, match="OMPI_COMM_WORLD_LOCAL_RANK='x'.*not an integer"):
        D.local_rank({"OMPI_COMM_WORLD_LOCAL_RANK": "x"})
    with pytest.raises(ValueError, match="SLURM_LOCALID='-1' is negative"):
        D.local_rank({"SLURM_LOCALID": "-1"})


def test_visible_cuda_devices_parsing():
    assert D.visible_cuda_devices({}) is None
    assert D.visible_cuda_devices({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert D.visible_cuda_devices({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert D.visible_cuda_devices({"CUDA_VISIBLE_DEVICES": "GPU-ab12, MIG-cd34"}) == ["GPU-ab12", "MIG-cd34"]
    assert D.visible_cuda_devices({"CUDA_VISIBLE_DEVICES": "1,-1,2"}) == ["1"]  # CUDA stops at -1


@pytest.mark.parametrize("lr,n,want", [(0, 4, 0), (1, 4, 1), (3, 4, 3), (5, 4, 1), (2, 1, 0)])
def test_cuda_index_is_local_rank_mod_count(lr, n, want):
    p = D.plan("cuda", {"OMPI_COMM_WORLD_LOCAL_RANK": str(lr)}, n_devices=n)
    assert (p.index, p.device, p.env) == (want, str(want), {"CUDA_VISIBLE_DEVICES": str(want)})


def test_cuda_maps_through_the_visible_list():
    env = {"SLURM_LOCALID": "1", "CUDA_VISIBLE_DEVICES": "4,6", "SLURM_NTASKS_PER_NODE": "2"}
    p = D.plan("cuda", env, n_devices=8)  # the list wins over the node count
    assert (p.n_devices, p.index, p.device, p.shared) == (2, 1, "6", False)
    assert p.env == {"CUDA_VISIBLE_DEVICES": "6"}
    p = D.plan("cuda", {"MPI_LOCALRANKID": "0", "CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb"})
    assert p.device == "GPU-aa"


def test_vulkan_uses_ti_visible_device_and_no_launcher_means_device_0():
    p = D.plan("vulkan", {"OMPI_COMM_WORLD_LOCAL_RANK": "3"}, n_devices=2)
    assert p.env == {"TI_VISIBLE_DEVICE": "1"} and p.device is None
    p = D.plan("cuda", {}, n_devices=3)
    assert (p.local_rank, p.index, p.env) == (None, 0, {"CUDA_VISIBLE_DEVICES": "0"})


def test_override_and_errors():
    p = D.plan("cuda", {"OMPI_COMM_WORLD_LOCAL_RANK": "1", "SCIML_DEVICE_INDEX": "0"}, n_devices=2)
    assert p.index == 0
    with pytest.raises(ValueError, match="SCIML_DEVICE_INDEX=2 but only 2"):
        D.plan("cuda", {"SCIML_DEVICE_INDEX": "2"}, n_devices=2)
    with pytest.raises(ValueError, match="empty list"):
        D.plan("cuda", {"CUDA_VISIBLE_DEVICES": ""})
    with pytest.raises(ValueError, match="no GPU was found"):
        D.plan("cuda", {}, n_devices=0)
    with pytest.raises(ValueError, match="expected one of"):
        D.plan("metal", {})
    with pytest.raises(ValueError, match="n_devices"):
        D.plan("vulkan", {}, n_devices=-1)


def test_bind_applies_to_the_given_env_and_warns_when_shared():
    env = {"OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "CUDA_VISIBLE_DEVICES": "0,1"}
    with pytest.warns(UserWarning, match="4 ranks on this node share 2 cuda"):
        p = D.bind_local_device("cuda", env)
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and p.index == 0 and p.shared
    env = {"OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    D.bind_local_device("vulkan", env, n_devices=2)
    assert env["TI_VISIBLE_DEVICE"] == "1"
    env = {"OMPI_COMM_WORLD_LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": ""}
    assert D.bind_local_device("cuda", env, required=False) is None and env["CUDA_VISIBLE_DEVICES"] == ""
    with pytest.raises(D.NoDeviceError):
        D.bind_local_device("cuda", env)
    with pytest.raises(ValueError, match="not an integer"):  # a broken launcher variable still raises
        D.bind_local_device("cuda", {"SLURM_LOCALID": "a"}, n_devices=1, required=False)


def test_bind_after_taichi_started_refuses_a_change(monkeypatch):
    import sciml as sm
    sm.init(arch="cpu")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(RuntimeError, match="already started"):
        D.bind_local_device("cuda")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # already narrowed to the right one: fine
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0")
    assert D.bind_local_device("cuda").device == "1"


def test_cuda_aware_mpi_detection():
    class Yes:
        @staticmethod
        def Query_cuda_support():
            return True

    class Raises:
        @staticmethod
        def Query_cuda_support():
            raise NotImplementedError

    class Old:
        pass
    assert D.cuda_aware_mpi(Yes, {}) is True
    assert D.cuda_aware_mpi(Raises, {}) is False
    assert D.cuda_aware_mpi(Old, {}) is False
    assert D.cuda_aware_mpi(Yes, {"SCIML_CUDA_AWARE_MPI": "0"}) is False
    assert D.cuda_aware_mpi(Old, {"SCIML_CUDA_AWARE_MPI": "1"}) is True
    with pytest.raises(ValueError, match="SCIML_CUDA_AWARE_MPI='maybe'"):
        D.cuda_aware_mpi(Old, {"SCIML_CUDA_AWARE_MPI": "maybe"})


def test_cuda_aware_mpi_of_the_installed_mpi():
    pytest.importorskip("mpi4py")
    import ctypes
    got = D.cuda_aware_mpi(env={})
    assert isinstance(got, bool)
    try:
        sym = ctypes.CDLL(None).MPIX_Query_cuda_support
    except AttributeError:
        return
    sym.restype = ctypes.c_int
    from mpi4py import MPI
    if not hasattr(MPI, "Query_cuda_support"):
        assert got == bool(sym())  # the Open MPI extension's answer (0 for a build without CUDA)


MPIRUN = __import__("shutil").which("mpirun")


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not found (OpenMPI); .ci/run installs it")
def test_two_ranks_under_mpirun_pick_different_devices(tmp_path):
    # the real launcher's variables: each of 2 local ranks gets its own device of 2 (no sciml import needed);
    # each rank writes its own file (two ranks printing at once can interleave on mpirun's stdout)
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import os, sys; from sciml.distributed import devices as d; p = d.plan('cuda', n_devices=2); "
            "open(os.path.join(sys.argv[1], f'rank{p.local_rank}'), 'w')"
            ".write(f'{p.local_rank} {p.local_size} {p.env[\"CUDA_VISIBLE_DEVICES\"]}')")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    r = subprocess.run([MPIRUN, "-np", "2", sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, f"mpirun failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    assert [(tmp_path / f"rank{k}").read_text().split() for k in range(2)] == [["0", "2", "0"], ["1", "2", "1"]]


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not found (OpenMPI); .ci/run installs it")
def test_dist_init_binds_each_rank_to_its_own_gpu(tmp_path):
    # sciml.distributed.init() under mpirun narrows CUDA_VISIBLE_DEVICES to the rank's device (before Taichi);
    # each rank writes its own file (two ranks printing at once can interleave on mpirun's stdout)
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import os, sys, sciml.distributed as dist; r, n = dist.init(); "
            "open(os.path.join(sys.argv[1], f'rank{r}'), 'w').write(os.environ.get('CUDA_VISIBLE_DEVICES', ''))")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", CUDA_VISIBLE_DEVICES="0,1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def run(sub):
        out = tmp_path / sub
        out.mkdir()
        r = subprocess.run([MPIRUN, "-np", "2", sys.executable, "-c", code, str(out)], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, f"mpirun failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
        return [(out / f"rank{k}").read_text() for k in range(2)]

    assert run("bound") == ["0", "1"]
    env["SCIML_BIND_DEVICE"] = "0"
    assert run("off") == ["0,1", "0,1"]
