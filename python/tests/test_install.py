"""`pip install .` of the repository (pyproject.toml: meson-python builds the package with
its compiled module) into a fresh venv, offline, as the README says, from each interpreter
this machine has: the one running the tests, Debian's /usr/bin/python3 and the first
python3 on PATH (CI has only Debian's; a development machine may have a pyenv or other
non-Debian CPython first on PATH), and any named in SHMBOX_TEST_PYTHONS (paths, separated
by ':', e.g. a pyenv's 3.12 and 3.13, which have no distutils: the build backend gives
Debian's meson setuptools' copy). The
installed package then posts into a box this process owns, without any environment
variable telling it where a library is, and the venv's python3 runs the README's producer
and owner (<!-- hello-python -->) as two processes. Each build compiles the library: about
2-4 minutes on 2 cores."""
import os
import shutil
import subprocess
import sys

import pytest

import shmbox
from conftest import SOURCE_ROOT, readme_hello, run_hello_pair


def _interpreters():
    seen, out = set(), []
    extra = [p for p in os.environ.get("SHMBOX_TEST_PYTHONS", "").split(":") if p]
    for py in (sys.executable, "/usr/bin/python3", shutil.which("python3"), *extra):
        if not py or not os.path.exists(py):
            continue
        real = os.path.realpath(py)
        if real not in seen:
            seen.add(real)
            out.append(py)
    return out


def _source_copy(dest):
    """The repository's files as a fresh clone has them (no build trees, no .git)."""
    shutil.copytree(SOURCE_ROOT, dest, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", "build", "build-*", "__pycache__", ".mesonpy-*",
                                                  "*.egg-info", ".venv", ".pytest_cache"))


@pytest.mark.parametrize("python", _interpreters())
def test_pip_install_offline_in_a_fresh_venv(tmp_path, box_name, children, python):
    r = subprocess.run([python, "-c", "import ensurepip, venv"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.skip(f"{python} cannot make a venv here (apt-get install python3-venv): {r.stderr.strip()}")
    src = tmp_path / "shmbox-src"
    _source_copy(src)
    venv = tmp_path / ".venv"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PIP_INDEX_URL", "VIRTUAL_ENV", "SHMBOX_LIBRARY", "PYTHONHOME")}
    env["PIP_NO_INDEX"] = "1"  # offline: nothing may be downloaded
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, env=env, timeout=180)
    # Exactly the README's command (with pip's build isolation: the backend is in the tree).
    r = subprocess.run([str(venv / "bin" / "pip"), "install", str(src)], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    name = box_name()
    shmbox.Box.create(name, capacity=4).close()
    script = ("import shmbox, sys\n"
              "assert '/.venv/' in shmbox.__file__, shmbox.__file__\n"
              "assert shmbox.library_path().startswith(shmbox.__path__[0]), shmbox.library_path()\n"
              "with shmbox.Producer.attach(sys.argv[1]) as p: print(p.post(b'from-venv'))\n")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", script, name], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "stored", r.stdout + r.stderr
    with shmbox.Owner.acquire(name) as o:
        assert o.receive(1).data == b"from-venv"
    # Then the README's producer and owner (<!-- hello-python -->) with the venv's python3, as
    # the README runs them: `python3 hello.py own BOX`, then `python3 hello.py produce BOX`.
    hello = tmp_path / "hello.py"
    hello.write_text(readme_hello(), encoding="utf-8")
    run_hello_pair(children, [str(venv / "bin" / "python3"), str(hello)], box_name("hello"), env=env)
