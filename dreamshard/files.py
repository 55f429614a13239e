"""Writing files so that a crash or an error never leaves a half-written one behind; reading
input files so that a malformed one is one line naming the file and the field."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from dreamshard.errors import DreamshardError

Model = TypeVar("Model", bound=BaseModel)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` to write; renamed into place only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; give it the usual mode
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it into place."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_json_atomic(path: str | Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


def read_json(path: str | Path, what: str) -> Any:
    """A JSON file's content; a missing or unreadable file is a DreamshardError naming `what`."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DreamshardError(f"{what} {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise DreamshardError(f"cannot read {what} {path}: {exc}") from None


def validate(model: type[Model], data: Any, where: str) -> Model:
    """`data` checked against a pydantic model; else a DreamshardError naming `where`, the field
    and what is wrong with it (the first problem found), never a ValidationError."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"])
        problem = describe_problem(error)
        message = f"{where}: {field} {problem}" if field else f"{where}: {problem}"
        raise DreamshardError(message) from None


# Phrases for pydantic's error types, filled from the error's input (`value`: its repr,
# shortened; `type`: its type's name) and the error's ctx.
PHRASES = {
    "missing": "is missing",
    "int_type": "{value} is not an integer",
    "int_parsing": "{value} is not an integer",
    "int_from_float": "must be a whole number, got {value}",
    "float_type": "{value} is not a number",
    "float_parsing": "{value} is not a number",
    "finite_number": "must be a finite number, got {value}",
    "string_type": "{value} is not a string",
    "string_too_short": "must not be empty",
    "bool_type": "{value} is not true or false",
    "dict_type": "must be an object, got {type}",
    "model_type": "must be an object, got {type}",
    "list_type": "must be a list, got {type}",
    "too_short": "needs at least {min_length} items, got {actual_length}",
    "too_long": "takes at most {max_length} items, got {actual_length}",
    "greater_than": "must be above {gt}, got {value}",
    "greater_than_0": "must be positive, got {value}",
    "greater_than_equal": "must be at least {ge}, got {value}",
    "greater_than_equal_0": "must not be negative, got {value}",
    "literal_error": "must be {expected}, got {value}",
    "multiple_of": "must be a multiple of {multiple_of:g}, got {value}",
}


def describe_problem(error: dict[str, Any]) -> str:
    """One pydantic error as a phrase that follows the field's name and says what to change."""
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:36] + " ..."
    if kind.startswith("greater_than") and ctx.get("gt", ctx.get("ge")) == 0:
        kind += "_0"
    if kind in PHRASES:
        return PHRASES[kind].format(value=shown, type=type(value).__name__, **ctx)
    message = error["msg"]  # our own validators' messages already read as phrases
    if message.startswith("Input should"):
        return f"{message.replace('Input should', 'should', 1)}, got {shown}"
    return message
