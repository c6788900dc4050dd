"""Records stored before instructions had a registry (tessel.trace/1, commit d9d881a) replay
with today's tessel to the programs they made then: the scheduled program and the
postprocessed one, compared by structural hash (tests/data/make_replay_fixture.py made both
the database, kept gzipped, and the hashes, with that commit's tessel). A deliberate change
of a postprocessor may change the postprocessed program of a few records: their new hashes are
written in the JSON with the reason, under "postprocessed_updated"; the scheduled programs never
change."""
import gzip
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from tessel import TesselError
from tessel.database import Database
from tessel.ir.structural import structural_hash
from tessel.schedule import Schedule
from tessel.space import default_postprocs, final_func
from tessel.target import Target

DATA = Path(__file__).parent / "data"
EXPECTED = json.loads((DATA / "replay_v1.json").read_text())


def stored_records():
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "replay_v1.db"
        with gzip.open(DATA / "replay_v1.db.gz") as packed, open(path, "wb") as file:
            shutil.copyfileobj(packed, file)
        return read_records(path)


def read_records(path):
    with Database(path) as db:
        return [(wl.func.name, wl.func, record.trace_json) for wl in db.workloads()
                for record in db.records(wl.key) if record.trace_json is not None]


RECORDS = stored_records()


def test_the_fixture_covers_every_kind_of_operator_and_every_template():
    names = {name for name, _, _ in RECORDS}
    assert {"matmul", "conv2d", "conv1d", "depthwise_conv2d", "softmax", "layer_norm",
            "conv2d_transpose", "transpose_batch_matmul", "conv2d_bn_relu"} <= names, names
    assert all(json.loads(text)["format"] == "tessel.trace/1" for _, _, text in RECORDS)
    assert len(RECORDS) == len(EXPECTED["programs"]) == 144


@pytest.mark.parametrize("index", range(len(RECORDS)))
def test_an_old_record_replays_to_the_program_it_made(index):
    name, func, text = RECORDS[index]
    from tessel.schedule import Trace
    scheduled, postprocessed = EXPECTED["programs"][hashlib.sha256(text.encode()).hexdigest()]
    sch = Trace.from_json(text).apply(Schedule(func))
    assert structural_hash(sch.func) == scheduled
    try:
        final = structural_hash(final_func(sch, default_postprocs(
            Target(EXPECTED["postproc_target"]))))
    except TesselError as err:
        final = f"error: {type(err).__name__}"
    assert final == postprocessed
