package worker

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
)

// roundTripResult is what the round trip shows of the lines added before it: nil when the call
// did not run, else its error.
type roundTripResult struct {
	sent  *error
	state *error
}

// doctorMessageTTL bounds how long a message of the round trip can outlive a round trip that
// stopped half way.
const doctorMessageTTL = 10 * time.Minute

// doctorScratchIdle deletes a scratch queue the round trip could not delete itself.
const doctorScratchIdle = 5 * time.Minute

// doctorState is what the round trip writes to the session state.
var doctorState = []byte("seqbus doctor")

// roundTrip makes every broker call the worker makes, each a line: on a scratch session queue
// with the entity's partitioning (Manage right), or on a session of its own in the entity when
// that is a queue.
func (d *doctor) roundTrip(ctx context.Context, props EntityProperties, manage bool) roundTripResult {
	var res roundTripResult
	suffix := scratchSuffix()
	sid := DoctorScratchPrefix + suffix
	target := d.cfg.Entity
	var cleanup func()
	switch {
	case manage:
		name := DoctorScratchPrefix + suffix
		partitioned, requires, idle := props.Partitioned, true, isoDurationString(doctorScratchIdle)
		qp := &admin.QueueProperties{RequiresSession: &requires, EnablePartitioning: &partitioned, AutoDeleteOnIdle: &idle}
		if props.LockDuration > 0 {
			lock := isoDurationString(props.LockDuration)
			qp.LockDuration = &lock
		}
		cctx, cancel := context.WithTimeout(ctx, d.step)
		_, err := d.conn.Admin.CreateQueue(cctx, name, &admin.CreateQueueOptions{Properties: qp})
		cancel()
		if err != nil {
			d.add("round trip: scratch queue", DoctorFail, fmt.Sprintf("create %s: %v", name, adminError("queue "+name, err)), "")
			return res
		}
		d.add("round trip: scratch queue", DoctorPass, fmt.Sprintf("created %s (sessions, partitioned: %t, as the entity)", name, partitioned), "")
		target = sbadapter.Entity{Queue: name}
		cleanup = func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.step)
			defer cancel()
			if _, err := d.conn.Admin.DeleteQueue(dctx, name, nil); err != nil {
				d.add("round trip: delete the scratch queue", DoctorWarn, fmt.Sprintf("%s: %v", name, err),
					fmt.Sprintf("delete the queue %s (it deletes itself after %s idle)", name, doctorScratchIdle))
				return
			}
			d.add("round trip: delete the scratch queue", DoctorPass, "deleted "+name, "")
		}
	case target.Queue != "":
		d.add("round trip: reserved session", DoctorPass, fmt.Sprintf("without the Manage right: session %s of %s, locked before anything is sent to it", sid, target), "")
	default:
		d.add("round trip", DoctorSkip,
			fmt.Sprintf("%s is a subscription: without the Manage right no scratch queue can be created, and a message sent to topic %s would reach every subscription", target, target.Topic),
			"run `worker doctor` with a key that has the Manage right")
		return res
	}
	rt := &roundTrip{d: d, target: target, sid: sid, reserved: !manage, partitioned: props.Partitioned}
	rt.run(ctx, &res)
	if cleanup != nil {
		cleanup()
	}
	return res
}

// roundTrip is one run of the broker calls.
type roundTrip struct {
	d        *doctor
	target   sbadapter.Entity
	sid      string
	reserved bool // on the worker's own entity: lock the session first, clean the dead letter
	// partitioned says the entity is partitioned, where deferral is known to fail.
	partitioned bool
	// failed is set once a step the session's other steps depend on failed (send, accept,
	// receive), or a step showed the session lock lost: the steps after it are skipped. A later step's failure skips only the steps
	// that need what it would have produced.
	failed bool
	// skipped says why the steps left are skipped, once a step could not run ("" after a
	// failure).
	skipped string
}

// stepSkipped is a step that could not run, and why; the steps after it are skipped too.
type stepSkipped struct{ reason string }

func (s *stepSkipped) Error() string { return s.reason }

// stepNotReady is a step whose input an earlier step did not produce: it alone is skipped.
type stepNotReady struct{ reason string }

