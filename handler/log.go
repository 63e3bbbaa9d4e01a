package handler

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/seqbus/seqbus/sequencer"
)

// LogRecord is the JSON object the log handler writes for each message, one per line.
type LogRecord struct {
	SessionID     string         `json:"session_id"`
	Sequence      int64          `json:"sequence"`
	Last          bool           `json:"last,omitempty"`
	MessageID     string         `json:"message_id"`
	BrokerSeq     int64          `json:"broker_sequence"`
	DeliveryCount uint32         `json:"delivery_count"`
	EnqueuedTime  *time.Time     `json:"enqueued_time,omitempty"`
	ContentType   string         `json:"content_type,omitempty"`
	Properties    map[string]any `json:"properties,omitempty"`
	// Body is the payload as text when it is valid UTF-8, otherwise base64 (BodyEncoding "base64").
	Body         string `json:"body"`
	BodyEncoding string `json:"body_encoding,omitempty"`
}

// Log is the built-in handler that writes one JSON line per message. It is safe for concurrent
// use: lines from concurrent sessions never interleave.
type Log struct {
	mu  sync.Mutex
	enc *json.Encoder
}

// NewLog returns a log handler writing to w.
func NewLog(w io.Writer) *Log {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &Log{enc: enc}
}

// Handle writes m as one JSON line. A write error is returned, so the engine retries the message.
func (l *Log) Handle(_ context.Context, m *sequencer.Message) error {
	rec := NewLogRecord(m)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.enc.Encode(rec); err != nil {
		return fmt.Errorf("log handler: write session %q sequence %d: %w", m.SessionID, m.Sequence, err)
	}
	return nil
}

// NewLogRecord converts a message into the record the log handler writes.
func NewLogRecord(m *sequencer.Message) LogRecord {
	rec := LogRecord{
		SessionID:     m.SessionID,
		Sequence:      m.Sequence,
		Last:          m.IsLast,
		MessageID:     m.MessageID,
		BrokerSeq:     m.BrokerSequence,
		DeliveryCount: m.DeliveryCount,
		ContentType:   m.ContentType,
		Properties:    jsonSafeProperties(m.Properties),
	}
	if !m.EnqueuedTime.IsZero() {
		t := m.EnqueuedTime.UTC()
		rec.EnqueuedTime = &t
	}
	if utf8.Valid(m.Body) {
		rec.Body = string(m.Body)
	} else {
		rec.Body = base64.StdEncoding.EncodeToString(m.Body)
		rec.BodyEncoding = "base64"
	}
	return rec
}

// jsonSafeProperties keeps the properties encoding/json can write and renders the others with %v,
// so an exotic property type never makes the handler fail.
func jsonSafeProperties(p map[string]any) map[string]any {
	if len(p) == 0 {
		return nil
	}
	out := make(map[string]any, len(p))
	for k, v := range p {
		switch v := v.(type) {
		case nil, string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, time.Time:
			out[k] = v
		case float32, float64:
			if _, err := json.Marshal(v); err != nil {
				out[k] = fmt.Sprint(v)
			} else {
				out[k] = v
			}
		case []byte:
			out[k] = base64.StdEncoding.EncodeToString(v)
		default:
			out[k] = fmt.Sprint(v)
		}
	}
	return out
}
