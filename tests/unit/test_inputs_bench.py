"""The benchmarks' options (python3 -m bench [steady], bench.spark):
nan/inf, negative counts and a DSN libpq cannot parse exit 2 naming the option, before any
server or Spark session starts."""

from __future__ import annotations

import pytest

from bench import run, steady


@pytest.mark.parametrize("parse,argv,words", [
    (run.parse_args, ["--seconds", "nan"], ["--seconds", "finite", "nan"]),
    (run.parse_args, ["--seconds", "inf"], ["--seconds", "inf"]),
    (run.parse_args, ["--spark-rows", "-5"], ["--spark-rows", "-5"]),
    (run.parse_args, ["--dsn", "host=x nonsense=1"], ["--dsn", "nonsense"]),
    (steady.parse_args, ["--minutes", "nan"], ["--minutes", "finite"]),
    (steady.parse_args, ["--rate", "inf"], ["--rate", "finite"]),
    (steady.parse_args, ["--poll-ms", "nan"], ["--poll-ms"]),
    (steady.parse_args, ["--dsn", "postgres://[::1"], ["--dsn", "IPv6"]),
])
def test_bad_bench_options_exit_2(capsys, parse, argv, words):
    with pytest.raises(SystemExit) as info:
        parse(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err


def test_spark_bench_refuses_bad_rows_and_dsn_before_starting_spark(capsys):
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    from bench import spark as spark_bench

    for argv, word in ((["--rows", "0"], "--rows must be at least 1"),
                       (["--dsn", "nonsense"], "--dsn is not a libpq connection string")):
        with pytest.raises(SystemExit) as info:
            spark_bench.main(argv)
        assert info.value.code == 2 and word in capsys.readouterr().err
