package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
)

// EarlyMessages names where the worker keeps a message that arrives before its turn once the
// reorder window is full or off.
type EarlyMessages string

const (
	// EarlyMessagesDefer defers an early message at the broker and fetches it back by its
	// sequence number when its turn comes (the default). Service Bus is known to fail that
	// fetch on partitioned entities, so Start refuses a partitioned entity it can read the
	// properties of, unless Config.DeferOnPartitioned.
	EarlyMessagesDefer EarlyMessages = "defer"
	// EarlyMessagesStore holds early messages in the Postgres state store and completes them at
	// the broker (sequencer.EarlyStore): no deferred message is ever created, so it works on
	// partitioned entities. Bounded by Config.HeldMaxSessionMessages, HeldMaxSessionBytes and
	// HeldMaxBytes.
	EarlyMessagesStore EarlyMessages = "store"
)

// checkEarlyMessages checks the mode against the settings it depends on: store holds message
// bodies, which the Service Bus session state cannot (its size limit is that of one message), and
// gives no message back to the broker, which the poison policy block relies on.
func checkEarlyMessages[T any](p *problems[T], c Config) {
	switch c.EarlyMessages {
	case EarlyMessagesDefer:
	case EarlyMessagesStore:
		if c.Ordering == OrderingSession && c.StateStore != StateStorePostgres {
			p.add("EarlyMessages", "%s holds early messages in the state store, which needs %s=postgres: the Service Bus session state is bounded by one message's size",
				c.EarlyMessages, p.v("StateStore"))
		}
		if c.PoisonPolicy == sequencer.PoisonBlock {
			p.add("EarlyMessages", "%s does not go with %s=block, which gives a failing message back to the broker: a held message has left it",
				c.EarlyMessages, p.v("PoisonPolicy"))
		}
	default:
		p.add("EarlyMessages", "%q is not one of %s, %s", c.EarlyMessages, EarlyMessagesDefer, EarlyMessagesStore)
	}
	if c.HeldMaxSessionMessages < 0 {
		p.add("HeldMaxSessionMessages", "must not be negative (0: no bound), got %d", c.HeldMaxSessionMessages)
	}
}

// EntityProperties are what the management API says of the worker's entity, as far as the
// worker's settings depend on it.
type EntityProperties struct {
	// Kind is "queue" or "subscription".
	Kind string
	// RequiresSession says whether the entity is session-enabled.
	RequiresSession bool
	// Partitioned says whether the entity is partitioned (a subscription: its topic).
	Partitioned bool
	// LockDuration is the entity's peek-lock (and session lock) duration.
	LockDuration time.Duration
	// MaxDeliveryCount is how many deliveries a message gets before the broker dead-letters it.
	MaxDeliveryCount int32
}

// ReadEntityProperties reads e's properties with the management API, which needs the Manage
// right: a refusal wraps sbadapter.ErrUnauthorized, a missing entity (or topic)
// sequencer.ErrNotFound.
func ReadEntityProperties(ctx context.Context, ac *admin.Client, e sbadapter.Entity) (EntityProperties, error) {
	if e.Queue != "" {
		q, err := ac.GetQueue(ctx, e.Queue, nil)
		if err != nil {
			return EntityProperties{}, adminError("queue "+e.Queue, err)
		}
		if q == nil {
			return EntityProperties{}, fmt.Errorf("queue %s: %w", e.Queue, sequencer.ErrNotFound)
		}
		return EntityProperties{
			Kind: "queue", RequiresSession: deref(q.RequiresSession), Partitioned: deref(q.EnablePartitioning),
			LockDuration: isoDuration(q.LockDuration), MaxDeliveryCount: deref(q.MaxDeliveryCount),
		}, nil
	}
	t, err := ac.GetTopic(ctx, e.Topic, nil)
	if err != nil {
		return EntityProperties{}, adminError("topic "+e.Topic, err)
	}
	if t == nil {
		return EntityProperties{}, fmt.Errorf("topic %s: %w", e.Topic, sequencer.ErrNotFound)
	}
	s, err := ac.GetSubscription(ctx, e.Topic, e.Subscription, nil)
	if err != nil {
		return EntityProperties{}, adminError("subscription "+e.String(), err)
	}
	if s == nil {
		return EntityProperties{}, fmt.Errorf("subscription %s: %w", e, sequencer.ErrNotFound)
	}
	return EntityProperties{
		Kind: "subscription", RequiresSession: deref(s.RequiresSession), Partitioned: deref(t.EnablePartitioning),
		LockDuration: isoDuration(s.LockDuration), MaxDeliveryCount: deref(s.MaxDeliveryCount),
	}, nil
}

