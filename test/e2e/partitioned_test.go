package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/sequencer"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
	"github.com/seqbus/seqbus/sessionstate/storetest"
	"github.com/seqbus/seqbus/worker"
)

// brokerRefusal starts the text the emulator answers, as the service did, a $management request
// on a session's messages that lacks the session-id the entity needs.
const brokerRefusal = "The service was unable to process the request; please retry the operation."

// newFixtureRule starts a test's emulator with the session queue queueName of props (a short
// lock, 10 deliveries), whose session entities need session-id on $management requests on their
// messages as rule says.
func newFixtureRule(t *testing.T, props broker.EntityProperties, rule broker.SessionIDRule) *fixture {
	t.Helper()
	props.RequiresSession, props.LockDuration, props.MaxDeliveryCount = true, lockDuration, 10
	return &fixture{srv: emulatortest.Start(t, &emulatortest.Options{
		Queues:        map[string]broker.EntityProperties{queueName: props},
		SessionIDRule: rule,
	})}
}

// sessionIDCases are the session queues whose broker refuses the SDK's fetch of deferred
// messages: a partitioned one (SEQBUS_DEFER_ON_PARTITIONED lets the worker start there), and a
// plain one on the strict emulator.
var sessionIDCases = []struct {
	name  string
	props broker.EntityProperties
	rule  broker.SessionIDRule
	env   []string
}{
	{name: "partitioned queue", props: broker.EntityProperties{EnablePartitioning: true}, rule: broker.SessionIDOnPartitioned,
		env: []string{"SEQBUS_DEFER_ON_PARTITIONED=true"}},
	{name: "plain queue, strict emulator", rule: broker.SessionIDAlways},
}

// A worker deferring early messages where the broker refuses to hand them back: each session is
// handled in order up to its first deferred sequence and no further; every refused fetch ends
// its run with an error naming the session and the broker's answer, counted on /metrics; and
// after the worker stops, every message not handled is still at the broker, nothing
// dead-lettered. The stored state is at the first sequence not handled, its index names exactly
// the messages deferred at the broker, and a handled message the failed run did not complete is
// below it (a duplicate when it comes back).
func TestDeferralRefusedLosesNothing(t *testing.T) {
	t.Parallel()
	const sessions, messages = 4, 20
	for _, tt := range sessionIDCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixtureRule(t, tt.props, tt.rule)
			f.publish(t, demo.Plan(sessions, messages, 0, 53))
			ids := sessionIDs(sessions)

			env := f.baseEnv(append([]string{
				"SEQBUS_STATE_STORE=servicebus",
				"SEQBUS_EARLY_MESSAGES=defer",
				// No reorder window and one message per receive: a message that is not its
				// session's next is deferred at once, not sorted within a receive's batch.
				"SEQBUS_REORDER_WINDOW=0",
				"SEQBUS_PREFETCH=1",
				"SEQBUS_MAX_CONCURRENT_SESSIONS=4",
			}, tt.env...)...)
			w := startWorker(t, "worker", env)
			addr := w.httpAddr(t)

			// Every session reaches a deferred sequence (no session of the plan arrives in order),
			// so each one's fetch is refused at least once.
			waitFor(t, waitLong, func() bool {
				return w.exited() || len(fetchRefusals(t, w, ids)) == sessions
			}, func() string {
				return fmt.Sprintf("refused fetches logged for %v; %s", fetchRefusals(t, w, ids), progress(t, w))
			})
			failures := metricValue(scrape(t, addr), "seqbus_deferred_fetch_failures_total", nil)
			require.GreaterOrEqual(t, failures, float64(sessions), "seqbus_deferred_fetch_failures_total")
			w.stop(t)

			got := bySession(w.records(t))
			total := 0
			for _, id := range ids {
				require.Equal(t, oneToN(1, int64(len(got[id]))), got[id], "session %s: a prefix of its sequences, in order, each once", id)
				require.Less(t, len(got[id]), messages, "session %s stopped at a deferred sequence", id)
				total += len(got[id])
			}
			require.Equal(t, total, handledCount(t, w), "handler calls reported by the worker")

			require.Zero(t, f.counts(t).DeadLetter, "nothing is dead-lettered")
			left := f.remaining(t, sessions*messages)
			deferred := 0
			for _, id := range ids {
				st := f.storedState(t, id)
				handled := int64(len(got[id]))
				require.Equal(t, handled+1, st.Next, "session %s: the stored state is past the messages handled, no further", id)
				for seq := int64(1); seq <= messages; seq++ {
					m, at := left[id][seq]
					if seq > handled {
						require.True(t, at, "session %s sequence %d, not handled, is at the broker", id, seq)
					} else if at {
						// The failed run did not complete it; below the stored Next, it is a
						// duplicate when it comes back.
						require.Equal(t, broker.MessageStateActive, m.state, "session %s sequence %d, handled", id, seq)
					}
					brokerSeq, indexed := st.Deferred[seq]
					if at && m.state == broker.MessageStateDeferred {
						require.True(t, indexed, "session %s sequence %d is deferred at the broker and in the stored state's index", id, seq)
						require.Equal(t, m.brokerSeq, brokerSeq, "session %s sequence %d: the index names the deferred message", id, seq)
						deferred++
					} else {
						require.False(t, indexed, "session %s sequence %d is indexed as deferred but is not deferred at the broker (%+v)", id, seq, m)
					}
				}
			}
			require.Positive(t, deferred, "early messages were deferred and stay deferred")
		})
	}
}

