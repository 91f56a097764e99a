"""Every statement the dashboard runs. Request input reaches them only as psycopg parameters
(%s placeholders, bound by the server): no text here is ever formatted with a value, and
tests/dashboard/test_http.py checks that each execute() in the package gets one of these
constants."""

IN_RECOVERY = "SELECT pg_is_in_recovery() AS standby"
METRICS_ALL = "SELECT * FROM pgmq.queue_metrics()"
METRICS_ONE = "SELECT * FROM pgmq.queue_metrics(%s::text)"
SETTINGS = "SELECT * FROM pgmq.list_queue_settings() WHERE queue_name = %s::text"
BROWSE = ("SELECT msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers "
          "FROM pgmq.browse(%s::text, %s::bigint, %s::integer, %s::boolean)")
PAUSE = "SELECT pgmq.pause(%s::text) AS result"
RESUME = "SELECT pgmq.resume(%s::text) AS result"
PURGE = "SELECT pgmq.purge_queue(%s::text) AS result"
REDRIVE = "SELECT pgmq.redrive(%s::text, %s::text, %s::integer) AS result"
STREAMS = "SELECT * FROM pgmq.list_streams() ORDER BY stream_name"
SUBSCRIPTIONS = "SELECT * FROM pgmq.stream_info() ORDER BY stream_name, subscription_name"
EXCHANGES = ("SELECT exchange_name, exchange_type, owner, on_unroutable, alternate_exchange "
             "FROM pgmq.list_exchanges() ORDER BY exchange_name")
BINDINGS = ("SELECT exchange_name, queue_name, stream_name, binding_key "
            "FROM pgmq.list_exchange_bindings() ORDER BY exchange_name, queue_name, stream_name, binding_key")
