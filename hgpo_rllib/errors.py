"""A failure's cause in one line, for the last line of a command and the errors the algorithm raises.

Ray hands the driver a trial's or a runner's error wrapped (``RayTaskError`` keeps the original as
``cause``); an actor that failed in its constructor (an algorithm that could not build its module or
env runners, an env runner whose env raised) arrives as ``ActorDiedError``, which keeps the original
only as the text of its traceback.
"""

from __future__ import annotations


def error_chain(error: BaseException | None) -> list[BaseException]:
    """``error`` and what it wraps (a Ray task error's ``cause``, Python's ``__cause__``)."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = getattr(error, "cause", None) or error.__cause__
        if not isinstance(error, BaseException):  # ActorDiedError's cause may be Ray's context object
            error = None
    return chain


def error_line(error: BaseException) -> str:
    """The innermost cause of ``error`` as one line, ``Type: message``; of an actor's constructor
    error, the exception lines after the last frame of its traceback text."""
    cause = error_chain(error)[-1]
    text = getattr(cause, "error_msg", None)
    if isinstance(text, str) and "\n  File " in text:
        lines = text.splitlines()
        last_frame = max(i for i, line in enumerate(lines) if line.startswith("  File "))
        return " ".join(line.strip() for line in lines[last_frame + 1 :] if line.strip() and line[0] != " ")
    return " ".join(f"{type(cause).__name__}: {cause}".split())
