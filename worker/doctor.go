package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
)

// DoctorResult is the outcome of one doctor check.
type DoctorResult string

// Doctor results. Only DoctorFail makes the report fail.
const (
	DoctorPass DoctorResult = "pass"
	DoctorWarn DoctorResult = "warn"
	DoctorFail DoctorResult = "fail"
	// DoctorSkip is a check that could not run, its detail saying why.
	DoctorSkip DoctorResult = "skip"
)

// DoctorCheck is one line of a doctor report.
type DoctorCheck struct {
	// Check names what was checked.
	Check string `json:"check"`
	// Result is pass, warn, fail or skip.
	Result DoctorResult `json:"result"`
	// Detail is what was seen.
	Detail string `json:"detail"`
	// Action is what to do about it ("" when nothing).
	Action string `json:"action,omitempty"`
}

// DoctorReport is what RunDoctor found, its checks in the order they ran.
type DoctorReport struct {
	Entity string        `json:"entity"`
	Checks []DoctorCheck `json:"checks"`
}

// Failed reports whether any check failed.
func (r DoctorReport) Failed() bool {
	for _, c := range r.Checks {
		if c.Result == DoctorFail {
			return true
		}
	}
	return false
}

// DoctorParams are the arguments of RunDoctor.
type DoctorParams struct {
	// Config is the worker's configuration, as `worker run` loads it.
	Config Config
	// Logger receives the doctor's own log lines (default: discard).
	Logger *slog.Logger
	// StepTimeout bounds each broker call of the round trip and each check (default 30s).
	StepTimeout time.Duration
}

// DoctorScratchPrefix starts the name of the scratch queue the round trip creates and of the
// session it uses; a random suffix makes each run's its own.
const DoctorScratchPrefix = "seqbus-doctor-"

// doctorMinDrains is how many times a deferred message may be fetched back (and its session
// released before it was handled: a lost lock, a stop, a gap that was waited on) before the
// delivery count check warns: each fetch is a delivery.
const doctorMinDrains = 3

// doctor runs the checks of one RunDoctor call.
type doctor struct {
	cfg    Config
	log    *slog.Logger
	step   time.Duration
	conn   *Connections
	report *DoctorReport
}

func (d *doctor) add(check string, result DoctorResult, detail, action string) int {
	d.report.Checks = append(d.report.Checks, DoctorCheck{Check: check, Result: result, Detail: detail, Action: action})
	return len(d.report.Checks) - 1
}

// set fills the line at i, added earlier (a right that a later check shows).
func (d *doctor) set(i int, result DoctorResult, detail, action string) {
	c := &d.report.Checks[i]
	c.Result, c.Detail, c.Action = result, detail, action
}

