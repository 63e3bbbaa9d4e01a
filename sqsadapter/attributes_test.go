package sqsadapter_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/sqsadapter"
)

var when = time.Date(2026, 11, 29, 5, 1, 2, 345678901, time.FixedZone("CET", 3600))

// roundTrips are the values EncodeAttributes takes, with the data type they travel as and
// what DecodeAttributes gives back.
var roundTrips = []struct {
	name     string
	in       any
	dataType string
	wire     string
	out      any
}{
	{"string", "hello", "String", "hello", "hello"},
	{"unicode", "ünïcødé ✓", "String", "ünïcødé ✓", "ünïcødé ✓"},
	{"true", true, "String.bool", "true", true},
	{"false", false, "String.bool", "false", false},
	{"int", 42, "Number", "42", int64(42)},
	{"int8", int8(-8), "Number", "-8", int64(-8)},
	{"int16", int16(1600), "Number", "1600", int64(1600)},
	{"int32", int32(-32), "Number", "-32", int64(-32)},
	{"int64max", int64(math.MaxInt64), "Number", "9223372036854775807", int64(math.MaxInt64)},
	{"int64min", int64(math.MinInt64), "Number", "-9223372036854775808", int64(math.MinInt64)},
	{"uint", uint(7), "Number", "7", int64(7)},
	{"uint8", uint8(255), "Number", "255", int64(255)},
	{"uint16", uint16(65535), "Number", "65535", int64(65535)},
	{"uint32", uint32(math.MaxUint32), "Number", "4294967295", int64(math.MaxUint32)},
	{"uint64small", uint64(12), "Number", "12", int64(12)},
	{"uint64huge", uint64(math.MaxUint64), "Number", "18446744073709551615", float64(math.MaxUint64)},
	{"float64", 2.5, "Number.float", "2.5", 2.5},
	{"float64integral", 3.0, "Number.float", "3", 3.0},
	{"float64tiny", 1.5e-100, "Number.float", "1.5e-100", 1.5e-100},
	{"float32", float32(0.1), "Number.float", "0.1", 0.1},
	{"zerofloat", 0.0, "Number.float", "0", 0.0},
	{"bytes", []byte{0, 1, 2, 255}, "Binary", "", []byte{0, 1, 2, 255}},
	{"time", when, "String.time", "2026-11-29T04:01:02.345678901Z", when.UTC()},
}

func TestEncodeDecodeAttributes(t *testing.T) {
	for _, tc := range roundTrips {
		t.Run(tc.name, func(t *testing.T) {
			enc, err := sqsadapter.EncodeAttributes(map[string]any{"P": tc.in})
			require.NoError(t, err)
			require.Len(t, enc, 1)
			require.Equal(t, tc.dataType, aws.ToString(enc["P"].DataType))
			if tc.dataType == "Binary" {
				require.Equal(t, tc.in, enc["P"].BinaryValue)
			} else {
				require.Equal(t, tc.wire, aws.ToString(enc["P"].StringValue))
			}
			dec, err := sqsadapter.DecodeAttributes(enc)
			require.NoError(t, err)
			require.Equal(t, map[string]any{"P": tc.out}, dec)
		})
	}
}

func TestEncodeAttributesRefuses(t *testing.T) {
	eleven := map[string]any{}
	for i := range 11 {
		eleven[string(rune('A'+i))] = i
	}
	for _, tc := range []struct {
		name  string
		props map[string]any
		want  string
	}{
		{"struct", map[string]any{"P": struct{}{}}, `property "P": type struct {} cannot be a message attribute`},
		{"map", map[string]any{"P": map[string]any{}}, `type map[string]interface {} cannot`},
		{"nil", map[string]any{"P": nil}, `property "P": nil`},
		{"empty string", map[string]any{"P": ""}, "empty String"},
		{"empty bytes", map[string]any{"P": []byte{}}, "empty Binary"},
		{"NaN", map[string]any{"P": math.NaN()}, "NaN is not a number"},
		{"Inf", map[string]any{"P": math.Inf(1)}, "+Inf is not a number"},
		{"too large", map[string]any{"P": 1e200}, "outside SQS's number range"},
		{"too small", map[string]any{"P": 1e-200}, "outside SQS's number range"},
		{"eleven", eleven, "11 application properties, SQS takes at most 10"},
		{"AWS prefix", map[string]any{"AWS.x": "v"}, `"AWS.x" is invalid: SQS reserves`},
		{"amazon prefix", map[string]any{"amazon.x": "v"}, `"amazon.x" is invalid: SQS reserves`},
		{"space", map[string]any{"a b": "v"}, `"a b" is invalid`},
		{"empty name", map[string]any{"": "v"}, `"" is invalid`},
		{"leading dot", map[string]any{".a": "v"}, "leading, trailing or doubled"},
		{"trailing dot", map[string]any{"a.": "v"}, "leading, trailing or doubled"},
		{"double dot", map[string]any{"a..b": "v"}, "leading, trailing or doubled"},
		{"long name", map[string]any{strings.Repeat("a", 257): "v"}, "is invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc, err := sqsadapter.EncodeAttributes(tc.props)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, enc)
		})
	}
}

