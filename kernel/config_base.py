"""What every section of the configuration (:mod:`kernel.config`) is built
from: a strict pydantic model, and the validator of an off/on switch word."""

from __future__ import annotations

from pydantic import BaseModel, BeforeValidator, ConfigDict


def switch_word(value: object) -> object:
    """The word a switch value names: YAML 1.1 reads a bare ``off``/``on``
    as a boolean, and the spec's own template writes ``mode: off``."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return value


Switch = BeforeValidator(switch_word)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)
