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


def script_traceback(error):
    """The traceback from the script's own frames on (this module's frames left out)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != SCRIPT_NAME:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))


class WitWorld(wit_world.WitWorld):
    def run(self, source: str, max_output: int) -> str:
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
        try:
            code = compile(source, SCRIPT_NAME, "exec")
            exec(code, namespace)
        except ExperimentLimit as limit:
            raise Err(output.answer(limit=str(limit)))
        except SystemExit as leaving:
            if leaving.code not in (None, 0):
                raise Err(output.answer(traceback=f"the script exited with {leaving.code!r}"))
        except BaseException as error:
            raise Err(output.answer(traceback=script_traceback(error)))
        finally:
            sys.stdout = sys.__stdout__
            sys.stderr = sys.__stderr__
        return output.answer()
