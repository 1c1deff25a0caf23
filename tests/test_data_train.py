"""DataLoader (batching, seeded shuffling, drop_last) and Trainer (fit, metrics, checkpoint/resume, NaN)."""
import sys

import numpy as np
import pytest

import sciml as sm
from sciml.data import DataLoader, train_test_split
from sciml.models import MLP, accuracy, cross_entropy, mse
from sciml.optim import Adam
from sciml.train import Trainer

R = np.random.default_rng(0)
X = R.normal(size=(50, 3))
Y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)


def test_loader_batches_shuffle_drop_last():
    dl = DataLoader(X, Y, batch_size=16)
    bs = list(dl)
    assert len(dl) == 4 and [b[0].shape[0] for b in bs] == [16, 16, 16, 2]
    np.testing.assert_array_equal(bs[0][0].numpy(), X[:16])
    assert bs[0][1].dtype == "int32"
    dl2 = DataLoader(X, Y, batch_size=16, shuffle=True, seed=3, drop_last=True)
    assert len(dl2) == 3
    e0, e1 = list(dl2), list(dl2)
    assert not np.array_equal(e0[0][0].numpy(), e1[0][0].numpy())        # new permutation per epoch
    again = list(DataLoader(X, Y, batch_size=16, shuffle=True, seed=3, drop_last=True).batches(epoch=1))
    np.testing.assert_array_equal(again[2][0].numpy(), e1[2][0].numpy())  # function of (seed, epoch)
    rows = np.concatenate([b[0].numpy() for b in DataLoader(X, batch_size=7, shuffle=True)])
    np.testing.assert_array_equal(np.sort(rows, 0), np.sort(X, 0))
    a, b, c, d = train_test_split(X, Y, test_size=0.2, seed=0)
    assert a.shape == (40, 3) and b.shape == (10, 3) and c.shape == (40,)


def test_loader_errors():
    with pytest.raises(ValueError, match=r"array 1 has shape \(3,\); expected first dimension 50"):
        DataLoader(X, Y[:3])
    with pytest.raises(ValueError, match="batch_size=0"):
        DataLoader(X, batch_size=0)


def _trainer(tmp_path=None, every=None, **kw):
    net = MLP([3, 8, 2], activation=sm.relu, seed=0)
    return Trainer(net, cross_entropy, Adam(net.parameters(), lr=0.05), metrics={"accuracy": accuracy},
                   checkpoint=None if tmp_path is None else tmp_path / "ck.npz", checkpoint_every=every,
                   progress=False, **kw)


def test_fit_learns_and_evaluates():
    tr = _trainer()
    h = tr.fit(DataLoader(X, Y, batch_size=10, shuffle=True), epochs=8, val=(X, Y))
    assert len(h["loss"]) == 40 and h["loss"][-1] < h["loss"][0]
    ev = tr.evaluate((X, Y))
    assert ev["accuracy"] > 0.9 and ev == h["val"][-1]


def test_checkpoint_resume_equals_uninterrupted(tmp_path):
    full = _trainer()
    full.fit(DataLoader(X, Y, batch_size=10, shuffle=True), epochs=3)
    part = _trainer(tmp_path, every=7)
    part.fit(DataLoader(X, Y, batch_size=10, shuffle=True), epochs=3, max_steps=9)   # checkpoint at step 7
    resumed = _trainer()
    resumed.checkpoint = tmp_path / "ck.npz"
    resumed.fit(DataLoader(X, Y, batch_size=10, shuffle=True), epochs=3, resume=tmp_path / "ck.npz")
    assert resumed.step == 15 and len(resumed.history["loss"]) == 15
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=0)
    np.testing.assert_allclose(full.history["loss"], resumed.history["loss"])


def _dropout_net():
    from sciml.models import Dropout, Linear, ReLU, Sequential
    return Sequential(Linear(3, 16, seed=0), ReLU(), Dropout(0.3, seed=5), Linear(16, 16, seed=1), ReLU(),
                      Dropout(0.2, seed=6), Linear(16, 2, seed=2))


def test_checkpoint_resume_with_dropout_equals_uninterrupted(tmp_path):
    """The Dropout streams are part of the model state: a resumed run draws the same masks."""
    def trainer(ck=None, every=None):
        net = _dropout_net()
        return Trainer(net, cross_entropy, Adam(net.parameters(), lr=0.05), checkpoint=ck, checkpoint_every=every,
                       progress=False)
    full = trainer()
    full.fit(DataLoader(X, Y, batch_size=10, shuffle=True), epochs=2)
    part = trainer(tmp_path / "ck.npz", every=5)
    part.fit(DataLoader(X, Y, batch_size=10, shuffle=True), epochs=2, max_steps=8)  # checkpoint at step 5
    resumed = trainer(tmp_path / "ck.npz")
    resumed.fit(DataLoader(X, Y, batch_size=10, shuffle=True), epochs=2, resume=tmp_path / "ck.npz")
    assert resumed.step == 10
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(full.history["loss"], resumed.history["loss"])


