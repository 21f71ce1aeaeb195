"""The experiment guest: a generic interpreter for the source sandboxd hands it.

Only modules imported here exist when a script runs (the component carries the stdlib it was
built with), so everything an experiment may want is imported once, at build time.
"""

import builtins
import collections
import csv
import dataclasses
import datetime
import decimal
import fractions
import functools
import hashlib
import heapq
import io
import itertools
import json
import linecache
import math
import operator
import os
import random
import re
import statistics
import string
import sys
import textwrap
import time
import traceback
import uuid

import wit_world
from componentize_py_types import Err

SCRIPT_NAME = "<experiment>"
# Characters past a cap a text keeps whole (the host's `CUT_ROOM`): more than the mark of a
# cut takes, so the host does not cut a text this module cut.
CUT_ROOM = 80


class SqlError(Exception):
    """The server refused a statement (its own words are the message)."""


# Shown as the script names it (`SqlError: …`), not as this module's (`app.SqlError: …`).
SqlError.__module__ = "builtins"


class ExperimentLimit(BaseException):
    """A limit of the run was reached; not an Exception, so `except Exception` cannot hide it."""


class Rows(list):
    """A statement's rows, one dict per row, with the column names and the affected count."""

    def __init__(self, rows, columns, affected, truncated):
        super().__init__(rows)
        self.columns = columns
        self.affected = affected
        self.truncated = truncated


# The values a statement's placeholders take: what JSON carries exactly (ints within 64 bits).
PARAM_TYPES = (str, int, float, bool, type(None))
INT_RANGE = range(-(2**63), 2**63)


def sql(query, params=None):
    """Runs one statement against your sandbox as your sandbox account; answers its rows.

    `params` is a list of str, int, float, bool or None bound to $1, $2, ... in order: sent
    apart from the statement, never spliced into it.
    """
    if not isinstance(query, str):
        raise TypeError("sql() takes one statement as a str")
    if params is None:
        params = []
    if not isinstance(params, (list, tuple)):
        raise TypeError("sql() takes its params as a list, e.g. sql(query, [42, 'text'])")
    for at, value in enumerate(params, start=1):
        if not isinstance(value, PARAM_TYPES):
            raise TypeError(
                f"param ${at} is a {type(value).__name__}; params are str, int, float, bool or None"
            )
        if isinstance(value, int) and not isinstance(value, bool) and value not in INT_RANGE:
            raise TypeError(f"param ${at} does not fit 64 bits; pass it as a str")
    try:
        answer = json.loads(wit_world.sql(query, json.dumps(list(params))))
    except Err as refused:
        detail = json.loads(refused.value)
        if detail.get("limit"):
            raise ExperimentLimit(detail["message"]) from None
        raise SqlError(detail["message"]) from None
    columns = answer["columns"]
    rows = [dict(zip(columns, row)) for row in answer["rows"]]
    return Rows(rows, columns, answer.get("affected"), answer.get("truncated", False))


class CappedOutput(io.TextIOBase):
    """Keeps the first `limit` characters written and counts the rest."""

    def __init__(self, limit):
        self.limit = limit
        self.parts = []
        self.kept = 0
        self.dropped = 0

    def writable(self):
        return True

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError("write() argument must be str")
        room = self.limit - self.kept
        if room > 0:
            piece = text[:room]
            self.parts.append(piece)
            self.kept += len(piece)
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def answer(self, **more):
        return json.dumps({"output": "".join(self.parts), "dropped": self.dropped, **more})


def capped(text, limit):
    """`text` cut to `limit` characters: its start and its end, and how much was left out."""
    if len(text) <= limit + CUT_ROOM:
        return text
    head = limit // 2
    tail = limit - head
    left_out = len(text) - head - tail
    return f"{text[:head]}\n… ({left_out} characters left out) …\n{text[len(text) - tail:]}"


def script_traceback(error):
    """The traceback of the script's own frames only: it starts at the script, and the frames
    of this module (sql() raising SqlError, the runner) are left out, in chained errors too."""
    shown = traceback.TracebackException.from_exception(error)
    pending, seen = [shown], set()
    while pending:
        part = pending.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        part.stack = traceback.StackSummary.from_list(
            [frame for frame in part.stack if frame.filename == SCRIPT_NAME]
        )
        pending.extend(p for p in (part.__cause__, part.__context__) if p is not None)
        pending.extend(getattr(part, "exceptions", None) or [])
    return "".join(shown.format())


class WitWorld(wit_world.WitWorld):
    def run(self, source: str, max_output: int) -> bool:
        os.environ.clear()
        output = CappedOutput(max_output)
        sys.stdout = sys.stderr = output
        linecache.cache[SCRIPT_NAME] = (len(source), None, source.splitlines(True), SCRIPT_NAME)
        namespace = {
            "__name__": "__main__",
            "__builtins__": builtins,
            "sql": sql,
            "SqlError": SqlError,
        }
        completed = False
        try:
            code = compile(source, SCRIPT_NAME, "exec")
            exec(code, namespace)
            completed = True
            answer = output.answer()
        except ExperimentLimit as limit:
            answer = output.answer(limit=capped(str(limit), max_output))
        except SystemExit as leaving:
            if leaving.code in (None, 0):
                completed = True
                answer = output.answer()
            else:
                exited = f"the script exited with {leaving.code!r}"
                answer = output.answer(traceback=capped(exited, max_output))
        except BaseException as error:
            answer = output.answer(traceback=capped(script_traceback(error), max_output))
        finally:
            sys.stdout = sys.__stdout__
            sys.stderr = sys.__stderr__
        wit_world.answer(answer)
        return completed
