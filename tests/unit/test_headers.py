"""One list of header names (pgmq_build/headers.py) for the templates, the client and Spark, and
the Spark COPY fast path tied to what the server's send paths actually read."""

from __future__ import annotations

import re

from pgmq_build import headers, render
from pgmq_build.manifest import MANIFEST
from pgmq_build.spark import publishing

SCRIPT = render.render_all()[f"pgmq--{MANIFEST.version}.sql"]
NAMES = {v for k, v in vars(headers).items() if k.isupper() and isinstance(v, str)}


def body(signature: str) -> str:
    start = SCRIPT.index(f"CREATE FUNCTION {MANIFEST.schema}.{signature}\n")
    return SCRIPT[start:SCRIPT.index("$fn$;", start)]


def literals(text: str) -> set[str]:
    return set(re.findall(r"'(x-pgmq-[a-z-]+)'", text))


def test_every_header_the_sql_names_is_declared():
    assert literals(SCRIPT) <= NAMES
    assert literals(SCRIPT) == NAMES  # and each declared name is used


def test_the_copy_fast_path_knows_every_header_send_acts_on():
    # What the main send and send_batch read besides the priority every insert derives...
    send = body("send(queue_name text, msg jsonb, headers jsonb, delay timestamp with time zone)")
    batch = body("send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay timestamp with time zone)")
    read_by_send = (literals(send) | literals(batch)) - {headers.PRIORITY}
    # ... is what the Spark connector sends through pgmq.send rather than COPY
    assert read_by_send == set(headers.INSERT_RULES)
    assert publishing.SPECIAL_HEADERS == headers.INSERT_RULES
    for name in headers.INSERT_RULES:
        assert publishing._header_info(f'{{"{name}": 1}}') == (True, 0)
    assert publishing._header_info(f'{{"{headers.PRIORITY}": -3}}') == (False, -3)
    assert publishing._header_info(f'{{"{headers.PRIORITY}": "7"}}') == (True, 0)  # the server decides


def test_the_limit_flag_and_the_delivery_rules_use_the_same_headers():
    # a header that changes delivery must flag the queue, or its reads would skip the checks
    send = body("send(queue_name text, msg jsonb, headers jsonb, delay timestamp with time zone)")
    flagged = re.search(r"headers \?\| ARRAY\[([^\]]*)\] THEN\s+IF NOT \((.*?)\) THEN\s+PERFORM pgmq\._check_headers"
                        r"[^;]*;\s+END IF;\s+IF NOT EXISTS \([^;]*s\.message_limits\) THEN"
                        r"\s+PERFORM pgmq\._note_message_limits", send, re.S)
    assert literals(flagged.group(1)) == set(headers.LIMITS)
    # and every header the reads use as an integer is checked before that: a message with one
    # of them gets the quick test of all of them, and whatever fails it goes to _check_headers
    assert set(re.findall(r"NOT headers \? '([^']*)'", flagged.group(2))) == {headers.PRIORITY, *headers.LIMITS}
    # one with none of the limit headers (its integer header is its priority) gets that one tested
    checked = re.search(r"headers \?\| ARRAY\[([^\]]*)\] THEN\s+IF headers \?\|.*?ELSIF NOT \((.*?)\) THEN"
                        r"\s+PERFORM pgmq\._check_headers", send, re.S)
    assert literals(checked.group(1)) == {headers.PRIORITY, *headers.LIMITS}
    assert set(re.findall(r"NOT headers \? '([^']*)'", checked.group(2))) == {headers.PRIORITY}
