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
# The metrics history (pgmq.sample_metrics / pgmq.metrics_history, 2.11.0): whether this role
# may write it (the function exists, EXECUTE is granted, the server takes writes).
MAY_SAMPLE = ("SELECT coalesce(has_function_privilege(to_regprocedure('pgmq.sample_metrics(interval,integer)'), "
              "'EXECUTE'), false) AND NOT pg_is_in_recovery() AS may")
SAMPLE = "SELECT * FROM pgmq.sample_metrics(%s::double precision * interval '1 second', %s::integer)"
# Read from the table (row security: the queues this role may read), so that one statement
# serves a page of queues; since NULL: everything kept.
HISTORY = ("SELECT queue_name, sampled_at, depth, visible, in_flight, delayed, oldest_msg_age_sec, "
           "total_sent, dead_letter_depth FROM pgmq.metrics_history "
           "WHERE queue_name = ANY(%s::text[]) "
           "AND (%s::double precision IS NULL OR sampled_at >= now() - %s::double precision * interval '1 second') "
           "ORDER BY queue_name, sampled_at")
