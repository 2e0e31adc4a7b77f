"""Failures a user can act on, and how ``curate`` reports them.

A known failure (bad input, bad config, a namespace held by another run, a full disk) is printed
as one short message that names the file, row or key and the fix; the Python trace, which would
only bury that line under 80-160 lines of Kedro and Hydra frames, is shown only with
``HYDRA_FULL_ERROR=1`` or ``curate --verbose`` (``kedro run`` does the same: :mod:`curation.cli`).
Anything else is a bug or an unforeseen failure and keeps its full trace.

Known failures are Hydra's composition errors (:func:`composition_message`), :class:`UserError` and its subclasses (among them the config errors of
:mod:`curation.configuration`, the schema errors of :mod:`curation.data.validate` and the lineage
errors of :mod:`curation.shards.lineage`: those modules import this one, never the reverse), and
``OSError`` for a full disk, an exhausted quota or a read-only file system. They are found anywhere
in the chain of causes (Kedro wraps a dataset's error in its own ``DatasetError``).
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from typing import Iterator, NoReturn

VERBOSE_ENV = "HYDRA_FULL_ERROR"  # Hydra's own switch for full traces; `curate --verbose` sets it


class UserError(Exception):
    """A failure caused by the input, the config or the environment, with a message that names
    what is wrong (file, row, key) and how to fix it."""


class EmptyCorpusError(UserError, ValueError):
    """No document of the corpus survived ingestion."""


class InvalidIdError(UserError, ValueError):
    """A row's id is a list, a dict or another value that cannot be a document id."""


_DISK = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exhausted",
         errno.EROFS: "the file system is read-only"}


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0", "false", "False")


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _one_line(text: str) -> str:
    """Hydra's and OmegaConf's multi-line texts as one line: the ``full_key`` / ``object_type`` detail and
    the config search path dropped (the key is already named), the rest joined."""
    kept = []
    for line in str(text).splitlines():
        line = line.strip()
        if line.startswith("Config search path"):
            break
        if line and not line.startswith(("full_key:", "object_type=", "See https://hydra.cc")):
            kept.append(line.rstrip("."))
    return ": ".join(kept)


# What Hydra's override grammar takes in an unquoted value besides ASCII letters and digits (OverrideLexer.g4:
# ID, UNQUOTED_CHAR, WS, and the brackets, commas and colons of lists, dicts and sweeps).
_UNQUOTED = set("_-/\\+.$%*@?|:~ \t,=[]{}()'\"")


def _unquoted_character(override: str) -> str | None:
    """The cause and the fix when an override's value holds a character Hydra's lexer refuses unquoted
    (a non-ASCII letter of a path or a name, ``#``, ``&``): Hydra's own message is
    ``LexerNoViableAltException: <override>`` and a caret, which names neither (issue #52)."""
    key, sep, value = override.partition("=")
    bad = [c for c in value if not ((c.isascii() and c.isalnum()) or c in _UNQUOTED)]
    if not sep or not bad:
        return None
    chars = ", ".join(repr(c) for c in dict.fromkeys(bad))
    quoted = value.replace("\\", "\\\\").replace('"', '\\"')
    return (f"{override}: Hydra reads a value outside quotes as ASCII letters, digits and _-/+.$%*@?|:~ only, "
            f"and this one holds {chars}. Fix: quote the value inside the shell's quotes: '{key}=\"{quoted}\"'.")


def composition_message(err: BaseException) -> str | None:
    """One line for an override or a config that Hydra cannot compose (an unknown key or group option, a
    value of the wrong type, an override that does not parse), with the fix; None for other errors.

    Hydra prints these as 5 to 25 lines and exit status 1 under ``curate``, and ``kedro run`` as a
    100-line trace; both are bad config, a known failure like any other (issue #39). Hydra is looked up in
    ``sys.modules``: an error can only be Hydra's once Hydra is imported, and this module stays light.
    """
    hydra_errors = sys.modules.get("hydra.errors")
    if hydra_errors is None:
        return None
    if isinstance(err, hydra_errors.MissingConfigException):
        options = ", ".join(o for o in (getattr(err, "options", None) or []) if not o.startswith("_"))
        where = _one_line(str(err)).split(": Available options")[0]
        return (f"{where}. Fix: pick one of the options{': ' + options if options else ''} "
                f"(the files of that folder under conf/).")
    if isinstance(err, hydra_errors.OverrideParseException):
        lexer = _unquoted_character(str(getattr(err, "override", "") or ""))
        if lexer is not None:
            return lexer
        return (f"{_one_line(str(err))}. Fix: write each override as key=value (a new key as +key=value); quote "
                f"values with spaces or brackets.")
    if isinstance(err, hydra_errors.ConfigCompositionException):
        cause = err.__cause__
        text = _one_line(str(err).split("\nTo append to your config")[0])
        if cause is not None:
            text = f"{text}: {_one_line(str(cause))}"
        kind = type(cause).__name__ if cause is not None else ""
        if "KeyError" in kind or "not in struct" in text or "not in '" in text:
            fix = "check the key's spelling against `curate --cfg job` (it prints every key and its value)"
        elif "Validation" in kind or "converted" in text:
            fix = "give the key a value of its type (`curate --cfg job` prints every key and its value)"
        else:
            fix = "correct the override (`curate --cfg job` prints the composed config)"
        return f"{text}. Fix: {fix}."
    return None


