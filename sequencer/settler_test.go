package sequencer

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// settlerSession is a Session for the settler's tests: it records the settlements in the order
// they are made, and a completion of a broker sequence listed in gate waits until the gate is
// closed (or returns the error listed in fail).
type settlerSession struct {
	mu    sync.Mutex
	calls []string
	gate  map[int64]chan struct{}
	fail  map[int64]error
	// started receives the broker sequence of each completion as it starts.
	started chan int64
}

func newSettlerSession() *settlerSession {
	return &settlerSession{gate: map[int64]chan struct{}{}, fail: map[int64]error{}, started: make(chan int64, 16)}
}

func (s *settlerSession) record(op string, m *Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, op+" "+strconv.FormatInt(m.BrokerSequence, 10))
}

func (s *settlerSession) recorded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func (s *settlerSession) ID() string             { return "s1" }
func (s *settlerSession) LockedUntil() time.Time { return time.Time{} }
func (s *settlerSession) Receive(context.Context, int) ([]*Message, error) {
	return nil, nil
}
func (s *settlerSession) ReceiveDeferred(context.Context, []int64) ([]*Message, error) {
	return nil, nil
}
func (s *settlerSession) Complete(_ context.Context, m *Message) error {
	s.started <- m.BrokerSequence
	s.mu.Lock()
	gate, err := s.gate[m.BrokerSequence], s.fail[m.BrokerSequence]
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if err != nil {
		return err
	}
	s.record("complete", m)
	return nil
}
func (s *settlerSession) Defer(_ context.Context, m *Message) error { s.record("defer", m); return nil }
func (s *settlerSession) DeadLetter(_ context.Context, m *Message, p DeadLetterParams) error {
	s.record("dead_letter("+p.Reason+": "+p.Description+")", m)
	return nil
}
func (s *settlerSession) Abandon(_ context.Context, m *Message) error {
	s.record("abandon", m)
	return nil
}
func (s *settlerSession) RenewLock(context.Context) (time.Time, error) { return time.Time{}, nil }
func (s *settlerSession) Close(context.Context) error                  { return nil }

type settlerBundle struct {
	sess   *settlerSession
	s      *settler
	ctx    context.Context
	events *[]Event
}

func setupSettler(t *testing.T, pending int) settlerBundle {
	t.Helper()
	var events []Event
	var mu sync.Mutex
	e, err := NewEngine(EngineConfig{Pipelining: Awaited, MaxPendingSettlements: pending}, EngineDeps{
		Store:   nopStore{},
		Handler: HandlerFunc(func(context.Context, *Message) error { return nil }),
		Observer: ObserverFunc(func(ev Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, ev)
		}),
	})
	require.NoError(t, err)
	sess := newSettlerSession()
	ctx, cancel := context.WithCancelCause(t.Context())
	t.Cleanup(func() { cancel(nil) })
	s := &settler{}
	s.init(ctx, cancel, e, sess)
	t.Cleanup(func() { _ = s.await() })
	return settlerBundle{sess: sess, s: s, ctx: ctx, events: &events}
}

func testMsg(seq, bs int64) *msg {
	return &msg{raw: &Message{BrokerSequence: bs}, seq: seq, bs: bs}
}

type nopStore struct{}

func (nopStore) Load(context.Context, LoadParams) (*State, int64, error) { return NewState(), 0, nil }
func (nopStore) Save(context.Context, SaveParams) (int64, error)         { return 1, nil }
func (nopStore) Delete(context.Context, DeleteParams) error              { return nil }

func TestSettlerBackgroundCompletionsAreBounded(t *testing.T) {
	t.Parallel()
	b := setupSettler(t, 2)
	release := make(chan struct{})
	b.sess.gate[1], b.sess.gate[2] = release, release
	require.NoError(t, b.s.completeLater(testMsg(1, 1), nil))
	require.NoError(t, b.s.completeLater(testMsg(2, 2), nil))
	<-b.sess.started
	<-b.sess.started
	third := make(chan error, 1)
	go func() { third <- b.s.completeLater(testMsg(3, 3), nil) }()
	select {
	case <-b.sess.started:
		t.Fatal("a third completion started while two were in flight")
	case <-third:
		t.Fatal("completeLater returned without a free slot")
	default:
	}
	close(release)
	require.NoError(t, <-third, "a slot frees once a completion finishes")
	require.NoError(t, b.s.await())
	require.ElementsMatch(t, []string{"complete 1", "complete 2", "complete 3"}, b.sess.recorded())
}

