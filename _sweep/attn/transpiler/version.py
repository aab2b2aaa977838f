"""The tilex version: a module at the bottom floor (imports nothing), read by the package, codegen, caches and the CLI."""

__version__ = "0.1.0"