// RunDoctor checks, with the worker's own settings, what the worker needs of its namespace,
// entity and state store, in order: the settings; the connection and its credentials; the
// rights each feature needs (Listen, Send, Manage); the entity (it exists, requires sessions, its
// lock duration against the settings, its max delivery count, its partitioning); the state
// store; then a live round trip of every broker call the worker makes (send, accept a session,
// receive, defer, receive deferred, complete, dead-letter, set and get session state, renew the
// lock), on a scratch session queue it creates with the entity's partitioning and deletes
// afterwards (Manage right), or else on a session of its own in the entity itself when that is a
// queue. With ProviderSQS: the endpoint and the credentials; the queue (it exists, is FIFO, its
// dead-letter queue, its max receive count); the group lock against the settings; the state
// store; then a round trip of the worker's SQS calls on a scratch FIFO queue and dead-letter
// queue it creates and deletes (skipped when the credentials may not create queues). A check
// that cannot run says why. It never returns an error: each problem is a line of the report.
func RunDoctor(ctx context.Context, p DoctorParams) DoctorReport {
	cfg := p.Config
	if cfg.Handler == nil && !cfg.Journal {
		// The doctor hands nothing to a handler; Validate asks for one all the same.
		cfg.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	}
	d := &doctor{cfg: cfg, log: p.Logger, step: p.StepTimeout, report: &DoctorReport{Entity: cfg.EntityName()}}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.step <= 0 {
		d.step = 30 * time.Second
	}
	if err := cfg.Validate(); err != nil {
		d.add("settings", DoctorFail, err.Error(), "correct the settings it names")
		return *d.report
	}
	d.add("settings", DoctorPass, fmt.Sprintf("%s, state store %s, early messages %s", cfg.EntityName(), cfg.StateStore, cfg.EarlyMessages), "")
	cfg.Logger = d.log
	if cfg.Provider == ProviderSQS {
		d.runSQS(ctx)
		return *d.report
	}
	conn, err := Connect(ctx, cfg)
	if err != nil {
		d.add("connection and credentials", DoctorFail, err.Error(), "correct the setting it names")
		return *d.report
	}
	defer conn.Close(ctx)
	d.conn = conn

	b, ok := d.checkBroker(ctx)
	store := d.checkStore(ctx)
	if !ok {
		return *d.report
	}
	if b.skipRoundTrip != "" {
		d.add("round trip", DoctorSkip, b.skipRoundTrip, "")
		return *d.report
	}
	rt := d.roundTrip(ctx, b.props, b.manage)
	refused := func(err error) bool { return errors.Is(err, sbadapter.ErrUnauthorized) }
	switch {
	case rt.sent == nil:
	case *rt.sent == nil:
		d.set(b.send, DoctorPass, "the round trip's send was accepted (worker dlq replay and the relay need it)", "")
	case refused(*rt.sent):
		d.set(b.send, DoctorWarn, fmt.Sprintf("refused: %v", *rt.sent), "grant Send to "+b.credentials+" for `worker dlq replay`, the relay and this round trip")
	default:
		d.set(b.send, DoctorSkip, "the round trip's send failed (see below)", "")
	}
	if store >= 0 {
		switch {
		case rt.state == nil:
			d.set(store, DoctorSkip, "Service Bus session state: the round trip did not reach its set and get session state", "")
		case *rt.state == nil:
			d.set(store, DoctorPass, "Service Bus session state: the round trip set, read back and cleared one", "")
		default:
			d.set(store, DoctorFail, fmt.Sprintf("Service Bus session state: %v", *rt.state), "")
		}
	}
	return *d.report
}

// brokerChecks are what the checks of the namespace and the entity found, for the round trip.
type brokerChecks struct {
	props  EntityProperties
	manage bool
	// skipRoundTrip says why the round trip cannot run ("" when it can).
	skipRoundTrip string
	send          int // the line of the Send right, which the round trip shows
	credentials   string
}

