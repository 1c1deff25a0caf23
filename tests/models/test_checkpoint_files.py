"""Module.save / Module.load / load_state on disk: atomic writes (real SIGKILLs), stale temporary
files, and clear errors (naming the file) for junk, truncated, incomplete, misshapen or
non-finite checkpoints."""
import glob
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP, Module, load_state
from sciml.models import module as module_mod


def _temps(folder, name):
    return glob.glob(os.path.join(folder, "." + name + ".*.tmp*"))


def _filled(v, sizes=(3, 4, 2)):
    net = MLP(list(sizes), seed=0)
    for p in net.parameters():
        p._assign(np.full(p.shape, float(v)))
    return net


@pytest.mark.parametrize("name", ["m.npz", "m.safetensors"])
def test_save_round_trip_leaves_no_temp(tmp_path, name):
    a, b = MLP([3, 4, 2], seed=0), MLP([3, 4, 2], seed=1)
    assert a.save(tmp_path / name) == str(tmp_path / name)
    assert a.save(tmp_path / name) == str(tmp_path / name)   # over an existing file
    b.load(tmp_path / name)
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        np.testing.assert_array_equal(x, y, err_msg=k)
    assert sorted(os.listdir(tmp_path)) == [name]
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(tmp_path / name).st_mode & 0o777 == 0o666 & ~umask   # as a plain open() makes it


def test_save_without_suffix_appends_npz(tmp_path):
    a = MLP([3, 4, 2], seed=0)
    assert a.save(tmp_path / "m") == str(tmp_path / "m.npz")
    b = MLP([3, 4, 2], seed=1).load(tmp_path / "m")           # load finds m.npz, as before
    np.testing.assert_array_equal(a.layers[0].weight.numpy(), b.layers[0].weight.numpy())


def test_save_error_keeps_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "m.npz"
    _filled(1).save(path)

    def boom(*a, **k):
        raise OSError("disk full (simulated)")
    monkeypatch.setattr(module_mod.np, "savez", boom)
    with pytest.raises(OSError, match="disk full"):
        _filled(2).save(path)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["m.npz"]
    assert all((v == 1).all() for v in load_state(path).values())


def test_save_to_missing_folder_fails_before_writing(tmp_path):
    with pytest.raises(FileNotFoundError, match="MLP.save.*does not exist"):
        _filled(1).save(tmp_path / "nope" / "m.npz")
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(ValueError, match="MLP.save.*is a folder"):
        _filled(1).save(tmp_path / "d.npz")
    assert os.listdir(tmp_path) == ["d.npz"]


def test_stale_temp_of_a_killed_writer_is_removed_next_save(tmp_path):
    path = tmp_path / "m.npz"
    stale = tmp_path / ".m.npz.abc123.tmp.npz"
    stale.write_bytes(b"half a checkpoint")
    old = time.time() - 60
    os.utime(stale, (old, old))
    other = tmp_path / ".other.npz.abc123.tmp.npz"            # another target's: not touched
    other.write_bytes(b"x")
    os.utime(other, (old, old))
    busy = tmp_path / ".m.npz.busy99.tmp.npz"                  # a live writer holds its lock: not touched
    busy.write_bytes(b"in flight")
    os.utime(busy, (old, old))
    with open(busy, "rb") as f:
        assert module_mod._lock(f)
        _filled(1).save(path)
        assert sorted(os.listdir(tmp_path)) == sorted([".other.npz.abc123.tmp.npz", ".m.npz.busy99.tmp.npz", "m.npz"])
    _filled(2).save(path)   # the lock is gone: now it is a dead writer's
    assert sorted(os.listdir(tmp_path)) == [".other.npz.abc123.tmp.npz", "m.npz"]


# --- loading bad files: clear errors that name the file ------------------------------------------
def _good(tmp_path, name="good.npz"):
    p = tmp_path / name
    _filled(1).save(p)
    return p


@pytest.mark.parametrize("ext", [".npz", ".safetensors"])
def test_junk_and_truncated_files(tmp_path, ext):
    junk = tmp_path / ("junk" + ext)
    junk.write_bytes(b"this is not a checkpoint at all\n" * 10)
    with pytest.raises(ValueError, match=f"load_state.*junk{ext}.*not a complete {ext} checkpoint"):
        _filled(0).load(junk)
    data = _good(tmp_path, "good" + ext).read_bytes()
    for cut in (1, 9, len(data) // 3, len(data) // 2, len(data) - 7):
        t = tmp_path / (f"cut{cut}" + ext)
        t.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=f"cut{cut}{ext}.*not a complete {ext} checkpoint"):
            _filled(0).load(t)
    empty = tmp_path / ("empty" + ext)
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty" + ext):
        load_state(empty)