def user_message(err: BaseException) -> str | None:
    """The short message for a known failure anywhere in ``err``'s chain of causes; None for others."""
    for cause in _chain(err):
        if isinstance(cause, UserError):
            text = str(cause)
            return text.strip() or type(cause).__name__
        composition = composition_message(cause)
        if composition is not None:
            return composition
        if isinstance(cause, OSError) and cause.errno in _DISK:
            where = f" while writing {cause.filename}" if cause.filename else ""
            fix = ("free space (or point the outputs elsewhere: run from a copy of the project on a larger disk, "
                   "or delete old namespaces under data/ and data/04_feature/cache/), then run the same command "
                   "again: finished shards are kept and the run resumes; files are written atomically, so none is "
                   "half-written" if cause.errno != errno.EROFS else
                   "make the project's data/ folder writable, then run the same command again")
            return f"{_DISK[cause.errno]}{where} ({cause.strerror}). Fix: {fix}."
    return None


def format_failure(message: str, prog: str = "curate") -> str:
    """The text printed for a known failure (``prog``: the command, ``curate`` or ``kedro run``)."""
    return (f"{prog}: error: {message}\n"
            f"(the full trace: run again with HYDRA_FULL_ERROR=1 or {prog} --verbose)")


TRACE_DIR = "logs"  # under the project root: the traces of unexpected failures (git-ignored)


def write_trace(err: BaseException, root: "os.PathLike[str] | str", prog: str = "curate") -> str:
    """Write ``err``'s full trace (with its chain of causes) to ``<root>/logs/<prog>-<time>-<pid>.trace``
    and return the path; the path of the console instead when the file cannot be written."""
    import time
    import traceback
    from pathlib import Path

    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    path = Path(root) / TRACE_DIR / f"{prog.replace(' ', '-')}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.trace"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{' '.join(sys.argv)}\n\n{text}")
    except OSError:
        sys.stderr.write(text)
        return "(the console above: the log folder could not be written)"
    return str(path)


def format_unexpected(err: BaseException, trace: str, prog: str = "curate") -> str:
    """The one line printed for a failure the project cannot explain (a bug, or a failure no check foresaw),
    with the file that holds its trace."""
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return (f"{prog}: unexpected error: {type(err).__name__}{': ' + first[:300] if first else ''} "
            f"(the full trace is in {trace}; please report it with that file)")


def exit_on_failure(err: BaseException, root: "os.PathLike[str] | str", prog: str = "curate") -> "NoReturn":
    """End a command on ``err``, as ``curate`` and ``kedro run`` both do: a known failure as one line
    (:func:`format_failure`, exit status 2), any other as one line naming the file that holds its trace
    (:func:`format_unexpected`, exit status 1)."""
    message = user_message(err)
    if message is None:
        print(format_unexpected(err, write_trace(err, root, prog), prog), file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    print(format_failure(message, prog), file=sys.stderr, flush=True)
    raise SystemExit(2) from None


class KnownFailureFilter(logging.Filter):
    """Drops Kedro's log records about a failing node ("Node ... failed with error: <message>", "No
    nodes ran ...") while a known failure is being handled: ``curate`` prints that message once,
    short. Other failures, and every failure with ``HYDRA_FULL_ERROR=1``, keep them."""

    LOGGERS = ("kedro.pipeline.node", "kedro.runner.runner", "kedro.runner.sequential_runner")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or verbose():
            return True
        handled = sys.exc_info()[1]
        return handled is None or user_message(handled) is None

    @classmethod
    def install(cls) -> None:
        for name in cls.LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(f, cls) for f in logger.filters):
                logger.addFilter(cls())
