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
