"""README.md runs as written.

Every ```python block runs on its own in a fresh interpreter (self-contained imports and data),
with ``SCIML_QUICK=1`` (the README names it: long blocks then take their smoke-test settings).
Every command in a ```bash block and in the benchmark table is checked without being run: a
``sciml`` command line must parse, a script / module / test path must exist, a pip extra must be
declared in pyproject.toml (pip itself is never run here).
"""
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")


def _blocks(lang):
    text = open(README, encoding="utf-8").read()
    return [m.group(1) for m in re.finditer(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)]


def _extras():
    """The extras declared in pyproject.toml's [project.optional-dependencies]."""
    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    try:
        import tomllib
    except ImportError:  # Python 3.10: the table's `name = [` lines
        section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
        return set(re.findall(r"^([A-Za-z0-9_-]+)\s*=\s*\[", section, re.M))
    return set(tomllib.loads(text)["project"]["optional-dependencies"])


PY = _blocks("python")


def test_the_readme_has_its_blocks_and_names_the_quick_switch():
    assert len(PY) >= 4 and len(_blocks("bash")) >= 3
    assert "SCIML_QUICK=1" in open(README, encoding="utf-8").read()
    assert "SCIML_QUICK" in "".join(PY)          # the long block reads it


@pytest.mark.parametrize("code", PY, ids=[f"python-block-{i}" for i in range(len(PY))])
def test_python_block_runs_on_its_own(code, tmp_path):
    env = dict(os.environ, SCIML_QUICK="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in ("SCIML_ARCH", "SCIML_DTYPE"):     # the block's own settings, not the test session's
        env.pop(k, None)
    script = tmp_path / "block.py"      # a file, not `python -c`: Taichi reads a kernel's source
    script.write_text(code, encoding="utf-8")
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"README block failed:\n{code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    if "print(" in code:
        assert r.stdout.strip(), "the block prints nothing"
    for name in re.findall(r"\.plot\(\"([^\"]+)\"\)", code):   # the files it says it writes
        assert (tmp_path / name).stat().st_size > 1000


def _check_pip(args, extras):
    assert args[:1] == ["install"], args
    for a in args[1:]:
        if a.startswith("-"):
            continue
        m = re.fullmatch(r"(?:\.|sciml)(?:\[([\w,]+)\])?", a)
        assert m, f"pip install {a!r}: expected ., sciml or one with [extras]"
        for extra in (m.group(1) or "").split(","):
            assert not extra or extra in extras, f"pip extra {extra!r} is not in pyproject.toml"


def _check_command(words, extras):
    """One command (no shell operators); raises AssertionError if it cannot work as written."""
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):     # VAR=value prefixes
        words = words[1:]
    prog, args = os.path.basename(words[0]), words[1:]     # v/bin/pip is pip
    if prog == "mpirun":
        i = 0
        while i < len(args) and args[i].startswith("-"):
            i += 1 if args[i].startswith("--allow") else 2
        return _check_command(args[i:], extras)
    if prog == "pip":
        return _check_pip(args, extras)
    if prog == "sciml":
        from sciml import cli
        try:
            cli.build_parser().parse_args(args)
        except SystemExit as e:
            raise AssertionError(f"sciml {' '.join(args)}: does not parse (exit {e.code})") from None
        return
    if prog == "python":
        if args[:2] == ["-m", "pytest"]:
            paths = [a for a in args[2:] if not a.startswith("-")]
            assert paths and all(os.path.exists(os.path.join(ROOT, p)) for p in paths), args
            return
        if args[:1] == ["-m"]:
            mod = args[1]
            path = os.path.join(ROOT, *mod.split("."))
            if os.path.isfile(path + ".py") or os.path.isfile(os.path.join(path, "__main__.py")):
                return
            import importlib.util
            assert "." not in mod and importlib.util.find_spec(mod) is not None, f"no module {mod}"
            return
        assert os.path.isfile(os.path.join(ROOT, args[0])), f"no script {args[0]}"
        return
    assert prog in ("apt-get",), f"unexpected command {prog!r} in the README"


def _commands(line):
    line = re.sub(r"\s+#.*$", "", line).strip()
    return [shlex.split(c) for c in re.split(r"&&|;", line) if c.strip()]


def test_bash_blocks_name_commands_that_exist():
    extras, n = _extras(), 0
    for block in _blocks("bash"):
        for line in block.splitlines():
            for words in _commands(line):
                _check_command(words, extras)
                n += 1
    assert n >= 6


def test_commands_quoted_in_the_text_and_tables_exist():
    extras = _extras()
    text = open(README, encoding="utf-8").read()
    quoted = [c for c in re.findall(r"`([^`\n]+)`", text)
              if re.match(r"(sciml|python|pip install) ", c) and "|" not in c and "..." not in c]
    assert len(quoted) >= 10
    for c in quoted:
        for part in re.split(r"`, `", c):
            for words in _commands(part):
                _check_command(words, extras)


def test_pictures_exist_and_are_small():
    text = open(README, encoding="utf-8").read()
    for path in re.findall(r"\]\((docs/img/[^)\s]+)\)", text):      # shown or linked
        full = os.path.join(ROOT, path)
        assert os.path.isfile(full), f"README shows {path}, which is not in the repository"
        assert os.path.getsize(full) < 400_000, f"{path}: keep pictures small"
