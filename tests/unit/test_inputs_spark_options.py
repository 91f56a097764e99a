"""The Spark data source's options and column types, judged in the driver before any task runs
(pgmq_build.spark.options; no Spark session needed): unknown options (typos), options of another
direction, out-of-range or non-finite numbers and columns of the wrong type raise PgmqSparkError
naming the option or column, the value and what is allowed."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow", reason="the spark extra is not installed: pip install -e '.[spark]'")

from hypothesis import given, settings
from hypothesis import strategies as st

from pgmq_build.spark.errors import PgmqSparkError
from pgmq_build.spark.options import OPTIONS, read_spec, stream_spec, write_spec

BASE = {"dsn": "host=x", "queue": "q"}
SPEC = {"read": read_spec, "readStream": stream_spec,
        "write": lambda o: write_spec(o, ["message"], streaming=False)}


@pytest.mark.parametrize("direction,key,words", [
    ("write", "messagecolum", ["unknown option 'messagecolum'", "did you mean 'messageColumn'"]),
    ("write", "createQueu", ["did you mean 'createQueue'"]),
    ("read", "numPartition", ["did you mean 'numPartitions'"]),
    ("read", "frobnicate", ["unknown option 'frobnicate' for read", "known: dsn"]),
    ("write", "table", ["'table' is a read option", "for write"]),
    ("read", "maxRowsPerBatch", ["readStream option", "for read"]),
    ("readStream", "claimVt", ["read option", "for readStream"]),
])
def test_unknown_and_misplaced_options_are_refused(direction, key, words):
    with pytest.raises(PgmqSparkError) as info:
        SPEC[direction]({**BASE, key: "1"})
    for word in words:
        assert word in str(info.value)


def test_spark_s_own_options_and_any_case_are_accepted():
    read_spec({**BASE, "path": "x", "NUMPARTITIONS": "3"})
    write_spec({**BASE, "path": "x", "checkpointlocation": "/tmp/ck"}, ["message"], streaming=True)


@pytest.mark.parametrize("direction,key,value,words", [
    ("read", "claimVt", str(2**31), ["claimVt", "0 to 2147483647", str(2**31)]),
    ("read", "claimMax", "0", ["claimMax", "1 to 2147483647", "got 0"]),
    ("readStream", "inflightWaitSeconds", "nan", ["inflightWaitSeconds", "finite", "'nan'"]),
    ("readStream", "inflightWaitSeconds", "inf", ["finite"]),
    ("readStream", "maxRowsPerBatch", "1.5", ["maxRowsPerBatch", "'1.5'"]),
])
def test_numbers_out_of_range_are_refused(direction, key, value, words):
    with pytest.raises(PgmqSparkError) as info:
        SPEC[direction]({**BASE, key: value})
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("types,words", [
    ({"message": "int"}, ["message column 'message'", "not int"]),
    ({"message": "string", "headers": "int"}, ["headers column 'headers'", "not int"]),
    ({"message": "string", "delay": "string"}, ["delay column", "integer (seconds) or a timestamp", "not string"]),
    ({"message": "string", "priority": "double"}, ["priority column", "an integer", "not double"]),
    ({"message": "string", "priority": "decimal(10,0)"}, ["not decimal(10,0)"]),
])
def test_columns_of_the_wrong_type_are_refused(types, words):
    with pytest.raises(PgmqSparkError) as info:
        write_spec(BASE, types, streaming=False)
    for word in words:
        assert word in str(info.value)


def test_columns_of_every_accepted_type_pass():
    spec = write_spec(BASE, {"message": "struct<a:int>", "headers": "map<string,string>",
                             "delay": "timestamp_ntz", "priority": "tinyint"}, streaming=False)
    assert (spec.columns.delay, spec.columns.priority) == ("delay", "priority")
    spec = write_spec({"dsn": "x", "exchange": "e"}, {"message": "binary", "routing_key": "string",
                                                      "delay": "bigint"}, streaming=False)
    assert spec.columns.routing_key == "routing_key"
    with pytest.raises(PgmqSparkError, match="routingKey column 'routing_key'.*must be a string, not int"):
        write_spec({"dsn": "x", "exchange": "e"}, {"message": "string", "routing_key": "int"},
                   streaming=False)


INT_OPTIONS = [("read", "numPartitions", 1), ("read", "claimVt", 0), ("read", "claimMax", 1),
               ("readStream", "maxRowsPerBatch", 1), ("readStream", "numPartitions", 1)]


@settings(max_examples=150, deadline=None)
@given(opt=st.sampled_from(INT_OPTIONS), value=st.one_of(
    st.integers().map(str), st.text(max_size=12), st.floats().map(repr),
    st.sampled_from(["nan", "inf", " 7 ", "0x1f", "1e3", "+5", "٣"])))
def test_integer_options_parse_exactly_or_fail_naming_the_option(opt, value):
    direction, key, minimum = opt
    try:
        spec = SPEC[direction]({**BASE, key: value})
    except PgmqSparkError as exc:
        msg = str(exc)
        assert key in msg
        try:
            assert str(int(value.strip())) in msg  # an integer out of range
        except ValueError:
            assert repr(value) in msg  # not an integer at all
        return
    got = {"numPartitions": spec.num_partitions, "claimVt": getattr(spec, "claim_vt", None),
           "claimMax": getattr(spec, "claim_max", None),
           "maxRowsPerBatch": getattr(spec, "max_rows", None)}[key]
    if value.strip():
        assert got == int(value.strip()) and minimum <= got <= 2**31 - 1


@settings(max_examples=100, deadline=None)
@given(key=st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=20),
       direction=st.sampled_from(sorted(OPTIONS)))
def test_any_key_is_known_to_its_direction_or_refused(key, direction):
    options = {**BASE, key: "1"}
    known = {k.lower() for k in OPTIONS[direction]}
    try:
        SPEC[direction](options)
    except PgmqSparkError as exc:
        assert key.lower() in known or repr(key) in str(exc)
        return
    assert key.lower() in known


@pytest.mark.parametrize("kwargs,exc,words", [
    ({"vt": True}, TypeError, ["vt", "bool"]),
    ({"vt": 2**31}, ValueError, ["vt", "2147483647"]),
    ({"max_messages": 0}, ValueError, ["max_messages", "got 0"]),
    ({"partitions": 0}, ValueError, ["partitions", "got 0"]),  # was: silently the default
    ({"partitions": -1}, ValueError, ["partitions"]),
    ({"queue": ""}, ValueError, ["queue", "empty"]),
    ({"conditional": '{"a": 1}'}, TypeError, ["conditional", "dict", "str"]),
])
def test_consume_checks_its_arguments_before_spark_is_asked(kwargs, exc, words):
    from pgmq_build.spark import consume

    args = {"dsn": "host=x", "queue": "q", "vt": 30, "max_messages": 10, **kwargs}
    with pytest.raises(exc) as info:
        consume(None, **args)  # no session needed: nothing reaches Spark
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("columns,words", [
    ({"message": (['{"a":1}', None, None], "string")}, ["message column 'message' has 2 null"]),
    ({"message": (["{}", "{}"], "string"), "delay": ([5, -3], "int64")},
     ["delay cannot be negative", "'delay' holds -3"]),
    ({"message": (["{}", "{}"], "string"), "delay": ([0, 2**31], "int64")},
     ["delay cannot exceed 2147483647", f"holds {2**31}"]),  # was an Arrow overflow in the task
])
def test_bad_values_in_rows_fail_the_task_naming_them(columns, words):
    """What the driver cannot see (values, not types) fails the task that meets them; the task's
    transaction then rolls back (other tasks of an at-least-once write may have committed)."""
    from datetime import datetime, timezone

    import pyarrow as pa

    from pgmq_build.spark.publishing import Columns, encode

    batch = pa.RecordBatch.from_pydict({k: pa.array(v, t) for k, (v, t) in columns.items()})
    cols = Columns(delay="delay" if "delay" in columns else None)
    with pytest.raises(PgmqSparkError) as info:
        encode(batch, cols, datetime.now(timezone.utc), routed=False)
    for word in words:
        assert word in str(info.value)


# -- streams (option stream) ------------------------------------------------------------------

STREAM = {"dsn": "host=x", "stream": "ev"}


@pytest.mark.parametrize("direction,options,words", [
    ("read", {"queue": "q"}, ["'queue' or option 'stream', not both"]),
    ("read", {"table": "archive"}, ["'table' applies to queues, not to stream 'ev' (read)"]),
    ("read", {"claimVt": "30"}, ["'claimVt' applies to queues"]),
    ("read", {"fromPosition": "-1"}, ["fromPosition", "0 to"]),
    ("read", {"fromPosition": "5", "toPosition": "4"}, ["toPosition (4) is before fromPosition (5)"]),
    ("read", {"subscription": "a"}, ["'subscription' is a readStream option"]),
    ("read", {"fromPositon": "1"}, ["did you mean 'fromPosition'"]),
    ("readStream", {}, ["needs option 'subscription'"]),
    ("readStream", {"subscription": "a", "onCommit": "delete"}, ["'onCommit' applies to queues"]),
    ("readStream", {"subscription": "a", "startingOffsets": "soon"}, ["earliest, latest or a position"]),
    ("readStream", {"subscription": "a", "maxRowsPerBatch": "0"}, ["maxRowsPerBatch", "1 to"]),
    ("readStream", {"subscripton": "a"}, ["did you mean 'subscription'"]),
    ("write", {"delayColumn": "d"}, ["'delayColumn' applies to queues"]),
    ("write", {"exchange": "x"}, ["'exchange' applies to queues"]),
    ("write", {"createQueue": "true"}, ["'createQueue' applies to queues"]),
    ("write", {"stream": ""}, ["'stream' must name a stream"]),
])
def test_stream_options_are_judged(direction, options, words):
    with pytest.raises(PgmqSparkError) as info:
        SPEC[direction]({**STREAM, **options})
    for word in words:
        assert word in str(info.value), info.value


@pytest.mark.parametrize("direction,options", [
    ("read", {"fromPosition": "3"}), ("readStream", {"subscription": "a"}),
])
def test_stream_only_options_on_a_queue_are_refused(direction, options):
    with pytest.raises(PgmqSparkError, match="applies to streams"):
        SPEC[direction]({**BASE, **options})


def test_stream_specs():
    spec = read_spec({**STREAM, "fromPosition": "3", "numPartitions": "4"})
    assert (spec.stream, spec.from_position, spec.to_position, spec.num_partitions) == ("ev", 3, None, 4)
    spec = stream_spec({**STREAM, "subscription": "a", "startingOffsets": "17", "maxRowsPerBatch": "9"})
    assert (spec.stream, spec.subscription, spec.starting, spec.max_rows) == ("ev", "a", "17", 9)
    assert stream_spec({**STREAM, "subscription": "a"}).starting == "earliest"
    # a stream's events have no delay or priority: columns with those names are not taken
    spec = write_spec(STREAM, {"message": "string", "delay": "int", "priority": "int"}, streaming=False)
    assert (spec.stream, spec.columns.delay, spec.columns.priority) == ("ev", None, None)
