"""The base of every error tessel raises on purpose.

Each layer has one error type with a one-line message that says what is wrong and what to do
(`ScheduleError`, `DatabaseError`, `TuneError`, ...); all of them are `TesselError`s, so a
caller (the `tessel` command among them) can tell tessel's own messages from a bug:

    try:
        tessel.tune(func, database="records.db")
    except tessel.TesselError as err:
        print(err)                     # one line, no traceback needed
"""
from __future__ import annotations


class TesselError(Exception):
    """Bad input or an unusable file, detected and explained by tessel."""


__all__ = ["TesselError"]
