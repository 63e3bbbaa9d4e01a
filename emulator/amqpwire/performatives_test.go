package amqpwire

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func ptr[T any](v T) *T { return &v }

// roundTripBodies holds one fully populated value of every performative and
// one minimal one, so every field is exercised in both directions.
func roundTripBodies() []struct {
	name  string
	typ   uint8
	body  any
	extra []byte
} {
	sessionFilter := Described{Descriptor: uint64(0x137000000c), Value: "session-1"}
	return []struct {
		name  string
		typ   uint8
		body  any
		extra []byte
	}{
		{"open full", FrameTypeAMQP, &Open{
			ContainerID: "c1", Hostname: "localhost:5672", MaxFrameSize: 65536, ChannelMax: 4999,
			IdleTimeout: 30 * time.Second, OutgoingLocales: []Symbol{"en-US"}, IncomingLocales: []Symbol{"en-US", "de"},
			OfferedCapabilities: []Symbol{"ANONYMOUS-RELAY"}, DesiredCapabilities: []Symbol{"x"},
			Properties: map[Symbol]any{"product": "MSGolangClient", "n": int64(3)},
		}, nil},
		{"open minimal", FrameTypeAMQP, &Open{ContainerID: "c", MaxFrameSize: 4294967295, ChannelMax: 65535}, nil},
		{"begin reply", FrameTypeAMQP, &Begin{
			RemoteChannel: ptr[uint16](3), NextOutgoingID: 1, IncomingWindow: 5000, OutgoingWindow: 5000,
			HandleMax: 262143, OfferedCapabilities: []Symbol{"a"}, DesiredCapabilities: []Symbol{"b"},
			Properties: map[Symbol]any{"p": true},
		}, nil},
		{"begin minimal", FrameTypeAMQP, &Begin{HandleMax: 4294967295}, nil},
		{"attach receiver with session filter", FrameTypeAMQP, &Attach{
			Name: "link-1", Handle: 7, Role: RoleReceiver,
			SndSettleMode: SenderSettleModeUnsettled, RcvSettleMode: ReceiverSettleModeSecond,
			Source: &Source{
				Address: "q1", Durable: 2, ExpiryPolicy: ExpiryNever, Timeout: 60, Dynamic: true,
				DynamicNodeProperties: map[Symbol]any{"lifetime": "x"}, DistributionMode: "move",
				Filter:         map[Symbol]any{"com.microsoft:session-filter": sessionFilter},
				DefaultOutcome: &Modified{DeliveryFailed: true}, Outcomes: []Symbol{"amqp:accepted:list"},
				Capabilities: []Symbol{"queue"},
			},
			Target: &Target{
				Address: "t", Durable: 1, ExpiryPolicy: ExpiryLinkDetach, Timeout: 5, Dynamic: true,
				DynamicNodeProperties: map[Symbol]any{"k": uint32(1)}, Capabilities: []Symbol{"c"},
			},
			Unsettled:           map[any]any{"tag": Described{Descriptor: uint64(0x24), Value: []any{}}},
			IncompleteUnsettled: true, InitialDeliveryCount: 0, MaxMessageSize: 1 << 20,
			OfferedCapabilities: []Symbol{"o"}, DesiredCapabilities: []Symbol{"d"},
			Properties: map[Symbol]any{"com.microsoft:locked-until-utc": int64(638000000000000000)},
		}, nil},
		{"attach refused (null source and target)", FrameTypeAMQP, &Attach{
			Name: "n", Handle: 0, Role: RoleSender, SndSettleMode: SenderSettleModeMixed, InitialDeliveryCount: 0,
		}, nil},
		{"flow session only", FrameTypeAMQP, &Flow{NextIncomingID: ptr[uint32](0), IncomingWindow: 5000, NextOutgoingID: 1, OutgoingWindow: 5000}, nil},
		{"flow link", FrameTypeAMQP, &Flow{
			NextIncomingID: ptr[uint32](9), IncomingWindow: 1, NextOutgoingID: 2, OutgoingWindow: 3,
			Handle: ptr[uint32](1), DeliveryCount: ptr[uint32](0), LinkCredit: ptr[uint32](1000), Available: ptr[uint32](4),
			Drain: true, Echo: true, Properties: map[Symbol]any{"x": nil},
		}, nil},
		{"transfer with payload", FrameTypeAMQP, &Transfer{
			Handle: 1, DeliveryID: ptr[uint32](42), DeliveryTag: []byte{1, 2, 3}, MessageFormat: ptr[uint32](0),
			Settled: ptr(false), More: true, RcvSettleMode: ptr(ReceiverSettleModeSecond),
			State: &Received{SectionNumber: 1, SectionOffset: 99}, Resume: true, Aborted: true, Batchable: true,
		}, []byte{0x00, 0x53, 0x75, 0xa0, 0x01, 0x7f}},
		{"transfer continuation", FrameTypeAMQP, &Transfer{Handle: 1}, []byte{0xa0, 0x01}},
		{"disposition accepted", FrameTypeAMQP, &Disposition{Role: RoleReceiver, First: 3, Last: ptr[uint32](9), Settled: true, State: &Accepted{}, Batchable: true}, nil},
		{"disposition rejected", FrameTypeAMQP, &Disposition{Role: RoleSender, First: 0, Settled: true, State: &Rejected{
			Error: &Error{Condition: "com.microsoft:message-lock-lost", Description: "gone", Info: map[Symbol]any{"k": "v"}},
		}}, nil},
		{"disposition released", FrameTypeAMQP, &Disposition{Role: RoleReceiver, First: 1, State: &Released{}}, nil},
		{"disposition modified", FrameTypeAMQP, &Disposition{Role: RoleReceiver, First: 1, State: &Modified{
			DeliveryFailed: true, UndeliverableHere: true, MessageAnnotations: map[any]any{Symbol("x-opt-a"): int64(1)},
		}}, nil},
		{"disposition rejected without error", FrameTypeAMQP, &Disposition{Role: RoleReceiver, First: 1, State: &Rejected{}}, nil},
		{"detach with error", FrameTypeAMQP, &Detach{Handle: 2, Closed: true, Error: &Error{Condition: "amqp:not-found", Description: "no entity"}}, nil},
		{"detach plain", FrameTypeAMQP, &Detach{Handle: 2}, nil},
		{"end", FrameTypeAMQP, &End{}, nil},
		{"end with error", FrameTypeAMQP, &End{Error: &Error{Condition: "amqp:internal-error"}}, nil},
		{"close", FrameTypeAMQP, &Close{}, nil},
		{"close with error", FrameTypeAMQP, &Close{Error: &Error{Condition: "amqp:connection:forced", Description: "bye"}}, nil},
		{"sasl mechanisms", FrameTypeSASL, &SASLMechanisms{Mechanisms: []Symbol{"ANONYMOUS", "MSSBCBS"}}, nil},
		{"sasl init", FrameTypeSASL, &SASLInit{Mechanism: "ANONYMOUS", InitialResponse: []byte("anonymous"), Hostname: "h"}, nil},
		{"sasl init minimal", FrameTypeSASL, &SASLInit{Mechanism: "PLAIN"}, nil},
		{"sasl challenge", FrameTypeSASL, &SASLChallenge{Challenge: []byte{1}}, nil},
		{"sasl response", FrameTypeSASL, &SASLResponse{Response: []byte{}}, nil},
		{"sasl outcome", FrameTypeSASL, &SASLOutcome{Code: SASLCodeAuth, AdditionalData: []byte("why")}, nil},
		{"sasl outcome ok", FrameTypeSASL, &SASLOutcome{Code: SASLCodeOK}, nil},
		{"heartbeat", FrameTypeAMQP, nil, nil},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tt := range roundTripBodies() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := Frame{Type: tt.typ, Channel: 513, Body: tt.body, Payload: tt.extra}
			enc, err := AppendFrame([]byte("prefix"), in)
			require.NoError(t, err)
			require.Equal(t, []byte("prefix"), enc[:6])
			enc = enc[6:]

			out, err := ReadFrame(bytes.NewReader(enc), 1<<20)
			require.NoError(t, err)
			require.Equal(t, in, out)

			// Re-encoding the decoded frame gives the same bytes.
			again, err := AppendFrame(nil, out)
			require.NoError(t, err)
			require.Equal(t, enc, again)

			if tt.body != nil {
				perf, n, err := DecodePerformative(enc[8:])
				require.NoError(t, err)
				require.Equal(t, len(enc)-8-len(tt.extra), n)
				require.Equal(t, tt.body, perf)
			}
		})
	}
}

