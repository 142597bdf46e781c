"""The ``labsrc`` command line: one module per subcommand, dispatched by :func:`main`."""

from labsrc.cli.main import main

__all__ = ["main"]
