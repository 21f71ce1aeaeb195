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


class ExperimentLimit(BaseException):
    """A limit of the run was reached; not an Exception, so `except Exception` cannot hide it."""


class Rows(list):
    """A statement's rows, one dict per row, with the column names and the affected count."""

    def __init__(self, rows, columns, affected, truncated):
        super().__init__(rows)
        self.columns = columns
        self.affected = affected
        self.truncated = truncated


def sql(query):
    """Runs one statement against your sandbox as your sandbox account; answers its rows."""
    if not isinstance(query, str):
        raise TypeError("sql() takes one statement as a str")
    try:
        answer = json.loads(wit_world.sql(query))
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
    """The traceback from the script's own frames on (this module's frames left out)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != SCRIPT_NAME:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))


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
