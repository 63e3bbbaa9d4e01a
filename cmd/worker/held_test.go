package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/operator"
)

// TestHeldTables: sessions show lists the held messages (sequence, message id, size, held since)
// and the held dead letters, and says how many were left out; nothing for a store that holds
// no messages.
func TestHeldTables(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	dead := at.Add(time.Minute)
	tests := []struct {
		name string
		held *operator.HeldSummary
		want []string
	}{
		{name: "no held messages in this store", held: nil, want: nil},
		{name: "held and dead", held: &operator.HeldSummary{
			Messages: 3, Bytes: 300,
			Listed: []operator.HeldInfo{
				{Sequence: 4, MessageID: "m-4", BrokerSequence: 40, Size: 100, HeldAt: at},
				{Sequence: 5, Last: true, MessageID: "m-5", BrokerSequence: 50, Size: 120, HeldAt: at.Add(time.Second)},
			},
			DeadLetters: []operator.HeldInfo{{ID: 7, Sequence: 3, MessageID: "m-3", Size: 90, HeldAt: at,
				Reason: "HandlerFailed", Description: "handler bug\nat line 3", DeadAt: &dead}},
		}, want: []string{
			"HELD IN THE STATE STORE (3 messages, 300 bytes)",
			"SEQUENCE  LAST   SIZE  HELD SINCE            BROKER SEQ  MESSAGE ID",
			"4         false  100   2026-11-28T09:00:00Z  40          m-4",
			"5         true   120   2026-11-28T09:00:01Z  50          m-5",
			"(1 more not listed; --max-messages)",
			"HELD DEAD LETTERS (1)",
			"ID  SEQUENCE  REASON         DESCRIPTION            DEAD AT               SIZE  MESSAGE ID",
			"7   3         HandlerFailed  handler bug at line 3  2026-11-28T09:01:00Z  90    m-3",
		}},
		{name: "nothing held", held: &operator.HeldSummary{Listed: []operator.HeldInfo{}, DeadLetters: []operator.HeldInfo{}}, want: []string{
			"HELD IN THE STATE STORE (0 messages, 0 bytes)",
			"HELD DEAD LETTERS (0)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out strings.Builder
			require.NoError(t, heldTables(&out, tt.held))
			var got []string
			for _, line := range strings.Split(out.String(), "\n") {
				if line = strings.TrimRight(line, " "); line != "" {
					got = append(got, line)
				}
			}
			require.Equal(t, tt.want, got, "output:\n%s", out.String())
		})
	}
}

// TestDLQTexts_StateStore: dlq list prints the state store's dead letters with their session;
// dlq replay says how many copies came from the store.
func TestDLQTexts_StateStore(t *testing.T) {
	t.Parallel()
	dead := time.Date(2026, 11, 28, 9, 1, 0, 0, time.UTC)
	var out strings.Builder
	require.NoError(t, heldDeadTable(&out, []operator.HeldInfo{{ID: 7, SessionID: "s-1", Sequence: 3, MessageID: "m-3", Size: 90,
		Reason: "HandlerFailed", Description: "boom", DeadAt: &dead}}, true))
	require.Equal(t, "ID  SESSION  SEQUENCE  REASON         DESCRIPTION  DEAD AT               SIZE  MESSAGE ID\n"+
		"7   s-1      3         HandlerFailed  boom         2026-11-28T09:01:00Z  90    m-3\n", out.String())

	out.Reset()
	require.NoError(t, replayText(&out, &operator.DLQReplayResult{Target: "orders", Sessions: []operator.ReplayedSession{
		{SessionID: "s-1", Sequences: []int64{2, 4}, Sent: 2, Completed: 2, FromStore: 1},
	}}))
	require.Equal(t, "replayed s-1: sent 2 (sequences 2, 4), completed 2, 1 of them from the state store\n"+
		"2 copies of 1 sessions sent to orders\n", out.String())
}
