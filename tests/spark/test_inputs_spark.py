"""Bad input to the Spark data source, end to end on local[2]: refused in the driver with a
message naming the option or column, before any task runs: no row written, no queue created."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'")

pytestmark = pytest.mark.spark


def test_bad_schema_and_unknown_options_write_nothing(spark, dsn, make_queue, sql):
    make_queue("sq")
    ints = spark.createDataFrame([(1,), (2,)], "message int")
    with pytest.raises(Exception, match=r"the message column 'message' \(option messageColumn\) "
                                        r"must be a string \(JSON text\), binary, struct, map or array, not int"):
        (ints.write.format("pgmq").option("dsn", dsn).option("queue", "made")
         .option("createQueue", "true").mode("append").save())
    texts = spark.createDataFrame([('{"a": 1}',), ('{"a": 2}',)], "body string")
    with pytest.raises(Exception, match="unknown option 'messagecolum' for write "
                                        r"\(did you mean 'messageColumn'\?\)"):
        (texts.write.format("pgmq").option("dsn", dsn).option("queue", "sq")
         .option("messagecolum", "body").mode("append").save())
    # (each call costs a Python worker in Spark: the other cases are in
    # tests/unit/test_inputs_spark_options.py)
    assert sql("SELECT count(*) FROM pgmq.q_sq") == [(0,)]
    assert sql("SELECT count(*) FROM pgmq.meta WHERE queue_name = 'made'") == [(0,)]