// adminError names what was read and marks a refusal (401, 403) as sbadapter.ErrUnauthorized.
func adminError(what string, err error) error {
	var re *azcore.ResponseError
	if errors.As(err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden) {
		return fmt.Errorf("read %s: %w: %w", what, sbadapter.ErrUnauthorized, err)
	}
	return fmt.Errorf("read %s: %w", what, err)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func isoDuration(s *string) time.Duration {
	if s == nil {
		return 0
	}
	d, err := contract.ParseDuration(*s)
	if err != nil {
		return 0
	}
	return d
}

// deferralRefused is the error of a configuration that defers early messages on a partitioned
// entity without Config.DeferOnPartitioned (nil for any other): Start stops on it, and `worker
// doctor` reports it.
func (c Config) deferralRefused(p EntityProperties) error {
	if c.Ordering != OrderingSession || c.EarlyMessages != EarlyMessagesDefer || !p.Partitioned || c.DeferOnPartitioned {
		return nil
	}
	return configError("EarlyMessages", fmt.Errorf(
		"%s on %s, which is partitioned: Service Bus is known to fail the fetch of a session's deferred messages on partitioned entities; "+
			"hold early messages in the state store instead (%s=%s with %s=%s), or run `worker doctor` with these settings and set %s=true only if its round trip passes",
		c.EarlyMessages, c.Entity, envVar(reflect.TypeFor[Config](), "EarlyMessages"), EarlyMessagesStore,
		envVar(reflect.TypeFor[Config](), "StateStore"), StateStorePostgres, envVar(reflect.TypeFor[Config](), "DeferOnPartitioned")))
}

// checkPartitioning is the start-time look at the entity's partitioning: it reads the entity's
// properties, refuses what deferralRefused refuses, and on a partitioned entity tells the
// session source not to peek (the SDK's peek of a session's messages lacks the session id the
// service needs there; see sbadapter.Source.MarkPartitioned). Without the Manage right (or when
// the read fails otherwise) it logs that it could not check and lets the worker start.
func (c *Client) checkPartitioning(ctx context.Context) error {
	cfg := c.cfg
	if cfg.Ordering != OrderingSession || cfg.Provider == ProviderSQS {
		return nil // an SQS queue has no partitions to look at
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	props, err := ReadEntityProperties(rctx, c.conn.Admin, cfg.Entity)
	cancel()
	if err != nil {
		reason := "the read failed"
		if errors.Is(err, sbadapter.ErrUnauthorized) {
			reason = "the credentials lack the Manage right"
		}
		what := "peeks of a session's messages"
		if cfg.EarlyMessages == EarlyMessagesDefer && !cfg.DeferOnPartitioned {
			what = "deferral of early messages"
		}
		c.log.WarnContext(ctx, "worker: could not check whether the entity is partitioned ("+what+" fail there); starting anyway",
			slog.String("entity", cfg.Entity.String()), slog.String("reason", reason), slog.Any("error", err))
		return nil
	}
	if props.Partitioned {
		for _, s := range []*sbadapter.Source{c.conn.Source, c.conn.ManagementSource, c.conn.ScanSource} {
			if s != nil {
				s.MarkPartitioned()
			}
		}
	}
	return cfg.deferralRefused(props)
}
