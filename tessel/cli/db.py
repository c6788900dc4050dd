"""The record-database commands of `tessel`: db check, db recover, db export, db import.

    tessel db check tessel.db                 SQLite's full integrity check, and what is stored
    tessel db recover tessel.db saved.db      copy every readable record of a damaged file
    tessel db export tessel.db records.jsonl  everything, as JSON lines
    tessel db import tessel.db records.jsonl  add a JSON-lines file's records
"""
from __future__ import annotations

import argparse
import sys

from tessel.cli.tune import DEFAULT_DB
from tessel.database import Database
from tessel.database.recover import check_file, recover


def cmd_check(args: argparse.Namespace) -> int:
    problems = check_file(args.db)  # a file that is no database at all: one line, exit 2
    if problems:
        print(f"{args.db} is damaged:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        print(f"`tessel db recover {args.db} NEW.db` copies every readable record to a new "
              "file", file=sys.stderr)
        return 1
    with Database(args.db, create=False) as db:
        print(f"{args.db}: ok; {len(db.workloads())} workloads, {len(db.targets())} targets, "
              f"{db.count()} records")
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    print(f"{args.db} -> {args.out}: {recover(args.db, args.out)}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with Database(args.db, create=False) as db:  # a missing file is refused, not created
        print(f"{args.db} -> {args.jsonl}: {db.export_jsonl(args.jsonl)} records")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    with Database(args.db) as db:
        added = db.import_jsonl(args.jsonl)
    print(f"{args.jsonl} -> {args.db}: read {added.read} records, {int(added)} new")
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("db", help="check, recover, export or import a record database")
    db_sub = p.add_subparsers(dest="db_command", required=True)
    p = db_sub.add_parser("check", help="SQLite's full integrity check, and what is stored")
    p.add_argument("db", nargs="?", default=DEFAULT_DB)
    p.set_defaults(fn=cmd_check)
    p = db_sub.add_parser("recover", help="copy every readable record to a new database file")
    p.add_argument("db", help="the damaged database (left untouched)")
    p.add_argument("out", help="the new database file")
    p.set_defaults(fn=cmd_recover)
    p = db_sub.add_parser("export", help="write every workload, target and record as JSON lines")
    p.add_argument("db")
    p.add_argument("jsonl")
    p.set_defaults(fn=cmd_export)
    p = db_sub.add_parser("import", help="add the records of a JSON-lines file")
    p.add_argument("db")
    p.add_argument("jsonl")
    p.set_defaults(fn=cmd_import)


__all__ = ["add_commands"]
