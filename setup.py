"""The optional C extension of the stdlib fast path (tilex/_cfast.c; everything else is in pyproject.toml).

optional=True: where there is no C compiler or no Python headers the build of the extension is skipped with a
warning and tilex installs without it (its fast path then runs in Python; tilex.cfast may still build it at
first use with the system compiler)."""
import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "transpiler/_cfast.c"
SHA = hashlib.sha256((Path(__file__).resolve().parent / SOURCE).read_bytes()).hexdigest()[:16]  # = cfast.source_sha()

setup(ext_modules=[Extension("tilex._cfast", [SOURCE], optional=True, extra_compile_args=["-O2", "-std=c11"],
                             define_macros=[("TILEX_CFAST_SHA", f'"{SHA}"')], libraries=["dl"])])
