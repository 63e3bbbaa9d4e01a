package broker

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// EntityStatus is an entity's availability, as in the Service Bus admin API.
type EntityStatus string

// Entity statuses. Disabled refuses sends and receives; SendDisabled and ReceiveDisabled
// refuse one side.
const (
	StatusActive          EntityStatus = "Active"
	StatusDisabled        EntityStatus = "Disabled"
	StatusSendDisabled    EntityStatus = "SendDisabled"
	StatusReceiveDisabled EntityStatus = "ReceiveDisabled"
)

// Service defaults applied to zero-valued EntityProperties fields (those of Azure
// Service Bus itself, not of Microsoft's emulator; the Config.json loader applies the
// Config.json schema's defaults before these).
const (
	DefaultLockDuration           = time.Minute
	DefaultMaxDeliveryCount int32 = 10
	DefaultDuplicateWindow        = 10 * time.Minute
	// DefaultMaxMessageSize is the Standard tier's limit, 256 KiB.
	DefaultMaxMessageSize int64 = 256 * 1024
)

// EntityProperties are the settable properties of a queue, topic or subscription, named
// as in Microsoft's emulator Config.json. Fields that do not apply to an entity kind are
// ignored for it (a topic has no LockDuration, for example). Zero values mean the
// service default.
type EntityProperties struct {
	// LockDuration is how long a peek-lock (message or session) lasts. Default 1 minute.
	LockDuration time.Duration
	// MaxDeliveryCount is how many deliveries a message gets before it is dead-lettered
	// with reason MaxDeliveryCountExceeded. Default 10.
	MaxDeliveryCount int32
	// DefaultMessageTimeToLive caps every message's time-to-live; zero means never.
	DefaultMessageTimeToLive time.Duration
	// RequiresSession makes the entity session-aware.
	RequiresSession bool
	// DeadLetteringOnMessageExpiration moves expired messages to the dead-letter queue
	// (reason TTLExpiredException) instead of dropping them.
	DeadLetteringOnMessageExpiration bool
	// RequiresDuplicateDetection (queues and topics) drops a message whose MessageId
	// the entity accepted within DuplicateDetectionHistoryTimeWindow (default 10
	// minutes): the send succeeds, the message goes nowhere.
	RequiresDuplicateDetection          bool
	DuplicateDetectionHistoryTimeWindow time.Duration
	// ForwardTo (queues and subscriptions) names a queue or topic that every message
	// admitted to the entity moves on to at once, keeping its properties; it gets a new
	// sequence number there, and x-opt-enqueue-sequence-number keeps its first one.
	// ForwardDeadLetteredMessagesTo does the same for dead-lettered messages. Targets
	// may be names or absolute URIs; they must exist when the entity is created or
	// updated (ErrInvalidConfig). See MaxForwardHops.
	ForwardTo                     string
	ForwardDeadLetteredMessagesTo string
	// Status defaults to StatusActive.
	Status EntityStatus
	// DropOnFilterEvaluationExceptions (subscriptions) discards a message whose rule
	// filter or action fails to evaluate (a string multiplied by a number, say). By
	// default such a message goes to the subscription's dead-letter queue with reason
	// ReasonFilterEvaluationException, as in Service Bus, whose admin API calls the
	// default DeadLetteringOnFilterEvaluationExceptions = true.
	DropOnFilterEvaluationExceptions bool
}

// withDefaults returns p with zero fields set to the service defaults.
func (p EntityProperties) withDefaults() EntityProperties {
	if p.LockDuration == 0 {
		p.LockDuration = DefaultLockDuration
	}
	if p.MaxDeliveryCount == 0 {
		p.MaxDeliveryCount = DefaultMaxDeliveryCount
	}
	if p.DuplicateDetectionHistoryTimeWindow == 0 {
		p.DuplicateDetectionHistoryTimeWindow = DefaultDuplicateWindow
	}
	if p.Status == "" {
		p.Status = StatusActive
	}
	return p
}

