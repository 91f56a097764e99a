"""Property test: random programs of send / read / pop / nack / read_message / commit / rollback
in one transaction stream, checked after every step against a plain Python model."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

OPS = st.lists(
    st.one_of(
        st.just(("send",)), st.just(("read",)), st.just(("pop",)), st.just(("take",)),
        st.tuples(st.just("nack"), st.integers(0, 5)),
        st.just(("commit",)), st.just(("rollback",)),
    ),
    min_size=1, max_size=25,
)


class Model:
    """payload n -> [visible, read_ct]; `committed` is what a rollback returns to."""

    def __init__(self):
        self.state: dict[int, list] = {}
        self.committed: dict[int, list] = {}
        self.next_n = 0

    def first_visible(self):
        visible = sorted(n for n, (vis, _) in self.state.items() if vis)
        return visible[0] if visible else None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_random_programs_match_the_model(connect, ops):
    admin = connect()
    admin.execute("SET lock_timeout = '5s'")
    admin.execute("SELECT pgmq.drop_queue('m')")
    admin.execute("SELECT pgmq.create('m')")
    c = connect(autocommit=False)
    try:
        run_program(c, ops)
    finally:
        c.close()  # a failing example must not leave locks behind for the next one


def run_program(c, ops):
    model = Model()
    for op in ops:
        kind = op[0]
        if kind == "send":
            c.execute("SELECT pgmq.send('m', jsonb_build_object('n', %s::int))", (model.next_n,))
            model.state[model.next_n] = [True, 0]
            model.next_n += 1
        elif kind == "read":
            got = c.execute("SELECT (message->>'n')::int, read_ct FROM pgmq.read('m', 3600, 1)").fetchall()
            n = model.first_visible()
            if n is None:
                assert got == []
            else:
                model.state[n] = [False, model.state[n][1] + 1]
                assert got == [(n, model.state[n][1])]
        elif kind in ("pop", "take"):
            sql = ("SELECT (message->>'n')::int FROM pgmq.pop('m')" if kind == "pop"
                   else "SELECT (m->>'n')::int FROM pgmq.read_message('m') m WHERE m IS NOT NULL")
            got = [r[0] for r in c.execute(sql).fetchall()]
            n = model.first_visible()
            assert got == ([] if n is None else [n])
            if n is not None:
                del model.state[n]
        elif kind == "nack":
            leased = sorted(n for n, (vis, _) in model.state.items() if not vis)
            if leased:
                n = leased[op[1] % len(leased)]
                msg_id = c.execute("SELECT msg_id FROM pgmq.q_m WHERE (message->>'n')::int = %s", (n,)).fetchone()[0]
                assert c.execute("SELECT pgmq.nack('m', %s)", (msg_id,)).fetchone()[0] is True
                # Without a retry policy the message comes back after 1 s (test_delivery checks
                # that); the model has no clock, so the wait is skipped: visible again now.
                assert c.execute("UPDATE pgmq.q_m SET vt = now() WHERE msg_id = %s AND vt > now()",
                                 (msg_id,)).rowcount == 1
                model.state[n][0] = True
        elif kind == "commit":
            c.commit()
            model.committed = copy.deepcopy(model.state)
        else:
            c.rollback()
            model.state = copy.deepcopy(model.committed)
        rows = c.execute("SELECT (message->>'n')::int, vt <= clock_timestamp(), read_ct FROM pgmq.q_m").fetchall()
        assert {n: [vis, ct] for n, vis, ct in rows} == model.state
    c.rollback()