def test_missing_file_folder_and_npy(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.npz"):
        _filled(0).load(tmp_path / "nothere.npz")
    with pytest.raises(ValueError, match="is a folder"):
        load_state(tmp_path)
    np.save(tmp_path / "single.npy", np.zeros(3))
    with pytest.raises(ValueError, match="single.npy.*single .npy array"):
        load_state(tmp_path / "single.npy")
    np.savez(tmp_path / "obj.npz", a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(ValueError, match="obj.npz"):
        load_state(tmp_path / "obj.npz")


def test_missing_keys_and_wrong_shapes_name_the_file(tmp_path):
    sd = _filled(1).state_dict()
    del sd["layers.1.bias"]
    np.savez(tmp_path / "missing.npz", **sd)
    with pytest.raises(KeyError, match=r"MLP.load\('.*missing.npz'\).*missing keys \['layers.1.bias'\]"):
        _filled(0).load(tmp_path / "missing.npz")
    net = _filled(0)
    assert net.load(tmp_path / "missing.npz", strict=False) is net
    assert (net.layers[0].weight.numpy() == 1).all() and (net.layers[1].bias.numpy() == 0).all()
    _filled(1, sizes=(3, 5, 2)).save(tmp_path / "wide.npz")
    with pytest.raises(ValueError, match=r"MLP.load\('.*wide.npz'\).*'layers.0.weight' has shape \(3, 5\)"):
        _filled(0).load(tmp_path / "wide.npz")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("ext", [".npz", ".safetensors"])
def test_nonfinite_values_refused_unless_allowed(tmp_path, bad, ext):
    net = _filled(1)
    w = np.ones(net.layers[1].weight.shape)
    w[0, 0] = bad
    net.layers[1].weight._assign(w)
    p = tmp_path / ("nan" + ext)
    net.save(p)
    other = _filled(0)
    with pytest.raises(ValueError, match=r"nan" + ext + r".*'layers.1.weight' holds 1 non-finite value.*allow_nonfinite=True"):
        other.load(p)
    assert (other.layers[1].weight.numpy() == 0).all()        # nothing was loaded
    other.load(p, allow_nonfinite=True)
    np.testing.assert_array_equal(other.layers[1].weight.numpy(), w)


# --- SIGKILL during saves: the file is always one complete version --------------------------------
_SERVER = textwrap.dedent("""
    import os, sys
    import numpy as np
    import sciml as sm
    sm.init(arch="cpu", dtype="float32")
    from sciml.models import MLP
    path = sys.argv[1]
    nets = []
    for v in range(4):
        net = MLP([256, 768, 768, 1], seed=0)        # ~0.8M float32 parameters: ~3 MB per save
        for p in net.parameters():
            p._assign(np.full(p.shape, float(v), np.float32))
        nets.append(net)
    nets[0].save(path)
    for p in nets[0].parameters():                  # take every Taichi kernel before forking
        p.numpy()
    print("ready", flush=True)
    child = None
    for line in sys.stdin:
        if child is not None:
            os.waitpid(child, 0)
        child = os.fork()
        if child == 0:                               # a writer saving versions 0..3 round robin until killed
            i = int(line)
            while True:
                nets[i % 4].save(path)
                i += 1
        print(child, flush=True)
""")


def test_sigkill_during_saves_never_loses_the_file(tmp_path):
    path = str(tmp_path / "ckpt.npz")
    server = subprocess.Popen([sys.executable, "-c", _SERVER, path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    rng = random.Random(0)
    in_flight = 0
    try:
        assert server.stdout.readline().strip() == "ready"
        kills = 16
        for k in range(kills):
            server.stdin.write(f"{k}\n")
            server.stdin.flush()
            pid = int(server.stdout.readline())
            time.sleep(rng.uniform(0.005, 0.08))
            os.kill(pid, signal.SIGKILL)
            while True:   # the server reaps it on the next line; wait until it is really dead here
                try:
                    os.kill(pid, 0)
                    with open(f"/proc/{pid}/stat") as f:
                        if f.read().split(")")[-1].split()[0] == "Z":
                            break
                except (ProcessLookupError, FileNotFoundError):
                    break
                time.sleep(0.001)
            state = load_state(path)                                  # always loads...
            vals = {float(v.flat[0]) for v in state.values()}
            assert len(vals) == 1 and vals <= {0.0, 1.0, 2.0, 3.0}, vals  # ...and is one whole version
            assert all((v == v.flat[0]).all() for v in state.values())
            assert len(state) == 6
            temps = _temps(str(tmp_path), "ckpt.npz")
            in_flight += bool(temps)
            assert len(temps) <= k + 1    # at most one per killed writer
    finally:
        server.stdin.close()
        server.kill()
        server.wait()
    assert in_flight >= 1, "no kill landed during a write: the test did not test anything"
    time.sleep(module_mod.STALE_AFTER_S + 0.1)
    net = MLP([256, 768, 768, 1], seed=0)
    net.save(path)                                                    # the next save cleans up
    assert os.listdir(tmp_path) == ["ckpt.npz"]