func (p EntityProperties) validate() error {
	switch {
	case p.LockDuration < 0:
		return fmt.Errorf("%w: LockDuration %v is negative", ErrInvalidConfig, p.LockDuration)
	case p.MaxDeliveryCount < 0:
		return fmt.Errorf("%w: MaxDeliveryCount %d is negative", ErrInvalidConfig, p.MaxDeliveryCount)
	case p.DefaultMessageTimeToLive < 0:
		return fmt.Errorf("%w: DefaultMessageTimeToLive %v is negative", ErrInvalidConfig, p.DefaultMessageTimeToLive)
	case p.DuplicateDetectionHistoryTimeWindow < 0:
		return fmt.Errorf("%w: DuplicateDetectionHistoryTimeWindow %v is negative", ErrInvalidConfig, p.DuplicateDetectionHistoryTimeWindow)
	}
	switch p.Status {
	case "", StatusActive, StatusDisabled, StatusSendDisabled, StatusReceiveDisabled:
	default:
		return fmt.Errorf("%w: unknown Status %q", ErrInvalidConfig, p.Status)
	}
	return nil
}

func (p EntityProperties) canSend() bool {
	return p.Status != StatusDisabled && p.Status != StatusSendDisabled
}

func (p EntityProperties) canReceive() bool {
	return p.Status != StatusDisabled && p.Status != StatusReceiveDisabled
}

// ParseISO8601Duration parses an ISO 8601 duration such as "PT1M", "P1DT2H30M" or
// "PT0.5S". Years count 365 days, months 30 days and weeks 7 days. Values beyond the
// range of time.Duration (such as .NET's TimeSpan.MaxValue, "P10675199DT2H48M5.4775807S")
// saturate at math.MaxInt64.
func ParseISO8601Duration(s string) (time.Duration, error) {
	bad := func() (time.Duration, error) {
		return 0, fmt.Errorf("invalid ISO 8601 duration %q", s)
	}
	rest, ok := strings.CutPrefix(s, "P")
	if !ok || rest == "" || strings.HasSuffix(rest, "T") {
		return bad()
	}
	const day = 24 * time.Hour
	dateUnits := map[byte]time.Duration{'Y': 365 * day, 'M': 30 * day, 'W': 7 * day, 'D': day}
	timeUnits := map[byte]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second}
	var total float64
	inTime := false
	seen := 0
	for rest != "" {
		if rest[0] == 'T' {
			if inTime {
				return bad()
			}
			inTime = true
			rest = rest[1:]
			continue
		}
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.' || rest[i] == ',') {
			i++
		}
		if i == 0 || i == len(rest) {
			return bad()
		}
		n, err := strconv.ParseFloat(strings.ReplaceAll(rest[:i], ",", "."), 64)
		if err != nil {
			return bad()
		}
		units := dateUnits
		if inTime {
			units = timeUnits
		}
		unit, ok := units[rest[i]]
		if !ok {
			return bad()
		}
		total += n * float64(unit)
		seen++
		rest = rest[i+1:]
	}
	if seen == 0 {
		return bad()
	}
	if total >= math.MaxInt64 {
		return time.Duration(math.MaxInt64), nil
	}
	return time.Duration(total), nil
}

// FormatISO8601Duration formats d as an ISO 8601 duration ("PT1M", "P1DT2H", "PT0.5S").
func FormatISO8601Duration(d time.Duration) string {
	if d <= 0 {
		return "PT0S"
	}
	const day = 24 * time.Hour
	var b strings.Builder
	b.WriteString("P")
	if days := d / day; days > 0 {
		fmt.Fprintf(&b, "%dD", days)
		d -= days * day
	}
	if d == 0 {
		return b.String()
	}
	b.WriteString("T")
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dH", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dM", m)
		d -= m * time.Minute
	}
	if d > 0 {
		b.WriteString(strconv.FormatFloat(d.Seconds(), 'f', -1, 64))
		b.WriteString("S")
	}
	return b.String()
}
