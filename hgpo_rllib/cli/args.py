"""Argument types and the one error policy of the ``rllib`` command: a user error is one line on
stderr and exit status 2."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn


class Parser(argparse.ArgumentParser):
    """Usage errors in one line on stderr, exit status 2 (as every other user error)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def json_dict(text: str) -> dict[str, Any]:
    """An argparse type: a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object, e.g. '{\"training_iteration\": 5}'")
    return value


def count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an int >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


#: What RLlib's ``AlgorithmConfig.validate()`` appends to each of its errors: advice for code that
#: builds configs, noise on a command line whose line already names the setting.
RLLIB_VALIDATION_ADVICE = "\nTo suppress all validation errors"


def user_error(exc: Exception) -> int:
    """One line on stderr, exit status 2."""
    message = str(exc).split(RLLIB_VALIDATION_ADVICE)[0].replace("\n", " ")
    print(f"rllib: error: {message}", file=sys.stderr)
    return 2


class InterruptedWithHint(KeyboardInterrupt):
    """Ctrl-C at a moment where the command's usual resume hint would be wrong; says what to do."""

    def __init__(self, hint: str):
        super().__init__(hint)
        self.hint = hint
