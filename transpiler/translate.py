"""The public front door: .tile source -> checked IR -> CUDA C++ text and launch specs."""
from __future__ import annotations

from dataclasses import dataclass

from . import ast as A
from .deep import deep
from .launchspec import make_spec
from .pipeline import Options, compile_program
from .source import read_file
from .spec import KernelSpec


@dataclass(frozen=True)
class Translation:
    """The result of translating one .tile file."""

    program: A.Program  # the checked, annotated IR
    cuda: str  # the generated, self-contained .cu text
    specs: dict[str, KernelSpec]  # launch contract per kernel name
    host: str | None = None  # C++ host launcher (with host=True)


@deep
def translate(source: str, file: str = "<string>", options: Options | None = None, host: bool = False) -> Translation:
    """Compile `source`; raises CompileError (render() it) on a bad program."""
    from .codegen import generate  # imported late: codegen pulls in Jinja

    options = options or Options()
    program = compile_program(source, file, options)
    specs = {k.name: make_spec(k, source) for k in program.kernels}
    cuda, host_code = generate(program, options, specs, host=host)
    return Translation(program, cuda, specs, host_code)


def translate_file(path: str, options: Options | None = None, host: bool = False) -> Translation:
    source, name = read_file(path, "tilex.translate.translate_file()")
    return translate(source, name, options, host)