func (n *stepNotReady) Error() string { return n.reason }

// sessionSteps are the steps every later one depends on.
var sessionSteps = map[string]bool{"send": true, "accept a session": true, "receive": true}

// do runs one step as a line. After a failed session step (sessionSteps), or one that lost the
// session lock, the later ones are skipped; another step's failure skips only the steps that
// need its result.
func (rt *roundTrip) do(ctx context.Context, check string, fn func(ctx context.Context) (string, error)) error {
	name := check
	check = "round trip: " + check
	if rt.failed {
		rt.d.add(check, DoctorSkip, cmp.Or(rt.skipped, "an earlier step failed"), "")
		return errSkipped
	}
	sctx, cancel := context.WithTimeout(ctx, rt.d.step)
	defer cancel()
	detail, err := fn(sctx)
	var (
		skip *stepSkipped
		nr   *stepNotReady
	)
	switch {
	case errors.As(err, &skip):
		rt.failed, rt.skipped = true, "an earlier step could not run"
		rt.d.add(check, DoctorSkip, skip.reason, "")
		return errSkipped
	case errors.As(err, &nr):
		rt.d.add(check, DoctorSkip, nr.reason, "")
		return errSkipped
	case err != nil:
		rt.failed = sessionSteps[name] || errors.Is(err, sequencer.ErrLockLost)
		rt.d.add(check, DoctorFail, err.Error(), "")
		return err
	}
	rt.d.add(check, DoctorPass, detail, "")
	return nil
}

var errSkipped = errors.New("skipped")

func (rt *roundTrip) run(ctx context.Context, res *roundTripResult) {
	d := rt.d
	src, err := sbadapter.NewSource(d.conn.Sessions, sbadapter.Config{Entity: rt.target, Logger: d.log})
	if err != nil {
		d.add("round trip", DoctorFail, err.Error(), "")
		return
	}
	var sess *sbadapter.Session
	defer func() {
		if sess != nil {
			_ = sess.Close(context.WithoutCancel(ctx))
		}
	}()
	accept := func(ctx context.Context) (string, error) {
		var (
			s   sequencer.Session
			err error
		)
		if rt.reserved {
			s, err = src.Accept(ctx, rt.sid)
		} else {
			s, err = src.AcceptNext(ctx)
		}
		if err != nil {
			return "", err
		}
		var ok bool
		if sess, ok = s.(*sbadapter.Session); !ok {
			_ = s.Close(ctx)
			return "", fmt.Errorf("the adapter returned a %T", s)
		}
		if sess.ID() != rt.sid {
			return "", fmt.Errorf("accepted session %q, not the round trip's %q", sess.ID(), rt.sid)
		}
		return fmt.Sprintf("session %s locked until %s", sess.ID(), sess.LockedUntil().UTC().Format(time.RFC3339)), nil
	}
	ids := [2]string{rt.sid + "-1", rt.sid + "-2"}
	send := func(ctx context.Context) (string, error) {
		err := rt.send(ctx, ids)
		res.sent = &err
		if errors.Is(err, sbadapter.ErrUnauthorized) {
			return "", &stepSkipped{reason: fmt.Sprintf("the credentials lack the Send right, which the round trip needs to put messages in: %v", err)}
		}
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("2 messages to session %s of %s", rt.sid, rt.target), nil
	}
	if rt.reserved {
		_ = rt.do(ctx, "accept a session", accept)
		_ = rt.do(ctx, "send", send)
	} else {
		_ = rt.do(ctx, "send", send)
		_ = rt.do(ctx, "accept a session", accept)
	}

	var first, second, fetched *sequencer.Message
	_ = rt.do(ctx, "receive", func(ctx context.Context) (string, error) {
		var got []*sequencer.Message
		for len(got) < 2 {
			msgs, err := sess.Receive(ctx, 2-len(got))
			if err != nil {
				return "", err
			}
			if len(msgs) == 0 {
				return "", fmt.Errorf("received %d of the 2 messages sent before %s passed", len(got), d.step)
			}
			got = append(got, msgs...)
		}
		for _, m := range got {
			switch m.MessageID {
			case ids[0]:
				first = m
			case ids[1]:
				second = m
			}
		}
		if first == nil || second == nil {
			return "", fmt.Errorf("received messages that the round trip did not send")
		}
		return "both messages", nil
	})
	if d.cfg.EarlyMessages == EarlyMessagesStore {
		// The worker holds early messages in its store: it defers nothing, and completes them.
		why := "the worker holds early messages in the state store (SEQBUS_EARLY_MESSAGES=store) and defers none"
		d.add("round trip: defer", DoctorSkip, why, "")
		d.add("round trip: receive deferred", DoctorSkip, why, "")
		fetched = first
	} else {
		rt.deferAndFetch(ctx, sess, first, &fetched)
	}
	_ = rt.do(ctx, "complete", func(ctx context.Context) (string, error) {
		if fetched == nil {
			return "", &stepNotReady{reason: "no message was received deferred to complete"}
		}
		if fetched == first && d.cfg.EarlyMessages == EarlyMessagesStore {
			return "the first message", sess.Complete(ctx, fetched)
		}
		return "the message received deferred", sess.Complete(ctx, fetched)
	})
	deadLetterErr := rt.do(ctx, "dead-letter", func(ctx context.Context) (string, error) {
		return fmt.Sprintf("broker sequence %d", second.BrokerSequence),
			sess.DeadLetter(ctx, second, sequencer.DeadLetterParams{Reason: "SeqbusDoctor", Description: "a message of the worker doctor's round trip"})
	})
	stateErr := rt.sessionState(ctx, sess)
	if !errors.Is(stateErr, errSkipped) {
		res.state = &stateErr
	}
	_ = rt.do(ctx, "renew the lock", func(ctx context.Context) (string, error) {
		until, err := sess.RenewLock(ctx)
		if err != nil {
			return "", err
		}
		return "locked until " + until.UTC().Format(time.RFC3339), nil
	})
	if rt.reserved && deadLetterErr == nil {
		rt.removeDeadLetter(ctx, ids[1])
	}
}

