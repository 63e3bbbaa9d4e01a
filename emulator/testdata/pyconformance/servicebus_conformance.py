"""Conformance of the seqbus Service Bus emulator with the official Python SDK.

azure-servicebus 7.8 on uamqp (Azure's C AMQP stack), as Debian ships them
(apt-get install python3-azure python3-uamqp). TestPythonSDKConformance in
package emulator starts an emulator in TLS mode with the entities this file
uses and runs it with the system Python, once per transport:

    SERVICEBUS_CONNECTION_STRING='Endpoint=sb://127.0.0.1:PORT;SharedAccessKeyName=...;SharedAccessKey=...' \\
    SERVICEBUS_CA_FILE=/path/to/emulator-cert.pem \\
    SERVICEBUS_TRANSPORT=amqps|websocket \\
    REQUESTS_CA_BUNDLE=/path/to/emulator-cert.pem \\
        /usr/bin/python3 servicebus_conformance.py

uamqp speaks AMQP only over TLS, and ignores the endpoint's port: AMQPS goes
to port 5671, WebSockets to 443. A user runs the emulator with -tls on 5671
and needs nothing more than connection_verify; WebSockets reach any port
through the SDK's custom_endpoint_address. A test cannot take port 5671, so
for "amqps" this script points the SDK's AMQPS port (the constant its
configuration reads) at the emulator's port; nothing else is changed.

Each scenario prints "PASS <name>" or "FAIL <name>: <error>", and the run ends
with "SUMMARY passed=N failed=M"; the exit status is 1 when one failed. A
crash of uamqp ends the output early, without the summary.
"""

import datetime
import os
import sys
import time
import traceback
import uuid
from urllib.parse import urlparse

from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusSubQueue,
    TransportType,
)
from azure.servicebus._common import _configuration
from azure.servicebus.exceptions import ServiceBusError
from azure.servicebus.management import (
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
)

CONN_STR = os.environ["SERVICEBUS_CONNECTION_STRING"]
CA_FILE = os.environ["SERVICEBUS_CA_FILE"]
TRANSPORT = os.environ.get("SERVICEBUS_TRANSPORT", "amqps")

endpoint = dict(kv.split("=", 1) for kv in CONN_STR.split(";") if kv)["Endpoint"]
PORT = urlparse(endpoint).port
# The messaging client's endpoint carries no port, as a user's on 5671 would not:
# uamqp names its links amqps://HOST/ENTITY without the port while the SDK compares
# them with its own amqps://HOST:PORT/ENTITY, and a session receiver then never
# learns its session's id or lock. The administration client needs the port.
SB_CONN_STR = CONN_STR.replace(endpoint, "sb://" + urlparse(endpoint).hostname, 1)

if TRANSPORT == "amqps":
    # See the module's docstring: the port a user gets by running on 5671.
    _configuration.DEFAULT_AMQPS_PORT = PORT
    TRANSPORT_KWARGS = {}
elif TRANSPORT == "websocket":
    TRANSPORT_KWARGS = {
        "transport_type": TransportType.AmqpOverWebsocket,
        "custom_endpoint_address": "https://127.0.0.1:%d" % PORT,
    }
else:
    sys.exit("SERVICEBUS_TRANSPORT must be amqps or websocket, not %r" % TRANSPORT)


def new_client(conn_str=SB_CONN_STR, **kwargs):
    # Short retries: the emulator answers at once, and a failure should
    # surface as one, not after the SDK's minutes of retries.
    kwargs.setdefault("retry_total", 2)
    kwargs.setdefault("retry_backoff_factor", 0.1)
    return ServiceBusClient.from_connection_string(
        conn_str, connection_verify=CA_FILE, **TRANSPORT_KWARGS, **kwargs
    )


client = new_client()


def body(msg):
    return b"".join(msg.body).decode()


