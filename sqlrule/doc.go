// Package sqlrule implements the Service Bus subscription rule language: SQL
// filters (CompileFilter, Filter.Match), SQL rule actions (CompileAction,
// Action.Apply) and correlation filters (CorrelationFilter.Match), evaluated
// against go-amqp messages as a broker stores them. The emulator's broker
// evaluates rules with it; topology compiles the rules of a topology file with
// it before anything reaches a namespace.
//
// # Filters
//
// A filter is a predicate over the message's system properties (sys.Name:
// MessageId, CorrelationId, To, ReplyTo, Label or Subject, SessionId,
// ReplyToSessionId, ContentType, PartitionKey, SequenceNumber,
// EnqueuedSequenceNumber, EnqueuedTimeUtc, ScheduledEnqueueTimeUtc,
// ExpiresAtUtc, DeliveryCount, TimeToLive, Size, DeadLetterSource, State or
// MessageState, LockedUntilUtc, LockToken, ViaPartitionKey)
// and its application properties (user.Name or plain Name). Names are
// case-insensitive and may be delimited as [my prop] or "my prop". The grammar:
//
//	predicate  := NOT predicate | predicate AND predicate | predicate OR predicate
//	            | expression {= | <> | != | > | >= | < | <=} expression
//	            | expression IS [NOT] NULL
//	            | expression [NOT] IN (expression, ...)
//	            | expression [NOT] LIKE pattern [ESCAPE char]
//	            | EXISTS(property) | (predicate) | boolean term
//	expression := constant | @parameter | property | newid() | property(name)
//	            | expression {+ | - | * | / | %} expression | {+ | -} expression
//	            | (expression)
//
// Constants are integers (int64), decimals and approximate numbers such as
// 1.5 or 101.5E5 (float64), strings in single quotes (a quote inside is
// written twice), TRUE, FALSE and NULL.
// Keywords are case-insensitive.
//
// # Semantics
//
// Evaluation follows the documented Service Bus rules:
//   - A missing application property is unknown (NULL); naming a system
//     property that does not exist is a compile error. A system property the
//     message does not carry (sys.SessionId of a message without a session) is
//     NULL.
//   - Arithmetic and comparisons with an unknown operand are unknown; AND, OR
//     and NOT use three-valued logic (FALSE AND unknown is FALSE, TRUE OR
//     unknown is TRUE). A filter matches only when it evaluates to TRUE.
//   - x IN (...) is unknown only when x is; otherwise TRUE when some element
//     equals x. LIKE is unknown when any operand is.
//   - Integer and floating point operands mix as in C#: integer op integer is
//     integer (division truncates, division by zero is an evaluation error),
//     anything with a float is float.
//   - + with a string operand concatenates, formatting the other operand as
//     .NET would (1.5 → "1.5", TRUE → "True").
//   - String comparison is ordinal and case-sensitive; so is LIKE, whose only
//     wildcards are % and _.
//   - Comparing values of different types (a string with a number, say) is
//     unknown, not an error. Arithmetic on unsupported types (a string times a
//     number) is an evaluation error, reported by Match wrapped in
//     ErrEvaluation; the broker treats it as "no match".
//
// # Actions
//
// An action is a sequence of SET property = expression and REMOVE property
// statements, each optionally followed by a semicolon, applied in order. SET
// on a system property accepts only the string-valued ones (MessageId,
// CorrelationId, To, ReplyTo, Label/Subject, SessionId, ReplyToSessionId,
// ContentType, PartitionKey); assigning a non-string value is an error,
// assigning NULL or REMOVE clears the property, and naming a read-only one
// (sys.SequenceNumber, ...) is a compile error. SET on an application property
// stores the value (NULL keeps the property with a null value) and converts an
// integer to float when the existing property is a float. A missing operand
// makes the whole expression NULL, so in the Gjura layout action
// SET sys.SessionId = user.A + '_' + user.B a message without B loses its
// session id; pair such actions with an EXISTS filter.
//
// sys.Size is approximated by the size of the message body; sys.MessageId and
// sys.CorrelationId of non-string AMQP ids read as strings (a uuid in its
// canonical form, a ulong in decimal, binary in hex).
//
// # Limits and errors
//
// Expressions are limited to MaxExpressionLength characters (ErrTooLong).
// Syntax errors are *SyntaxError values with the line and column of the
// offending token, e.g. "sqlrule: 1:17: expected expression after AND, found EOF".
//
// # Layering
//
// The package imports only the standard library and github.com/Azure/go-amqp.
// It must never import other seqbus packages (in particular not the emulator,
// whose broker plugs it in through its SQLCompiler hook, nor topology).
package sqlrule
