"""One example per public SQL routine, shown in docs/reference/sql.md.

Each runs as written through psql (ON_ERROR_STOP) in a fresh database where `CREATE EXTENSION
pgmq` was done, as a superuser: tests/integration/test_reference_examples.py runs every one, and
tests/unit/test_reference.py fails when a public routine has none. Examples that make a role do
it in a transaction they roll back: roles belong to the whole cluster.
"""

from __future__ import annotations

_PARTMAN = "CREATE SCHEMA partman;\nCREATE EXTENSION pg_partman SCHEMA partman;\n"

EXAMPLES: dict[str, str] = {
    # ---- core
    "format_table_name": "SELECT pgmq.format_table_name('Jobs', 'q');   -- q_jobs",
    "validate_queue_name": "SELECT pgmq.validate_queue_name('jobs');",
    "acquire_queue_lock": """\
BEGIN;
SELECT pgmq.acquire_queue_lock('jobs');   -- held until COMMIT
COMMIT;""",
    "create_non_partitioned": "SELECT pgmq.create_non_partitioned('jobs');",
    "create_unlogged": "SELECT pgmq.create_unlogged('scratch');",
    "create": """\
SELECT pgmq.create('jobs');
SELECT pgmq.create('docs', 'xml');   -- a queue of xml payloads (see send_payload)""",
    "drop_queue": """\
SELECT pgmq.create('jobs');
SELECT pgmq.drop_queue('jobs');   -- true""",
    "purge_queue": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send('jobs', '{"task": 1}');
SELECT pgmq.purge_queue('jobs');   -- 1""",
    "list_queues": """\
SELECT pgmq.create('jobs');
SELECT queue_name, is_partitioned, is_unlogged, created_at FROM pgmq.list_queues();""",
    "detach_archive": """\
SELECT pgmq.create('jobs');
SELECT pgmq.detach_archive('jobs');   -- a WARNING: deprecated, does nothing""",
    "send": """\
SELECT pgmq.create('jobs');
SELECT * FROM pgmq.send('jobs', '{"task": 1}');                               -- msg_id
SELECT * FROM pgmq.send('jobs', '{"task": 2}', '{"x-pgmq-priority": 1}', 10);  -- visible in 10 s""",
    "send_batch": """\
SELECT pgmq.create('jobs');
SELECT * FROM pgmq.send_batch('jobs', ARRAY['{"task": 1}', '{"task": 2}']::jsonb[]);""",
    "enable_priorities": """\
SELECT pgmq.create('jobs');
SELECT pgmq.enable_priorities('jobs');""",
    "read": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send('jobs', '{"task": 1}');
SELECT msg_id, read_ct, message FROM pgmq.read('jobs', vt => 30, qty => 10);""",
    "read_unordered": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send_batch('jobs', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[]);
SELECT msg_id, message FROM pgmq.read_unordered('jobs', 30, 10);   -- both, in the order they became visible""",
    "read_with_poll": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send('jobs', '{"task": 1}');
SELECT msg_id, message FROM pgmq.read_with_poll('jobs', vt => 30, qty => 1, max_poll_seconds => 1);""",
    "pop": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send('jobs', '{"task": 1}');
SELECT msg_id, message FROM pgmq.pop('jobs');""",
    "delete": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send('jobs', '{"task": 1}');
SELECT pgmq.delete('jobs', 1::bigint);                  -- true
SELECT * FROM pgmq.delete('jobs', ARRAY[2, 3]::bigint[]);  -- no row: none existed""",
    "archive": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send('jobs', '{"task": 1}');
SELECT pgmq.archive('jobs', 1::bigint);   -- true: moved to pgmq.a_jobs""",
    "set_vt": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send('jobs', '{"task": 1}');
SELECT msg_id, vt FROM pgmq.set_vt('jobs', 1::bigint, 60);   -- invisible for 60 s""",
    "metrics": """\
SELECT pgmq.create('jobs');
SELECT queue_length, total_messages FROM pgmq.metrics('jobs');""",
    "metrics_all": """\
SELECT pgmq.create('jobs');
SELECT queue_name, queue_length FROM pgmq.metrics_all();""",
    # ---- delivery
    "set_retry_policy": """\
SELECT pgmq.create('jobs');
SELECT pgmq.create('jobs_dead');
SELECT pgmq.set_retry_policy('jobs', max_retries => 3, retry_delay => 10, backoff_factor => 2,
                             dead_letter_queue => 'jobs_dead');""",
    "remove_retry_policy": """\
SELECT pgmq.create('jobs');
SELECT pgmq.set_retry_policy('jobs', max_retries => 3);
SELECT pgmq.remove_retry_policy('jobs');""",
    "set_dedup_window": """\
SELECT pgmq.create('jobs');
SELECT pgmq.set_dedup_window('jobs', 600);
SELECT pgmq.send('jobs', '{"task": 1}', '{"x-pgmq-dedup-id": "order-7"}'::jsonb);
SELECT pgmq.send('jobs', '{"task": 1}', '{"x-pgmq-dedup-id": "order-7"}'::jsonb);  -- the same msg_id""",
    "set_message_ttl": """\
SELECT pgmq.create('jobs');
SELECT pgmq.set_message_ttl('jobs', 3600);   -- dead-letter messages older than an hour""",
    "list_queue_settings": """\
SELECT pgmq.create('jobs');
SELECT * FROM pgmq.list_queue_settings();""",
    "redrive": """\
SELECT pgmq.create('jobs');
SELECT pgmq.create('jobs_dead');
SELECT pgmq.send('jobs_dead', '{"task": 1}');
SELECT pgmq.redrive('jobs_dead', target_queue => 'jobs');   -- 1""",
    "nack": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send('jobs', '{"task": 1}');
SELECT msg_id FROM pgmq.read('jobs', 30, 1);
SELECT pgmq.nack('jobs', 1, 'timeout calling the API');   -- retried later""",
    "checkpoint": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send('jobs', '{"step": 1}');
SELECT msg_id FROM pgmq.read('jobs', 30, 1);
SELECT pgmq.checkpoint('jobs', 1, '{"step": 2}', vt => 60);   -- true""",
    "send_reserved": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send_reserved('jobs', '{"task": 1}', confirm_within => 60);   -- invisible until confirmed""",
    "confirm": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send_reserved('jobs', '{"task": 1}', 60);
SELECT pgmq.confirm('jobs', ARRAY[1]::bigint[]);   -- 1""",
    "expire_messages": """\
SELECT pgmq.create('jobs');
SELECT pgmq.expire_messages('jobs');   -- or pgmq.expire_messages() for every queue""",
    # ---- partitioned (pg_partman)
    "create_partitioned": _PARTMAN + """\
SELECT pgmq.create_partitioned('events', partition_interval => '10000',
                               retention_interval => '100000');""",
    "convert_archive_partitioned": _PARTMAN + """\
SELECT pgmq.create('jobs');
SELECT pgmq.convert_archive_partitioned('jobs');   -- the old archive is kept as a_jobs_old""",
    "run_partition_maintenance": _PARTMAN + """\
SELECT pgmq.create_partitioned('events');
SELECT pgmq.run_partition_maintenance('events');""",
    # ---- fifo
    "create_fifo_index": """\
SELECT pgmq.create('orders');
SELECT pgmq.create_fifo_index('orders');""",
    "create_fifo_indexes_all": """\
SELECT pgmq.create('orders');
SELECT pgmq.create_fifo_indexes_all();""",
    "read_grouped": """\
SELECT pgmq.create('orders');
SELECT pgmq.send('orders', '{"step": 1}', '{"x-pgmq-group": "customer-1"}'::jsonb);
SELECT pgmq.send('orders', '{"step": 2}', '{"x-pgmq-group": "customer-1"}'::jsonb);
SELECT msg_id, message FROM pgmq.read_grouped('orders', vt => 30, qty => 10);""",
    "read_grouped_with_poll": """\
SELECT pgmq.create('orders');
SELECT pgmq.send('orders', '{"step": 1}', '{"x-pgmq-group": "customer-1"}'::jsonb);
SELECT msg_id, message FROM pgmq.read_grouped_with_poll('orders', 30, 10, max_poll_seconds => 1);""",
    "read_grouped_rr": """\
SELECT pgmq.create('orders');
SELECT pgmq.send('orders', '{"n": 1}', '{"x-pgmq-group": "a"}'::jsonb);
SELECT pgmq.send('orders', '{"n": 2}', '{"x-pgmq-group": "a"}'::jsonb);
SELECT pgmq.send('orders', '{"n": 3}', '{"x-pgmq-group": "b"}'::jsonb);
SELECT msg_id, message FROM pgmq.read_grouped_rr('orders', 30, 3);   -- a1, b3, a2""",
    "read_grouped_rr_with_poll": """\
SELECT pgmq.create('orders');
SELECT pgmq.send('orders', '{"n": 1}', '{"x-pgmq-group": "a"}'::jsonb);
SELECT msg_id, message FROM pgmq.read_grouped_rr_with_poll('orders', 30, 3, max_poll_seconds => 1);""",
    "read_grouped_head": """\
SELECT pgmq.create('orders');
SELECT pgmq.send('orders', '{"n": 1}', '{"x-pgmq-group": "a"}'::jsonb);
SELECT pgmq.send('orders', '{"n": 2}', '{"x-pgmq-group": "b"}'::jsonb);
SELECT msg_id, message FROM pgmq.read_grouped_head('orders', 30, 10);""",
    "read_grouped_head_with_poll": """\
SELECT pgmq.create('orders');
SELECT pgmq.send('orders', '{"n": 1}', '{"x-pgmq-group": "a"}'::jsonb);
SELECT msg_id, message FROM pgmq.read_grouped_head_with_poll('orders', 30, 10, max_poll_seconds => 1);""",
    # ---- streams
    "create_stream": "SELECT pgmq.create_stream('orders', retention => '7 days', rotation_period => '1 hour');",
    "drop_stream": """\
SELECT pgmq.create_stream('orders');
SELECT pgmq.drop_stream('orders');   -- true""",
    "list_streams": """\
SELECT pgmq.create_stream('orders');
SELECT stream_name, retention, segments FROM pgmq.list_streams();""",
    "stream_send": """\
SELECT pgmq.create_stream('orders');
SELECT pgmq.stream_send('orders', '{"id": 1}', headers => '{"source": "web"}');   -- ev_id""",
    "stream_send_batch": """\
SELECT pgmq.create_stream('orders');
SELECT * FROM pgmq.stream_send_batch('orders', ARRAY['{"id": 1}', '{"id": 2}']::jsonb[]);""",
    "stream_tick": """\
SELECT pgmq.create_stream('orders');
SELECT pgmq.stream_send('orders', '{"id": 1}');
SELECT pgmq.stream_tick('orders');   -- or pgmq.stream_tick() for every stream (pg_cron)""",
    "subscribe": """\
SELECT pgmq.create_stream('orders');
SELECT pgmq.subscribe('orders', 'billing', start => 'earliest');   -- or 'latest', or a position""",
    "unsubscribe": """\
SELECT pgmq.create_stream('orders');
SELECT pgmq.subscribe('orders', 'billing');
SELECT pgmq.unsubscribe('orders', 'billing');   -- true""",
    "stream_read": """\
SELECT pgmq.create_stream('orders');
SELECT pgmq.subscribe('orders', 'billing', start => 'earliest');
SELECT pgmq.stream_send('orders', '{"id": 1}');
SELECT batch_id, ev_id, message FROM pgmq.stream_read('orders', 'billing', lease_seconds => 30);""",
    "stream_ack": """\
SELECT pgmq.create_stream('orders');
SELECT pgmq.subscribe('orders', 'billing', start => 'earliest');
SELECT pgmq.stream_send('orders', '{"id": 1}');
BEGIN;
SELECT batch_id FROM pgmq.stream_read('orders', 'billing') LIMIT 1 \\gset
-- ... store what the batch did, in this transaction ...
SELECT pgmq.stream_ack('orders', 'billing', :batch_id);
COMMIT;""",
    "stream_nack": """\
SELECT pgmq.create_stream('orders');
SELECT pgmq.subscribe('orders', 'billing', start => 'earliest', retry_queue => 'billing_retry');
SELECT pgmq.stream_send('orders', '{"id": 1}');
BEGIN;
SELECT batch_id, array_agg(ev_id) AS failed FROM pgmq.stream_read('orders', 'billing') GROUP BY batch_id \\gset
SELECT pgmq.stream_nack('orders', 'billing', :batch_id, :'failed', 'card declined');
SELECT pgmq.stream_ack('orders', 'billing', :batch_id);
COMMIT;""",
    "stream_rewind": """\
SELECT pgmq.create_stream('orders');
SELECT pgmq.subscribe('orders', 'billing');
SELECT pgmq.stream_rewind('orders', 'billing', now() - interval '1 hour');""",
    "stream_info": """\
SELECT pgmq.create_stream('orders');
SELECT pgmq.subscribe('orders', 'billing');
SELECT * FROM pgmq.stream_info('orders');""",
    "grant_stream_access": """\
SELECT pgmq.create_stream('orders');
SELECT pgmq.grant_stream_access('orders', 'public', 'read');""",
    "revoke_stream_access": """\
SELECT pgmq.create_stream('orders');
SELECT pgmq.grant_stream_access('orders', 'public', 'read');
SELECT pgmq.revoke_stream_access('orders', 'public', 'read');""",
    # ---- routing
    "validate_routing_key": "SELECT pgmq.validate_routing_key('orders.eu.created');   -- true",
    "validate_topic_pattern": "SELECT pgmq.validate_topic_pattern('orders.*.created');   -- true",
    "create_exchange": "SELECT pgmq.create_exchange('orders', 'topic');   -- fanout (default), direct, topic, headers",
    "drop_exchange": """\
SELECT pgmq.create_exchange('orders');
SELECT pgmq.drop_exchange('orders', false);""",
    "set_unroutable": """\
SELECT pgmq.create_exchange('orders', 'direct');
SELECT pgmq.set_unroutable('orders', 'error');   -- a publish that reaches no queue fails""",
    "list_exchanges": """\
SELECT pgmq.create_exchange('orders', 'direct');
SELECT exchange_name, exchange_type FROM pgmq.list_exchanges();""",
    "list_exchange_bindings": """\
SELECT pgmq.create('orders_eu');
SELECT pgmq.create_exchange('orders', 'direct');
SELECT pgmq.bind_queue('orders_eu', 'orders', 'eu');
SELECT * FROM pgmq.list_exchange_bindings('orders');""",
    "bind_queue": """\
SELECT pgmq.create('orders_eu');
SELECT pgmq.create_exchange('orders', 'direct');
SELECT pgmq.bind_queue('orders_eu', 'orders', 'eu');   -- (queue, exchange, key)""",
    "unbind_queue": """\
SELECT pgmq.create('orders_eu');
SELECT pgmq.create_exchange('orders', 'direct');
SELECT pgmq.bind_queue('orders_eu', 'orders', 'eu');
SELECT pgmq.unbind_queue('orders_eu', 'orders', 'eu');""",
    "bind_topic": """\
SELECT pgmq.create('eu_orders');
SELECT pgmq.bind_topic('orders.eu.*', 'eu_orders');""",
    "unbind_topic": """\
SELECT pgmq.create('eu_orders');
SELECT pgmq.bind_topic('orders.eu.*', 'eu_orders');
SELECT pgmq.unbind_topic('orders.eu.*', 'eu_orders');   -- true""",
    "list_topic_bindings": """\
SELECT pgmq.create('eu_orders');
SELECT pgmq.bind_topic('orders.eu.*', 'eu_orders');
SELECT pattern, queue_name FROM pgmq.list_topic_bindings('eu_orders');""",
    "test_routing": """\
SELECT pgmq.create('eu_orders');
SELECT pgmq.bind_topic('orders.eu.*', 'eu_orders');
SELECT pattern, queue_name FROM pgmq.test_routing('orders.eu.created');""",
    "bind_stream": """\
SELECT pgmq.create_stream('orders_log');
SELECT pgmq.create_exchange('orders', 'topic');
SELECT pgmq.bind_stream('orders_log', 'orders', 'orders.#');   -- (stream, exchange, key)""",
    "unbind_stream": """\
SELECT pgmq.create_stream('orders_log');
SELECT pgmq.create_exchange('orders', 'topic');
SELECT pgmq.bind_stream('orders_log', 'orders', 'orders.#');
SELECT pgmq.unbind_stream('orders_log', 'orders', 'orders.#');""",
    "publish": """\
SELECT pgmq.create('orders_eu');
SELECT pgmq.create_exchange('orders', 'direct');
SELECT pgmq.bind_queue('orders_eu', 'orders', 'eu');
SELECT * FROM pgmq.publish('orders', 'eu', '{"id": 1}', headers => '{"x-pgmq-priority": 1}');""",
    "publish_routed": """\
SELECT pgmq.create('orders_eu');
SELECT pgmq.create_stream('orders_log');
SELECT pgmq.create_exchange('orders', 'direct');
SELECT pgmq.bind_queue('orders_eu', 'orders', 'eu');
SELECT pgmq.bind_stream('orders_log', 'orders', 'eu');
SELECT * FROM pgmq.publish_routed('orders', 'eu', '{"id": 1}');   -- a queue row and a stream row""",
    "test_exchange_routing": """\
SELECT pgmq.create('orders_eu');
SELECT pgmq.create_exchange('orders', 'direct');
SELECT pgmq.bind_queue('orders_eu', 'orders', 'eu');
SELECT * FROM pgmq.test_exchange_routing('orders', 'eu');""",
    "send_topic": """\
SELECT pgmq.create('eu_orders');
SELECT pgmq.bind_topic('orders.eu.*', 'eu_orders');
SELECT pgmq.send_topic('orders.eu.created', '{"id": 1}');   -- 1 queue""",
    "send_batch_topic": """\
SELECT pgmq.create('eu_orders');
SELECT pgmq.bind_topic('orders.eu.*', 'eu_orders');
SELECT * FROM pgmq.send_batch_topic('orders.eu.created', ARRAY['{"id": 1}', '{"id": 2}']::jsonb[]);""",
    # ---- notify
    "notify_queue_listeners": """\
SELECT pgmq.create('jobs');
SELECT pgmq.enable_notify_insert('jobs');   -- installs this trigger function on pgmq.q_jobs
SELECT tgname FROM pg_trigger WHERE tgfoid = 'pgmq.notify_queue_listeners'::regproc;""",
    "enable_notify_insert": """\
SELECT pgmq.create('jobs');
SELECT pgmq.enable_notify_insert('jobs', throttle_interval_ms => 250);
LISTEN "pgmq.q_jobs.INSERT";""",
    "disable_notify_insert": """\
SELECT pgmq.create('jobs');
SELECT pgmq.enable_notify_insert('jobs');
SELECT pgmq.disable_notify_insert('jobs');""",
    "update_notify_insert": """\
SELECT pgmq.create('jobs');
SELECT pgmq.enable_notify_insert('jobs');
SELECT pgmq.update_notify_insert('jobs', 1000);""",
    "list_notify_insert_throttles": """\
SELECT pgmq.create('jobs');
SELECT pgmq.enable_notify_insert('jobs');
SELECT * FROM pgmq.list_notify_insert_throttles();""",
    "enable_notify_msg_id": """\
SELECT pgmq.create('jobs');
SELECT pgmq.enable_notify_msg_id('jobs');
LISTEN "pgmq.q_jobs.MSG_ID";   -- the payload of each notification is a msg_id""",
    "disable_notify_msg_id": """\
SELECT pgmq.create('jobs');
SELECT pgmq.enable_notify_msg_id('jobs');
SELECT pgmq.disable_notify_msg_id('jobs');""",
    # ---- payloads
    "set_payload_type": """\
SELECT pgmq.create('blobs');
SELECT pgmq.set_payload_type('blobs', 'bytea');""",
    "payload_type": """\
SELECT pgmq.create('docs', 'xml');
SELECT pgmq.payload_type('docs');   -- xml""",
    "send_payload": """\
SELECT pgmq.create('blobs', 'bytea');
SELECT pgmq.send_payload('blobs', '\\x00ff'::bytea, headers => '{"k": 1}', delay => 0);   -- msg_id""",
    "read_payload": """\
SELECT pgmq.create('blobs', 'bytea');
SELECT pgmq.send_payload('blobs', '\\x00ff'::bytea);
SELECT msg_id, payload FROM pgmq.read_payload('blobs', vt => 30, qty => 10, payload_type => NULL::bytea);""",
    "pop_payload": """\
SELECT pgmq.create('notes', 'text');
SELECT pgmq.send_payload('notes', 'hi'::text);
SELECT msg_id, payload FROM pgmq.pop_payload('notes', 1, NULL::text);""",
    # ---- pgpro_queue compatibility
    "queue_initialize": "SELECT pgmq.queue_initialize();",
    "queue_deinitialize": """\
SELECT pgmq.create('jobs');
SELECT pgmq.queue_deinitialize();   -- drops every queue""",
    "create_queue": """\
CALL pgmq.create_queue('jobs', queue_retries => 5, queue_retry_delay => 10);""",
    "alter_queue": """\
CALL pgmq.create_queue('jobs');
CALL pgmq.alter_queue('jobs', new_retries => 3);""",
    "get_queue_table": """\
CALL pgmq.create_queue('jobs');
SELECT pgmq.get_queue_table('jobs')::regclass;   -- pgmq.q_jobs""",
    "insert_message": """\
CALL pgmq.create_queue('jobs');
CALL pgmq.insert_message('jobs', '{"task": 1}', q_msg_priority => 5, q_msg_properties => '{"kind": "a"}');""",
    "insert_message_xml": """\
CALL pgmq.create_queue('docs');
CALL pgmq.insert_message_xml('docs', '<doc id="1"/>');""",
    "read_message": """\
CALL pgmq.create_queue('jobs');
CALL pgmq.insert_message('jobs', '{"task": 1}');
BEGIN;
SELECT pgmq.read_message('jobs');   -- deleted when this transaction commits
COMMIT;""",
    "read_message_xml": """\
CALL pgmq.create_queue('docs');
CALL pgmq.insert_message_xml('docs', '<doc id="1"/>');
SELECT pgmq.read_message_xml('docs');""",
    "read_message_by_id": """\
CALL pgmq.create_queue('jobs');
CALL pgmq.insert_message('jobs', '{"task": 1}');
SELECT pgmq.read_message_by_id('jobs', 1);""",
    "read_message_by_id_xml": """\
CALL pgmq.create_queue('docs');
CALL pgmq.insert_message_xml('docs', '<doc id="1"/>');
SELECT pgmq.read_message_by_id_xml('docs', 1);""",
    "read_message_any": """\
CALL pgmq.create_queue('docs');
CALL pgmq.insert_message_xml('docs', '<doc id="1"/>');
SELECT * FROM pgmq.read_message_any('docs');   -- q_jsonb NULL, q_xml the document""",
    "read_message_by_id_any": """\
CALL pgmq.create_queue('docs');
CALL pgmq.insert_message('docs', '{"id": 1}');
SELECT * FROM pgmq.read_message_by_id_any('docs', 1);   -- body the message, body_xml NULL""",
    "publish_message": """\
CALL pgmq.create_queue('orders_eu');
SELECT pgmq.create_exchange('orders', 'direct');
SELECT pgmq.bind_queue('orders_eu', 'orders', 'eu');
CALL pgmq.publish_message('orders', 'eu', '{"id": 2}', 5);   -- priority 5""",
    "publish_message_xml": """\
CALL pgmq.create_queue('docs_eu');
SELECT pgmq.create_exchange('docs', 'direct');
SELECT pgmq.bind_queue('docs_eu', 'docs', 'eu');
CALL pgmq.publish_message_xml('docs', 'eu', '<doc id="1"/>');""",
    # ---- callbacks
    "register_callback": """\
SELECT pgmq.create('orders');
CREATE PROCEDURE handle_order(msg jsonb) LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'order %', msg->>'order';
END $$;
CALL pgmq.register_callback('orders', 'handle_order(jsonb)');   -- one per queue""",
    "unregister_callback": """\
SELECT pgmq.create('orders');
CREATE PROCEDURE handle_order(msg jsonb) LANGUAGE plpgsql AS $$ BEGIN NULL; END $$;
CALL pgmq.register_callback('orders', 'handle_order(jsonb)');
CALL pgmq.unregister_callback('orders', 'handle_order(jsonb)');""",
    "list_callbacks": """\
SELECT pgmq.create('orders');
CREATE PROCEDURE handle_order(msg jsonb) LANGUAGE plpgsql AS $$ BEGIN NULL; END $$;
CALL pgmq.register_callback('orders', 'handle_order(jsonb)');
SELECT queue_name, callback, registrant FROM pgmq.list_callbacks();""",
    "dispatch": """\
SELECT pgmq.create('orders');
CREATE TABLE orders_seen (order_id int);
CREATE PROCEDURE handle_order(msg jsonb) LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO orders_seen VALUES ((msg->>'order')::int);
END $$;
CALL pgmq.register_callback('orders', 'handle_order(jsonb)');
SELECT pgmq.send('orders', '{"order": 42}');
CALL pgmq.dispatch('orders', 100);   -- or pgmq.dispatch() for every queue with a callback
SELECT order_id FROM orders_seen;    -- 42""",
    # ---- ops
    "pause": """\
SELECT pgmq.create('jobs');
SELECT pgmq.pause('jobs');   -- reads return nothing until pgmq.resume('jobs')""",
    "resume": """\
SELECT pgmq.create('jobs');
SELECT pgmq.pause('jobs');
SELECT pgmq.resume('jobs');   -- true""",
    "set_delivery_counting": """\
SELECT pgmq.create('jobs');
SELECT pgmq.set_delivery_counting('jobs');   -- true: its reads and pops are counted from now on
SELECT pgmq.send('jobs', '{"n": 1}');
SELECT count(*) FROM pgmq.pop('jobs');       -- 1, counted in the pop's transaction
SELECT delivered FROM pgmq.queue_consumers WHERE queue_name = 'jobs';   -- 1: this session's row""",
    "queue_metrics": """\
SELECT pgmq.create('jobs');
SELECT * FROM pgmq.queue_metrics('jobs');   -- or pgmq.queue_metrics() for every queue""",
    "queue_metrics_page": """\
SELECT pgmq.create('a_jobs'), pgmq.create('b_jobs');
SELECT queue_name FROM pgmq.queue_metrics_page(NULL, 1);      -- a_jobs: the first page
SELECT queue_name FROM pgmq.queue_metrics_page('a_jobs', 1);  -- b_jobs: the page after it""",
    "sample_metrics": """\
SELECT pgmq.create('jobs');
SELECT count(*) FROM pgmq.sample_metrics();        -- 1: one row per queue, the last 24 h kept
SELECT queue_name, depth FROM pgmq.sample_metrics(interval '1 hour', 720);  -- an hour, 720 samples a queue""",
    "metrics_history": """\
SELECT pgmq.create('jobs');
SELECT count(*) FROM pgmq.sample_metrics();
SELECT sampled_at, depth FROM pgmq.metrics_history('jobs', now() - interval '1 hour');""",
    "ack_ranges": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send_batch('jobs', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]);
