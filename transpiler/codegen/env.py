"""The Jinja environment over `tilex/templates`: kernel skeletons, op templates and macros, and the `.cuh` helpers."""
from __future__ import annotations

from functools import lru_cache
from importlib import resources

import jinja2


@lru_cache(maxsize=None)
def env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: resources.files("tilex.templates").joinpath(name).read_text()),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=False, lstrip_blocks=False)


def template(name: str) -> jinja2.Template:
    return env().get_template(name)


def macros(name: str):
    """The macros of template `name`, as attributes (`macros("matmul_wgmma_parts.j2").setup(c)`)."""
    return env().get_template(name).module


def helper(name: str) -> str:
    """The text of device-helper file `name` (a `.cuh`), as codegen inlines it."""
    return resources.files("tilex.templates").joinpath(name).read_text().rstrip()
