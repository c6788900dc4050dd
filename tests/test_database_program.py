"""A record made into its program again (tessel.database.record_program): a good record gives the
program its trace replays to, postprocessed; a record an older tessel made (another trace format,
a primitive this one lacks, a trace that no longer fits, a program a postprocessor now rejects)
gives None; and Database.open, the one way to open a database a user names."""
import json

import pytest

from tessel import Schedule, Target, ops
from tessel.database import Database, DatabaseError, TuningRecord, first_program, record_program
from tessel.ir import structural_equal
from tessel.measure import MeasureResult
from tessel.space import SpaceError, final_func, postprocs_for

from test_database import split_candidate

HOST = Target("host")
FUNC = ops.matmul(8, 12, 6)


def record_of(trace_json):
    return TuningRecord("w", "t", trace_json, None, (1e-3,))


def older(edit):
    """The JSON of a good record's trace as an older tessel might have written it."""
    doc = json.loads(split_candidate(FUNC, 4).trace.to_json())
    edit(doc)
    return json.dumps(doc)


def test_a_good_record_gives_the_program_its_trace_replays_to():
    cand = split_candidate(FUNC, 4)
    posts = postprocs_for(FUNC, HOST)
    program = record_program(record_of(cand.trace.to_json()), FUNC, posts)
    assert structural_equal(program, final_func(cand.trace.apply(Schedule(FUNC)), posts))
    assert structural_equal(record_program(record_of(cand.trace.to_json()), FUNC, ()), cand.func)


def rename_split(doc):
    doc["insts"] = [[("split_v0" if kind == "split" else kind), *rest]
                    for kind, *rest in doc["insts"]]


class RejectsEverything:
    """A postprocessor newer than the record: it rejects the record's program."""

    def apply(self, sch):
        raise SpaceError("this program is no longer valid")


@pytest.mark.parametrize("trace_json, func, posts", [
    (None, FUNC, ()),  # a hand-written program: no trace
    (older(lambda doc: doc.update(format="tessel.trace/0")), FUNC, ()),  # another format
    ("{not json", FUNC, ()),
    (older(rename_split), FUNC, ()),  # a primitive this tessel does not have
    (split_candidate(FUNC, 4).trace.to_json(), ops.relu(8), ()),  # no block C to split
    (split_candidate(FUNC, 4).trace.to_json(), FUNC, [RejectsEverything()]),
], ids=["no-trace", "format", "not-json", "unknown-kind", "does-not-fit", "postproc-rejects"])
def test_a_record_of_an_older_tessel_gives_none(trace_json, func, posts):
    assert record_program(record_of(trace_json), func, posts) is None


def test_first_program_skips_the_records_that_make_none(tmp_path):
    cands = [split_candidate(FUNC, f) for f in (2, 3)]
    with Database(tmp_path / "r.db") as db:
        good = db.commit_results(HOST, cands, [MeasureResult((2e-3,)), MeasureResult((3e-3,))])
        stale = record_of(older(rename_split))
        record, program = first_program([stale, *db.top_k(FUNC, HOST)], FUNC, ())
    assert record == good[0] and structural_equal(program, cands[0].func)
    assert first_program([stale, record_of(None)], FUNC, ()) is None


def test_database_open_reads_without_creating_and_writes_creating(tmp_path):
    missing = tmp_path / "sub" / "r.db"
    assert Database.open(None, create=True) is None
    assert Database.open(missing, create=False) is None and not (tmp_path / "sub").exists()
    with Database.open(str(missing), create=True) as db:
        assert Database.open(db, create=False) is db and missing.exists()
    with Database.open(missing, create=False) as again:
        assert again.path == missing
    (tmp_path / "empty.db").touch()
    with pytest.raises(DatabaseError, match="empty"):
        Database.open(tmp_path / "empty.db", create=False)
    with pytest.raises(DatabaseError, match="database must be a file path, a tessel Database or "
                                            "None, got int"):
        Database.open(42, create=False)
