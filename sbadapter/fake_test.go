package sbadapter

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// fakeReceiver is an in-memory sessionReceiver for one session.
type fakeReceiver struct {
	mu          sync.Mutex
	id          string
	lockedUntil time.Time
	active      []*azservicebus.ReceivedMessage
	deferred    map[int64]*azservicebus.ReceivedMessage
	state       []byte
	settled     map[int64]string // broker sequence → "complete", "defer", ...
	dlReason    string
	dlDesc      string
	failWith    error // returned by every call except Close
	linkDown    bool  // ReceiveMessages returns nothing at once, as the SDK does after a link failure
	closeHangs  bool  // Close waits for its ctx to end, as on a connection that stopped answering
	// completeHangs makes CompleteMessage wait for its ctx to end and return its error, as the
	// SDK does while it sleeps before retrying a settlement the broker refused as busy.
	completeHangs bool
	// hangs, when set, makes CompleteMessage hang as completeHangs does for the messages it
	// names by broker sequence number.
	hangs map[int64]bool
	// sdkLockField mimics the SDK's SessionReceiver.lockedUntil: set when a call re-attaches the
	// link, read by LockedUntil, both without a lock (so -race flags concurrent use).
	sdkLockField *time.Time
	closed       bool
	deferredReq  [][]int64
	// calls counts the calls that reached the fake (Close and the read-only methods excepted);
	// failNext, when not empty, is returned by the next calls, one error each.
	calls    int
	failNext []error
	// receiveWaits records the TimeAfterFirstMessage of each receive (0: no options).
	receiveWaits []time.Duration
	// completeCtxs records the ctx of each CompleteMessage.
	completeCtxs []context.Context
}

// failure counts a call and returns the error it must fail with, if any. f.mu must be held.
func (f *fakeReceiver) failure() error {
	f.calls++
	if len(f.failNext) > 0 {
		err := f.failNext[0]
		f.failNext = f.failNext[1:]
		return err
	}
	return f.failWith
}

// callCount returns how many calls reached the fake.
func (f *fakeReceiver) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func newFakeReceiver(id string) *fakeReceiver {
	return &fakeReceiver{
		id:          id,
		lockedUntil: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		deferred:    map[int64]*azservicebus.ReceivedMessage{},
		settled:     map[int64]string{},
	}
}

func (f *fakeReceiver) SessionID() string { return f.id }

