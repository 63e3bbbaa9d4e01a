package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/emulator/broker"
)

// Management operations of the $management node (reference §6.4).
const (
	opRenewLock          = "com.microsoft:renew-lock"
	opReceiveBySequence  = "com.microsoft:receive-by-sequence-number"
	opPeek               = "com.microsoft:peek-message"
	opUpdateDisposition  = "com.microsoft:update-disposition"
	opRenewSessionLock   = "com.microsoft:renew-session-lock"
	opGetSessionState    = "com.microsoft:get-session-state"
	opSetSessionState    = "com.microsoft:set-session-state"
	opSchedule           = "com.microsoft:schedule-message"
	opCancelScheduled    = "com.microsoft:cancel-scheduled-message"
	opGetMessageSessions = "com.microsoft:get-message-sessions"
)

// mgmtError is a failed management operation with its status code and, when set, the
// error-condition the response carries.
type mgmtError struct {
	status int32
	cond   amqp.ErrCond
	err    error
}

func (e *mgmtError) Error() string { return e.err.Error() }

func badRequest(format string, args ...any) *mgmtError {
	return &mgmtError{status: 400, err: fmt.Errorf(format, args...)}
}

// unableToProcess is the service's generic failure text (status 500, amqp:internal-error),
// which it answered to receive-by-sequence-number without session-id on a partitioned
// session queue.
const unableToProcess = "The service was unable to process the request; please retry the operation."

// sessionOps are the operations on a session's messages that a session entity may require
// session-id for (broker.SessionIDRule).
var sessionOps = map[string]bool{opReceiveBySequence: true, opUpdateDisposition: true, opPeek: true}

// missingSessionID refuses op on e when its request names no session and e needs one: 500
// with amqp:internal-error and the service's text, followed by what the emulator saw.
func missingSessionID(op string, e *broker.Entity, body map[string]any) *mgmtError {
	if !sessionOps[op] {
		return nil
	}
	if sid, ok := body["session-id"].(string); ok && sid != "" {
		return nil
	}
	if !e.NeedsSessionID() {
		return nil
	}
	why := "partitioned session entity"
	if !e.Partitioned() {
		why = "session entity (session-id required on every session entity)"
	}
	return &mgmtError{status: 500, cond: amqp.ErrCond(condInternal), err: fmt.Errorf("%s (emulator: %s on %s %q without session-id)", unableToProcess, op, why, e.Path())}
}

// statusFor maps a broker error to a management status code the SDK
// classifies correctly (410 lock lost, 404 not found, 408 timeout).
func statusFor(err error) int32 {
	switch {
	case errors.Is(err, broker.ErrLockLost), errors.Is(err, broker.ErrSessionLockLost):
		return 410
	case errors.Is(err, broker.ErrNotFound), errors.Is(err, broker.ErrMessageNotFound):
		return 404
	case errors.Is(err, broker.ErrTimeout):
		return 408
	case errors.Is(err, broker.ErrNotAllowed), errors.Is(err, broker.ErrMessageTooLarge), errors.Is(err, broker.ErrInvalidConfig):
		return 400
	case errors.Is(err, broker.ErrEntityExists):
		return 409
	case errors.Is(err, broker.ErrEntityDisabled):
		return 403
	}
	return 500
}

// handleManagementLocked serves one $management request for link l's entity.
func (c *conn) handleManagementLocked(l *link, req *amqp.Message) *amqp.Message {
	op, _ := req.ApplicationProperties["operation"].(string)
	if !c.claimedLocked(l.address) {
		return statusResponse(401, errUnauthorized(l.address).Description)
	}
	if c.srv.takeMgmtFailure() {
		return statusResponse(503, "server busy (fault injected by the emulator)")
	}
	body, _ := req.Value.(map[string]any)
	if body == nil {
		body = map[string]any{}
	}
	if resp := c.refuseManagement(op, body); resp != nil {
		c.log.Debug("engine: management refused (pressure)", slog.String("operation", op), slog.String("entity", l.address))
		return resp
	}
	assocName, _ := req.ApplicationProperties["associated-link-name"].(string)
	assoc := c.linksByName[assocName]
	value, status, err := c.runManagement(op, l.entity, assoc, body)
	c.log.Debug("engine: management", slog.String("operation", op), slog.String("entity", l.address), slog.Bool("associated_link_known", assoc != nil), slog.Int("status", int(status)))
	if err != nil {
		var me *mgmtError
		if !errors.As(err, &me) {
			me = &mgmtError{status: statusFor(err), err: err}
		}
		c.log.Debug("engine: management operation failed", slog.String("operation", op), slog.Int("status", int(me.status)), slog.Any("error", err))
		resp := statusResponse(me.status, me.err.Error())
		if me.cond != "" {
			resp.ApplicationProperties["error-condition"] = string(me.cond)
		} else if e := brokerError(me.err); e.Condition != condInternal {
			resp.ApplicationProperties["error-condition"] = string(e.Condition)
		}
		return resp
	}
	resp := statusResponse(status, "OK")
	if value != nil {
		resp.Value = value
	}
	return resp
}

