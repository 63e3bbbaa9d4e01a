// Conformance of the seqbus Service Bus emulator with the official JavaScript
// SDK (@azure/service-bus, rhea underneath). TestJavaScriptSDKConformance in
// package emulator starts an emulator with the entities declared in
// js_conformance_test.go and runs this file with node's test runner:
//
//   SERVICEBUS_CONNECTION_STRING='Endpoint=sb://127.0.0.1:PORT;...;UseDevelopmentEmulator=true' \
//     node --test --test-reporter=spec
//
// Every scenario uses entities of its own, so the scenarios do not depend on
// each other's leftovers.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  ServiceBusAdministrationClient,
  ServiceBusClient,
  isServiceBusError,
} from "@azure/service-bus";

const connectionString = process.env.SERVICEBUS_CONNECTION_STRING;
if (!connectionString) {
  throw new Error("SERVICEBUS_CONNECTION_STRING must name the emulator");
}

// Short retries and timeouts: the emulator answers at once, and a failure
// should surface as one, not after the SDK's minute of retries.
const fast = { retryOptions: { maxRetries: 2, retryDelayInMs: 100, timeoutInMs: 10000 } };
const client = new ServiceBusClient(connectionString, fast);
after(() => client.close());

// A scenario fails after this long rather than hanging the run.
const scenario = { timeout: 60000 };

/** Receives until n messages arrived or waitMs passed without reaching n. */
async function receiveN(receiver, n, waitMs = 5000) {
  const got = [];
  const deadline = Date.now() + waitMs;
  while (got.length < n && Date.now() < deadline) {
    const batch = await receiver.receiveMessages(n - got.length, {
      maxWaitTimeInMs: Math.max(deadline - Date.now(), 1),
    });
    got.push(...batch);
  }
  return got;
}

/** Asserts that nothing is there to receive within waitMs. */
async function assertNothingToReceive(receiver, what, waitMs = 300) {
  const left = await receiver.receiveMessages(1, { maxWaitTimeInMs: waitMs });
  assert.deepEqual(left.map((m) => m.body), [], what);
}

/** Asserts that fn rejects with a ServiceBusError of the given code. */
async function assertServiceBusError(fn, code) {
  await assert.rejects(fn, (err) => {
    assert.ok(isServiceBusError(err), `want a ServiceBusError, got ${err?.name}: ${err?.message}`);
    assert.equal(err.code, code, err.message);
    return true;
  });
}

describe("messages", () => {
  test("send and receive keep body and properties", scenario, async () => {
    const sender = client.createSender("js-basic");
    const receiver = client.createReceiver("js-basic");
    const before = Date.now();
    await sender.sendMessages({
      body: { order: 7, items: ["a", "b"] },
      messageId: "order-7",
      correlationId: "checkout-1",
      subject: "created",
      contentType: "application/json",
      applicationProperties: { region: "eu", attempt: 3 },
    });
    const [m] = await receiveN(receiver, 1);
    assert.ok(m, "the message arrives");
    assert.deepEqual(m.body, { order: 7, items: ["a", "b"] });
    assert.equal(m.messageId, "order-7");
    assert.equal(m.correlationId, "checkout-1");
    assert.equal(m.subject, "created");
    assert.equal(m.contentType, "application/json");
    assert.deepEqual(m.applicationProperties, { region: "eu", attempt: 3 });
    assert.equal(m.deliveryCount, 0, "first delivery");
    assert.ok(m.sequenceNumber.greaterThan(0), "the broker numbered it");
    assert.ok(m.enqueuedTimeUtc.getTime() >= before - 1000, "enqueued just now");
    assert.ok(m.lockedUntilUtc.getTime() > Date.now(), "peek-lock holds a lock");
    await receiver.completeMessage(m);
    await assertNothingToReceive(receiver, "a completed message is gone");
    await sender.close();
    await receiver.close();
  });

  test("a message sent without an id gets one", scenario, async () => {
    const sender = client.createSender("js-basic");
    const receiver = client.createReceiver("js-basic");
    await sender.sendMessages({ body: "no id" });
    const [m] = await receiveN(receiver, 1);
    assert.equal(typeof m.messageId, "string");
    assert.ok(m.messageId.length > 0);
    await receiver.completeMessage(m);
    await receiver.close();
  });

  test("batches arrive whole and in order", scenario, async () => {
    const sender = client.createSender("js-batch");
    const batch = await sender.createMessageBatch();
    assert.ok(batch.maxSizeInBytes > 0);
    for (let i = 0; i < 10; i++) {
      assert.ok(batch.tryAddMessage({ body: `item-${i}` }), `item ${i} fits`);
    }
    assert.equal(
      batch.tryAddMessage({ body: "x".repeat(batch.maxSizeInBytes) }),
      false,
      "a message larger than the batch limit does not fit",
    );
    await sender.sendMessages(batch);
    await sender.sendMessages([{ body: "array-1" }, { body: "array-2" }]);

    const receiver = client.createReceiver("js-batch", { receiveMode: "receiveAndDelete" });
    const got = await receiveN(receiver, 12);
    assert.deepEqual(
      got.map((m) => m.body),
      [...Array.from({ length: 10 }, (_, i) => `item-${i}`), "array-1", "array-2"],
    );
    for (let i = 1; i < got.length; i++) {
      assert.ok(got[i].sequenceNumber.greaterThan(got[i - 1].sequenceNumber), "sequence numbers ascend");
    }
    assert.equal(new Set(got.map((m) => m.messageId)).size, 12, "every message has its own id");
    await assertNothingToReceive(receiver, "receive-and-delete removed them");
    await sender.close();
    await receiver.close();
  });
});

