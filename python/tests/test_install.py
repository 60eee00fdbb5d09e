"""`pip install` of python/ into a venv, offline, as the README says; the installed
package then posts and receives. About 30 s (ensurepip installs pip into the venv)."""
import os
import shutil
import subprocess
import sys

import pytest

import shmbox
from conftest import PYTHON_DIR


def test_pip_install_offline_in_venv(tmp_path, box_name):
    try:
        import ensurepip  # noqa: F401  (python3-venv)
        import setuptools  # noqa: F401  (python3-setuptools)
    except ImportError as e:
        pytest.skip(f"cannot make a venv here: {e}")
    src = tmp_path / "python"
    shutil.copytree(PYTHON_DIR, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info", ".*"))
    venv = tmp_path / ".venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL", "VIRTUAL_ENV")}
    env["PIP_NO_INDEX"] = "1"  # offline: nothing may be downloaded
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, env=env,
                   timeout=120)
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation", str(src)], env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    name = box_name()
    shmbox.Box.create(name, capacity=4).close()
    script = ("import shmbox, sys\n"
              "assert '/.venv/' in shmbox.__file__, shmbox.__file__\n"
              "with shmbox.Producer.attach(sys.argv[1]) as p: print(p.post(b'from-venv'))\n")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", script, name], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "stored", r.stdout + r.stderr
    with shmbox.Owner.acquire(name) as o:
        assert o.receive(1).data == b"from-venv"