func (c *conn) runManagement(op string, e *broker.Entity, assoc *link, body map[string]any) (any, int32, error) {
	if me := missingSessionID(op, e, body); me != nil {
		return nil, 0, me
	}
	switch op {
	case opAddRule, opRemoveRule, opEnumerateRules:
		return c.runRuleOperation(op, e, body)
	case opRenewLock:
		tokens, err := uuidsField(body, "lock-tokens")
		if err != nil {
			return nil, 0, err
		}
		exps, err := e.RenewLocks(tokens)
		if err != nil {
			return nil, 0, err
		}
		return map[string]any{"expirations": exps}, 200, nil

	case opReceiveBySequence:
		seqs, err := int64sField(body, "sequence-numbers")
		if err != nil {
			return nil, 0, err
		}
		opts := broker.ReceiveOptions{Mode: broker.PeekLock}
		if mode, ok := toInt64(body["receiver-settle-mode"]); ok && mode == 0 {
			opts.Mode = broker.ReceiveAndDelete
		}
		if assoc != nil {
			opts.Session = assoc.sessionLock
		}
		if sid, ok := body["session-id"].(string); ok && sid != "" && e.RequiresSession() {
			// The request names the session: it must be one this client holds.
			if opts.Session = c.sessionLockLocked(e, sid, assoc); opts.Session == nil {
				return nil, 0, fmt.Errorf("session %q is not locked by this client: %w", sid, broker.ErrSessionLockLost)
			}
		}
		ds, err := e.ReceiveDeferred(seqs, opts)
		if err != nil {
			return nil, 0, err
		}
		msgs := make([]any, 0, len(ds))
		for _, d := range ds {
			if opts.Mode == broker.PeekLock {
				if d.Message.DeliveryAnnotations == nil {
					d.Message.DeliveryAnnotations = amqp.Annotations{}
				}
				d.Message.DeliveryAnnotations["x-opt-lock-token"] = d.LockToken
			}
			b, err := encodeMessage(d.Message)
			if err != nil {
				return nil, 0, fmt.Errorf("encode message %d: %w", d.SequenceNumber, err)
			}
			entry := map[string]any{"message": b}
			if opts.Mode == broker.PeekLock {
				entry["lock-token"] = d.LockToken
			}
			msgs = append(msgs, entry)
		}
		return map[string]any{"messages": msgs}, 200, nil

	case opPeek:
		from, _ := toInt64(body["from-sequence-number"])
		count, _ := toInt64(body["message-count"])
		if count <= 0 {
			count = 1
		}
		sid, _ := body["session-id"].(string)
		if sid == "" && assoc != nil && assoc.sessionLock != nil {
			sid = assoc.sessionLock.ID()
		}
		msgs := e.Peek(from, int(count), sid)
		if len(msgs) == 0 {
			return nil, 204, nil
		}
		out := make([]any, 0, len(msgs))
		for _, m := range msgs {
			b, err := encodeMessage(m)
			if err != nil {
				return nil, 0, fmt.Errorf("encode peeked message: %w", err)
			}
			out = append(out, map[string]any{"message": b})
		}
		return map[string]any{"messages": out}, 200, nil

	case opUpdateDisposition:
		tokens, err := uuidsField(body, "lock-tokens")
		if err != nil {
			return nil, 0, err
		}
		status, _ := body["disposition-status"].(string)
		props, _ := body["properties-to-modify"].(map[string]any)
		reason, _ := body["deadletter-reason"].(string)
		desc, _ := body["deadletter-description"].(string)
		for _, t := range tokens {
			switch status {
			case "completed":
				err = e.Complete(t)
			case "abandoned":
				err = e.Abandon(t, props)
			case "defered", "deferred":
				err = e.Defer(t, props)
			case "suspended":
				err = e.DeadLetter(t, reason, desc, props)
			default:
				return nil, 0, badRequest("unknown disposition-status %q", status)
			}
			if err != nil {
				return nil, 0, err
			}
		}
		return nil, 200, nil

	case opRenewSessionLock, opGetSessionState, opSetSessionState:
		sid, ok := body["session-id"].(string)
		if !ok {
			return nil, 0, badRequest("%s needs a string session-id", op)
		}
		lock := c.sessionLockLocked(e, sid, assoc)
		if lock == nil {
			return nil, 0, fmt.Errorf("session %q is not locked by this client: %w", sid, broker.ErrSessionLockLost)
		}
		switch op {
		case opRenewSessionLock:
			exp, err := lock.Renew()
			if err != nil {
				return nil, 0, err
			}
			return map[string]any{"expiration": exp}, 200, nil
		case opGetSessionState:
			st, err := lock.State()
			if err != nil {
				return nil, 0, err
			}
			if st == nil {
				return map[string]any{"session-state": nil}, 200, nil
			}
			return map[string]any{"session-state": st}, 200, nil
		default:
			st, _ := body["session-state"].([]byte)
			if err := lock.SetState(st); err != nil {
				return nil, 0, err
			}
			return nil, 200, nil
		}

	case opSchedule:
		entries, ok := body["messages"].([]any)
		if !ok {
			return nil, 0, badRequest("schedule-message needs a list of messages")
		}
		seqs := make([]int64, 0, len(entries))
		for i, raw := range entries {
			entry, ok := raw.(map[string]any)
			if !ok {
				return nil, 0, badRequest("messages[%d] is %T, want a map", i, raw)
			}
			bin, ok := entry["message"].([]byte)
			if !ok {
				return nil, 0, badRequest("messages[%d] has no message binary", i)
			}
			m, err := decodeMessage(bin)
			if err != nil {
				return nil, 0, badRequest("messages[%d]: %v", i, err)
			}
			at := scheduledAt(m)
			if at.IsZero() {
				return nil, 0, badRequest("messages[%d] has no x-opt-scheduled-enqueue-time", i)
			}
			s, err := e.Schedule([]*amqp.Message{m}, at)
			if err != nil {
				return nil, 0, err
			}
			seqs = append(seqs, s...)
		}
		return map[string]any{"sequence-numbers": seqs}, 200, nil

	case opCancelScheduled:
		seqs, err := int64sField(body, "sequence-numbers")
		if err != nil {
			return nil, 0, err
		}
		if err := e.CancelScheduled(seqs); err != nil {
			return nil, 0, err
		}
		return nil, 200, nil

	case opGetMessageSessions:
		updated, _ := body["last-updated-time"].(time.Time)
		skip, _ := toInt64(body["skip"])
		top, _ := toInt64(body["top"])
		ids, err := e.ListSessions(updated, int(skip), int(top))
		if err != nil {
			return nil, 0, err
		}
		if len(ids) == 0 {
			return nil, 204, nil
		}
		return map[string]any{"sessions-ids": ids, "skip": int32(skip) + int32(len(ids))}, 200, nil
	}
	return nil, 0, badRequest("unsupported management operation %q", op)
}

