package broker

import (
	"fmt"
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
	// EnablePartitioning (queues and topics; a subscription has its topic's) spreads the
	// entity over partitions in Service Bus. The emulator keeps one store; what it changes
	// is which $management requests a session entity refuses (SessionIDRule). It cannot
	// change after the entity is created.
	EnablePartitioning bool
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
