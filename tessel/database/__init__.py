"""Tuning records: workloads, targets and measurements in SQLite, with JSON-lines exchange.

    db = tessel.Database("records.db")
    db.commit_results(target, candidates, results)
    db.top_k(func, target, k=5), db.records(func), db.count(), db.export_jsonl("r.jsonl")
"""
from tessel.database.record import DatabaseError, TuningRecord, Workload
from tessel.database.sqlite import FORMAT, SCHEMA_VERSION, Database

__all__ = ["Database", "DatabaseError", "TuningRecord", "Workload", "FORMAT", "SCHEMA_VERSION"]
