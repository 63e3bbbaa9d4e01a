// Package sqs is a local Amazon SQS for tests and local development: FIFO queues
// served over the SQS JSON protocol (POST with X-Amz-Target: AmazonSQS.<Action> and
// Content-Type application/x-amz-json-1.0), the protocol the AWS SDK for Go v2 and
// the current AWS SDKs and CLI send.
//
// Handler is an http.Handler (embed it with httptest.NewServer); Start serves it on
// an address of its own, as cmd/emulator -sqs-addr does.
//
// # What is modeled
//
//   - Queues: CreateQueue, GetQueueUrl, GetQueueAttributes, SetQueueAttributes,
//     ListQueues, DeleteQueue, PurgeQueue (once in 60 seconds), with the
//     service's name and attribute rules and ranges. Queue URLs are
//     http://<host of the request>/<account>/<name>; ARNs
//     arn:aws:sqs:<region>:<account>:<name>.
//   - FIFO sending: SendMessage and SendMessageBatch with MessageGroupId required,
//     MessageDeduplicationId or ContentBasedDeduplication required, deduplication
//     within 5 minutes per queue or per group (DeduplicationScope), a duplicate
//     answered with the first message's id and sequence number, a rising
//     SequenceNumber, message attributes with their MD5, the queue's DelaySeconds,
//     the queue's MaximumMessageSize and MessageRetentionPeriod.
//   - FIFO receiving: ReceiveMessage returns a group's messages in order and as
//     many of one group as fit first; a group with a message in flight is not
//     served; the visibility timeout (queue default or per receive), its lapse,
//     ChangeMessageVisibility(Batch) up to 12 hours from the receive,
//     DeleteMessage(Batch) with the newest receipt handle of a message in flight
//     (an older or lapsed one is refused as expired, as FIFO queues do),
//     WaitTimeSeconds long polling, MaxNumberOfMessages, MessageAttributeNames
//     (names, prefixes "name.*", "All", ".*"), MessageSystemAttributeNames and
//     the older AttributeNames, ReceiveRequestAttemptId retries within 5 minutes.
//   - RedrivePolicy: a message received maxReceiveCount times moves, on its next
//     receive, to the dead-letter queue, which must be an existing FIFO queue; it
//     keeps its id, body, attributes, group, deduplication id and SentTimestamp,
//     carries DeadLetterQueueSourceArn, and is retained there from the move.
//
// # What is not modeled
//
// Standard queues (CreateQueue refuses them), the query (XML) protocol,
// permissions, tags, message move tasks, KMS, throughput quotas and throttling,
// and ListDeadLetterSourceQueues: these answer with a clear error rather than
// pretending. Requests are not authenticated: any SigV4-signed (or unsigned)
// request is accepted and credentials are not checked; the access key id of the
// Authorization header becomes the message's SenderId.
//
// All time comes from the injected clock.Clock (Config.Clock), so tests move
// visibility timeouts, delays and the deduplication window with clock.Fake.
//
// The package imports nothing of seqbus but the clock package.
package sqs