// checkBroker runs the checks of the namespace, the rights and the entity; false when the
// namespace cannot be reached or refuses the credentials, which leaves nothing else to check.
func (d *doctor) checkBroker(ctx context.Context) (brokerChecks, bool) {
	cfg := d.cfg
	// The two calls that show the rights, side by side: a namespace that does not answer costs
	// one step's time, not two.
	var listenErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		if cfg.Ordering == OrderingNone {
			listenErr = d.probeUnordered(ctx)
			return
		}
		pctx, cancel := context.WithTimeout(ctx, d.step)
		defer cancel()
		listenErr = d.conn.ManagementSource.Probe(pctx)
	})
	actx, cancel := context.WithTimeout(ctx, d.step)
	props, manageErr := ReadEntityProperties(actx, d.conn.Admin, cfg.Entity)
	cancel()
	wg.Wait()

	credentials := "SEQBUS_CONNECTION_STRING's key"
	if cfg.Namespace != "" {
		credentials = "the role assignments of the Entra ID identity on SEQBUS_NAMESPACE"
	}
	refused := func(err error) bool { return errors.Is(err, sbadapter.ErrUnauthorized) }
	missing := func(err error) bool { return errors.Is(err, sequencer.ErrNotFound) }
	answered := func(err error) bool { return err == nil || refused(err) || missing(err) }
	var noToken *azidentity.AuthenticationFailedError
	switch {
	case errors.As(listenErr, &noToken) || errors.As(manageErr, &noToken):
		d.add("connection and credentials", DoctorFail, fmt.Sprintf("no Entra ID token for the namespace: %v", noToken),
			"check the identity DefaultAzureCredential finds here (environment, workload or managed identity, Azure CLI login)")
		return brokerChecks{}, false
	case !answered(listenErr) && !answered(manageErr):
		action := "check the namespace's host name, that it is reachable from here (AMQP on port 5671, HTTPS on 443) and its network rules"
		if cfg.Namespace != "" {
			action += ", and that DefaultAzureCredential finds an identity here"
		}
		d.add("connection and credentials", DoctorFail, fmt.Sprintf("the namespace did not answer: %v", listenErr), action)
		return brokerChecks{}, false
	case refused(listenErr) && refused(manageErr):
		d.add("connection and credentials", DoctorFail, fmt.Sprintf("the namespace refused the credentials: %v", listenErr),
			"check "+credentials+": a wrong or expired key is refused this way, and so is one without any right on the entity")
		return brokerChecks{}, false
	default:
		d.add("connection and credentials", DoctorPass, "the namespace answered and accepted the credentials", "")
	}

	// The rights, as the calls that need them were answered.
	switch {
	case listenErr == nil:
		d.add("right Listen", DoctorPass, "the entity's sessions could be listed (worker run, the sessions and dlq commands need it)", "")
	case refused(listenErr):
		d.add("right Listen", DoctorFail, fmt.Sprintf("refused: %v", listenErr), "grant Listen on the entity to "+credentials+": worker run needs it")
	case missing(listenErr):
		d.add("right Listen", DoctorSkip, "the entity does not exist", "")
	default:
		d.add("right Listen", DoctorFail, listenErr.Error(), "")
	}
	send := d.add("right Send", DoctorSkip, "shown by the round trip's send, which did not run", "")
	hasManage := manageErr == nil || missing(manageErr)
	switch {
	case hasManage:
		d.add("right Manage", DoctorPass, "the entity's properties could be read (the start-time partitioning check, the scaling signal's message counts and the round trip's scratch queue need it)", "")
	case refused(manageErr):
		d.add("right Manage", DoctorWarn,
			"refused: the worker cannot check its entity's partitioning at start, the scaling signal has no message counts, and this round trip cannot use a scratch queue",
			"grant Manage to "+credentials+", or run `worker doctor` with a key that has it")
	default:
		d.add("right Manage", DoctorWarn, fmt.Sprintf("the entity's properties could not be read: %v", manageErr), "")
	}

	b := brokerChecks{props: props, manage: hasManage, send: send, credentials: credentials}
	switch {
	case !d.checkEntity(props, listenErr, manageErr):
		b.skipRoundTrip = "the entity does not exist"
	case cfg.Ordering == OrderingNone:
		b.skipRoundTrip = "the worker with SEQBUS_ORDERING=none makes no session calls"
	}
	return b, true
}

// probeUnordered checks Listen on an entity without sessions: a peek.
func (d *doctor) probeUnordered(ctx context.Context) error {
	var err error
	pctx, cancel := context.WithTimeout(ctx, d.step)
	defer cancel()
	e := d.cfg.Entity
	if e.Queue != "" {
		r, rerr := d.conn.Management.NewReceiverForQueue(e.Queue, nil)
		if rerr != nil {
			return sbadapter.MapError(rerr)
		}
		defer func() { _ = r.Close(context.WithoutCancel(ctx)) }()
		_, err = r.PeekMessages(pctx, 1, nil)
	} else {
		r, rerr := d.conn.Management.NewReceiverForSubscription(e.Topic, e.Subscription, nil)
		if rerr != nil {
			return sbadapter.MapError(rerr)
		}
		defer func() { _ = r.Close(context.WithoutCancel(ctx)) }()
		_, err = r.PeekMessages(pctx, 1, nil)
	}
	return sbadapter.MapError(err)
}

