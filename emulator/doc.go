// Package emulator runs an in-process Azure Service Bus emulator that the real
// azservicebus SDK talks to over AMQP 1.0 (with UseDevelopmentEmulator=true in
// the connection string): queues, topics and subscriptions, peek-lock and
// receive-and-delete, settlement, deferral, dead-lettering, scheduling,
// sessions with session state, the $cbs token node and the $management node.
//
// Start(ctx, Config) opens the listeners (free loopback ports by default) and
// returns a *Server whose ConnectionString the SDK accepts. The AMQP port also
// answers HTTP (GET /health and the management API of emulator/atom, which
// the admin client reaches through admintransport), telling the two
// apart by the first bytes of a connection; Config.HTTPAddr serves the same
// handler on a port of its own.
//
// # SDKs
//
// The Go SDK (azservicebus v1.11) and the JavaScript SDK (@azure/service-bus
// 7.9, on rhea) run against the emulator in its tests; for JavaScript,
// testdata/jsconformance holds a node --test suite that TestJavaScriptSDKConformance
// runs (send and receive, batches, settlement, dead-lettering, deferral,
// scheduling, peek, sessions with state, accept-next, a wrong key, rules
// through the rule manager and the administration client). For any SDK:
//
//   - $cbs and $management accept each reply-link shape of the official
//     SDKs and route a response by the request's reply-to: to the reply
//     link with that target address, else the one with that name (rhea
//     attaches its $cbs reply link without a target address); a request
//     without reply-to (pyamqp's put-token) goes to the reply link of the
//     node on the request's session. Responses carry status-code and
//     status-description, and statusCode and statusDescription, which .NET
//     and Python read, with the request's message-id, whatever its type, as
//     correlation-id. Requests may come pre-settled (.NET).
//   - Client receivers may drain their credit (JavaScript does at the end
//     of every receiveMessages call and closes its link when no answer comes
//     within 200 ms); a session filter comes back in the form it was sent
//     (described for go-amqp, a bare string for JavaScript); deliveries
//     state delivery-count 0; messages sent without an id get one.
//   - A subscription's $management node serves add-rule, remove-rule and
//     enumerate-rules (the rule managers of JavaScript, .NET, Java, Python).
//
// The Python SDK (azure-servicebus 7.8 on uamqp) runs against the emulator in
// TLS mode: testdata/pyconformance, run by TestPythonSDKConformance over AMQPS
// and over WebSockets. uamqp names entity links by URI
// (amqps://host/queue), which the engine resolves, and fails (and, in its C
// code, writes into freed memory) when a $cbs or $management response comes
// before the request's settlement, so the engine settles first.
//
// The .NET and Java SDKs are not run here: their reply-link shapes come from
// their sources and are covered by the engine's tests with go-amqp.
//
// # TLS and WebSockets
//
// Config.TLS serves the AMQP port over TLS only, as Service Bus serves port
// 5671 (DefaultTLSPort, cmd/emulator's default with -tls): AMQPS, the
// management API over HTTPS and AMQP over WebSockets, told apart after the
// handshake by their first bytes. The certificate is given (CertFile,
// KeyFile) or generated and written for clients to trust (Server.CertFile;
// Go clients take Server.ClientTLSConfig). AMQP over WebSockets is served at
// WebSocketPath (subprotocol AMQPWSB10, or amqp) on the AMQP port, over TLS or
// not, and on HTTPAddr.
//
// The JavaScript administration client always builds https:// URLs from the
// Endpoint and takes no option that changes that (UseDevelopmentEmulator is
// ignored, and its constructor passes neither additionalPolicies nor
// httpClient to its pipeline). After construction its pipeline accepts a
// policy that sends the requests over plain HTTP to the Endpoint's port,
// where the emulator answers HTTP too:
//
//	admin.pipeline.addPolicy({name: "emulator", sendRequest: (req, next) => {
//		req.url = req.url.replace(/^https:/, "http:"); req.allowInsecureConnection = true; return next(req)
//	}}, {afterPhase: "Sign"})
//
// # Tests
//
// emulator/emulatortest starts an emulator for a test in one call (free
// ports, log to t.Log, entities declared in Go, a client with fast retries,
// cleanup with t.Cleanup).
//
// # Fault hooks
//
// DropConnections (TCP close: the SDK reconnects), DetachEntityLinks
// (amqp:link:detach-forced: the SDK re-creates its links),
// FailNextManagementCalls (503: the SDK retries),
// DropConnectionOnNextManagementCalls (the connection dies mid-call: the SDK
// reconnects and repeats the call), ExpireMessageLock and ExpireSessionLock
// let tests exercise recovery paths without waiting.
//
// # Pressure
//
// Config.Pressure makes the emulator behave like a loaded namespace: latency
// on every answer, a credit-based throttle modelled on the Standard tier
// (refusals with com.microsoft:server-busy and the service's retry-after
// hint; deliveries wait instead) and a rate of transient errors; see
// Pressure for what each costs and where it applies, and PressureStats for
// what it did. cmd/emulator sets it with flags or SEQBUS_EMULATOR_* variables.
// A throttled or failed link settlement shows a trait of go-amqp: it takes
// the refusing disposition as final, so the SDK's retry of the settlement
// returns success without reaching the emulator, and the message, still
// locked, comes back when its lock expires.
//
// # Partitioned session entities
//
// On a session entity with partitioning enabled (EnablePartitioning of a
// queue, or of a subscription's topic, set through the admin clients or a
// Config.json), the $management operations on a session's messages,
// com.microsoft:receive-by-sequence-number, com.microsoft:update-disposition
// and com.microsoft:peek-message, fail when the request carries no
// session-id: status 500, error-condition amqp:internal-error, and a
// status-description that starts with the service's text, "The service was
// unable to process the request; please retry the operation.", and goes on to
// say what the emulator refused. With session-id they run as on any entity
// (receive-by-sequence-number then needs that session locked by the client:
// 410 otherwise). Partitioning cannot change after an entity is created (400).
//
// Evidence: the .NET library once sent receive-by-sequence-number for a
// session receiver without session-id, and the service answered with that text
// (azure-service-bus-dotnet issue 544, as the library's generic
// ServiceBusException); the fix added session-id, its commit saying that a
// partitioned session queue requires it (PR 574); the old Go library had the
// same fault (azure-service-bus-go issue 127). The text comes from the service
// with status 500 on $management (azservicebus records "rpc: failed, status
// code 500 and description: The service was unable to process the request;
// please retry the operation." in a live test of another operation) and with
// amqp:internal-error on links. For entities without partitioning no public
// source says either way: Config.SessionIDRule (broker.SessionIDAlways;
// cmd/emulator -session-id-required always; Config.json
// "SessionIdRequired": "Always"; emulatortest.Options.SessionIDRule) refuses
// the same requests on every session entity, the strict case.
//
// What callers see: azservicebus v1.11 sends none of the three with session-id
// (internal/mgmt.go), so on such an entity a SessionReceiver's
// ReceiveDeferredMessages and PeekMessages, and the settlement of a message
// received deferred, fail. The SDK takes a 500 answer as retryable
// (internal/errors.go, GetRecoveryKind), retries it RetryOptions.MaxRetries
// times and returns its RPCError unchanged: no
// azservicebus.Code (errors.As to *azservicebus.Error is false), no
// *amqp.Error (go-amqp carries the response message, of which the SDK reads
// status-code and status-description and ignores error-condition), the text
// "rpc: failed, status code 500 and description: ...", and RPCCode() 500.
// The Python SDK names the session in all three and works
// (TestPythonSDKConformance runs its session deferral on a partitioned queue).
// TestSessionDeferralRoundTripWithStockSDK and, in the engine,
// TestSessionOperationsWithoutSessionID pin this.
//
// # SDK behaviour worth knowing (azservicebus v1.11.0)
//
//   - After its session lock is lost, a SessionReceiver retries a settlement
//     with the default backoff (about 45 s) before returning CodeLockLost; it
//     never reports false success against this emulator.
//   - After a connection loss, messages received before it cannot be settled
//     (the retries end in CodeConnectionLost); their locks expire and they are
//     redelivered with DeliveryCount+1. A link-level detach, in contrast,
//     falls back to $management settlement, which succeeds.
//   - Message locks survive the link and connection that received them, as on
//     Service Bus; session locks are released when their link goes away.
//   - When a link is detached just after a settlement went out, go-amqp may
//     report the settlement as failed although the emulator applied it; the
//     SDK then settles again through $management and returns CodeLockLost for
//     a message that is gone. Treat CodeLockLost on Complete as "maybe done".
//   - go-amqp reports a send whose context ends before the link takes it as
//     amqp:link:transfer-limit-exceeded ("credit limit exceeded for sending
//     link"), credit or not: a request/response call cancelled by a stopping
//     worker logs it. The engine grants 1000 credits on every client sender,
//     $cbs and $management included, and tops them up at half
//     (TestRequestLinksKeepTheirCredit).
//   - go-amqp abandons a session whose begin its context stopped before the
//     frame was written, and later ends it on a channel the emulator never
//     saw; the emulator ignores such an end (closing the connection, as it
//     once did, failed every other session of the client).
//
// # Layering
//
// emulator/amqpwire (codec), emulator/broker (semantics),
// emulator/internal/engine (connections, links, nodes) and emulator/atom
// (management API) sit below this package. It must never import anything of seqbus outside
// emulator/ except the leaf packages clock, contract (durations) and sqlrule (the rule
// language), which import nothing of seqbus.
package emulator
