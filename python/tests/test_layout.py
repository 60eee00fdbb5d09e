"""The ctypes structs against the C header: sizes and every field's offset, as a C compiler sees them."""
import os
import shutil
import subprocess

import pytest

from conftest import SOURCE_ROOT
from shmbox import _capi


def test_structs_match_header(tmp_path):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "shmbox/shmbox.h"', "int main(void) {"]
    expected = []
    for cname, cls in _capi.STRUCTS.items():
        lines.append(f'printf("%zu\\n", sizeof({cname}));')
        expected.append(f"{cname} size {ctypes_sizeof(cls)}")
        for field, _ in cls._fields_:
            lines.append(f'printf("%zu\\n", offsetof({cname}, {field}));')
            expected.append(f"{cname}.{field} {getattr(cls, field).offset}")
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c99", "-Wall", "-Werror", "-I", os.path.join(SOURCE_ROOT, "include"), str(src), "-o",
                    str(exe)], check=True, timeout=120)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=30).stdout.split()
    got = [f"{e.rsplit(' ', 1)[0]} {v}" for e, v in zip(expected, out)]
    assert len(out) == len(expected)
    assert got == expected


def ctypes_sizeof(cls):
    import ctypes
    return ctypes.sizeof(cls)
