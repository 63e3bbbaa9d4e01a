package sbadapter

import (
	"cmp"
	"context"
	"slices"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

// rpcFailure stands for the SDK's error for a management answer it does not map to a Code
// (its type is internal to the SDK): what a partitioned session entity answers to a request
// without session-id, once the SDK's retries are spent.
type rpcFailure struct{ code int }

func (e rpcFailure) Error() string {
	return "rpc: failed, status code 500 and description: The service was unable to process the request; please retry the operation."
}
func (e rpcFailure) RPCCode() int { return e.code }

// peekingFake is a fakeReceiver whose peek shows deferred messages as well as active ones, as
// Service Bus's does, and whose receive-deferred answers not found for the numbers in notFound
// even when the message is there.
type peekingFake struct {
	*fakeReceiver
	notFound map[int64]bool
	peeks    int
}

func (f *peekingFake) ReceiveDeferredMessages(_ context.Context, seqs []int64, _ *azservicebus.ReceiveDeferredMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deferredReq = append(f.deferredReq, slices.Clone(seqs))
	if err := f.failure(); err != nil {
		return nil, err
	}
	var out []*azservicebus.ReceivedMessage
	for _, s := range seqs {
		m, ok := f.deferred[s]
		if !ok || f.notFound[s] {
			return nil, &azservicebus.Error{Code: azservicebus.CodeNotFound}
		}
		out = append(out, m)
	}
	return out, nil
}

func (f *peekingFake) PeekMessages(_ context.Context, max int, o *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peeks++
	if err := f.failure(); err != nil {
		return nil, err
	}
	all := slices.Concat(f.active, slices.Collect(func(yield func(*azservicebus.ReceivedMessage) bool) {
		for _, m := range f.deferred {
			d := *m
			d.State = azservicebus.MessageStateDeferred
			if !yield(&d) {
				return
			}
		}
	}))
	slices.SortFunc(all, func(a, b *azservicebus.ReceivedMessage) int { return cmp.Compare(*a.SequenceNumber, *b.SequenceNumber) })
	var out []*azservicebus.ReceivedMessage
	for _, m := range all {
		if *m.SequenceNumber >= *o.FromSequenceNumber && len(out) < max {
			out = append(out, m)
		}
	}
	return out, nil
}

func TestReceiveDeferredLeavesOutOnlyWhatIsConfirmedNotDeferred(t *testing.T) {
	t.Parallel()
	notFound := &azservicebus.Error{Code: azservicebus.CodeNotFound}
	tests := []struct {
		name     string
		deferred []int64
		active   []int64 // active at the broker (a deferral that did not land)
		notFound []int64 // answered not found although deferred
		failNext []error // the fake's next answers, one a call (receive-deferred or peek)
		ask      []int64
		want     []int64 // broker sequences returned; nil with wantErr
		wantErr  []string
		// wantNotIs are sentinels the error must not carry (it is no verdict on the message).
		wantNotIs []error
		wantPeeks int
	}{
		{name: "all there", deferred: []int64{5, 7}, ask: []int64{5, 7}, want: []int64{5, 7}},
		{name: "one gone, confirmed by a peek that finds nothing", deferred: []int64{5, 7}, ask: []int64{5, 6, 7},
			want: []int64{5, 7}, wantPeeks: 1},
		{name: "one gone, confirmed by a peek that finds a later message", deferred: []int64{5, 8}, ask: []int64{6, 8},
			want: []int64{8}, wantPeeks: 1},
		{name: "not found, and the peek shows it active: it comes back through a receive", deferred: []int64{5}, active: []int64{6},
			ask: []int64{5, 6}, want: []int64{5}, wantPeeks: 1},
		{name: "not found, but the peek shows it deferred", deferred: []int64{5, 6}, notFound: []int64{6}, ask: []int64{5, 6},
			wantErr:   []string{`receive deferred 6 session "s1"`, "a peek shows the message still deferred at that number"},
			wantNotIs: []error{sequencer.ErrNotFound}, wantPeeks: 1},
		{name: "not found, and the peek fails", deferred: []int64{5}, ask: []int64{5, 6},
			failNext:  []error{notFound, nil, notFound, rpcFailure{500}},
			wantErr:   []string{`receive deferred 6 session "s1"`, "the peek to confirm it failed", "status code 500"},
			wantNotIs: []error{sequencer.ErrNotFound}, wantPeeks: 1},
		{name: "refused", deferred: []int64{5}, ask: []int64{5}, failNext: []error{rpcFailure{500}},
			wantErr: []string{`receive deferred session "s1"`, "status code 500", "The service was unable to process the request"}},
		{name: "not found together, refused alone", deferred: []int64{5}, ask: []int64{5, 6},
			failNext: []error{notFound, rpcFailure{500}},
			wantErr:  []string{`receive deferred 5 session "s1"`, "status code 500"}},
		{name: "lock lost", deferred: []int64{5}, ask: []int64{5},
			failNext: []error{&azservicebus.Error{Code: azservicebus.CodeLockLost}},
			wantErr:  []string{`receive deferred session "s1"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &peekingFake{fakeReceiver: newFakeReceiver("s1"), notFound: map[int64]bool{}}
			for _, bs := range tt.deferred {
				f.deferred[bs] = sbMsg("s1", bs, "m")
			}
			for _, bs := range tt.notFound {
				f.notFound[bs] = true
			}
			for _, bs := range tt.active {
				f.active = append(f.active, sbMsg("s1", bs, "m"))
			}
			f.failNext = tt.failNext
			s := newSession(f, discard())
			before := DeferredFetchFailures()

			got, err := s.ReceiveDeferred(t.Context(), tt.ask)
			require.Equal(t, tt.wantPeeks, f.peeks, "peeks")
			if tt.wantErr != nil {
				require.Error(t, err)
				require.Nil(t, got, "nothing is handed over, nothing left out")
				for _, w := range tt.wantErr {
					require.ErrorContains(t, err, w)
				}
				for _, sentinel := range tt.wantNotIs {
					require.NotErrorIs(t, err, sentinel)
				}
				require.Greater(t, DeferredFetchFailures(), before, "counted")
				return
			}
			require.NoError(t, err)
			var bss []int64
			for _, m := range got {
				bss = append(bss, m.BrokerSequence)
			}
			require.Equal(t, tt.want, bss)
		})
	}
}

func TestReceiveDeferredLockLostMarksTheSession(t *testing.T) {
	t.Parallel()
	f := &peekingFake{fakeReceiver: newFakeReceiver("s1")}
	f.failNext = []error{&azservicebus.Error{Code: azservicebus.CodeLockLost}}
	s := newSession(f, discard())
	_, err := s.ReceiveDeferred(t.Context(), []int64{5})
	require.ErrorIs(t, err, sequencer.ErrLockLost)
	_, err = s.ReceiveDeferred(t.Context(), []int64{5})
	require.ErrorIs(t, err, sequencer.ErrLockLost, "no later call reaches the broker")
	require.Equal(t, 1, f.callCount())
}
