package sqlrule

import (
	"errors"

	"github.com/Azure/go-amqp"
)

// CorrelationFilter matches messages by exact equality of system properties
// and application properties, as Service Bus's CorrelationRuleFilter. Every
// non-empty field must equal the message's property (ordinal, case-sensitive),
// and every entry of Properties must exist under exactly that name with an
// equal value (numbers compare across integer and float types, as in SQL
// filters; values of different types never match).
type CorrelationFilter struct {
	CorrelationID    string
	MessageID        string
	To               string
	ReplyTo          string
	Subject          string // Label in the admin API and Config.json
	SessionID        string
	ReplyToSessionID string
	ContentType      string
	Properties       map[string]any
}

// ErrEmptyCorrelationFilter is returned by Validate for a filter with no field set.
var ErrEmptyCorrelationFilter = errors.New("sqlrule: correlation filter has no properties set")

// Validate reports a filter that sets nothing, which the service rejects.
func (c CorrelationFilter) Validate() error {
	if c.CorrelationID == "" && c.MessageID == "" && c.To == "" && c.ReplyTo == "" && c.Subject == "" &&
		c.SessionID == "" && c.ReplyToSessionID == "" && c.ContentType == "" && len(c.Properties) == 0 {
		return ErrEmptyCorrelationFilter
	}
	return nil
}

// Match reports whether m has every property the filter sets. It never fails;
// the error is there to fit the broker's filter hook.
func (c CorrelationFilter) Match(m *amqp.Message) (bool, error) {
	checks := []struct {
		want string
		prop string
	}{
		{c.CorrelationID, "correlationid"},
		{c.MessageID, "messageid"},
		{c.To, "to"},
		{c.ReplyTo, "replyto"},
		{c.Subject, "subject"},
		{c.SessionID, "sessionid"},
		{c.ReplyToSessionID, "replytosessionid"},
		{c.ContentType, "contenttype"},
	}
	for _, ch := range checks {
		if ch.want == "" {
			continue
		}
		if got := systemProperties[ch.prop].get(m); got.k != kString || got.s != ch.want {
			return false, nil
		}
	}
	for k, want := range c.Properties {
		got, ok := m.ApplicationProperties[k]
		if !ok {
			return false, nil
		}
		w, g := fromGo(want), fromGo(got)
		if w.k == kNull && g.k == kNull {
			continue
		}
		if !equal(w, g) {
			return false, nil
		}
	}
	return true, nil
}