SELECT count(*) FROM pgmq.read('jobs', 30, 3);                           -- 3 leased
SELECT pgmq.ack_ranges('jobs', ARRAY[1]::bigint[], ARRAY[3]::bigint[]);   -- 3: ids 1..3 deleted""",
    "browse": """\
SELECT pgmq.create('jobs');
SELECT pgmq.send('jobs', '{"task": 1}');
SELECT msg_id, read_ct, message FROM pgmq.browse('jobs', after_msg_id => 0, qty => 50);""",
    "move_messages": """\
SELECT pgmq.create('jobs');
SELECT pgmq.create('jobs_v2');
SELECT pgmq.send('jobs', '{"task": 1}');
SELECT pgmq.move_messages('jobs', 'jobs_v2');   -- 1""",
    # ---- access (roles are cluster-wide: made and dropped in a rolled-back transaction)
    "grant_queue_access": """\
BEGIN;
CREATE ROLE reporting;
SELECT pgmq.create('jobs');
CALL pgmq.grant_queue_access('jobs', 'reporting');
ROLLBACK;""",
    "revoke_queue_access": """\
BEGIN;
CREATE ROLE reporting;
SELECT pgmq.create('jobs');
CALL pgmq.grant_queue_access('jobs', 'reporting');
CALL pgmq.revoke_queue_access('jobs', 'reporting');
ROLLBACK;""",
    "reset_queue_access": """\
BEGIN;
CREATE ROLE reporting;
SELECT pgmq.create('jobs');
CALL pgmq.grant_queue_access('jobs', 'reporting');
CALL pgmq.reset_queue_access('jobs');   -- only the owner and pg_monitor keep access
ROLLBACK;""",
    "grant_publish_access": """\
SELECT pgmq.create_exchange('orders');
CALL pgmq.revoke_publish_access('orders', 'public');
CALL pgmq.grant_publish_access('orders', 'public');""",
    "revoke_publish_access": """\
SELECT pgmq.create_exchange('orders');
CALL pgmq.revoke_publish_access('orders', 'public');   -- only granted roles may publish now""",
}