func (f *fakeReceiver) LockedUntil() time.Time {
	if f.sdkLockField != nil {
		return *f.sdkLockField
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lockedUntil
}

func (f *fakeReceiver) ReceiveMessages(ctx context.Context, max int, opts *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	f.mu.Lock()
	var wait time.Duration
	if opts != nil {
		wait = opts.TimeAfterFirstMessage
	}
	f.receiveWaits = append(f.receiveWaits, wait)
	if err := f.failure(); err != nil {
		defer f.mu.Unlock()
		return nil, err
	}
	if len(f.active) > 0 {
		defer f.mu.Unlock()
		n := min(max, len(f.active))
		out := f.active[:n]
		f.active = f.active[n:]
		return out, nil
	}
	if f.linkDown {
		f.mu.Unlock()
		return nil, nil
	}
	f.mu.Unlock()
	<-ctx.Done()
	return nil, ctx.Err()
}

func (f *fakeReceiver) ReceiveDeferredMessages(_ context.Context, seqs []int64, _ *azservicebus.ReceiveDeferredMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deferredReq = append(f.deferredReq, slices.Clone(seqs))
	if err := f.failure(); err != nil {
		return nil, err
	}
	var out []*azservicebus.ReceivedMessage
	for _, s := range seqs {
		m, ok := f.deferred[s]
		if !ok {
			return nil, &azservicebus.Error{Code: azservicebus.CodeNotFound}
		}
		out = append(out, m)
	}
	return out, nil
}

func (f *fakeReceiver) settle(m *azservicebus.ReceivedMessage, how string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failure(); err != nil {
		return err
	}
	f.settled[*m.SequenceNumber] = how
	if how == "defer" {
		f.deferred[*m.SequenceNumber] = m
	}
	return nil
}

func (f *fakeReceiver) CompleteMessage(ctx context.Context, m *azservicebus.ReceivedMessage, _ *azservicebus.CompleteMessageOptions) error {
	f.mu.Lock()
	hangs := f.completeHangs || f.hangs[*m.SequenceNumber]
	f.completeCtxs = append(f.completeCtxs, ctx)
	f.mu.Unlock()
	if hangs {
		<-ctx.Done()
		return ctx.Err()
	}
	return f.settle(m, "complete")
}

func (f *fakeReceiver) AbandonMessage(_ context.Context, m *azservicebus.ReceivedMessage, _ *azservicebus.AbandonMessageOptions) error {
	return f.settle(m, "abandon")
}

func (f *fakeReceiver) DeferMessage(_ context.Context, m *azservicebus.ReceivedMessage, _ *azservicebus.DeferMessageOptions) error {
	return f.settle(m, "defer")
}

func (f *fakeReceiver) DeadLetterMessage(_ context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.DeadLetterOptions) error {
	f.mu.Lock()
	if o != nil && o.Reason != nil {
		f.dlReason = *o.Reason
	}
	if o != nil && o.ErrorDescription != nil {
		f.dlDesc = *o.ErrorDescription
	}
	f.mu.Unlock()
	return f.settle(m, "deadletter")
}

func (f *fakeReceiver) RenewSessionLock(context.Context, *azservicebus.RenewSessionLockOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failure(); err != nil {
		return err
	}
	f.lockedUntil = time.Now().Add(time.Minute) // a fresh lock, as Service Bus grants
	return nil
}

func (f *fakeReceiver) GetSessionState(context.Context, *azservicebus.GetSessionStateOptions) ([]byte, error) {
	if f.sdkLockField != nil {
		*f.sdkLockField = time.Now().Add(time.Minute) // the link was re-attached
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failure(); err != nil {
		return nil, err
	}
	return f.state, nil
}

func (f *fakeReceiver) SetSessionState(_ context.Context, b []byte, _ *azservicebus.SetSessionStateOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failure(); err != nil {
		return err
	}
	f.state = slices.Clone(b)
	return nil
}

func (f *fakeReceiver) PeekMessages(_ context.Context, max int, o *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failure(); err != nil {
		return nil, err
	}
	var from int64
	if o != nil && o.FromSequenceNumber != nil {
		from = *o.FromSequenceNumber
	}
	var out []*azservicebus.ReceivedMessage
	for _, m := range f.active {
		if *m.SequenceNumber >= from && len(out) < max {
			out = append(out, m)
		}
	}
	return out, nil
}

func (f *fakeReceiver) Close(ctx context.Context) error {
	f.mu.Lock()
	if f.closeHangs {
		f.mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	defer f.mu.Unlock()
	if f.closed {
		return &azservicebus.Error{Code: azservicebus.CodeClosed}
	}
	f.closed = true
	return nil
}

func sbMsg(session string, brokerSeq int64, body string) *azservicebus.ReceivedMessage {
	enq := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	ct := "text/plain"
	var token [16]byte
	token[0], token[15] = byte(brokerSeq), byte(brokerSeq>>8)
	return &azservicebus.ReceivedMessage{
		LockToken:             token,
		MessageID:             "m" + body,
		SessionID:             &session,
		SequenceNumber:        &brokerSeq,
		DeliveryCount:         1,
		EnqueuedTime:          &enq,
		ContentType:           &ct,
		ApplicationProperties: map[string]any{"seq": int64(brokerSeq)},
		Body:                  []byte(body),
	}
}

// fakeAccepter hands out fake receivers.
type fakeAccepter struct {
	mu        sync.Mutex
	next      []*fakeReceiver
	byID      map[string]*fakeReceiver
	locked    map[string]bool
	err       error
	sessions  []string
	deadlines []bool
}

func (a *fakeAccepter) acceptNext(ctx context.Context) (sessionReceiver, error) {
	a.mu.Lock()
	_, has := ctx.Deadline()
	a.deadlines = append(a.deadlines, has)
	if a.err != nil {
		defer a.mu.Unlock()
		return nil, a.err
	}
	if len(a.next) > 0 {
		defer a.mu.Unlock()
		r := a.next[0]
		a.next = a.next[1:]
		return r, nil
	}
	a.mu.Unlock()
	<-ctx.Done()
	return nil, ctx.Err()
}

func (a *fakeAccepter) accept(_ context.Context, id string) (sessionReceiver, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return nil, a.err
	}
	if a.locked[id] {
		return nil, amqpErr(condSessionCannotBeLocked)
	}
	if r, ok := a.byID[id]; ok {
		return r, nil
	}
	return newFakeReceiver(id), nil
}

func (a *fakeAccepter) listSessions(_ context.Context, limit int, _ *time.Time) ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return nil, a.err
	}
	if limit > 0 && len(a.sessions) > limit {
		return a.sessions[:limit], nil
	}
	return a.sessions, nil
}
