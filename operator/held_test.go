package operator_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

// TestShow_ListsHeldMessages: Show lists what the state store holds for a session (sequence,
// message id, size, held since) and its held dead letters; with a store that holds no messages
// there is nothing to list.
func TestShow_ListsHeldMessages(t *testing.T) {
	t.Parallel()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			b := setup(t, store, nil)
			ctx := testCtx(t)
			hs, ok := b.store.(sequencer.HeldStore)
			if !ok {
				b.publish(t, "a", 3, 1)
				show, err := b.op.Show(ctx, operator.ShowParams{SessionID: "a"})
				require.NoError(t, err)
				require.Nil(t, show.Held, "the %s store holds no messages", store)
				return
			}
			sess := storetest.NewSession("a")
			st := sequencer.NewState()
			st.Next = 2
			heldAt := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
			var msgs []*sequencer.HeldMessage
			for seq := int64(2); seq <= 5; seq++ {
				m := storetest.SampleHeld(seq)
				m.HeldAt = heldAt.Add(time.Duration(seq) * time.Second)
				msgs = append(msgs, m)
			}
			msgs[3].IsLast = true
			res, err := hs.Hold(ctx, sequencer.HoldParams{Session: sess, State: st, Messages: msgs})
			require.NoError(t, err)
			parked := sequencer.NewState()
			parked.Next = 2
			parked.Parked = &sequencer.Parked{Sequence: 2, Reason: "handler bug", At: heldAt}
			_, err = hs.DeadLetterHeld(ctx, sequencer.DeadLetterHeldParams{Session: sess, State: parked, ExpectedVersion: res.Version,
				Sequence: 2, Reason: sequencer.ReasonHandlerFailed, Description: "handler bug", At: heldAt.Add(time.Minute)})
			require.NoError(t, err)

			show, err := b.op.Show(ctx, operator.ShowParams{SessionID: "a", MaxMessages: 2})
			require.NoError(t, err)
			require.NotNil(t, show.Held)
			require.Equal(t, 3, show.Held.Messages, "every held message is counted")
			require.Equal(t, 3*sequencer.HeldSize(storetest.SampleHeld(3)), show.Held.Bytes)
			require.Equal(t, []operator.HeldInfo{
				{Sequence: 3, MessageID: "msg-3", BrokerSequence: 1003, Size: sequencer.HeldSize(msgs[1]), HeldAt: msgs[1].HeldAt},
				{Sequence: 4, MessageID: "msg-4", BrokerSequence: 1004, Size: sequencer.HeldSize(msgs[2]), HeldAt: msgs[2].HeldAt},
			}, show.Held.Listed, "the first MaxMessages")
			require.Len(t, show.Held.DeadLetters, 1)
			d := show.Held.DeadLetters[0]
			require.Equal(t, int64(2), d.Sequence)
			require.Equal(t, sequencer.ReasonHandlerFailed, d.Reason)
			require.Equal(t, "handler bug", d.Description)
			require.NotZero(t, d.ID)
			require.True(t, heldAt.Add(time.Minute).Equal(*d.DeadAt))
			require.Equal(t, int64(2), show.Session.Parked.Sequence)
		})
	}
}