// deferAndFetch defers first and receives it back deferred into *fetched, as the worker does
// with SEQBUS_EARLY_MESSAGES=defer.
func (rt *roundTrip) deferAndFetch(ctx context.Context, sess *sbadapter.Session, first *sequencer.Message, fetched **sequencer.Message) {
	deferErr := rt.do(ctx, "defer", func(ctx context.Context) (string, error) {
		return fmt.Sprintf("broker sequence %d", first.BrokerSequence), sess.Defer(ctx, first)
	})
	_ = rt.do(ctx, "receive deferred", func(ctx context.Context) (string, error) {
		if deferErr != nil {
			return "", &stepNotReady{reason: "the defer did not land"}
		}
		known := ""
		if rt.partitioned {
			known = " (the failure known on partitioned entities: the worker cannot defer early messages here; leave SEQBUS_DEFER_ON_PARTITIONED unset)"
		}
		msgs, err := sess.ReceiveDeferred(ctx, []int64{first.BrokerSequence})
		if err != nil {
			return "", fmt.Errorf("%w%s", err, known)
		}
		if len(msgs) != 1 || msgs[0].MessageID != first.MessageID {
			return "", fmt.Errorf("the broker did not return deferred message %d%s", first.BrokerSequence, known)
		}
		*fetched = msgs[0]
		return fmt.Sprintf("broker sequence %d, delivery count %d", msgs[0].BrokerSequence, msgs[0].DeliveryCount), nil
	})
}

// sessionState sets, reads back and clears the session state, where the worker keeps its
// sessions' states there.
func (rt *roundTrip) sessionState(ctx context.Context, sess *sbadapter.Session) error {
	if rt.d.cfg.StateStore != StateStoreServiceBus {
		rt.d.add("round trip: set and get session state", DoctorSkip, fmt.Sprintf("the worker keeps the sessions' states in %s", rt.d.cfg.StateStore), "")
		return errSkipped
	}
	return rt.do(ctx, "set and get session state", func(ctx context.Context) (string, error) {
		if err := sess.SetState(ctx, doctorState); err != nil {
			return "", err
		}
		got, err := sess.GetState(ctx)
		if err != nil {
			return "", err
		}
		if !bytes.Equal(got, doctorState) {
			return "", fmt.Errorf("read back %q after setting %q", got, doctorState)
		}
		if err := sess.SetState(ctx, nil); err != nil {
			return "", fmt.Errorf("clear: %w", err)
		}
		return fmt.Sprintf("%d bytes set, read back and cleared", len(doctorState)), nil
	})
}

