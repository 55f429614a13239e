"""Objects named by a "module:attribute" string, imported on first use.

The planner registry and the model resolver name what sits in a higher stage this way, so a
low stage can offer it without importing it (and `dreamshard --help` stays quick).
"""

from __future__ import annotations

import importlib


def load_object(target: str) -> object:
    """The object `target` ("package.module:attribute") names; ValueError if it is malformed."""
    module, sep, attribute = target.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"{target!r} is not of the form 'package.module:attribute'")
    return getattr(importlib.import_module(module), attribute)
