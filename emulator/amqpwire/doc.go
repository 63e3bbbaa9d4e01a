// Package amqpwire holds the AMQP 1.0 wire format used by the seqbus Service Bus
// emulator: the type system codec (AppendValue, DecodeValue), the performatives
// and their companion types (Open … Close, the SASL frames, Source, Target, Error,
// delivery states), frames and protocol headers (ReadFrame, AppendFrame,
// ReadProtocolHeader, AppendProtocolHeader), and the splitting of a message
// payload into its sections (SplitSections).
//
// # Go mapping of AMQP values
//
//	null → nil             boolean → bool         ubyte → uint8     ushort → uint16
//	uint → uint32          ulong → uint64         byte → int8       short → int16
//	int → int32            long → int64           float → float32   double → float64
//	char → Char            timestamp → time.Time (ms precision, UTC)
//	uuid → UUID            binary → []byte        string → string   symbol → Symbol
//	list → []any           map → map[any]any      array → Array
//	described → Described  decimal32/64/128 → Decimal
//
// Encoding picks the compact encodings a real peer uses (uint0, smallulong,
// str8, list0, map8, …); decoding accepts every valid encoding. For
// convenience AppendValue also accepts int, uint, map[Symbol]any,
// map[string]any, []Symbol and every performative, delivery state, Source,
// Target and Error pointer of this package.
//
// Decoding never panics on malformed input: every read is bounds-checked,
// nesting is limited to MaxDepth levels and no allocation is sized by a length
// field larger than the input that remains. Decoding errors wrap ErrMalformed.
//
// # Layering
//
// The package does no network I/O beyond reading from an io.Reader handed to
// it, keeps no state and imports only the standard library. It must never
// import other seqbus packages (it is the bottom layer of emulator/) nor
// go-amqp; tests may import go-amqp to cross-check encodings.
package amqpwire
