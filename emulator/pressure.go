package emulator

import (
	"fmt"
	"time"

	"github.com/seqbus/seqbus/emulator/internal/engine"
)

// StandardCreditsPerSecond is the Standard tier's credit limit per namespace (Pressure.CreditsPerSecond).
const StandardCreditsPerSecond = 1000

// ServerBusyCondition is the AMQP condition of an operation refused by the throttle, the one
// Service Bus uses; $management answers status 503 with it as error-condition.
const ServerBusyCondition = string(engine.ServerBusyCondition)

// Pressure puts the load of a busy namespace on the emulator's clients (Config.Pressure). The
// zero value puts none. It applies where the service applies it: on the AMQP links (sends,
// deliveries, settlements) and on $management; the $cbs node and the management API over HTTP
// are never refused or delayed.
type Pressure struct {
	// Latency delays every frame the emulator sends once a connection is open by Latency plus a
	// random share (uniform) of LatencyJitter, keeping their order: each answer (a settlement's
	// outcome, a delivery, a $management response, an attach) reaches the client that much
	// later while its requests keep flowing, as on a slower service.
	Latency       time.Duration
	LatencyJitter time.Duration
	// CreditsPerSecond throttles the namespace as the Standard tier does (credit-based
	// throttling; StandardCreditsPerSecond is the service's figure): each second brings that
	// many credits, and no more than one second's worth is kept. A message operation costs 1
	// credit per message (send, delivery, settlement, receive-deferred, peek, lock renewal,
	// session state get and set, scheduling), a management operation 10 (rule operations,
	// listing sessions). While the balance is not positive an operation is refused with
	// ServerBusyCondition (on $management: status 503 with that error-condition) and the
	// service's description, "… is being throttled. Error code : 50009. Please wait 2 seconds
	// and try again."; the SDKs retry it. A delivery cannot be refused, so it waits for the next
	// second instead. An admitted operation may take the balance below zero (a large batch);
	// the following seconds pay the debt. 0 turns the throttle off.
	CreditsPerSecond int
	// TransientErrorRate is the share (0 to 1) of sends, settlements and $management requests
	// refused with a transient error that the service asks clients to retry: condition
	// com.microsoft:timeout on the link, status 408 on $management. Nothing is carried out.
	TransientErrorRate float64
}

func (p Pressure) validate() error {
	switch {
	case p.Latency < 0 || p.LatencyJitter < 0:
		return fmt.Errorf("emulator: Pressure latency %s + jitter %s must not be negative", p.Latency, p.LatencyJitter)
	case p.CreditsPerSecond < 0:
		return fmt.Errorf("emulator: Pressure.CreditsPerSecond %d must not be negative", p.CreditsPerSecond)
	case !(p.TransientErrorRate >= 0 && p.TransientErrorRate <= 1):
		return fmt.Errorf("emulator: Pressure.TransientErrorRate %v out of range (0..1)", p.TransientErrorRate)
	}
	return nil
}

// PressureStats counts what Config.Pressure did since the emulator started.
type PressureStats struct {
	// Credits is the credits charged to the operations carried out.
	Credits uint64
	// Throttled counts operations refused with ServerBusyCondition.
	Throttled uint64
	// DeliveriesDelayed counts deliveries that waited for credits.
	DeliveriesDelayed uint64
	// TransientErrors counts operations refused with an injected transient error.
	TransientErrors uint64
}

// PressureStats returns what Config.Pressure did so far (zero without pressure).
func (s *Server) PressureStats() PressureStats {
	st := s.engine.PressureStats()
	return PressureStats{Credits: st.Credits, Throttled: st.Throttled, DeliveriesDelayed: st.DeliveriesDelayed, TransientErrors: st.TransientErrors}
}
