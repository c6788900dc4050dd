"""Tuning records: workloads, targets and measurements in SQLite, with JSON-lines exchange.

    db = tessel.Database("records.db")      # or Database.open(argument, create=...)
    db.commit_results(target, candidates, results)
    db.top_k(func, target, k=5), db.records(func), db.count(), db.export_jsonl("r.jsonl")
    record_program(record, func, postprocs)  # a record's program again (None if stale)
"""
from tessel.database.program import first_program, record_program
from tessel.database.record import DatabaseError, TuningRecord, Workload
from tessel.database.sqlite import FORMAT, SCHEMA_VERSION, Database

__all__ = ["Database", "DatabaseError", "TuningRecord", "Workload", "FORMAT", "SCHEMA_VERSION",
           "first_program", "record_program"]
