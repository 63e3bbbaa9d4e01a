package sqlrule

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCorrelationFilter(t *testing.T) {
	t.Parallel()
	app := map[string]any{"color": "blue", "n": int32(5), "f": 1.5, "nil": nil}
	tests := []struct {
		name string
		f    CorrelationFilter
		want bool
	}{
		{"correlation id (uuid rendered)", CorrelationFilter{CorrelationID: "01020000-0000-0000-0000-000000000000"}, true},
		{"message id", CorrelationFilter{MessageID: "msg-1"}, true},
		{"all system fields", CorrelationFilter{To: "Store5", ReplyTo: "replies", Subject: "Electronics", SessionID: "session-1",
			ReplyToSessionID: "reply-session", ContentType: "application/json"}, true},
		{"one field differs", CorrelationFilter{To: "Store5", Subject: "electronics"}, false},
		{"properties", CorrelationFilter{Subject: "Electronics", Properties: map[string]any{"color": "blue", "n": 5, "f": 1.5}}, true},
		{"int matches float", CorrelationFilter{Properties: map[string]any{"n": 5.0}}, true},
		{"property type differs", CorrelationFilter{Properties: map[string]any{"n": "5"}}, false},
		{"property missing", CorrelationFilter{Properties: map[string]any{"size": 1}}, false},
		{"property names are exact", CorrelationFilter{Properties: map[string]any{"Color": "blue"}}, false},
		{"null matches null", CorrelationFilter{Properties: map[string]any{"nil": nil}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, tt.f.Validate())
			got, err := tt.f.Match(testMessage(app))
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	require.ErrorIs(t, CorrelationFilter{}.Validate(), ErrEmptyCorrelationFilter)
}
