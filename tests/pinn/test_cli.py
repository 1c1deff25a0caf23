"""`sciml solve ...` smoke tests with tiny step counts (in process, through sciml.cli.main)."""
import pytest

from sciml.cli import main


def test_solve_poisson_prints_error_and_writes_a_plot(tmp_path, capsys):
    png = tmp_path / "poisson.png"
    rc = main(["solve", "poisson", "--dtype", "float64", "--steps", "3,2", "--points", "64",
               "--net", "8x2", "--plot", str(png), "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "relative L2 error:" in out and "time:" in out
    assert png.stat().st_size > 1000


@pytest.mark.parametrize("name", ["burgers", "heat", "wave", "helmholtz"])
def test_solve_each_problem_runs(name, capsys):
    rc = main(["solve", name, "--dtype", "float64", "--steps", "2,0", "--points", "32",
               "--net", "4x1", "--quiet"])
    assert rc == 0
    assert "relative L2 error:" in capsys.readouterr().out


def test_bad_arguments_are_clear(capsys):
    with pytest.raises(SystemExit):
        main(["solve", "navier"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["solve", "poisson", "--steps", "a,b"])
    assert "expected ADAM[,LBFGS] step counts" in capsys.readouterr().err
    assert main(["solve", "poisson", "--dtype", "float64", "--points", "0"]) == 2
    assert "--points must be > 0" in capsys.readouterr().err
