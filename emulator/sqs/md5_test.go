package sqs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAttrsMD5 checks the message attribute digest against published vectors.
func TestAttrsMD5(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		attrs map[string]attrValue
		want  string
	}{
		{"none", nil, ""},
		{"one string", map[string]attrValue{"SellerName": {DataType: "String", StringValue: "Example Store"}}, "cd28f3b68aeee4b2eac9c66f2f694b58"},
		{"a number and a string", map[string]attrValue{
			"ordinal":  {DataType: "Number", StringValue: "1"},
			"category": {DataType: "String", StringValue: "test"},
		}, "d21ae90c49061e927f57df5f5d72be1f"},
	} {
		require.Equal(t, tc.want, attrsMD5(tc.attrs), tc.name)
	}
}
