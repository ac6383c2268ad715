"""pynvml loads without ctypes.util (and what it imports), and nothing else notices."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import needs

import slurmpool

needs.module("pynvml")

HEAVY = ("ctypes.util", "shutil", "subprocess", "tempfile", "bz2", "lzma")


def _run(code: str) -> str:
    import pynvml

    paths = [str(Path(slurmpool.__file__).parents[1]), str(Path(pynvml.__file__).parent)]
    boot = f"import sys; sys.path[:0] = {paths!r}\n"
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", boot + code], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_pynvml_loads_without_ctypes_util_and_its_imports() -> None:
    code = (
        "from slurmpool.driver.pynvml_import import preload_pynvml\n"
        "m = preload_pynvml()\n"
        "import pynvml, ctypes\n"
        "assert m is pynvml and hasattr(pynvml, 'nvmlInit')\n"
        "assert not hasattr(ctypes, 'util')\n"
        f"print(sorted(k for k in {HEAVY!r} if k in sys.modules))\n"
    )
    assert _run(code) == "[]"


def test_find_library_and_later_importers_get_the_real_ctypes_util() -> None:
    code = (
        "from slurmpool.driver.pynvml_import import preload_pynvml\n"
        "pynvml = preload_pynvml()\n"
        "import ctypes.util\n"
        "assert ctypes.util.find_library is not pynvml.find_library\n"
        "assert hasattr(ctypes.util, 'test')  # the real module, not the stand-in\n"
        "print(pynvml.find_library('c') == ctypes.util.find_library('c'))\n"
    )
    assert _run(code) == "True"


def test_an_earlier_import_is_used_as_it_is() -> None:
    code = (
        "import ctypes.util, pynvml\n"
        "from slurmpool.driver.pynvml_import import preload_pynvml\n"
        "print(preload_pynvml() is pynvml and pynvml.find_library is ctypes.util.find_library)\n"
    )
    assert _run(code) == "True"
