// Package topology provisions Service Bus entities from a declarative YAML file:
// spec (Parse) → validate (Validate, Load) → expand (Expand) → plan (Fetch, Diff) →
// apply (Apply) or render (Render, an Azure CLI script).
//
// The core (this package) does no I/O: it reads the namespace and changes it through
// the narrow Admin interface. topology/sbadmin implements Admin over the azservicebus
// admin client (real Service Bus, or the seqbus emulator through
// admintransport); topology/topologytest has an in-memory fake. The CLI is
// cmd/topology.
//
// # The file
//
//	queues:
//	  - name: jobs
//	    lockDuration: PT1M            # ISO 8601 (PT30S, P14D) or Go (30s, 24h)
//	    maxDeliveryCount: 10
//	    requiresSession: true
//	    forwardTo: other-queue        # and forwardDeadLetteredMessagesTo
//	topics:
//	  - name: orders-api
//	    defaultMessageTimeToLive: P14D
//	    subscriptions:
//	      - name: audit
//	        rules:                    # when present: the complete rule set
//	          - {name: big, sql: "amount > 100", action: "SET user.big = TRUE"}
//	          - {name: vip, correlation: {subject: vip, properties: {tier: 1}}}
//	sequenced:
//	  - name: checkout
//	    sources: [orders-api, payments-api]
//	    forwardingSubscription: checkout-fwd   # default <name>-fwd
//	    topic: checkout-seq                    # default <name>-seq
//	    subscription: workers                  # default workers
//	    filter: "sys.Label <> 'noise'"         # optional, ANDed
//	    sessionId:
//	      strategy: composite
//	      separator: "_"
//	      properties: [{name: SessionName, maxLength: 32}, {name: TransactionId, maxLength: 36},
//	                   {name: InstanceId, maxLength: 36}]
//	    lockDuration: PT1M                     # worker subscription properties
//	    maxDeliveryCount: 10
//	    defaultMessageTimeToLive: P7D
//	    deadLetteringOnMessageExpiration: true
//
// Properties: lockDuration, maxDeliveryCount, defaultMessageTimeToLive,
// deadLetteringOnMessageExpiration, requiresSession, requiresDuplicateDetection,
// duplicateDetectionHistoryTimeWindow, maxSizeInMegabytes, enableBatchedOperations,
// autoDeleteOnIdle, forwardTo, forwardDeadLetteredMessagesTo, userMetadata; Validate
// says which apply to queues, topics and subscriptions. A property the file leaves out
// is not managed: plan never changes it.
//
// # Sequenced entities
//
// A sequenced block expands into the Gjura layout: on each source topic a forwarding
// subscription with ForwardTo = the sequencing topic and one rule per session-key
// alternative, whose filter is EXISTS(user.P) AND … over the key's properties and whose
// action is SET sys.SessionId = user.A + '<sep>' + user.B …; and the sequencing topic
// with a subscription that requires sessions (unless the strategy is none). Messages
// lacking the properties match no rule and are not forwarded. Source and sequencing
// topics the file does not declare are created.
//
// # Session-id strategies
//
// Expressible as SQL rule actions (the broker assigns the SessionId while forwarding):
//   - composite: properties joined by separator (default "_"); Gjura's
//     SessionName_TransactionId_InstanceId.
//   - entity: ordering scope "entity", owner/repo/entity_type/entity_id, from
//     Owner, Repo, EntityType, EntityId (or four properties you name).
//   - repository: ordering scope "repository", owner/repo/repository, from Owner, Repo.
//   - fallback: alternatives tried in order; each becomes a rule whose filter also
//     excludes the earlier alternatives, so exactly one rule matches and the message is
//     forwarded once.
//   - none: forwarded without a session id (the worker subscription must not require
//     sessions).
//
// Not expressible in SQL, so the publisher must set the SessionId (package publisher,
// publisher.Func) and publish straight to a session-enabled entity: keys taken from
// the message body; normalisation such as lower-casing or trimming; mapping event
// types to entity types (pull_request_review → pull_request) except as a fixed list of
// rules written by hand; hashing or truncating keys that could exceed 128 characters.
// Values are concatenated as the SQL + operator formats them (True, 1.5, 1E+20), and
// publisher.Format formats them the same way.
//
// # Validation
//
// Before touching a broker: names (entities ≤260 characters of letters, digits, '.',
// '-', '_', '/'; subscriptions and rules ≤50, no '/'), duplicates, property ranges,
// forwarding targets declared in the file, chains of at most 4 hops and no loops,
// filters and actions ≤1,024 characters that compile (sqlrule), session ids
// that fit 128 characters given each property's maxLength (a warning when one is
// unbounded). Every error names the file, line, column and field path, e.g.
//
//	topology.yaml:12:5: sequenced[0].sessionId: the session id can be 182 characters long, Service Bus allows 128
//
// # Plan and apply
//
// Diff compares only the properties the file sets. Apply creates and updates in
// dependency order (topics, queues with forwarding targets first, subscriptions,
// rules). Destructive changes, deleting entities the file does not declare and
// replacing entities whose requiresSession or requiresDuplicateDetection differ (which
// loses their messages), are made only with ApplyOptions.Prune. Rules of a subscription
// whose rules the file declares are synchronised exactly (extra rules are deleted).
// Applying the same file twice changes nothing the second time.
//
// # Imports
//
// The package imports the standard library, go.yaml.in/yaml/v3 and sqlrule (a
// pure compiler, for validation). It must never import the Azure SDK, the emulator's
// broker or server, or anything that does I/O; sbadmin and cmd/topology do.
package topology