// send sends the round trip's two messages to its session.
func (rt *roundTrip) send(ctx context.Context, ids [2]string) error {
	queue := rt.target.Queue
	s, err := rt.d.conn.Management.NewSender(queue, nil)
	if err != nil {
		return sbadapter.MapError(err)
	}
	defer func() { _ = s.Close(context.WithoutCancel(ctx)) }()
	batch, err := s.NewMessageBatch(ctx, nil)
	if err != nil {
		return sbadapter.MapError(err)
	}
	ttl := doctorMessageTTL
	for _, id := range ids {
		if err := batch.AddMessage(&azservicebus.Message{
			MessageID: &id, SessionID: &rt.sid, TimeToLive: &ttl, Body: []byte("worker doctor round trip"),
		}, nil); err != nil {
			return fmt.Errorf("batch: %w", err)
		}
	}
	return sbadapter.MapError(s.SendMessageBatch(ctx, batch, nil))
}

// doctorDeadLetterScan bounds how many messages of the entity's dead-letter queue the reserved
// round trip holds while it looks for its own dead letter.
const doctorDeadLetterScan = 256

// removeDeadLetter completes the round trip's dead letter in the worker's own entity, holding
// the dead letters ahead of it until it is found. The ones held are then abandoned (their order
// stays) by lock token through a fresh receiver's management link: the receiving link, closed
// first, has credit left that would take them back, locked, as soon as they were abandoned.
func (rt *roundTrip) removeDeadLetter(ctx context.Context, id string) {
	dlq := &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}
	var held []*azservicebus.ReceivedMessage
	_ = rt.do(ctx, "remove the dead letter", func(ctx context.Context) (string, error) {
		r, err := rt.d.conn.Management.NewReceiverForQueue(rt.target.Queue, dlq)
		if err != nil {
			return "", sbadapter.MapError(err)
		}
		defer func() { _ = r.Close(context.WithoutCancel(ctx)) }()
		for len(held) < doctorDeadLetterScan {
			msgs, err := r.ReceiveMessages(ctx, min(32, doctorDeadLetterScan-len(held)), nil)
			if err != nil {
				return "", fmt.Errorf("dead-letter queue of %s: %w (message %s is left there)", rt.target, sbadapter.MapError(err), id)
			}
			for _, m := range msgs {
				if m.MessageID == id {
					if err := r.CompleteMessage(ctx, m, nil); err != nil {
						return "", fmt.Errorf("complete message %s in the dead-letter queue: %w", id, sbadapter.MapError(err))
					}
					return fmt.Sprintf("message %s removed from the dead-letter queue", id), nil
				}
				held = append(held, m)
			}
		}
		return "", fmt.Errorf("message %s not among the first %d of the dead-letter queue of %s: it is left there", id, doctorDeadLetterScan, rt.target)
	})
	if len(held) == 0 {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rt.d.step)
	defer cancel()
	settler, err := rt.d.conn.Management.NewReceiverForQueue(rt.target.Queue, dlq)
	if err == nil {
		defer func() { _ = settler.Close(actx) }()
		for _, m := range held {
			if err = settler.AbandonMessage(actx, &azservicebus.ReceivedMessage{LockToken: m.LockToken}, nil); err != nil {
				break
			}
		}
	}
	if err != nil {
		rt.d.add("round trip: release the dead letters held", DoctorWarn,
			fmt.Sprintf("%d dead letters ahead of the round trip's stay locked until their locks expire: %v", len(held), sbadapter.MapError(err)), "")
	}
}

// isoDurationString renders d for the admin API.
func isoDurationString(d time.Duration) string {
	return contract.FormatDuration(d)
}