describe("peek-lock settlement", () => {
  test("abandon returns the message with its delivery count up and properties changed", scenario, async () => {
    const sender = client.createSender("js-settle");
    const receiver = client.createReceiver("js-settle");
    await sender.sendMessages({ body: "try me" });
    const [first] = await receiveN(receiver, 1);
    await receiver.abandonMessage(first, { lastError: "timeout" });
    const [again] = await receiveN(receiver, 1);
    assert.equal(again.body, "try me");
    assert.equal(again.deliveryCount, 1);
    assert.equal(again.applicationProperties.lastError, "timeout");
    const renewed = await receiver.renewMessageLock(again);
    assert.ok(renewed.getTime() >= again.lockedUntilUtc.getTime(), "renewing extends the lock");
    await receiver.completeMessage(again);
    await assertNothingToReceive(receiver, "completed after the retry");
    await sender.close();
    await receiver.close();
  });

  test("dead-letter keeps the reason and description", scenario, async () => {
    const sender = client.createSender("js-deadletter");
    const receiver = client.createReceiver("js-deadletter");
    await sender.sendMessages({ body: "poison", messageId: "poison-1" });
    const [m] = await receiveN(receiver, 1);
    await receiver.deadLetterMessage(m, {
      deadLetterReason: "BadFormat",
      deadLetterErrorDescription: "field 'id' is missing",
    });
    await assertNothingToReceive(receiver, "the message left the queue");

    const dlq = client.createReceiver("js-deadletter", { subQueueType: "deadLetter" });
    const [dead] = await receiveN(dlq, 1);
    assert.equal(dead.messageId, "poison-1");
    assert.equal(dead.body, "poison");
    assert.equal(dead.deadLetterReason, "BadFormat");
    assert.equal(dead.deadLetterErrorDescription, "field 'id' is missing");
    assert.equal(dead.deadLetterSource, "js-deadletter");
    await dlq.completeMessage(dead);
    await sender.close();
    await receiver.close();
    await dlq.close();
  });

  test("defer, then receive the deferred message by sequence number", scenario, async () => {
    const sender = client.createSender("js-defer");
    const receiver = client.createReceiver("js-defer");
    await sender.sendMessages({ body: "later, please" });
    const [m] = await receiveN(receiver, 1);
    await receiver.deferMessage(m);
    await assertNothingToReceive(receiver, "a deferred message is not received normally");

    const [deferred] = await receiver.receiveDeferredMessages([m.sequenceNumber]);
    assert.equal(deferred.body, "later, please");
    assert.equal(deferred.state, "deferred");
    await receiver.completeMessage(deferred);
    await assertServiceBusError(() => receiver.receiveDeferredMessages([m.sequenceNumber]), "MessageNotFound");
    await sender.close();
    await receiver.close();
  });
});

