"""The message headers pgmq gives a meaning to: one list for the templates (the Jinja global
``H``: ``{{ H.TTL }}``), the Python client and the Spark connector.

INSERT_RULES are the headers that make an insert more than a plain INSERT: send and send_batch
look for them (deduplication; flagging a queue whose messages carry their own limits, so that
its reads check every row). The Spark connector's COPY fast path sends rows carrying one of them
through pgmq.send instead; tests/unit/test_headers.py ties both to the rendered SQL.
"""

from __future__ import annotations

from types import SimpleNamespace

PRIORITY = "x-pgmq-priority"        # integer, lower first (default 0)
TTL = "x-pgmq-ttl"                  # seconds to live, overrides the queue's
MAX_RETRIES = "x-pgmq-max-retries"  # overrides the queue's retry policy
RETRY_DELAY = "x-pgmq-retry-delay"  # seconds, overrides the queue's
DEDUP_ID = "x-pgmq-dedup-id"        # duplicate sends within the window return the first id
GROUP = "x-pgmq-group"              # FIFO group (upstream's)
PAYLOAD = "x-pgmq-payload"          # typed payload marker (its type), set by send_payload & co
CONFIRM_BY = "x-pgmq-confirm-by"    # send_reserved: unconfirmed after this time
LAST_ERROR = "x-pgmq-last-error"    # nack / failed callback: the last error
DEAD_LETTER = "x-pgmq-dead-letter"  # the record a dead letter carries
STREAM = "x-pgmq-stream"              # stream_nack: the stream a retried event came from,
SUBSCRIPTION = "x-pgmq-subscription"  # the subscription that failed it,
EV_ID = "x-pgmq-ev-id"                # its ev_id
EV_TIME = "x-pgmq-ev-time"            # and the time it was sent

# Limits a message carries itself; a queue that ever receives one reads with checks.
LIMITS = (TTL, MAX_RETRIES, RETRY_DELAY)
# Per-message retry policy.
RETRIES = (MAX_RETRIES, RETRY_DELAY)
# What send/send_batch look at besides PRIORITY (which every insert derives into its column).
INSERT_RULES = (DEDUP_ID, *LIMITS)

# For the templates.
H = SimpleNamespace(**{name: value for name, value in globals().items()
                       if name.isupper() and isinstance(value, (str, tuple))})