// TestPerformativeGolden pins the exact bytes of frames whose shape matters
// to the SDK: trailing nulls dropped, refused attach with null terminus,
// session flows carrying next-incoming-id.
func TestPerformativeGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    Frame
		hex  string
	}{
		{"heartbeat", Frame{}, "00000008 02000000"},
		{"sasl outcome ok", Frame{Type: FrameTypeSASL, Body: &SASLOutcome{Code: 0}},
			"00000010 02010000 005344 c0 03 01 5000"},
		{"sasl mechanisms", Frame{Type: FrameTypeSASL, Body: &SASLMechanisms{Mechanisms: []Symbol{"ANONYMOUS"}}},
			"0000001c 02010000 005340 c0 0f 01 e0 0c 01 a3 09 414e4f4e594d4f5553"},
		{"open drops trailing nulls", Frame{Body: &Open{ContainerID: "b", MaxFrameSize: 65536, ChannelMax: 65535}},
			"00000017 02000000 005310 c0 0a 03 a10162 40 7000010000"},
		{"end without error is list0", Frame{Channel: 1, Body: &End{}}, "0000000c 02000001 005317 45"},
		{"accepted disposition", Frame{Body: &Disposition{Role: RoleReceiver, First: 5, Settled: true, State: &Accepted{}}},
			"00000017 02000000 005315 c0 0a 05 41 5205 40 41 005324 45"},
		{"refused attach", Frame{Body: &Attach{Name: "n", Handle: 1, Role: RoleReceiver, SndSettleMode: SenderSettleModeMixed}},
			"00000018 02000000 005312 c0 0b 05 a1016e 5201 41 5002 5000"},
		{"session flow", Frame{Body: &Flow{NextIncomingID: ptr[uint32](0), IncomingWindow: 5000, NextOutgoingID: 0, OutgoingWindow: 5000}},
			"0000001a 02000000 005313 c0 0d 04 43 7000001388 43 7000001388"},
		{"detach closed with error", Frame{Body: &Detach{Handle: 0, Closed: true, Error: &Error{Condition: "amqp:not-found"}}},
			"00000026 02000000 005316 c0 19 03 43 41 00531d c0 11 01 a3 0e 616d71703a6e6f742d666f756e64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := AppendFrame(nil, tt.f)
			require.NoError(t, err)
			require.Equal(t, hexBytes(t, tt.hex), got, "got %x", got)
		})
	}
}