def receive_n(receiver, n, wait=5.0):
    """Receives until n messages arrived or wait seconds passed."""
    got = []
    deadline = time.monotonic() + wait
    while len(got) < n and time.monotonic() < deadline:
        got.extend(receiver.receive_messages(max_message_count=n - len(got), max_wait_time=max(deadline - time.monotonic(), 0.1)))
    return got


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


SCENARIOS = []


def scenario(fn):
    SCENARIOS.append(fn)
    return fn


@scenario
def send_and_receive():
    with client.get_queue_sender("py-basic") as sender:
        sender.send_messages(ServiceBusMessage("hello", application_properties={"n": 1}, subject="greeting"))
    with client.get_queue_receiver("py-basic", max_wait_time=5) as receiver:
        msgs = receive_n(receiver, 1)
        expect([body(m) for m in msgs] == ["hello"], "got %r" % [body(m) for m in msgs])
        expect(msgs[0].application_properties[b"n"] == 1, "properties %r" % msgs[0].application_properties)
        expect(msgs[0].subject == "greeting", "subject %r" % msgs[0].subject)
        receiver.complete_message(msgs[0])


@scenario
def batch():
    with client.get_queue_sender("py-batch") as sender:
        b = sender.create_message_batch()
        for i in range(5):
            b.add_message(ServiceBusMessage("m%d" % i))
        sender.send_messages(b)
        sender.send_messages([ServiceBusMessage("list-%d" % i) for i in range(3)])
    with client.get_queue_receiver("py-batch") as receiver:
        msgs = receive_n(receiver, 8)
        got = sorted(body(m) for m in msgs)
        expect(got == sorted(["m%d" % i for i in range(5)] + ["list-%d" % i for i in range(3)]), "got %r" % got)
        for m in msgs:
            receiver.complete_message(m)


@scenario
def peek_lock_settlement():
    with client.get_queue_sender("py-settle") as sender:
        sender.send_messages([ServiceBusMessage("complete"), ServiceBusMessage("abandon")])
    with client.get_queue_receiver("py-settle") as receiver:
        msgs = {body(m): m for m in receive_n(receiver, 2)}
        expect(set(msgs) == {"complete", "abandon"}, "got %r" % list(msgs))
        before = msgs["complete"].locked_until_utc
        renewed = receiver.renew_message_lock(msgs["complete"])
        expect(renewed >= before, "renewed lock %s before %s" % (renewed, before))
        receiver.complete_message(msgs["complete"])
        receiver.abandon_message(msgs["abandon"])
        again = receive_n(receiver, 1)
        expect([body(m) for m in again] == ["abandon"], "redelivered %r" % [body(m) for m in again])
        expect(again[0].delivery_count == 1, "delivery count %r" % again[0].delivery_count)
        receiver.complete_message(again[0])
        expect(receiver.receive_messages(max_message_count=1, max_wait_time=0.5) == [], "queue empty")


