"""The dashboard's read-only JSON API (/api/...: what the pages show, behind the same Host rule),
the queue list's sort and filter, its shared sparkline scale, and the outage page that retries
by itself."""

from __future__ import annotations

import json
import re

from pgmq_build.dashboard import charts
from tests.dashboard.demo_db import streams_and_exchanges
from tests.helpers import wait_for


def doc(reply) -> dict:
    assert reply.headers["content-type"] == "application/json", reply.headers
    return json.loads(reply.body)


def test_api_queues_is_what_the_list_shows(dashboard, demo):
    dash = dashboard()
    wait_for(lambda: len(dash.app.sampler.history("orders")) >= 2, what="two samples")
    got = doc(dash.get("/api/queues"))
    assert [q["queue_name"] for q in got["queues"]] == sorted(demo.queues)
    orders = next(q for q in got["queues"] if q["queue_name"] == "orders")
    assert (orders["depth"], orders["visible"], orders["in_flight"], orders["delayed"]) == (26, 20, 4, 2)
    assert len(orders["history"]) >= 2 and orders["history"][-1]["depth"] == 26
    assert orders["rates"] == {"sent_per_s": 0.0, "consumed_per_s": 0.0}
    payments = next(q for q in got["queues"] if q["queue_name"] == demo.source)
    assert (payments["dead_letter_queue"], payments["dead_letter_depth"]) == (demo.dlq, demo.dead)
    assert (got["sort"], got["order"], got["q"], got["total"]) == ("name", "asc", "", len(demo.queues))


def test_api_queue_and_dead_letters(dashboard, demo):
    dash = dashboard()
    one = doc(dash.get("/api/queues/orders"))
    assert one["queue"] == "orders" and one["metrics"]["depth"] == 26
    assert one["settings"]["queue_name"] == "orders" and isinstance(one["history"], list)
    missing = dash.get("/api/queues/nope")
    assert missing.status == 404 and "nope" in doc(missing)["error"]["message"]
    dead = doc(dash.get("/api/dead-letters"))["dead_letter_queues"]
    assert [d["name"] for d in dead] == [demo.dlq] and dead[0]["sources"] == [demo.source]
    assert sorted(x["dead"]["reason"] for x in dead[0]["letters"]) == ["nack"] * 3 + ["rollback"] * 2


def test_api_keeps_the_host_rule_and_is_read_only(dashboard, demo):
    dash = dashboard()
    refused = dash.get("/api/queues", headers={"Host": "evil.example:80"})
    assert refused.status == 400 and "unexpected Host" in doc(refused)["error"]["message"]
    post = dash.post("/api/queues", form={})
    assert post.status == 405 and doc(post)["error"]["status"] == 405


def test_sort_and_filter(dashboard, demo):
    dash = dashboard()
    by_depth = doc(dash.get("/api/queues?sort=depth&order=desc"))["queues"]
    depths = [q["depth"] for q in by_depth]
    assert depths == sorted(depths, reverse=True) and by_depth[0]["queue_name"] == "orders"
    # DLQs last either way: queues without one have no value to sort by
    dead = [q["queue_name"] for q in doc(dash.get("/api/queues?sort=dead&order=asc"))["queues"]]
    assert dead[0] == demo.source
    filtered = doc(dash.get("/api/queues?q=PAY"))
    assert [q["queue_name"] for q in filtered["queues"]] == [demo.source, demo.dlq]
    assert filtered["total"] == len(demo.queues)
    bad = dash.get("/api/queues?sort=color")
    assert bad.status == 400 and "sort must be one of" in doc(bad)["error"]["message"]
    assert dash.get("/?order=sideways").status == 400
    page = dash.get("/?q=pay&sort=depth&order=desc")
    rows = re.findall(r'<tr>\s*<td class="l"><a href="/queues/([^"]+)"', page.body)
    assert rows == [demo.dlq, demo.source]  # 5 dead letters, then the 3 messages left of 8
    assert "2 of 5 queue(s)" in page.body
    assert 'class="sort on" data-sort="depth" href="/?sort=depth&amp;order=asc&amp;q=pay"' in page.body


def test_sparklines_share_one_log_scale():
    """A queue of 2 and one of 26,886 on one scale: both drawn, the small one low but above 0."""
    big = charts.sparkline([(0, 26_886), (1, 26_886)], top=26_886, height=26)
    small = charts.sparkline([(0, 2), (1, 2)], top=26_886, height=26)
    y = lambda svg: float(re.search(r'points="[\d.]+,([\d.]+)', svg).group(1))  # noqa: E731
    assert y(big) == 2.0  # the top edge (pad 2)
    assert 15 < y(small) < 24  # log10(3)/log10(26887) of the way up: visible, not flat on 0
    alone = charts.sparkline([(0, 2), (1, 2)])  # its own scale, linear: at the top
    assert y(alone) == 2.0


def test_outage_page_says_it_retries(dashboard):
    down = dashboard("host=127.0.0.1 port=1 user=nobody dbname=none connect_timeout=1",
                     pool_timeout=0.5)
    page = down.get("/")
    assert page.status == 503 and page.headers["retry-after"] == "5"
    assert 'id="retrying"' in page.body and "location.reload()" in page.body and "5000" in page.body
    api = down.get("/api/queues")
    assert api.status == 503 and api.headers["retry-after"] == "5"
    assert "unavailable" in doc(api)["error"]["message"]


def test_streams_and_exchanges_pages_and_api(dashboard, demo, conn):
    streams_and_exchanges(conn)
    dash = dashboard()
    (ev,) = doc(dash.get("/api/streams"))["streams"]
    subs = {u["subscription_name"]: u for u in ev["subscriptions"]}
    assert ev["stream_name"] == "ev" and subs["a"]["lag_events"] == 3 and ev["retention"] > 0
    page = dash.get("/streams")
    assert page.status == 200 and 'data-stream="ev"' in page.body
    assert re.search(r"<td class=\"l\">a</td>.*?<td class=\"lag\">3</td>", page.body, re.S)
    exchanges = {e["exchange_name"]: e for e in doc(dash.get("/api/exchanges"))["exchanges"]}
    assert exchanges["orders"]["exchange_type"] == "direct"
    assert exchanges["orders"]["bindings"] == [{"queue": "orders", "stream": None, "key": "eu"},
                                               {"queue": None, "stream": "ev", "key": "us"}]
    page = dash.get("/exchanges")
    assert '<a href="/queues/orders">orders</a> <span class="muted">[eu]</span>' in page.body
    assert "stream ev" in page.body


def test_queue_page_time_range(dashboard, demo):
    dash = dashboard()
    page = dash.get("/queues/orders?range=5m")
    assert page.status == 200
    assert 'data-range="5m" class="on">last 5m</a>' in page.body
    assert page.body.count('class="chart"') == 3
    assert 'data-range="1h" class="on"' in dash.get("/queues/orders").body  # the default
    bad = dash.get("/queues/orders?range=2d")
    assert bad.status == 400 and "range must be one of 5m, 15m, 1h, 6h, 24h, all" in bad.body