func TestEncodeAttributesEmpty(t *testing.T) {
	for _, props := range []map[string]any{nil, {}} {
		enc, err := sqsadapter.EncodeAttributes(props)
		require.NoError(t, err)
		require.Nil(t, enc)
	}
	dec, err := sqsadapter.DecodeAttributes(nil)
	require.NoError(t, err)
	require.Nil(t, dec)
}

func attr(dataType, s string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String(dataType), StringValue: aws.String(s)}
}

// TestDecodeAttributesForeign decodes what other publishers send: plain Numbers written as
// decimals or with exponents and custom types seqbus does not write.
func TestDecodeAttributesForeign(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   types.MessageAttributeValue
		want any
	}{
		{"decimal integral", attr("Number", "5.0"), int64(5)},
		{"exponent integral", attr("Number", "1e3"), int64(1000)},
		{"fraction", attr("Number", "2.25"), 2.25},
		{"beyond int64", attr("Number", "1e30"), 1e30},
		{"custom number", attr("Number.int", "7"), int64(7)},
		{"custom string", attr("String.json", `{"a":1}`), `{"a":1}`},
		{"custom binary", types.MessageAttributeValue{DataType: aws.String("Binary.gz"), BinaryValue: []byte{9}}, []byte{9}},
		{"float of integer", attr("Number.float", "4"), 4.0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec, err := sqsadapter.DecodeAttributes(map[string]types.MessageAttributeValue{"P": tc.in})
			require.NoError(t, err)
			require.Equal(t, tc.want, dec["P"])
		})
	}
}

func TestDecodeAttributesRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   types.MessageAttributeValue
		want string
	}{
		{"bad bool", attr("String.bool", "yes"), `attribute "P": String.bool value "yes"`},
		{"bool in caps", attr("String.bool", "TRUE"), `neither "true" nor "false"`},
		{"bad time", attr("String.time", "yesterday"), "not an RFC 3339 time"},
		{"bad number", attr("Number", "twelve"), `number value "twelve" is not a number`},
		{"bad float", attr("Number.float", "x"), "is not a number"},
		{"unknown type", attr("List", "x"), `data type "List" is none of`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec, err := sqsadapter.DecodeAttributes(map[string]types.MessageAttributeValue{"P": tc.in})
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, dec)
		})
	}
}

// TestAttributesThroughLocalSQS sends every kind of value through a local SQS FIFO and reads
// it back, and checks that the sequence property arrives as contract.Parse reads it.
func TestAttributesThroughLocalSQS(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t, nil)
	url, _ := l.queue(t, 0)
	for i, tc := range roundTrips {
		props := map[string]any{"P": tc.in, contract.SequenceProperty: i + 1, contract.LastProperty: i == len(roundTrips)-1}
		enc, err := sqsadapter.EncodeAttributes(props)
		require.NoError(t, err)
		_, err = l.Client.SendMessage(ctx, &awssqs.SendMessageInput{
			QueueUrl: aws.String(url), MessageBody: aws.String(tc.name), MessageGroupId: aws.String("g"),
			MessageDeduplicationId: aws.String(tc.name), MessageAttributes: enc})
		require.NoError(t, err, tc.name)
	}
	var got []types.Message
	for len(got) < len(roundTrips) {
		out, err := l.Client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}, WaitTimeSeconds: 1})
		require.NoError(t, err)
		require.NotEmpty(t, out.Messages)
		for _, m := range out.Messages {
			got = append(got, m)
			_, err := l.Client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
			require.NoError(t, err)
		}
	}
	for i, tc := range roundTrips {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.name, aws.ToString(got[i].Body))
			dec, err := sqsadapter.DecodeAttributes(got[i].MessageAttributes)
			require.NoError(t, err)
			require.Equal(t, tc.out, dec["P"])
			seq, last, err := contract.Parse(dec, contract.SequenceProperty, contract.LastProperty)
			require.NoError(t, err)
			require.Equal(t, int64(i+1), seq)
			require.Equal(t, i == len(roundTrips)-1, last)
		})
	}
}
