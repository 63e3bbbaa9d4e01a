package publisher_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/publisher"
)

func TestValidateSessionID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		id      string
		kind    error  // besides ErrInvalidSessionID; nil when valid
		wantMsg string // part of the error message
	}{
		{name: "plain", id: "order-42"},
		{name: "128 multi-byte characters", id: strings.Repeat("é", 128)},
		{name: "spaces and symbols", id: "octocat/hello world/pull_request/#42"},
		{name: "empty", id: "", kind: publisher.ErrEmptySessionID, wantMsg: "it is empty"},
		{name: "129 characters", id: strings.Repeat("é", 129), kind: publisher.ErrSessionIDTooLong, wantMsg: "it is 129 characters"},
		{name: "tab", id: "a\tb", kind: publisher.ErrInvalidSessionID, wantMsg: "control character U+0009 at position 2"},
		{name: "newline at the end", id: "ab\n", kind: publisher.ErrInvalidSessionID, wantMsg: "U+000A at position 3"},
		{name: "NUL", id: "\x00", kind: publisher.ErrInvalidSessionID, wantMsg: "U+0000 at position 1"},
		{name: "DEL", id: "a\x7f", kind: publisher.ErrInvalidSessionID, wantMsg: "U+007F"},
		{name: "C1 control", id: "é\u0085", kind: publisher.ErrInvalidSessionID, wantMsg: "U+0085 at position 2"},
		{name: "invalid UTF-8", id: "a\xffb", kind: publisher.ErrInvalidSessionID, wantMsg: "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := publisher.ValidateSessionID(tt.id)
			if tt.kind == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, publisher.ErrInvalidSessionID)
			require.ErrorIs(t, err, tt.kind)
			require.ErrorContains(t, err, tt.wantMsg)
			var sErr *publisher.SessionIDError
			require.ErrorAs(t, err, &sErr)
			require.Equal(t, tt.id, sErr.ID)
		})
	}
	require.NotErrorIs(t, publisher.ValidateSessionID("a\tb"), publisher.ErrSessionIDTooLong)
}

func TestMessageID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "order-42/7", publisher.MessageID("order-42", 7))

	// 126 characters + "/" + "1" = 128 fits; "/10" does not.
	fits := strings.Repeat("é", 126)
	require.Equal(t, fits+"/1", publisher.MessageID(fits, 1))
	hashed := publisher.MessageID(fits, 10)
	require.Regexp(t, `^[0-9a-f]{64}/10$`, hashed)
	require.NotEqual(t, hashed, publisher.MessageID(strings.Repeat("é", 127), 10), "different sessions, different ids")
	require.LessOrEqual(t, utf8.RuneCountInString(publisher.MessageID(strings.Repeat("x", 128), 1<<62)), publisher.MaxMessageIDLength)
}

func TestPublishRefusesInvalidSessionIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	empty := publisher.Func(func(map[string]any) (string, bool, error) { return "", true, nil })
	tests := []struct {
		name     string
		strategy publisher.Strategy
		props    map[string]any
		kind     error
	}{
		{"a strategy computing an empty id", empty, nil, publisher.ErrEmptySessionID},
		{"a composite of one empty value", publisher.Composite{Properties: []string{"Key"}}, map[string]any{"Key": ""}, publisher.ErrEmptySessionID},
		{"None inside a Fallback", publisher.Fallback{publisher.Entity(), publisher.None{}}, map[string]any{}, publisher.ErrEmptySessionID},
		{"a control character", publisher.Composite{Properties: []string{"Key"}}, map[string]any{"Key": "line\nbreak"}, publisher.ErrInvalidSessionID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			counter := publisher.NewMemoryCounter()
			p, err := publisher.New(rec, &publisher.Config{Strategy: tt.strategy, Counter: counter})
			require.NoError(t, err)
			_, err = p.Publish(ctx, msg(tt.props), nil)
			require.ErrorIs(t, err, tt.kind)
			require.Empty(t, rec.sent, "nothing sent")
			require.Zero(t, counter.Sessions(), "no number handed out")
		})
	}
}
