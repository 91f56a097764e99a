"""Bad worker settings (Worker(...) and `pgmq-build worker` options, command line or environment):
refused with the setting, the value and what is allowed; exit 2 for the command; nothing
connects and no thread starts. The server here is a bare listening socket that counts who
connects to it."""

from __future__ import annotations

import contextlib
import math
import socket
import threading
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from pgmq_build.cli import main
from pgmq_build.worker import NAPTIME_MS_MAX, SettingError, Worker


@contextlib.contextmanager
def listening() -> Iterator[tuple[str, socket.socket]]:
    """A DSN whose server is a socket nobody accepts on: a connection attempt would queue there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        s.setblocking(False)  # a connection attempt is queued before the call under test returns
        yield f"host=127.0.0.1 port={s.getsockname()[1]} connect_timeout=1", s


def nobody_connected(s: socket.socket) -> bool:
    try:
        s.accept()[0].close()
    except BlockingIOError:
        return True
    return False


# (keyword arguments, the setting named, words the message must contain)
BAD_SETTINGS = [
    ({"min_workers": 0}, "min_workers", ["1", "got 0"]),
    ({"min_workers": "3"}, "min_workers", ["integer", "str"]),
    ({"min_workers": 4, "max_workers": 2}, "max_workers", ["at least min_workers (4)", "got 2"]),
    ({"max_workers": 2.5}, "max_workers", ["integer", "float"]),
    ({"start_delay": math.nan}, "start_delay", ["finite", "nan"]),
    ({"start_delay": -1}, "start_delay", [">= 0", "-1"]),
    ({"idle_timeout": math.inf}, "idle_timeout", ["finite", "inf"]),
    ({"idle_timeout": "60"}, "idle_timeout", ["number", "str"]),
    ({"naptime_ms": 0}, "naptime_ms", [f"1 to {NAPTIME_MS_MAX}"]),
    ({"naptime_ms": NAPTIME_MS_MAX + 1}, "naptime_ms", [str(NAPTIME_MS_MAX + 1)]),
    ({"batch": True}, "batch", ["integer", "bool"]),
    ({"tx_batch": 1001}, "tx_batch", ["1 to 1000", "1001"]),
    ({"refresh_interval": 0}, "refresh_interval", ["> 0"]),
    ({"max_backoff": math.nan}, "max_backoff", ["finite"]),
    ({"queues": "jobs"}, "queues", ["list of queue names", "str"]),  # not ['j', 'o', 'b', 's']
    ({"queues": ["jobs", ""]}, "queues", ["queues[1]", "empty"]),
    ({"queues": ["a\x00b"]}, "queues", ["queues[0]", "NUL"]),
    ({"queues": [b"jobs"]}, "queues", ["queues[0]", "bytes"]),
    ({"streams": "ev:a", "handler": print}, "streams", ["STREAM:SUBSCRIPTION", "str"]),
    ({"streams": ["ev"], "handler": print}, "streams", ["streams[0]", "STREAM:SUBSCRIPTION", "'ev'"]),
    ({"streams": ["ev:"], "handler": print}, "streams", ["streams[0] (subscription)", "empty"]),
    ({"streams": [":a"], "handler": print}, "streams", ["streams[0] (stream)", "empty"]),
    ({"streams": [("ev", 5)], "handler": print}, "streams", ["streams[0] (subscription)", "int"]),
    ({"streams": ["ev:a"]}, "handler", ["streams need a handler"]),
    ({"streams": ["ev:a"], "handler": "mod:fn"}, "handler", ["handler(batch, conn)", "'mod:fn'"]),
    ({"handler": print}, "handler", ["give the streams"]),
    ({"streams": ["ev:a"], "handler": print, "stream_lease": 0}, "stream_lease", ["1 to", "got 0"]),
    ({"streams": ["ev:a"], "handler": print, "stream_consumers": 101}, "stream_consumers", ["1 to 100"]),
    ({"dsn": "nonsense==="}, "dsn", ["libpq", "nonsense"]),
    ({"dsn": None}, "dsn", ["dsn", "str"]),
]


@pytest.mark.parametrize("kwargs,setting,words", BAD_SETTINGS)
def test_bad_settings_are_named_and_nothing_connects_or_starts(kwargs, setting, words):
    kwargs = dict(kwargs)
    threads = threading.active_count()
    with listening() as (dsn, server):
        with pytest.raises(SettingError) as info:
            Worker(kwargs.pop("dsn", dsn), **kwargs)
        assert nobody_connected(server)
    assert info.value.setting == setting and isinstance(info.value, ValueError)
    for word in words:
        assert word in str(info.value), f"{word!r} not in {info.value}"
    assert threading.active_count() == threads


def worker_cli(*args: str, env: dict[str, str] | None = None):
    with listening() as (dsn, server):
        result = CliRunner().invoke(main, ["worker", "--dsn", dsn, *args], env=env)
        assert nobody_connected(server), result.output
    return result


@pytest.mark.parametrize("args,words", [
    (["--stream", "ev:a"], ["--handler", "streams need a handler"]),
    (["--handler", "pgmq_build.streams:handle_batch"], ["--handler", "give the streams"]),
    (["--stream", "ev", "--handler", "pgmq_build.streams:handle_batch"], ["--stream", "STREAM:SUBSCRIPTION"]),
    (["--stream", "ev:a", "--handler", "pgmq_build.streams"], ["--handler", "MODULE:FUNCTION"]),
    (["--stream", "ev:a", "--handler", "pgmq_build.streams:nothing"], ["--handler", "has no 'nothing'"]),
    (["--stream", "ev:a", "--handler", "pgmq_build.streams:DONE"], ["--handler", "not callable (str)"]),
    (["--start-delay", "nan"], ["--start-delay", "'nan' is not a finite number"]),
    (["--idle-timeout", "inf"], ["--idle-timeout", "finite"]),
    (["--naptime-ms", "99999999999"], ["--naptime-ms", "1<=x<=3600000"]),
    (["--queue", "jobs", "--queue", ""], ["--queue", "queues[1] must not be empty"]),
    (["--min-workers", "5", "--max-workers", "2"], ["--max-workers", "at least min_workers (5)"]),
])
def test_cli_refuses_bad_options_with_exit_2_before_connecting(args, words):
    result = worker_cli(*args)
    assert result.exit_code == 2, result.output
    for word in words:
        assert word in result.output


def test_cli_refuses_a_bad_dsn_with_exit_2():
    result = CliRunner().invoke(main, ["worker", "--dsn", "host=x nonsense=1"])
    assert result.exit_code == 2
    assert "--dsn" in result.output and 'invalid connection option "nonsense"' in result.output


def test_cli_names_the_environment_variable_a_bad_value_came_from():
    result = worker_cli(env={"PGMQ_BUILD_WORKER_MIN_WORKERS": "abc"})
    assert result.exit_code == 2
    assert "'abc'" in result.output and "PGMQ_BUILD_WORKER_MIN_WORKERS" in result.output
    # on the command line: no mention of the environment, though the variable is set
    result = worker_cli("--min-workers", "x", env={"PGMQ_BUILD_WORKER_MIN_WORKERS": "abc"})
    assert result.exit_code == 2 and "'x'" in result.output and "environment" not in result.output
    result = CliRunner().invoke(main, ["worker"], env={"PGMQ_BUILD_WORKER_DSN": "nonsense==="})
    assert result.exit_code == 2 and "PGMQ_BUILD_WORKER_DSN" in result.output


def test_options_renamed_in_python_read_the_documented_variables():
    """PGMQ_BUILD_<COMMAND>_<OPTION> (README): --to, --queue and --migrate have other Python
    names, whose automatic variables (..._TARGET, ..._QUEUES, ..._MIGRATE_) nobody would guess."""
    result = CliRunner().invoke(main, ["migrate", "--dsn", "dbname=x"], env={"PGMQ_BUILD_MIGRATE_TO": "bogus"})
    assert result.exit_code == 2 and "PGMQ_BUILD_MIGRATE_TO" in result.output
    result = worker_cli(env={"PGMQ_BUILD_WORKER_HANDLER": "no_such_module_x:f",
                             "PGMQ_BUILD_WORKER_STREAM": "ev:a"})
    assert result.exit_code == 2 and "PGMQ_BUILD_WORKER_HANDLER" in result.output
    assert "cannot import 'no_such_module_x'" in result.output
    # (PGMQ_BUILD_WORKER_QUEUE: tests/integration/test_inputs_worker.py)


# ----------------------------------------------------------------------------- property tests

NUMERIC = {  # option: (smallest, largest, integer?)
    "--min-workers": (1, None, True), "--max-workers": (1, None, True),
    "--start-delay": (0, None, False), "--idle-timeout": (0, None, False),
    "--naptime-ms": (1, NAPTIME_MS_MAX, True), "--batch": (1, None, True),
    "--tx-batch": (1, 1000, True), "--lease": (1, 2**31 - 1, True),
    "--stream-consumers": (1, 100, True),
}


@st.composite
def bad_value(draw) -> tuple[str, str]:
    option = draw(st.sampled_from(sorted(NUMERIC)))
    low, high, integral = NUMERIC[option]
    choices = [st.integers(max_value=low - 1).map(str),
               st.sampled_from(["nan", "inf", "-inf", "", " ", "1e", "0x10", "五"]),
               st.text(st.characters(categories=("L", "P", "S")), min_size=1, max_size=8)]
    if high is not None:
        choices.append(st.integers(min_value=high + 1).map(str))
    if integral:
        choices.append(st.floats(allow_nan=False, allow_infinity=False)
                       .filter(lambda f: not f.is_integer()).map(repr))
    return option, draw(st.one_of(*choices))


@settings(max_examples=80, deadline=None)
@given(bad=bad_value(), where=st.sampled_from(["argv", "env"]))
def test_random_bad_numbers_exit_2_naming_the_option(bad, where):
    option, value = bad
    var = "PGMQ_BUILD_WORKER_" + option[2:].upper().replace("-", "_")
    args, env = ([option, value], None) if where == "argv" else ([], {var: value})
    if where == "env" and not value.strip():
        return  # an empty variable means "not set" to click
    result = worker_cli(*args, env=env)
    assert result.exit_code == 2, (option, value, result.output)
    assert option in result.output and "Traceback" not in result.output
    assert (var in result.output) == (where == "env")
