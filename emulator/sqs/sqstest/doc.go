// Package sqstest is the conformance suite for a local SQS FIFO: Run drives any
// server that speaks the SQS JSON protocol with the real AWS SDK for Go v2 client
// (github.com/aws/aws-sdk-go-v2/service/sqs) and checks the FIFO behaviour the
// seqbus SQS provider relies on, as the AWS documentation states it:
//
//   - queues: CreateQueue (FIFO name and attribute rules, idempotent create,
//     QueueNameExists on different attributes), GetQueueUrl, GetQueueAttributes,
//     SetQueueAttributes, ListQueues, DeleteQueue, PurgeQueue (once a minute);
//   - sending: MessageGroupId required (MissingParameter), a deduplication id or
//     ContentBasedDeduplication required, no per-message delay, message
//     attributes and their MD5, SendMessageBatch with distinct entry ids;
//   - receiving: order within a group, SequenceNumber rising, a group blocked
//     while one of its messages is in flight, the visibility timeout lapsing and
//     ChangeMessageVisibility (at most 12 hours from the receive; zero releases),
//     expired receipt handles refused, ReceiveRequestAttemptId retries, long
//     polling with WaitTimeSeconds;
//   - deduplication by MessageDeduplicationId or by content within 5 minutes;
//   - redrive to a FIFO dead-letter queue after maxReceiveCount receives.
//
// A Target whose Advance is set lets the suite move the server's clock; without
// it the suite waits in real time with short timeouts and skips the cases that
// need minutes to pass (the end of the deduplication window, the 60 seconds
// between purges).
//
// Only test code may import this package.
package sqstest
