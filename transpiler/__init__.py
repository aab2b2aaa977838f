"""tilex: a compiler for tile-level GPU kernels."""

__version__ = "0.1.0"
