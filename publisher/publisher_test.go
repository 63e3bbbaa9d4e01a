package publisher_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/publisher"
	"github.com/seqbus/seqbus/sqlrule"
	"github.com/seqbus/seqbus/topology"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStrategies(t *testing.T) {
	t.Parallel()
	ghPR := map[string]any{"Owner": "microsoft", "Repo": "vscode", "EntityType": "pull_request", "EntityId": int64(1234)}
	push := map[string]any{"Owner": "github", "Repo": "docs"}
	lower := publisher.Func(func(p map[string]any) (string, bool, error) {
		owner, ok := p["Owner"].(string)
		return strings.ToLower(owner), ok, nil
	})
	tests := []struct {
		name     string
		strategy publisher.Strategy
		props    map[string]any
		want     string
		wantOK   bool
	}{
		{"gjura", publisher.Gjura(), map[string]any{"SessionName": "checkout", "TransactionId": "t1", "InstanceId": int32(7)}, "checkout_t1_7", true},
		{"gjura missing", publisher.Gjura(), map[string]any{"SessionName": "checkout"}, "", false},
		{"property names are case-insensitive", publisher.Gjura(), map[string]any{"sessionname": "s", "TRANSACTIONID": "t", "InstanceId": "i"}, "s_t_i", true},
		{"nil value counts as missing", publisher.Gjura(), map[string]any{"SessionName": "s", "TransactionId": nil, "InstanceId": "i"}, "", false},
		{"entity", publisher.Entity(), ghPR, "microsoft/vscode/pull_request/1234", true},
		{"repository", publisher.Repository(), push, "github/docs/repository", true},
		{"fallback first", publisher.Fallback{publisher.Entity(), publisher.Repository()}, ghPR, "microsoft/vscode/pull_request/1234", true},
		{"fallback second", publisher.Fallback{publisher.Entity(), publisher.Repository()}, push, "github/docs/repository", true},
		{"fallback none applies", publisher.Fallback{publisher.Entity(), publisher.Repository()}, map[string]any{"Owner": "x"}, "", false},
		{"none", publisher.None{}, nil, "", true},
		{"func", lower, map[string]any{"Owner": "OctoCat"}, "octocat", true},
		{"values formatted as SQL does", publisher.Composite{Properties: []string{"a", "b", "c", "d"}, Separator: "-"},
			map[string]any{"a": true, "b": 1.5, "c": 1e20, "d": 0.00001}, "True-1.5-1E+20-1E-05", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, ok, err := tt.strategy.SessionID(tt.props)
			require.NoError(t, err)
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, id)
		})
	}
}

// TestPublisherMatchesTheForwardingAction checks that the session id the publisher sets
// is the one the topology's SQL action assigns when the message is forwarded.
func TestPublisherMatchesTheForwardingAction(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key      string
		strategy publisher.Strategy
		props    map[string]any
	}{
		{"{strategy: composite, properties: [SessionName, TransactionId, InstanceId]}", publisher.Gjura(),
			map[string]any{"SessionName": "s", "TransactionId": int64(42), "InstanceId": 2.5}},
		{"{strategy: entity}", publisher.Entity(),
			map[string]any{"Owner": "o", "Repo": "r", "EntityType": "issue", "EntityId": int64(9)}},
		{"{strategy: repository}", publisher.Repository(), map[string]any{"Owner": "o", "Repo": "r", "Flag": true}},
		{"{strategy: composite, separator: '|', properties: [A, B]}", publisher.Composite{Properties: []string{"A", "B"}, Separator: "|"},
			map[string]any{"A": true, "B": 1e-7}},
	}
	for _, tt := range tests {
		ns, _, err := topology.Load("t.yaml", []byte("sequenced:\n  - name: s\n    sources: [in]\n    sessionId: "+tt.key+"\n"))
		require.NoError(t, err)
		rule := ns.Topic("in").Subscription("s-fwd").Rules[0]
		action, err := sqlrule.CompileAction(rule.Action, nil)
		require.NoError(t, err)
		m := &amqp.Message{Properties: &amqp.MessageProperties{}, ApplicationProperties: tt.props}
		require.NoError(t, action.Apply(m))

		id, ok, err := tt.strategy.SessionID(tt.props)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, *m.Properties.GroupID, id, tt.key)
	}
}

// recorder is a Sender that keeps what it is given and can fail.
type recorder struct {
	mu   sync.Mutex
	sent []*azservicebus.Message
	fail error
}

func (r *recorder) SendMessage(_ context.Context, m *azservicebus.Message, _ *azservicebus.SendMessageOptions) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		err := r.fail
		r.fail = nil
		return err
	}
	r.sent = append(r.sent, m)
	return nil
}

func msg(props map[string]any) *azservicebus.Message {
	return &azservicebus.Message{Body: []byte("x"), ApplicationProperties: props}
}

func TestSequencePerSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recorder{}
	counter := publisher.NewMemoryCounter()
	p, err := publisher.New(rec, &publisher.Config{Strategy: publisher.Repository(), Counter: counter})
	require.NoError(t, err)

	a := map[string]any{"Owner": "o", "Repo": "a"}
	b := map[string]any{"Owner": "o", "Repo": "b"}
	clone := func(m map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	var got []publisher.Published
	for _, props := range []map[string]any{a, b, a, a, b} {
		res, err := p.Publish(ctx, msg(clone(props)), nil)
		require.NoError(t, err)
		got = append(got, res)
	}
	require.Equal(t, []publisher.Published{
		{"o/a/repository", 1}, {"o/b/repository", 1}, {"o/a/repository", 2}, {"o/a/repository", 3}, {"o/b/repository", 2},
	}, got)
	for i, m := range rec.sent {
		require.Equal(t, got[i].SessionID, *m.SessionID)
		require.Equal(t, got[i].Sequence, m.ApplicationProperties["Sequence"])
		require.NotContains(t, m.ApplicationProperties, "IsLast")
	}

	// The last message is marked, and the session forgotten.
	res, err := p.Publish(ctx, msg(clone(a)), &publisher.PublishOptions{Last: true})
	require.NoError(t, err)
	require.Equal(t, int64(4), res.Sequence)
	require.Equal(t, true, rec.sent[len(rec.sent)-1].ApplicationProperties["IsLast"])
	require.Equal(t, 1, counter.Sessions())
}

func TestRetryKeepsTheSequence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	boom := errors.New("connection lost")
	rec := &recorder{fail: boom}
	p, err := publisher.New(rec, &publisher.Config{Strategy: publisher.Gjura()})
	require.NoError(t, err)

	m := msg(map[string]any{"SessionName": "s", "TransactionId": "t", "InstanceId": "i"})
	_, err = p.Publish(ctx, m, nil)
	require.ErrorIs(t, err, boom)
	res, err := p.Publish(ctx, m, nil) // the caller retries the same message
	require.NoError(t, err)
	require.Equal(t, publisher.Published{SessionID: "s_t_i", Sequence: 1}, res)
	res, err = p.Publish(ctx, msg(map[string]any{"SessionName": "s", "TransactionId": "t", "InstanceId": "i"}), nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Sequence, "no gap after the retried send")
}

func TestPublishRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recorder{}
	p, err := publisher.New(rec, &publisher.Config{Strategy: publisher.Gjura()})
	require.NoError(t, err)

	_, err = p.Publish(ctx, msg(map[string]any{"SessionName": "s"}), nil)
	require.ErrorIs(t, err, publisher.ErrNoSessionKey)
	require.Contains(t, err.Error(), "[SessionName]")

	long := strings.Repeat("x", 125) // 125 + len("_t_i") = 129
	_, err = p.Publish(ctx, msg(map[string]any{"SessionName": long, "TransactionId": "t", "InstanceId": "i"}), nil)
	require.ErrorIs(t, err, publisher.ErrSessionIDTooLong)

	_, err = p.Publish(ctx, msg(map[string]any{"SessionName": []byte("x"), "TransactionId": "t", "InstanceId": "i"}), nil)
	require.ErrorContains(t, err, "cannot use a []uint8 in a session id")
	require.Empty(t, rec.sent)

	_, err = publisher.New(rec, nil)
	require.ErrorIs(t, err, publisher.ErrNoStrategy)
}

func TestNoneSendsWithoutSessionOrSequence(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	p, err := publisher.New(rec, &publisher.Config{Strategy: publisher.None{}})
	require.NoError(t, err)
	res, err := p.Publish(context.Background(), msg(nil), &publisher.PublishOptions{Last: true})
	require.NoError(t, err)
	require.Equal(t, publisher.Published{}, res)
	require.Nil(t, rec.sent[0].SessionID)
	require.Empty(t, rec.sent[0].ApplicationProperties)
}

// TestOwnSessionIDAndSequenceAreKept: a message that already carries its session id is
// sent under it even when it lacks the strategy's properties, and a Sequence the caller
// set as a plain Go int is neither replaced nor counted.
func TestOwnSessionIDAndSequenceAreKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recorder{}
	p, err := publisher.New(rec, &publisher.Config{Strategy: publisher.Gjura()})
	require.NoError(t, err)

	own := "order-42"
	m := msg(map[string]any{"Kind": "created"})
	m.SessionID = &own
	res, err := p.Publish(ctx, m, nil)
	require.NoError(t, err)
	require.Equal(t, publisher.Published{SessionID: "order-42", Sequence: 1}, res)

	m = msg(map[string]any{"Sequence": 7})
	m.SessionID = &own
	res, err = p.Publish(ctx, m, nil)
	require.NoError(t, err)
	require.Equal(t, publisher.Published{SessionID: "order-42", Sequence: 7}, res)
	require.Equal(t, 7, rec.sent[1].ApplicationProperties["Sequence"])

	m = msg(nil)
	m.SessionID = &own
	res, err = p.Publish(ctx, m, nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Sequence, "the caller's own number did not use up one of the counter's")
}