func TestSettlerSettlementWaitsForBackgroundCompletions(t *testing.T) {
	t.Parallel()
	b := setupSettler(t, 4)
	release := make(chan struct{})
	b.sess.gate[1] = release
	require.NoError(t, b.s.completeLater(testMsg(1, 1), nil))
	<-b.sess.started
	deferred := make(chan error, 1)
	go func() { deferred <- b.s.deferMsg(testMsg(5, 5)) }()
	close(release)
	require.NoError(t, <-deferred)
	require.Equal(t, []string{"complete 1", "defer 5"}, b.sess.recorded(), "a defer never overtakes a complete issued before it")
}

func TestSettlerKeepsTheFirstBackgroundError(t *testing.T) {
	t.Parallel()
	b := setupSettler(t, 4)
	first, second := errors.New("first"), errors.New("second")
	b.sess.fail[1], b.sess.fail[2] = first, second
	release := make(chan struct{})
	b.sess.gate[2] = release
	require.NoError(t, b.s.completeLater(testMsg(1, 1), nil))
	require.NoError(t, b.s.completeLater(testMsg(2, 2), nil))
	<-b.sess.started
	<-b.sess.started
	close(release)
	err := b.s.await()
	require.Error(t, err)
	require.True(t, errors.Is(err, first) || errors.Is(err, second))
	require.Equal(t, err, b.s.failure(), "the pipeline keeps its first error")
	require.Equal(t, err, b.s.completeLater(testMsg(3, 3), nil), "and reports it at the next completion")
	require.NoError(t, b.ctx.Err(), "an error other than a lost lock does not cancel the run")
}

func TestSettlerLostLock(t *testing.T) {
	t.Parallel()
	for _, pending := range []int{1, 4} {
		b := setupSettler(t, pending)
		b.sess.fail[1] = ErrLockLost
		err := b.s.completeLater(testMsg(1, 1), nil)
		if err == nil {
			err = b.s.await()
		}
		require.ErrorIs(t, err, ErrLockLost)
		require.True(t, b.s.lost.Load())
		require.ErrorIs(t, context.Cause(b.ctx), ErrLockLost, "a lost lock cancels the run")
		_, err = b.s.call(CallDefer, testMsg(2, 2), b.sess.Defer, b.s.e.clock.Now())
		require.ErrorIs(t, err, ErrLockLost)
		_, err = b.s.deadLetter(testMsg(2, 2), ReasonHandlerFailed, "x")
		require.ErrorIs(t, err, ErrLockLost)
		b.s.markLost()
		require.Empty(t, b.sess.recorded(), "nothing is settled once the lock is lost (pending %d)", pending)
		lost := 0
		for _, ev := range *b.events {
			if ev.Kind == EventLockLost {
				lost++
			}
		}
		require.Equal(t, 1, lost, "the loss is reported once")
	}
}

func TestSettlerAnchors(t *testing.T) {
	t.Parallel()
	b := setupSettler(t, 1)
	b.s.anchor(testMsg(3, 30), "", false)
	b.s.anchor(testMsg(4, 40), "poison", false)
	b.s.anchor(testMsg(5, 50), "", false)
	b.sess.fail[50] = errors.New("broker down")
	require.Error(t, b.s.settleAnchors())
	require.Equal(t, []string{"complete 30", "dead_letter(HandlerFailed: poison) 40"}, b.sess.recorded(), "in the order handled")
	require.Equal(t, map[int64]int64{4: 40}, b.s.settled, "a skipped anchor's SkippedPoison entry goes in the next save")
	require.Len(t, b.s.anchors, 1, "the anchor that failed stays for a later call")
	delete(b.sess.fail, 50)
	require.NoError(t, b.s.settleAnchors())
	require.Empty(t, b.s.anchors)
	require.Equal(t, "complete 50", b.sess.recorded()[2])
}