describe("scheduling and peeking", () => {
  test("a scheduled message waits for its time and can be cancelled", scenario, async () => {
    const sender = client.createSender("js-schedule");
    const receiver = client.createReceiver("js-schedule");
    const inAnHour = new Date(Date.now() + 3600 * 1000);
    const [cancelled] = await sender.scheduleMessages({ body: "never" }, inAnHour);
    const [peeked] = await receiver.peekMessages(1, { fromSequenceNumber: cancelled });
    assert.equal(peeked.body, "never");
    assert.equal(peeked.state, "scheduled");
    assert.equal(peeked.scheduledEnqueueTimeUtc.getTime(), inAnHour.getTime());
    await sender.cancelScheduledMessages(cancelled);
    assert.deepEqual(await receiver.peekMessages(5, { fromSequenceNumber: cancelled }), [], "cancelled");

    const soon = new Date(Date.now() + 1500);
    await sender.scheduleMessages({ body: "on time" }, soon);
    await assertNothingToReceive(receiver, "not before its time");
    const [m] = await receiveN(receiver, 1, 10000);
    assert.equal(m.body, "on time");
    assert.ok(Date.now() >= soon.getTime() - 50, "received once due");
    await receiver.completeMessage(m);
    await sender.close();
    await receiver.close();
  });

  test("peek shows messages in order without taking them", scenario, async () => {
    const sender = client.createSender("js-peek");
    await sender.sendMessages([{ body: "p1" }, { body: "p2" }, { body: "p3" }]);
    const receiver = client.createReceiver("js-peek");
    const peeked = await receiver.peekMessages(10);
    assert.deepEqual(peeked.map((m) => m.body), ["p1", "p2", "p3"]);
    const fromSecond = await receiver.peekMessages(10, { fromSequenceNumber: peeked[1].sequenceNumber });
    assert.deepEqual(fromSecond.map((m) => m.body), ["p2", "p3"]);
    const got = await receiveN(receiver, 3);
    assert.deepEqual(got.map((m) => m.body), ["p1", "p2", "p3"], "peeking locked nothing");
    assert.deepEqual(got.map((m) => m.deliveryCount), [0, 0, 0], "and counted no delivery");
    for (const m of got) await receiver.completeMessage(m);
    await sender.close();
    await receiver.close();
  });
});

describe("sessions", () => {
  test("a session receiver gets its session's messages in order and keeps state", scenario, async () => {
    const sender = client.createSender("js-sessions");
    await sender.sendMessages([
      { body: "o1-1", sessionId: "order-1" },
      { body: "o2-1", sessionId: "order-2" },
      { body: "o1-2", sessionId: "order-1" },
      { body: "o1-3", sessionId: "order-1" },
    ]);
    const receiver = await client.acceptSession("js-sessions", "order-1");
    assert.equal(receiver.sessionId, "order-1");
    assert.ok(receiver.sessionLockedUntilUtc.getTime() > Date.now(), "the session is locked");
    assert.equal(await receiver.getSessionState(), null, "no state yet");

    const got = await receiveN(receiver, 3);
    assert.deepEqual(got.map((m) => m.body), ["o1-1", "o1-2", "o1-3"]);
    assert.ok(got.every((m) => m.sessionId === "order-1"));
    for (const m of got) await receiver.completeMessage(m);
    await receiver.setSessionState({ next: 4 });
    assert.deepEqual(await receiver.getSessionState(), { next: 4 });
    await receiver.renewSessionLock();

    await assertServiceBusError(() => client.acceptSession("js-sessions", "order-1"), "SessionCannotBeLocked");
    await receiver.close();

    const again = await client.acceptSession("js-sessions", "order-1");
    assert.deepEqual(await again.getSessionState(), { next: 4 }, "the state outlives the receiver");
    await assertNothingToReceive(again, "order-1 is done");
    await again.close();

    const other = await client.acceptSession("js-sessions", "order-2");
    const [o2] = await receiveN(other, 1);
    assert.equal(o2.body, "o2-1", "other sessions are untouched");
    await other.completeMessage(o2);
    await other.close();
    await sender.close();
  });

  test("accept-next takes each waiting session once, and times out when none is left", scenario, async () => {
    const sender = client.createSender("js-accept-next");
    await sender.sendMessages([
      { body: "a", sessionId: "s-a" },
      { body: "b", sessionId: "s-b" },
    ]);
    const seen = [];
    for (let i = 0; i < 2; i++) {
      const receiver = await client.acceptNextSession("js-accept-next");
      const [m] = await receiveN(receiver, 1);
      assert.equal(m.sessionId, receiver.sessionId);
      seen.push(receiver.sessionId);
      await receiver.completeMessage(m);
      await receiver.close();
    }
    assert.deepEqual(seen.sort(), ["s-a", "s-b"]);

    const impatient = new ServiceBusClient(connectionString, {
      retryOptions: { maxRetries: 0, timeoutInMs: 1500 },
    });
    try {
      await assertServiceBusError(() => impatient.acceptNextSession("js-accept-next"), "ServiceTimeout");
    } finally {
      await impatient.close();
    }
    await sender.close();
  });
});