// TestDLQReplay_MergesTheStoresDeadLetters: a session with a dead letter at the broker (2) and
// one in the state store (4, a held message that turned poison) lists both, replays both in
// ascending order with the same command, and removes each after its copy was sent.
func TestDLQReplay_MergesTheStoresDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres", nil)
	ctx := testCtx(t)
	hs := b.store.(sequencer.HeldStore)
	b.park(t, "a", 3, 2) // 2 dead-lettered at the broker, 3 deferred, parked at 2

	// 4 was held in the store, then turned poison (the poison policy skip would pass it).
	st, v := b.state(t, "a")
	sess := storetest.NewSession("a")
	four := &sequencer.HeldMessage{Sequence: 4, IsLast: true, MessageID: "a/4", BrokerSequence: 99, ContentType: "text/plain",
		Body: []byte("a step 4"), Properties: map[string]any{"Sequence": int64(4), "IsLast": true, "Kind": "step"}}
	res, err := hs.Hold(ctx, sequencer.HoldParams{Session: sess, State: st, ExpectedVersion: v, Messages: []*sequencer.HeldMessage{four}})
	require.NoError(t, err)
	_, err = hs.DeadLetterHeld(ctx, sequencer.DeadLetterHeldParams{Session: sess, State: st, ExpectedVersion: res.Version,
		Sequence: 4, Reason: sequencer.ReasonHandlerFailed, Description: "handler bug"})
	require.NoError(t, err)

	list, err := b.op.DLQList(ctx, operator.DLQListParams{SessionID: "a"})
	require.NoError(t, err)
	require.Len(t, list.Messages, 1)
	require.Equal(t, int64(2), list.Messages[0].Sequence)
	require.Len(t, list.Held, 1)
	require.Equal(t, int64(4), list.Held[0].Sequence)
	require.Equal(t, sequencer.ReasonHandlerFailed, list.Held[0].Reason)
	other, err := b.op.DLQList(ctx, operator.DLQListParams{Reason: "InvalidSequence"})
	require.NoError(t, err)
	require.Empty(t, other.Held, "the reason filter applies to the store's dead letters")

	dry, err := b.op.DLQReplay(ctx, operator.DLQReplayParams{SessionID: "a", DryRun: true})
	require.NoError(t, err)
	require.Equal(t, []operator.ReplayedSession{{SessionID: "a", Sequences: []int64{2, 4}}}, dry.Sessions)

	rep, err := b.op.DLQReplay(ctx, operator.DLQReplayParams{SessionID: "a"})
	require.NoError(t, err)
	require.Equal(t, []operator.ReplayedSession{{SessionID: "a", Sequences: []int64{2, 4}, Sent: 2, Completed: 2, FromStore: 1}}, rep.Sessions)
	require.Empty(t, b.deadLetters(t))
	left, err := hs.HeldDeadLetters(ctx, sequencer.HeldDeadLettersParams{SessionID: "a"})
	require.NoError(t, err)
	require.Empty(t, left, "removed after its copy was sent")

	copies := b.drainSession(t, "a")
	require.Len(t, copies, 2)
	require.Equal(t, operator.ReplayMessageID("a/2", list.Messages[0].BrokerSequence), copies[0].MessageID, "the broker's dead letter first")
	c := copies[1]
	require.Equal(t, operator.ReplayMessageID("a/4", 99), c.MessageID)
	require.Equal(t, "a step 4", string(c.Body))
	require.Equal(t, "text/plain", *c.ContentType)
	require.Equal(t, int64(4), c.ApplicationProperties["Sequence"])
	require.Equal(t, true, c.ApplicationProperties["IsLast"])
	require.Equal(t, "orders", c.ApplicationProperties[operator.PropertyReplayedFromDLQ])
}

// TestSkip_SaysWhichHeldMessagesItGivesUp: a skip past sequences the state store holds removes
// them with the state's advance and lists them; those from the new next on stay held.
func TestSkip_SaysWhichHeldMessagesItGivesUp(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres", nil)
	ctx := testCtx(t)
	hs := b.store.(sequencer.HeldStore)
	st := sequencer.NewState()
	st.Next = 2
	var msgs []*sequencer.HeldMessage
	for _, seq := range []int64{3, 4, 6} {
		msgs = append(msgs, storetest.SampleHeld(seq))
	}
	_, err := hs.Hold(ctx, sequencer.HoldParams{Session: storetest.NewSession("a"), State: st, Messages: msgs})
	require.NoError(t, err)

	res, err := b.op.Skip(ctx, operator.SkipParams{SessionID: "a", To: 5})
	require.NoError(t, err)
	require.Equal(t, int64(2), res.SkippedFrom)
	require.Equal(t, int64(5), res.Next)
	require.Equal(t, []int64{3, 4}, res.DroppedHeld)
	left, err := hs.Held(ctx, sequencer.HeldParams{Session: storetest.NewSession("a")})
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, int64(6), left[0].Sequence)
}