// fetchRefusals returns the sessions among ids for which the worker logged a run ended by the
// broker's refusal of a deferred fetch: the error names the fetch, the session and the broker's
// answer.
func fetchRefusals(t *testing.T, p *proc, ids []string) []string {
	t.Helper()
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		var rec struct {
			Msg       string `json:"msg"`
			SessionID string `json:"session_id"`
			Error     string `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Msg != "sequencer: session released after an error" {
			continue
		}
		if strings.Contains(rec.Error, fmt.Sprintf("receive deferred session %q", rec.SessionID)) && strings.Contains(rec.Error, brokerRefusal) {
			seen[rec.SessionID] = true
		}
	}
	var out []string
	for _, id := range ids {
		if seen[id] {
			out = append(out, id)
		}
	}
	return out
}

// brokerMessage is what remaining reports of one message at the broker.
type brokerMessage struct {
	state     broker.MessageState
	brokerSeq int64
}

// remaining reads every message in the queue (at most max) through the broker, by session and
// the Sequence application property; a sequence at the broker twice fails the test.
func (f *fixture) remaining(t *testing.T, max int) map[string]map[int64]brokerMessage {
	t.Helper()
	q, err := f.srv.Broker().Lookup(queueName)
	require.NoError(t, err)
	out := map[string]map[int64]brokerMessage{}
	msgs := q.Peek(0, max+1, "")
	require.LessOrEqual(t, len(msgs), max, "more messages at the broker than were sent")
	for _, m := range msgs {
		require.NotNil(t, m.Properties, "a message without properties")
		require.NotNil(t, m.Properties.GroupID, "a message without a session")
		sid := *m.Properties.GroupID
		seq, ok := m.ApplicationProperties["Sequence"].(int64)
		require.True(t, ok, "session %s: a message without a Sequence: %v", sid, m.ApplicationProperties)
		state, ok := m.Annotations[broker.AnnotationMessageState].(int64)
		require.True(t, ok, "session %s sequence %d: no message state: %v", sid, seq, m.Annotations)
		brokerSeq, ok := m.Annotations[broker.AnnotationSequenceNumber].(int64)
		require.True(t, ok, "session %s sequence %d: no sequence number: %v", sid, seq, m.Annotations)
		if out[sid] == nil {
			out[sid] = map[int64]brokerMessage{}
		}
		_, dup := out[sid][seq]
		require.False(t, dup, "session %s sequence %d is at the broker twice", sid, seq)
		out[sid][seq] = brokerMessage{state: broker.MessageState(state), brokerSeq: brokerSeq}
	}
	return out
}

// `worker doctor` where the broker refuses the fetch of a deferred message: the round trip's
// receive-deferred step fails with the broker's answer, the steps after it are skipped, the
// scratch queue is deleted all the same, and the exit code is 1.
func TestDoctorDeferralRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range sessionIDCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixtureRule(t, tt.props, tt.rule)
			r := runCLI(t, f.baseEnv(tt.env...), "doctor", "--json")
			require.Equal(t, 1, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			var rep worker.DoctorReport
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)

			checks := map[string]worker.DoctorCheck{}
			var order []string
			for _, c := range rep.Checks {
				checks[c.Check] = c
				order = append(order, c.Check)
			}
			for _, step := range []string{"send", "accept a session", "receive", "defer"} {
				require.Equal(t, worker.DoctorPass, checks["round trip: "+step].Result, "round trip: %s: %+v", step, checks["round trip: "+step])
			}
			fetch, ok := checks["round trip: receive deferred"]
			require.True(t, ok, "the report names the receive-deferred step: %v", order)
			require.Equal(t, worker.DoctorFail, fetch.Result, "%+v", fetch)
			require.Contains(t, fetch.Detail, brokerRefusal)
			if tt.props.EnablePartitioning {
				require.Equal(t, worker.DoctorWarn, checks["entity partitioning"].Result, "%+v", checks["entity partitioning"])
				require.Contains(t, fetch.Detail, "SEQBUS_DEFER_ON_PARTITIONED", "the detail says what the failure means here")
			}
			require.Equal(t, worker.DoctorSkip, checks["round trip: complete"].Result, "%+v", checks["round trip: complete"])
			require.Equal(t, worker.DoctorPass, checks["round trip: delete the scratch queue"].Result, "%+v", checks["round trip: delete the scratch queue"])

			var failed []string
			for _, c := range rep.Checks {
				if c.Result == worker.DoctorFail {
					failed = append(failed, c.Check)
				}
			}
			require.Equal(t, []string{"round trip: receive deferred"}, failed, "the only failed check")
			for _, q := range f.srv.Broker().ListQueues() {
				require.False(t, strings.HasPrefix(q.Name, worker.DoctorScratchPrefix), "scratch queue %s left behind", q.Name)
			}
		})
	}
}

// storedState reads the session state the Service Bus store keeps for session id, locking the
// session for the read.
func (f *fixture) storedState(t *testing.T, id string) *sequencer.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := f.srv.Client.AcceptSessionForQueue(ctx, queueName, id, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close(ctx)) }()
	raw, err := r.GetSessionState(ctx, nil)
	require.NoError(t, err)
	s := storetest.NewSession(id)
	require.NoError(t, s.SetState(ctx, raw))
	st, _, err := sbstate.New(nil).Load(ctx, sequencer.LoadParams{Session: s})
	require.NoError(t, err)
	return st
}