describe("authorization", () => {
  test("a wrong key is refused", scenario, async () => {
    const wrong = connectionString.replace(/SharedAccessKey=[^;]*/, "SharedAccessKey=not-the-key");
    assert.notEqual(wrong, connectionString);
    const intruder = new ServiceBusClient(wrong, { retryOptions: { maxRetries: 0, timeoutInMs: 5000 } });
    try {
      await assertServiceBusError(() => intruder.createSender("js-basic").sendMessages({ body: "x" }), "UnauthorizedAccess");
      await assertServiceBusError(
        () => intruder.createReceiver("js-basic").receiveMessages(1, { maxWaitTimeInMs: 1000 }),
        "UnauthorizedAccess",
      );
    } finally {
      await intruder.close();
    }
  });
});

describe("rules", () => {
  /** Sends one message per color to topic and returns the bodies subscription sub receives. */
  async function route(topic, sub, messages, expected) {
    const sender = client.createSender(topic);
    await sender.sendMessages(messages);
    await sender.close();
    const receiver = client.createReceiver(topic, sub, { receiveMode: "receiveAndDelete" });
    const got = await receiveN(receiver, expected);
    await assertNothingToReceive(receiver, `${sub} gets nothing more`);
    await receiver.close();
    return got;
  }
  const colors = (...cs) => cs.map((c) => ({ body: c, applicationProperties: { color: c } }));

  test("rules declared with the emulator filter and act", scenario, async () => {
    const red = await route("js-routing", "red", colors("red", "blue", "red"), 2);
    assert.deepEqual(red.map((m) => m.body), ["red", "red"]);
    assert.ok(red.every((m) => m.applicationProperties.tagged === "yes"), "the rule's action ran");
    const all = client.createReceiver("js-routing", "all", { receiveMode: "receiveAndDelete" });
    assert.deepEqual((await receiveN(all, 3)).map((m) => m.body), ["red", "blue", "red"], "$Default matches everything");
    await all.close();
  });

  test("the rule manager adds, lists and removes rules", scenario, async () => {
    const rules = client.createRuleManager("js-rules-amqp", "picky");
    const names = async () => {
      const out = [];
      for await (const r of rules.listRules()) out.push(r);
      return out;
    };
    assert.deepEqual((await names()).map((r) => r.name), ["$Default"]);
    await rules.createRule("reds", { sqlExpression: "color = 'red'" }, { sqlExpression: "SET shade = 'dark'" });
    await rules.createRule("order-7", { correlationId: "order-7", applicationProperties: { region: "eu" } });
    await rules.deleteRule("$Default");
    const listed = await names();
    assert.deepEqual(listed.map((r) => r.name), ["reds", "order-7"]);
    assert.equal(listed[0].filter.sqlExpression, "color = 'red'");
    assert.equal(listed[0].action.sqlExpression, "SET shade = 'dark'");
    assert.equal(listed[1].filter.correlationId, "order-7");
    assert.deepEqual(listed[1].filter.applicationProperties, { region: "eu" });
    await assertServiceBusError(() => rules.createRule("reds", { sqlExpression: "1=1" }), "MessagingEntityAlreadyExists");

    const got = await route(
      "js-rules-amqp",
      "picky",
      [...colors("red", "blue"), { body: "order", correlationId: "order-7", applicationProperties: { region: "eu" } }],
      2,
    );
    assert.deepEqual(got.map((m) => m.body), ["red", "order"]);
    assert.equal(got[0].applicationProperties.shade, "dark");
  });

  test("the administration client manages entities and rules over plain HTTP", scenario, async () => {
    const admin = new ServiceBusAdministrationClient(connectionString);
    // The administration client always builds https:// URLs and has no
    // option for a development emulator (its constructor ignores
    // additionalPolicies and httpClient). After construction its pipeline
    // takes a policy that sends the requests over plain HTTP to the
    // emulator's port, which answers HTTP as well as AMQP.
    admin.pipeline.addPolicy(
      {
        name: "emulatorPlainHttp",
        sendRequest: (request, next) => {
          request.url = request.url.replace(/^https:/, "http:");
          request.allowInsecureConnection = true;
          return next(request);
        },
      },
      { afterPhase: "Sign" },
    );

    const queue = await admin.createQueue("js-admin-queue", { requiresSession: true, maxDeliveryCount: 4, lockDuration: "PT45S" });
    assert.equal(queue.requiresSession, true);
    assert.equal(queue.maxDeliveryCount, 4);
    assert.equal(queue.lockDuration, "PT45S");
    assert.equal(await admin.queueExists("js-admin-queue"), true);
    assert.equal(await admin.queueExists("js-no-such-queue"), false);
    await assertRestError(() => admin.createQueue("js-admin-queue"), "MessageEntityAlreadyExistsError");

    const sender = client.createSender("js-admin-queue");
    await sender.sendMessages([{ body: 1, sessionId: "x" }, { body: 2, sessionId: "x" }]);
    await sender.close();
    const runtime = await admin.getQueueRuntimeProperties("js-admin-queue");
    assert.equal(runtime.activeMessageCount, 2);
    assert.equal(runtime.totalMessageCount, 2);

    await admin.createTopic("js-admin-topic");
    await admin.createSubscription("js-admin-topic", "blue-only");
    await admin.createRule(
      "js-admin-topic",
      "blue-only",
      "blue",
      { sqlExpression: "color = @c", sqlParameters: { "@c": "blue" } },
      { sqlExpression: "SET note = 'it''s blue'" },
    );
    await admin.deleteRule("js-admin-topic", "blue-only", "$Default");
    const rules = [];
    for await (const r of admin.listRules("js-admin-topic", "blue-only")) rules.push(r);
    assert.deepEqual(rules.map((r) => r.name), ["blue"]);
    const blue = await admin.getRule("js-admin-topic", "blue-only", "blue");
    assert.equal(blue.filter.sqlExpression, "color = @c");
    assert.deepEqual(blue.filter.sqlParameters, { "@c": "blue" });
    assert.equal(blue.action.sqlExpression, "SET note = 'it''s blue'");

    const got = await route("js-admin-topic", "blue-only", colors("red", "blue", "green"), 1);
    assert.deepEqual(got.map((m) => m.body), ["blue"]);
    assert.equal(got[0].applicationProperties.note, "it's blue");

    await admin.deleteTopic("js-admin-topic");
    await admin.deleteQueue("js-admin-queue");
    assert.equal(await admin.topicExists("js-admin-topic"), false);
  });
});

/** Asserts that fn rejects with a RestError (the administration client's) of the given code. */
async function assertRestError(fn, code) {
  await assert.rejects(fn, (err) => {
    assert.equal(err.code, code, `${err.name}: ${err.message}`);
    return true;
  });
}
