"""SQL issue found by the dashboard (ops-dashboard branch): the new operations routines raise
their name check as P0001 (upstream's format_table_name, a plain RAISE) where our own routines
raise 42602 invalid_name (pgmq._format_table_name: redrive, nack, notify_msg_id...). A client
(the dashboard) cannot tell P0001 from any other RAISE, so it must match the message text.
Fails until queue_metrics and browse call _format_table_name for their name check."""

from __future__ import annotations

import pytest

from tests.helpers import raises_sql


@pytest.mark.parametrize("sql", ["SELECT * FROM pgmq.queue_metrics(%s)", "SELECT * FROM pgmq.browse(%s)",
                                 "SELECT pgmq.redrive(%s)"])
def test_ops_routines_raise_invalid_name_like_ours(conn, sql):
    with raises_sql("42602"):
        conn.execute(sql, ("x;y",))