// checkEntity adds the lines of the entity's properties and reports whether it exists.
func (d *doctor) checkEntity(props EntityProperties, listenErr, manageErr error) bool {
	cfg := d.cfg
	entityVar := "SEQBUS_QUEUE"
	if cfg.Entity.Queue == "" {
		entityVar = "SEQBUS_TOPIC and SEQBUS_SUBSCRIPTION"
	}
	switch {
	case manageErr == nil:
		d.add("entity exists", DoctorPass, fmt.Sprintf("%s %s", props.Kind, cfg.Entity), "")
	case errors.Is(manageErr, sequencer.ErrNotFound) || errors.Is(listenErr, sequencer.ErrNotFound):
		d.add("entity exists", DoctorFail, fmt.Sprintf("%s does not exist in the namespace", cfg.Entity), "correct "+entityVar+", or create the entity (`topology apply`)")
		return false
	case listenErr == nil:
		d.add("entity exists", DoctorPass, fmt.Sprintf("%s answered", cfg.Entity), "")
	default:
		d.add("entity exists", DoctorSkip, "neither its properties nor its sessions could be read", "")
	}
	if manageErr != nil {
		for _, c := range []string{"entity requires sessions", "entity lock duration", "entity max delivery count", "entity partitioning"} {
			d.add(c, DoctorSkip, "needs the Manage right to read the entity's properties", "")
		}
		return true
	}

	switch {
	case cfg.Ordering == OrderingSession && !props.RequiresSession:
		d.add("entity requires sessions", DoctorFail, fmt.Sprintf("%s does not require sessions; the worker restores the order of sessions", cfg.Entity),
			"use a session-enabled entity (sessions cannot be turned on for an existing one), or SEQBUS_ORDERING=none")
	case cfg.Ordering == OrderingNone && props.RequiresSession:
		d.add("entity requires sessions", DoctorFail, fmt.Sprintf("%s requires sessions, which SEQBUS_ORDERING=none does not accept", cfg.Entity),
			"use SEQBUS_ORDERING=session, or an entity without sessions")
	default:
		d.add("entity requires sessions", DoctorPass, fmt.Sprintf("requires sessions: %t (SEQBUS_ORDERING=%s)", props.RequiresSession, cfg.Ordering), "")
	}
	d.checkLockDuration(props.LockDuration)
	d.checkDeliveryCount(props.MaxDeliveryCount)

	switch err := cfg.deferralRefused(props); {
	case err != nil:
		d.add("entity partitioning", DoctorFail, err.Error(),
			"set SEQBUS_EARLY_MESSAGES=store (with SEQBUS_STATE_STORE=postgres), or run this doctor and see its round trip pass, then set SEQBUS_DEFER_ON_PARTITIONED=true")
	case props.Partitioned && cfg.Ordering == OrderingSession && cfg.EarlyMessages == EarlyMessagesDefer:
		d.add("entity partitioning", DoctorWarn, "partitioned, with SEQBUS_DEFER_ON_PARTITIONED=true: deferral is known to fail on partitioned entities",
			"keep the override only while the round trip below passes on this namespace")
	default:
		d.add("entity partitioning", DoctorPass, fmt.Sprintf("partitioned: %t", props.Partitioned), "")
	}
	return true
}

// checkLockDuration compares the entity's lock duration with the settings that depend on it.
func (d *doctor) checkLockDuration(lock time.Duration) {
	d.checkLock("entity lock duration", "", "session", lock)
}

// checkLock adds the line check: lock (what, when set, says what it is) against
// SEQBUS_LOCK_RENEW_INTERVAL, which renews the locks of a kind ("session", "group").
func (d *doctor) checkLock(check, what, kind string, lock time.Duration) {
	cfg := d.cfg
	seen := lock.String()
	if what != "" {
		seen += " (" + what + ")"
	}
	switch {
	case lock <= 0:
		d.add(check, DoctorWarn, "the entity reports no lock duration", "")
	case cfg.LockRenewInterval >= lock:
		d.add(check, DoctorFail,
			fmt.Sprintf("%s, but SEQBUS_LOCK_RENEW_INTERVAL is %s: the %s locks expire before they are renewed", seen, cfg.LockRenewInterval, kind),
			"set SEQBUS_LOCK_RENEW_INTERVAL well below the lock duration (0 renews at half the remaining lock time)")
	case cfg.LockRenewInterval > lock/2:
		d.add(check, DoctorWarn,
			fmt.Sprintf("%s, and SEQBUS_LOCK_RENEW_INTERVAL is %s: one slow renewal loses the lock", seen, cfg.LockRenewInterval),
			"set SEQBUS_LOCK_RENEW_INTERVAL to at most half the lock duration (or 0)")
	default:
		renew := "at half the remaining lock time"
		if cfg.LockRenewInterval > 0 {
			renew = "every " + cfg.LockRenewInterval.String()
		}
		d.add(check, DoctorPass, fmt.Sprintf("%s, renewed %s", seen, renew), "")
	}
}

