// Package atom serves the Service Bus management API (ATOM XML over HTTP) on top of an
// in-memory emulator/broker, compatible with the azservicebus/admin client v1.11
// (api-version 2024-05 and 2021-05).
//
// NewHandler returns an http.Handler for these endpoints (paths are relative to the
// namespace root, every request carries ?api-version=…):
//
//	PUT|GET|DELETE /{queue-or-topic}                          create (update with If-Match: *), get, delete
//	GET            /$Resources/Queues, /$Resources/Topics     list, honouring $skip and $top
//	PUT|GET|DELETE /{topic}/Subscriptions/{sub}
//	GET            /{topic}/Subscriptions                     list
//	PUT|GET|DELETE /{topic}/Subscriptions/{sub}/Rules/{rule}  (PUT …/Rules/ takes the name from the body)
//	GET            /{topic}/Subscriptions/{sub}/Rules         list
//	GET            /$namespaceinfo
//
// Every request must carry "Authorization: SharedAccessSignature sr=…&sig=…&se=…&skn=…"
// signed (HMAC-SHA256) with the configured key, unexpired, for a resource that covers
// the request path; otherwise the answer is 401. Errors are answered with
// <Error><Code>…</Code><Detail>…</Detail></Error>: 400 for malformed XML or an invalid
// property, 404 for a missing entity, 409 for a duplicate.
//
// Entities are created with the same broker calls as a Config.json file (CreateQueue,
// CreateTopic, CreateSubscriptionWithRules, CreateRule). Properties the broker does not
// model (MaxSizeInMegabytes, EnableBatchedOperations, AutoDeleteOnIdle, UserMetadata,
// EnablePartitioning, MaxMessageSizeInKilobytes, SupportOrdering, authorization rules,
// …) are kept by the handler and echoed. SQL filter and action parameters go to the
// broker as Rule.SQLParameters and Rule.ActionParameters (typed Go values: string,
// int64, float64, bool, time.Time); the handler remembers their XML types so that reads
// return what was written.
//
// # Service Bus behaviour kept
//
//   - Create answers 201, update (PUT with If-Match) and get 200, delete 200 with no body.
//   - Values outside Service Bus limits are refused with 400: LockDuration above 5 minutes,
//     MaxDeliveryCount below 1, DuplicateDetectionHistoryTimeWindow outside [20s, 7d],
//     AutoDeleteOnIdle below 5 minutes, unknown Status, UserMetadata above 1024 characters.
//   - ForwardTo and ForwardDeadLetteredMessagesTo accept a name or an absolute URI, must
//     name an existing queue or topic other than the entity itself, and are returned as
//     absolute URIs, as the service does: a URI as the client wrote it (the SDK's live
//     tests write sb:// and https:// URIs and expect them back unchanged), a plain name
//     as sb://<host the request was sent to>/<name>.
//   - An invalid SQL filter or action (in a rule or a subscription's default rule) is a
//     400 whose detail names the line and column of the offending token.
//   - Runtime counts come from the broker; TransferDeadLetterMessageCount is the
//     transfer dead-letter queue (failed auto-forwarding), TransferMessageCount is
//     always 0 as forwarding is synchronous.
//   - "Never" (zero time-to-live or idle timeout) is reported as .NET's TimeSpan.MaxValue,
//     P10675199DT2H48M5.4775807S, and read back as never.
//   - Lists return at most $top entries (default 100) after skipping $skip.
//   - A subscription created without a DefaultRuleDescription gets the $Default TrueFilter
//     rule; rule responses always carry a typed Filter and Action (EmptyRuleAction).
//   - DeadLetteringOnFilterEvaluationExceptions defaults to true and reaches the broker
//     (a message whose rule fails to evaluate is dead-lettered in the subscription).
//   - RequiresSession and RequiresDuplicateDetection cannot change on update (400).
//
// # Imports
//
// The package imports the standard library, emulator/broker, clock, contract (durations) and
// sqlrule (for the position of SQL syntax errors). It must
// never import the AMQP engine, the emulator root package, the Azure SDK, or anything of
// seqbus outside the emulator.
package atom
