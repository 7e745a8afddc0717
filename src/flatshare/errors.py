"""Errors the CLI turns into a one-line message and exit code 2."""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: a file, a record or a setting. The message names where and what."""