// checkDeliveryCount warns, with deferral, when a deferred message would be dead-lettered by the
// broker after being fetched back only a few times: its first delivery, the released retries
// (each one fetches it again) and doctorMinDrains more.
func (d *doctor) checkDeliveryCount(max int32) {
	cfg := d.cfg
	if cfg.Ordering != OrderingSession || cfg.EarlyMessages != EarlyMessagesDefer {
		d.add("entity max delivery count", DoctorPass, fmt.Sprint(max), "")
		return
	}
	need, why := d.deliveriesNeeded("delivery", doctorMinDrains, "fetches of it deferred")
	if int(max) < need {
		d.add("entity max delivery count", DoctorWarn,
			fmt.Sprintf("%d: a deferred message counts a delivery each time it is fetched back; %d would cover %s", max, need, why),
			fmt.Sprintf("raise the entity's MaxDeliveryCount to at least %d", need))
		return
	}
	d.add("entity max delivery count", DoctorPass, fmt.Sprintf("%d (at least %d: %s)", max, need, why), "")
}

// deliveriesNeeded is how many deliveries a message may take before the worker settles it, and
// why: its first (a "delivery", a "receive"), extra more (what they are), and one for each
// released retry.
func (d *doctor) deliveriesNeeded(first string, extra int, what string) (int, string) {
	need := 1 + extra
	why := fmt.Sprintf("its first %s and %d %s", first, extra, what)
	if d.cfg.RetryReleaseAfter > 0 {
		released := d.cfg.MaxHandlerAttempts - d.cfg.RetryReleaseAfter
		need += released
		why += fmt.Sprintf(", and the %d released retries of SEQBUS_RETRY_RELEASE_AFTER", released)
	}
	return need, why
}

// checkStore checks the state store: Postgres reachable, its migrations applied. With the
// Service Bus session state it returns the line the round trip fills in, else -1.
func (d *doctor) checkStore(ctx context.Context) int {
	cfg := d.cfg
	if cfg.Ordering == OrderingNone {
		d.add("state store", DoctorSkip, "SEQBUS_ORDERING=none keeps no state", "")
		return -1
	}
	if cfg.StateStore != StateStorePostgres {
		// The Service Bus session state: the round trip's set and get session state show it.
		return d.add("state store", DoctorSkip, "Service Bus session state: shown by the round trip's set and get session state, which did not run", "")
	}
	if err := d.conn.Ping(ctx); err != nil {
		d.add("state store: database reachable", DoctorFail, err.Error(), "check SEQBUS_DATABASE_URL and that the database accepts connections from here")
		d.add("state store: migrations applied", DoctorSkip, "the database cannot be reached", "")
		return -1
	}
	d.add("state store: database reachable", DoctorPass, RedactDatabaseURL(d.conn.Pool.Config().ConnString()), "")
	sctx, cancel := context.WithTimeout(ctx, d.step)
	defer cancel()
	st, err := migrations.New(d.conn.Pool, &migrations.Config{Logger: d.log}).Status(sctx)
	if err != nil {
		d.add("state store: migrations applied", DoctorFail, fmt.Sprintf("the schema could not be read: %v", err), "")
		return -1
	}
	var lacking, unknown []string
	applied := 0
	for _, s := range st {
		switch {
		case s.Known && !s.Applied:
			lacking = append(lacking, fmt.Sprintf("%03d_%s", s.Version, s.Name))
		case !s.Known && s.Applied:
			unknown = append(unknown, fmt.Sprintf("%03d_%s", s.Version, s.Name))
		case s.Applied:
			applied++
		}
	}
	switch {
	case len(lacking) > 0 && cfg.MigrateOnStart:
		d.add("state store: migrations applied", DoctorWarn, fmt.Sprintf("lacking %v; SEQBUS_MIGRATE_ON_START applies them when the worker starts", lacking), "")
	case len(lacking) > 0:
		d.add("state store: migrations applied", DoctorFail, fmt.Sprintf("lacking %v: the worker refuses to start", lacking),
			"run `worker migrate up`, or set SEQBUS_MIGRATE_ON_START=true")
	case len(unknown) > 0:
		d.add("state store: migrations applied", DoctorWarn, fmt.Sprintf("all %d applied, and %v, which this binary does not know (a newer worker migrated this database)", applied, unknown), "")
	default:
		d.add("state store: migrations applied", DoctorPass, fmt.Sprintf("all %d applied", applied), "")
	}
	return -1
}

// scratchSuffix returns a random suffix for the names of one run.
func scratchSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
