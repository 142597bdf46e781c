"""The package version, in one place (the report records it)."""

__version__ = "0.1.0"