def test_model_and_optimizer_state_resume_with_dropout(tmp_path):
    """N steps uninterrupted == N/2 steps, save model + optimizer, load into fresh objects, N/2 steps."""
    x, y = sm.tensor(X), Y.astype(np.int32)

    def steps(net, opt, k):
        vg = sm.value_and_grad(lambda p: cross_entropy(net.apply(p, x), y))
        for _ in range(k):
            opt.step(vg(net.params())[1])

    a = _dropout_net()
    oa = Adam(a.parameters(), lr=0.05)
    steps(a, oa, 6)
    b = _dropout_net()
    ob = Adam(b.parameters(), lr=0.05)
    steps(b, ob, 3)
    b.save(tmp_path / "m.npz")
    osd = ob.state_dict()
    c = _dropout_net().load(tmp_path / "m.npz")          # fresh objects: streams at their seeds until loaded
    oc = Adam(c.parameters(), lr=0.05)
    oc.load_state_dict(osd)
    steps(c, oc, 3)
    for p, q in zip(a.parameters(), c.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    d = _dropout_net()                                    # without the saved stream the run differs
    d.load_state_dict({k: v for k, v in b.state_dict().items() if "rng_state" not in k}, strict=False)
    od = Adam(d.parameters(), lr=0.05)
    od.load_state_dict(osd)
    steps(d, od, 3)
    assert not np.array_equal(a.parameters()[0].numpy(), d.parameters()[0].numpy())


def test_nan_loss_raises_with_step():
    net = MLP([3, 4, 1], seed=0)
    tr = Trainer(net, mse, Adam(lr=0.01), progress=False)
    Yr = R.normal(size=(50, 1))
    Yr[25:] = np.nan
    with pytest.raises(FloatingPointError, match="the loss is nan at step 2 "):
        tr.fit(DataLoader(X, Yr, batch_size=10), epochs=1)


# --- callbacks, metrics, progress (issue 16) ------------------------------------------------------
import io
import logging
import os

from sciml.train import BestCheckpoint, Callback, EarlyStopping, LogMetrics, LROnPlateau


class _Record(Callback):
    def __init__(self):
        self.events = []

    def on_train_begin(self, tr):
        self.events.append("begin")

    def on_epoch_begin(self, tr, epoch):
        self.events.append(f"e{epoch}")

    def on_batch_end(self, tr, step, loss):
        self.events.append(step)

    def on_epoch_end(self, tr, epoch, logs):
        self.events.append(sorted(logs))

    def on_train_end(self, tr):
        self.events.append("end")


def test_callback_hooks_and_epoch_logs():
    rec = _Record()
    tr = _trainer(callbacks=[rec])
    h = tr.fit(DataLoader(X, Y, batch_size=25), epochs=2, val=(X, Y))
    keys = ["loss", "lr", "val_accuracy", "val_loss"]
    assert rec.events == ["begin", "e1", 1, 2, keys, "e2", 3, 4, keys, "end"]
    assert h["epochs"][1]["val_accuracy"] == h["val"][1]["accuracy"]
    assert h["epochs"][0]["loss"] == pytest.approx(np.mean(h["loss"][:2]))
    with pytest.raises(TypeError, match="expected a sciml.train.Callback"):
        _trainer(callbacks=[print])


def test_early_stopping_and_restore_best():
    net = MLP([3, 8, 2], activation=sm.relu, seed=0)
    es = EarlyStopping(monitor="loss", patience=1, restore_best=True)
    tr = Trainer(net, cross_entropy, Adam(net.parameters(), lr=0.0), callbacks=[es], progress=False)
    tr.fit(DataLoader(X, Y, batch_size=25), epochs=10)     # lr 0: the loss never improves after epoch 1
    assert tr.epoch == 3 and es.stopped_epoch == 3
    with pytest.raises(KeyError, match="val_loss"):
        Trainer(net, cross_entropy, Adam(net.parameters()), callbacks=[EarlyStopping()], progress=False).fit(
            DataLoader(X, Y, batch_size=25), epochs=1)


def test_best_checkpoint_and_lr_on_plateau(tmp_path):
    best = BestCheckpoint(tmp_path / "best.npz", monitor="val_accuracy")
    plateau = LROnPlateau(monitor="loss", factor=0.5, patience=0)
    tr = _trainer(callbacks=[best, plateau])
    tr.fit(DataLoader(X, Y, batch_size=10, shuffle=True), epochs=4, val=(X, Y))
    assert best.best_epoch is not None and os.listdir(tmp_path) == ["best.npz"]
    saved = sm.load(tmp_path / "best.npz")
    assert set(saved) == set(tr.model.state_dict())
    lrs = [e["lr"] for e in tr.history["epochs"]]
    assert all(b <= a for a, b in zip(lrs, lrs[1:]))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        BestCheckpoint(tmp_path / "nope" / "b.npz")
    with pytest.raises(FileNotFoundError, match="does not exist"):          # checked before any training
        _trainer(checkpoint=tmp_path / "nope" / "ck.npz", every=1) if False else Trainer(
            MLP([3, 2], seed=0), cross_entropy, Adam(), checkpoint=tmp_path / "nope" / "ck.npz", checkpoint_every=1)


def test_checkpoint_write_is_atomic_and_load_errors(tmp_path):
    tr = _trainer(tmp_path, every=2)
    tr.fit(DataLoader(X, Y, batch_size=10), epochs=1)
    assert sorted(os.listdir(tmp_path)) == ["ck.npz"]
    (tmp_path / "bad.npz").write_bytes(b"junk")
    with pytest.raises(ValueError, match="bad.npz.*cannot read"):
        _trainer().load_checkpoint(tmp_path / "bad.npz")
    np.savez(tmp_path / "other.npz", a=np.ones(1))
    with pytest.raises(ValueError, match="'opt_step' is missing"):
        _trainer().load_checkpoint(tmp_path / "other.npz")


def test_frozen_parameters_stay_frozen_in_fit():
    tr = _trainer()
    w = tr.model.layers[0].weight
    w.requires_grad_(False)
    w0 = w.numpy()
    tr.fit(DataLoader(X, Y, batch_size=10), epochs=1)
    np.testing.assert_array_equal(w.numpy(), w0)
    assert not np.allclose(tr.model.layers[0].bias.numpy(), 0)


def test_progress_to_a_log_file_has_no_carriage_returns(capsys, caplog):
    tr = _trainer(progress=True) if False else Trainer(MLP([3, 8, 2], seed=0), cross_entropy,
                                                       Adam(lr=0.05), progress=True)
    with caplog.at_level(logging.INFO, logger="sciml"):
        tr.fit(DataLoader(X, Y, batch_size=10), epochs=2, val=(X, Y))
    out = capsys.readouterr()
    assert "\r" not in out.out and "\r" not in out.err
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch")]
    assert len(lines) == 2 and lines[0].startswith("epoch 1/2  loss ") and "val_loss" in lines[0]
    assert "samples/s" in lines[0] and lines[0].count("loss ") == 2      # loss and val_loss, nothing repeated


class _TTY(io.StringIO):
    def isatty(self):
        return True


def _render(text):
    """What a terminal shows: '\\r' returns to column 0 and later characters overwrite; ANSI escapes dropped."""
    import re
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    shown = []
    for line in text.split("\n"):
        buf = []
        col = 0
        for ch in line:
            if ch == "\r":
                col = 0
                continue
            if col < len(buf):
                buf[col] = ch
            else:
                buf.append(ch)
            col += 1
        shown.append("".join(buf).rstrip())
    return [s for s in shown if s]


def test_terminal_bar_renders_cleanly(monkeypatch, caplog):
    tty = _TTY()
    monkeypatch.setattr(sys, "stderr", tty)
    tr = Trainer(MLP([3, 8, 2], seed=0), cross_entropy, Adam(lr=0.05), progress=True, log_every=1)
    handler = logging.StreamHandler(tty)
    logging.getLogger("sciml").addHandler(handler)
    caplog.set_level(logging.INFO, logger="sciml")
    try:
        tr.fit(DataLoader(X, Y, batch_size=10), epochs=2)
    finally:
        logging.getLogger("sciml").removeHandler(handler)
    raw = tty.getvalue()
    assert "epoch 1/2" in raw and "samples/s" in raw and "<" in raw      # the bar was drawn, with elapsed<ETA
    shown = _render(raw)
    epoch_lines = [s for s in shown if s.startswith("epoch")]
    # the bar is cleared when an epoch ends: what stays on screen is one clean line per epoch
    assert len(epoch_lines) >= 2 and all(s.count("samples/s") == 1 and "%|" not in s for s in epoch_lines)
    assert all(s.startswith("epoch 1/2  loss ") or s.startswith("epoch 2/2  loss ") for s in epoch_lines)