func TestPublishSetsTheMessageID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recorder{}
	p, err := publisher.New(rec, &publisher.Config{Strategy: publisher.Gjura()})
	require.NoError(t, err)
	props := func() map[string]any {
		return map[string]any{"SessionName": "s", "TransactionId": "t", "InstanceId": "i"}
	}

	_, err = p.Publish(ctx, msg(props()), nil)
	require.NoError(t, err)
	require.Equal(t, "s_t_i/1", *rec.sent[0].MessageID)

	own := "mine"
	m := msg(props())
	m.MessageID = &own
	_, err = p.Publish(ctx, m, nil)
	require.NoError(t, err)
	require.Equal(t, "mine", *rec.sent[1].MessageID, "a MessageId the caller set is kept")
}

// lastCounter is a LastCounter that records its calls.
type lastCounter struct {
	*publisher.MemoryCounter
	mu    sync.Mutex
	calls []string
}

func (c *lastCounter) record(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, s)
}

func (c *lastCounter) Next(ctx context.Context, id string) (int64, error) {
	c.record("next " + id)
	return c.MemoryCounter.Next(ctx, id)
}

func (c *lastCounter) NextLast(ctx context.Context, id string) (int64, error) {
	c.record("last " + id)
	return c.MemoryCounter.Next(ctx, id)
}

func (c *lastCounter) End(ctx context.Context, id string) error {
	c.record("end " + id)
	return c.MemoryCounter.End(ctx, id)
}

// TestLastCounterEndsWithTheLastNumber: a LastCounter numbers the last message with
// NextLast and is not told End afterwards; a plain Counter is told End after the send.
func TestLastCounterEndsWithTheLastNumber(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &lastCounter{MemoryCounter: publisher.NewMemoryCounter()}
	p, err := publisher.New(&recorder{}, &publisher.Config{Strategy: publisher.Gjura(), Counter: c})
	require.NoError(t, err)
	props := func() map[string]any {
		return map[string]any{"SessionName": "s", "TransactionId": "t", "InstanceId": "i"}
	}
	_, err = p.Publish(ctx, msg(props()), nil)
	require.NoError(t, err)
	res, err := p.Publish(ctx, msg(props()), &publisher.PublishOptions{Last: true})
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Sequence)
	require.Equal(t, []string{"next s_t_i", "last s_t_i"}, c.calls)

	// A last message the caller numbered allocates nothing, so the counter is told End.
	m := msg(props())
	m.ApplicationProperties["Sequence"] = int64(3)
	_, err = p.Publish(ctx, m, &publisher.PublishOptions{Last: true})
	require.NoError(t, err)
	require.Equal(t, []string{"next s_t_i", "last s_t_i", "end s_t_i"}, c.calls)
}

func TestPublishBatchWithoutBatchSender(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recorder{}
	p, err := publisher.New(rec, &publisher.Config{Strategy: publisher.Repository()})
	require.NoError(t, err)
	a := func() map[string]any { return map[string]any{"Owner": "o", "Repo": "a"} }
	b := func() map[string]any { return map[string]any{"Owner": "o", "Repo": "b"} }
	res, err := p.PublishBatch(ctx, []publisher.BatchItem{
		{Message: msg(a())}, {Message: msg(b())}, {Message: msg(a())}, {Message: msg(b()), Last: true}, {Message: msg(a())},
	}, nil)
	require.NoError(t, err)
	require.Equal(t, []publisher.Published{
		{"o/a/repository", 1}, {"o/b/repository", 1}, {"o/a/repository", 2}, {"o/b/repository", 2}, {"o/a/repository", 3},
	}, res)
	// Grouped per session in order of first appearance, each in its own order.
	var got []string
	for _, m := range rec.sent {
		got = append(got, *m.MessageID)
	}
	require.Equal(t, []string{"o/a/repository/1", "o/a/repository/2", "o/a/repository/3", "o/b/repository/1", "o/b/repository/2"}, got)
	require.Equal(t, true, rec.sent[4].ApplicationProperties["IsLast"])

	// An item without a session id fails the whole batch before anything is numbered.
	_, err = p.PublishBatch(ctx, []publisher.BatchItem{{Message: msg(a())}, {Message: msg(map[string]any{"Owner": "o"})}}, nil)
	require.ErrorIs(t, err, publisher.ErrNoSessionKey)
	require.ErrorContains(t, err, "batch item 1")
	require.Len(t, rec.sent, 5)
}
