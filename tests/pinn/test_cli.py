"""`sciml solve ...`: tiny runs (in process, through sciml.cli.main), and every bad flag refused
before anything trains."""
import pytest

from sciml.cli import main
from sciml.pinn import problems


def _result_line(out, name):
    lines = [ln for ln in out.splitlines() if ln.startswith(f"{name}: relative L2 error")]
    assert len(lines) == 1, out
    return lines[0]


def test_solve_poisson_prints_one_result_line_and_writes_a_plot(tmp_path, capsys, monkeypatch):
    from sciml.pinn import plot
    drawn = []
    real = plot.plot_result
    monkeypatch.setattr(plot, "plot_result", lambda r, *a, **k: drawn.append(r.history) or real(r, *a, **k))
    png = tmp_path / "poisson.png"
    rc = main(["solve", "poisson", "--dtype", "float64", "--steps", "3,2", "--points", "64",
               "--net", "8x2", "--plot", str(png), "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0
    line = _result_line(out, "poisson")
    assert "max abs error" in line and line.rstrip().endswith("derivatives)")
    assert out.strip().splitlines() == [line]          # --quiet: the result line only
    assert png.stat().st_size > 1000
    (h,) = drawn                                         # the plot marks the Adam -> L-BFGS switch
    assert h["stage_step"][-1] == 3 and h["stage_name"][-1] == "L-BFGS"


@pytest.mark.parametrize("name", ["burgers", "heat", "wave", "helmholtz"])
def test_solve_each_problem_runs(name, capsys):
    rc = main(["solve", name, "--dtype", "float64", "--steps", "2,0", "--points", "32",
               "--net", "4x1", "--quiet"])
    assert rc == 0
    _result_line(capsys.readouterr().out, name)


def test_list_shows_one_line_per_problem(capsys):
    assert main(["solve", "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == list(problems.PROBLEMS)
    assert all(len(ln.split(None, 1)[1]) > 20 for ln in lines)     # a description on each


@pytest.fixture
def no_training(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("training started although an argument was bad")
    monkeypatch.setattr(problems.Setup, "run", refuse)


@pytest.mark.parametrize("argv, flag, says", [
    (["navier"], None, "invalid choice: 'navier'"),
    (["poisson", "--steps", "a,b"], "--steps", "expected ADAM[,SECOND] step counts"),
    (["poisson", "--steps", "0,0"], "--steps", "nothing would be trained"),
    (["poisson", "--steps", "-1"], "--steps", ">= 0"),
    (["poisson", "--steps", "1,2,3"], "--steps", "one or two step counts"),
    (["poisson", "--net", "0x0"], "--net", "every number >= 1"),
    (["poisson", "--net", "32,0"], "--net", "every number >= 1"),
    (["poisson", "--net", "wide"], "--net", "WIDTHxDEPTH"),
    (["poisson", "--points", "0"], "--points", "expected a number of points >= 1"),
    (["poisson", "--log-every", "0"], "--log-every", ">= 1"),
    (["poisson", "--seed", "-3"], "--seed", ">= 0"),
    (["poisson", "--arch", "foo"], "--arch", "invalid choice: 'foo'"),
    (["poisson", "--dtype", "float16"], "--dtype", "invalid choice"),
    (["poisson", "--optimizer", "sgd"], "--optimizer", "invalid choice"),
    (["poisson", "--loss", "l1"], "--loss", "invalid choice"),
    (["poisson", "--verbose", "--quiet"], "--quiet", "not allowed with argument --verbose"),
    ([], None, "give a PROBLEM"),
])
def test_bad_arguments_are_refused_naming_the_flag(argv, flag, says, capsys, no_training):
    with pytest.raises(SystemExit) as e:
        main(["solve", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert says in err, err
    if flag:
        assert f"argument {flag}" in err, err


@pytest.mark.parametrize("plot, says", [
    ("missing-folder/x.png", "does not exist"),
    ("x.docx", "has suffix '.docx'; expected one of"),
])
def test_a_bad_plot_path_fails_before_training(plot, says, tmp_path, capsys, no_training):
    assert main(["solve", "poisson", "--plot", str(tmp_path / plot)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sciml solve: error: --plot:") and says in err and "\n" not in err, err


def test_verbose_reaches_solve(monkeypatch, capsys):
    seen = {}

    class Stop(Exception):
        pass

    def fake_run(self, **kw):
        seen.update(kw)
        raise Stop
    monkeypatch.setattr(problems.Setup, "run", fake_run)
    with pytest.raises(Stop):
        main(["solve", "heat", "--dtype", "float64", "--verbose", "--steps", "1,1", "--log-every", "5"])
    assert seen["verbose"] is True and seen["log_every"] == 5 and seen["steps"] == (1, 1)


def test_restore_best_reaches_solve_and_the_result_line(capsys):
    rc = main(["solve", "poisson", "--dtype", "float64", "--steps", "20,0", "--points", "32",
               "--net", "4x1", "--quiet", "--restore-best", "--log-every", "5"])
    assert rc == 0
    line = _result_line(capsys.readouterr().out, "poisson")
    step = int(line.rsplit("best model at step ", 1)[1])
    assert 1 <= step <= 20