// TestDecodeAppliesDefaults decodes performatives whose optional fields are
// absent and checks the spec defaults appear.
func TestDecodeAppliesDefaults(t *testing.T) {
	t.Parallel()
	enc := func(code uint64, fields ...any) []byte {
		b, err := AppendValue(nil, Described{Descriptor: code, Value: fields})
		require.NoError(t, err)
		return b
	}
	tests := []struct {
		name string
		in   []byte
		want any
	}{
		{"open", enc(0x10, "c"), &Open{ContainerID: "c", MaxFrameSize: 4294967295, ChannelMax: 65535}},
		{"open symbolic descriptor", func() []byte {
			b, err := AppendValue(nil, Described{Descriptor: Symbol("amqp:open:list"), Value: []any{"c", nil, uint32(512)}})
			require.NoError(t, err)
			return b
		}(), &Open{ContainerID: "c", MaxFrameSize: 512, ChannelMax: 65535}},
		{"open single locale symbol", enc(0x10, "c", nil, nil, nil, nil, Symbol("en")),
			&Open{ContainerID: "c", MaxFrameSize: 4294967295, ChannelMax: 65535, OutgoingLocales: []Symbol{"en"}}},
		{"begin", enc(0x11, nil, uint32(0), uint32(5000), uint32(5000)),
			&Begin{IncomingWindow: 5000, OutgoingWindow: 5000, HandleMax: 4294967295}},
		{"attach", enc(0x12, "n", uint32(0), true),
			&Attach{Name: "n", Role: RoleReceiver, SndSettleMode: SenderSettleModeMixed, RcvSettleMode: ReceiverSettleModeFirst}},
		{"attach empty source", enc(0x12, "n", uint32(0), false, nil, nil, Described{Descriptor: uint64(0x28), Value: []any{}}),
			&Attach{Name: "n", SndSettleMode: SenderSettleModeMixed, Source: &Source{ExpiryPolicy: ExpirySessionEnd}}},
		{"transfer", enc(0x14, uint32(1)), &Transfer{Handle: 1}},
		{"disposition", enc(0x15, true, uint32(4)), &Disposition{Role: RoleReceiver, First: 4}},
		{"flow", enc(0x13, nil, uint32(1), uint32(2), uint32(3)), &Flow{IncomingWindow: 1, NextOutgoingID: 2, OutgoingWindow: 3}},
		{"detach", enc(0x16, uint32(9)), &Detach{Handle: 9}},
		{"close empty list", enc(0x18), &Close{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, n, err := DecodePerformative(tt.in)
			require.NoError(t, err)
			require.Equal(t, len(tt.in), n)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestDecodePerformativeErrors(t *testing.T) {
	t.Parallel()
	enc := func(desc any, value any) []byte {
		b, err := AppendValue(nil, Described{Descriptor: desc, Value: value})
		require.NoError(t, err)
		return b
	}
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"not described", []byte{0x45}, "want described list"},
		{"not a list", enc(uint64(0x10), "x"), "want list"},
		{"unknown descriptor", enc(uint64(0x99), []any{}), "unknown performative"},
		{"unknown symbolic descriptor", enc(Symbol("amqp:nope:list"), []any{}), "unknown descriptor"},
		{"missing container id", enc(uint64(0x10), []any{}), "container-id: amqpwire: malformed input: mandatory"},
		{"wrong field type", enc(uint64(0x10), []any{"c", nil, "big"}), "max-frame-size"},
		{"attach missing role", enc(uint64(0x12), []any{"n", uint32(0)}), "role"},
		{"transfer bad state", enc(uint64(0x14), []any{uint32(0), nil, nil, nil, nil, nil, nil, Described{Descriptor: uint64(0x10), Value: []any{}}}), "unknown delivery state"},
		{"source wrong descriptor", enc(uint64(0x12), []any{"n", uint32(0), true, nil, nil, Described{Descriptor: uint64(0x29), Value: []any{}}}), "want source"},
		{"properties with int keys", enc(uint64(0x10), []any{"c", nil, nil, nil, nil, nil, nil, nil, nil, map[any]any{int32(1): nil}}), "symbol keys"},
		{"detach error not described", enc(uint64(0x16), []any{uint32(0), true, "oops"}), "want described list"},
		{"bad capability item", enc(uint64(0x10), []any{"c", nil, nil, nil, nil, nil, nil, Array{Code: 0xa1, Items: []any{"x"}}}), "want symbol"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := DecodePerformative(tt.in)
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestErrorImplementsError(t *testing.T) {
	t.Parallel()
	var err error = &Error{Condition: "amqp:not-found", Description: "queue q1"}
	require.EqualError(t, err, "amqp error amqp:not-found: queue q1")
	require.EqualError(t, &Error{Condition: "amqp:internal-error"}, "amqp error amqp:internal-error")
}

func TestAppendValueEncodesPackageTypes(t *testing.T) {
	t.Parallel()
	// A rejected state inside a map (as an unsettled map would hold it).
	enc, err := AppendValue(nil, map[any]any{"t": &Rejected{Error: &Error{Condition: "c"}}})
	require.NoError(t, err)
	v, _, err := DecodeValue(enc)
	require.NoError(t, err)
	want := map[any]any{"t": Described{Descriptor: uint64(0x25), Value: []any{
		Described{Descriptor: uint64(0x1d), Value: []any{Symbol("c")}},
	}}}
	require.Equal(t, want, v)
}
