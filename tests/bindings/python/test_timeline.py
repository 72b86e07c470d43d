"""start_timeline / stop_timeline from Python write rank 0's Chrome trace of the
collectives run meanwhile; a path that cannot be created raises ValueError."""

import json
import os

import pytest
import torch


def test_timeline_records_the_collectives_run_while_it_is_on(hvd, tmp_path):
    # Only rank 0 writes: every rank passes rank 0's path.
    path = hvd.broadcast_object(str(tmp_path / "timeline.json"), root_rank=0)
    hvd.start_timeline(path, mark_cycles=True)
    hvd.allreduce(torch.ones(1024), name="timeline.py.small")
    hvd.allgather(torch.ones(2, 3), name="timeline.py.gather")
    hvd.stop_timeline()
    hvd.allreduce(torch.ones(8), name="timeline.py.after")
    if hvd.rank() != 0:
        return
    with open(path) as f:
        events = json.load(f)  # complete JSON once stop_timeline returned
    events = events["traceEvents"] if isinstance(events, dict) else events
    tracks = {e["tid"]: e["args"]["name"] for e in events
              if e.get("ph") == "M" and e.get("name") == "thread_name"}
    phases = {}
    for e in events:
        if e.get("ph") in ("B", "X") and e.get("tid") in tracks:
            phases.setdefault(tracks[e["tid"]], set()).add(e.get("name"))
    # Horovod's words: tensors named by operation and name, its phase names, its marks.
    assert {"QUEUE", "NEGOTIATE_ALLREDUCE", "ALLREDUCE"} <= \
        phases.get("allreduce.timeline.py.small", set()), phases
    assert {"NEGOTIATE_ALLGATHER", "ALLGATHER"} <= \
        phases.get("allgather.timeline.py.gather", set()), phases
    assert "allreduce.timeline.py.after" not in phases
    assert any(e.get("ph") == "i" and e.get("name") == "CYCLE_START" for e in events)


def test_a_timeline_path_that_cannot_be_created_raises_value_error(hvd):
    if hvd.rank() != 0:
        pytest.skip("only rank 0 writes the timeline")
    with pytest.raises(ValueError, match="/no/such/dir/t.json"):
        hvd.start_timeline("/no/such/dir/t.json")
    assert not os.path.exists("/no/such/dir")