@scenario
def dead_letter_with_reason():
    with client.get_queue_sender("py-deadletter") as sender:
        sender.send_messages(ServiceBusMessage("poison"))
    with client.get_queue_receiver("py-deadletter") as receiver:
        msgs = receive_n(receiver, 1)
        receiver.dead_letter_message(msgs[0], reason="bad-input", error_description="cannot parse")
    with client.get_queue_receiver("py-deadletter", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        dead = receive_n(dlq, 1)
        expect([body(m) for m in dead] == ["poison"], "dead-lettered %r" % [body(m) for m in dead])
        expect(dead[0].dead_letter_reason == "bad-input", "reason %r" % dead[0].dead_letter_reason)
        expect(dead[0].dead_letter_error_description == "cannot parse", "description %r" % dead[0].dead_letter_error_description)
        dlq.complete_message(dead[0])


@scenario
def session_state_and_renew():
    with client.get_queue_sender("py-sessions") as sender:
        sender.send_messages([ServiceBusMessage("s-%d" % i, session_id="order-1") for i in range(3)])
        sender.send_messages(ServiceBusMessage("other", session_id="order-2"))
    with client.get_queue_receiver("py-sessions", session_id="order-1") as receiver:
        session = receiver.session
        expect(session.session_id == "order-1", "session %r" % session.session_id)
        expect(session.get_state() in (None, b""), "fresh state %r" % session.get_state())
        session.set_state("step-2")
        expect(session.get_state() == b"step-2", "state %r" % session.get_state())
        before = session.locked_until_utc
        after = session.renew_lock()
        expect(after >= before, "renewed session lock %s before %s" % (after, before))
        msgs = receive_n(receiver, 3)
        expect([body(m) for m in msgs] == ["s-0", "s-1", "s-2"], "in order, only order-1: %r" % [body(m) for m in msgs])
        for m in msgs:
            receiver.complete_message(m)
        session.set_state(None)
    with client.get_queue_receiver("py-sessions", session_id="order-2") as receiver:
        msgs = receive_n(receiver, 1)
        expect([body(m) for m in msgs] == ["other"], "order-2 %r" % [body(m) for m in msgs])
        receiver.complete_message(msgs[0])


@scenario
def next_available_session():
    with client.get_queue_sender("py-accept-next") as sender:
        sender.send_messages(ServiceBusMessage("first", session_id="next-1"))
    with client.get_queue_receiver("py-accept-next", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5) as receiver:
        expect(receiver.session.session_id == "next-1", "accepted %r" % receiver.session.session_id)
        msgs = receive_n(receiver, 1)
        expect([body(m) for m in msgs] == ["first"], "got %r" % [body(m) for m in msgs])
        receiver.complete_message(msgs[0])


def defer_and_receive_deferred(receiver, sender_send):
    sender_send()
    msgs = receive_n(receiver, 1)
    expect(len(msgs) == 1, "received %d" % len(msgs))
    seq = msgs[0].sequence_number
    receiver.defer_message(msgs[0])
    expect(receiver.receive_messages(max_message_count=1, max_wait_time=0.5) == [], "deferred is not received")
    deferred = receiver.receive_deferred_messages([seq])
    expect([m.sequence_number for m in deferred] == [seq], "deferred %r" % [m.sequence_number for m in deferred])
    receiver.complete_message(deferred[0])
    try:
        receiver.receive_deferred_messages([seq])
    except ServiceBusError:
        return
    raise AssertionError("a completed deferred message was received again")


@scenario
def defer_on_queue():
    with client.get_queue_sender("py-defer") as sender, client.get_queue_receiver("py-defer") as receiver:
        defer_and_receive_deferred(receiver, lambda: sender.send_messages(ServiceBusMessage("later")))


@scenario
def defer_on_session():
    with client.get_queue_sender("py-session-defer") as sender:
        send = lambda: sender.send_messages(ServiceBusMessage("later", session_id="d-1"))
        send()
        with client.get_queue_receiver("py-session-defer", session_id="d-1") as receiver:
            defer_and_receive_deferred(receiver, lambda: None)
            # py-session-defer is partitioned: the peek, like the receive-deferred and the
            # settlement above, names the session, which the service requires there.
            peeked = receiver.peek_messages(max_message_count=5)
            expect(peeked == [], "nothing left in the session: %r" % [body(m) for m in peeked])


@scenario
def schedule_and_cancel():
    now = datetime.datetime.now(datetime.timezone.utc)
    with client.get_queue_sender("py-schedule") as sender:
        far = sender.schedule_messages(ServiceBusMessage("never"), now + datetime.timedelta(hours=1))
        soon = sender.schedule_messages(ServiceBusMessage("soon"), now + datetime.timedelta(seconds=1))
        expect(len(far) == 1 and len(soon) == 1, "sequence numbers %r %r" % (far, soon))
        sender.cancel_scheduled_messages(far)
    with client.get_queue_receiver("py-schedule") as receiver:
        msgs = receive_n(receiver, 1, wait=10)
        expect([body(m) for m in msgs] == ["soon"], "got %r" % [body(m) for m in msgs])
        receiver.complete_message(msgs[0])
        peeked = receiver.peek_messages(max_message_count=5)
        expect(peeked == [], "the cancelled message is gone: %r" % [body(m) for m in peeked])


@scenario
def peek():
    with client.get_queue_sender("py-peek") as sender:
        sender.send_messages([ServiceBusMessage("p-%d" % i) for i in range(3)])
    with client.get_queue_receiver("py-peek") as receiver:
        peeked = receiver.peek_messages(max_message_count=3)
        expect([body(m) for m in peeked] == ["p-0", "p-1", "p-2"], "peeked %r" % [body(m) for m in peeked])
        more = receiver.peek_messages(max_message_count=3, sequence_number=peeked[1].sequence_number)
        expect([body(m) for m in more] == ["p-1", "p-2"], "from a sequence number %r" % [body(m) for m in more])
        msgs = receive_n(receiver, 3)
        expect(len(msgs) == 3, "peeking left them: received %d" % len(msgs))
        for m in msgs:
            receiver.complete_message(m)


@scenario
def topic_with_sql_rule_from_admin_client():
    # The administration client of 7.8 drops connection_verify (its pipeline is built
    # without the client's options); it trusts what REQUESTS_CA_BUNDLE names.
    admin = ServiceBusAdministrationClient.from_connection_string(CONN_STR)
    with admin:
        admin.create_subscription("py-routing", "red")
        admin.delete_rule("py-routing", "red", "$Default")
        admin.create_rule("py-routing", "red", "red-only", filter=SqlRuleFilter("color = 'red'"), action=SqlRuleAction("SET tagged = 'yes'"))
        rule = admin.get_rule("py-routing", "red", "red-only")
        expect(isinstance(rule.filter, SqlRuleFilter) and rule.filter.sql_expression == "color = 'red'", "rule read back %r" % rule.filter)
        expect([r.name for r in admin.list_rules("py-routing", "red")] == ["red-only"], "rules")
    with client.get_topic_sender("py-routing") as sender:
        sender.send_messages([
            ServiceBusMessage("red", application_properties={"color": "red"}),
            ServiceBusMessage("blue", application_properties={"color": "blue"}),
        ])
    with client.get_subscription_receiver("py-routing", "red") as receiver:
        msgs = receive_n(receiver, 2, wait=2)
        expect([body(m) for m in msgs] == ["red"], "the red subscription got %r" % [body(m) for m in msgs])
        expect(msgs[0].application_properties.get(b"tagged") == b"yes", "action ran: %r" % msgs[0].application_properties)
        receiver.complete_message(msgs[0])
    with client.get_subscription_receiver("py-routing", "all") as receiver:
        msgs = receive_n(receiver, 2)
        expect(sorted(body(m) for m in msgs) == ["blue", "red"], "the all subscription got %r" % [body(m) for m in msgs])
        for m in msgs:
            receiver.complete_message(m)


@scenario
def wrong_key_is_refused():
    bad = SB_CONN_STR.replace("SharedAccessKey=", "SharedAccessKey=wrong", 1)
    with new_client(bad, retry_total=0) as c:
        try:
            with c.get_queue_sender("py-basic") as sender:
                sender.send_messages(ServiceBusMessage("must not arrive"))
        except ServiceBusError:
            pass
        else:
            raise AssertionError("a message was sent with a wrong key")
    with client.get_queue_receiver("py-basic") as receiver:
        expect(receiver.peek_messages(max_message_count=1) == [], "nothing arrived")


def main():
    passed = failed = 0
    print("TRANSPORT %s" % TRANSPORT, flush=True)
    for fn in SCENARIOS:
        start = time.monotonic()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failed += 1
            print("FAIL %s: %s: %s" % (fn.__name__, type(e).__name__, e), flush=True)
            traceback.print_exc()
        else:
            passed += 1
            print("PASS %s (%.2fs)" % (fn.__name__, time.monotonic() - start), flush=True)
    client.close()
    print("SUMMARY passed=%d failed=%d" % (passed, failed), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
