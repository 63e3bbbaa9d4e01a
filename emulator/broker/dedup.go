package broker

import (
	"fmt"
	"time"

	"github.com/Azure/go-amqp"
)

// dedupHistory is the duplicate detection history of a queue or topic: the message ids
// first seen within the window, in arrival order so that old ones are dropped cheaply.
type dedupHistory struct {
	seen  map[string]time.Time
	order []dedupEntry
}

type dedupEntry struct {
	id string
	at time.Time
}

// duplicateLocked reports whether m repeats a MessageId the entity accepted within its
// DuplicateDetectionHistoryTimeWindow, and records it if not. Entities without
// RequiresDuplicateDetection, and messages without a MessageId, are never duplicates.
func (e *Entity) duplicateLocked(m *amqp.Message, now time.Time) bool {
	if !e.props.RequiresDuplicateDetection || m.Properties == nil || m.Properties.MessageID == nil {
		return false
	}
	id := messageIDKey(m.Properties.MessageID)
	h := &e.dedup
	window := e.props.DuplicateDetectionHistoryTimeWindow
	i := 0
	for ; i < len(h.order) && now.Sub(h.order[i].at) >= window; i++ {
		if old := h.order[i]; h.seen[old.id].Equal(old.at) {
			delete(h.seen, old.id)
		}
	}
	h.order = h.order[i:]
	if at, ok := h.seen[id]; ok && now.Sub(at) < window {
		e.b.log.Debug("broker: duplicate message dropped", "entity", e.path, "message_id", id)
		return true
	}
	if h.seen == nil {
		h.seen = make(map[string]time.Time)
	}
	h.seen[id] = now
	h.order = append(h.order, dedupEntry{id: id, at: now})
	return false
}

// messageIDKey renders an AMQP message-id (string, ulong, uuid or binary) as the
// service's string MessageId; the type prefix keeps "1" and ulong 1 apart.
func messageIDKey(v any) string {
	switch id := v.(type) {
	case string:
		return "s:" + id
	case amqp.UUID:
		return "u:" + id.String()
	case []byte:
		return fmt.Sprintf("b:%x", id)
	}
	return fmt.Sprintf("%T:%v", v, v)
}