// sessionLockLocked finds this connection's lock on session sid of e,
// preferring the associated link's.
func (c *conn) sessionLockLocked(e *broker.Entity, sid string, assoc *link) *broker.SessionLock {
	if assoc != nil && assoc.sessionLock != nil && assoc.sessionLock.ID() == sid && assoc.sessionLock.Held() {
		return assoc.sessionLock
	}
	for _, l := range c.linksByName {
		if l.sessionLock != nil && l.entity == e && l.sessionLock.ID() == sid && l.sessionLock.Held() {
			return l.sessionLock
		}
	}
	return nil
}

func uuidsField(body map[string]any, key string) ([]amqp.UUID, error) {
	switch v := body[key].(type) {
	case []amqp.UUID:
		return v, nil
	case []any:
		out := make([]amqp.UUID, 0, len(v))
		for _, x := range v {
			u, ok := x.(amqp.UUID)
			if !ok {
				return nil, badRequest("%s: item is %T, want uuid", key, x)
			}
			out = append(out, u)
		}
		return out, nil
	}
	return nil, badRequest("%s: want an array of uuid, got %T", key, body[key])
}

func int64sField(body map[string]any, key string) ([]int64, error) {
	switch v := body[key].(type) {
	case []int64:
		return v, nil
	case []any:
		out := make([]int64, 0, len(v))
		for _, x := range v {
			n, ok := toInt64(x)
			if !ok {
				return nil, badRequest("%s: item is %T, want long", key, x)
			}
			out = append(out, n)
		}
		return out, nil
	}
	return nil, badRequest("%s: want an array of long, got %T", key, body[key])
}

// scheduledAt reads x-opt-scheduled-enqueue-time, keyed by string or symbol.
func scheduledAt(m *amqp.Message) time.Time {
	const key = "x-opt-scheduled-enqueue-time"
	v, ok := m.Annotations[key]
	if !ok {
		v = m.Annotations[amqp.Symbol(key)]
	}
	t, _ := v.(time.Time)
	return t
}
