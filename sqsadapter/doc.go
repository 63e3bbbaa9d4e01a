// Package sqsadapter runs seqbus over Amazon SQS FIFO queues: a message group plays the part of
// a Service Bus session.
//
// # Attributes
//
// Application properties travel as SQS message attributes ([EncodeAttributes],
// [DecodeAttributes]): strings as String, bools as String.bool, integers as Number (back as
// int64), floats as Number.float (back as float64), []byte as Binary and time.Time as
// String.time (RFC 3339 with nanoseconds, UTC). The sequence property of the message contract
// is thus a Number and comes back as the int64 contract.Parse reads. SQS takes at most 10
// attributes per message and refuses empty String and Binary values; such properties are an
// error, not dropped.
package sqsadapter
