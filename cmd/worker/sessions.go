package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seqbus/seqbus/operator"
)

// defaultWait bounds how long resume and skip wait for a worker to release the session.
const defaultWait = 30 * time.Second

// ---- sessions list ----

type sessionsListOpts struct {
	outputOpts
	Parked, Gap, Stranded, Blocked, Retrying, Ended bool
	After                                           string
	Limit                                           int
}

// defaultListLimit is the page sessions list prints unless told otherwise: its memory and, with
// Service Bus session state, its session reads are bounded by the page.
const defaultListLimit = 1000

func (o *sessionsListOpts) bind(fs *flag.FlagSet) {
	o.bindOutput(fs)
	fs.BoolVar(&o.Parked, "parked", false, "sessions parked by the poison policy or the gap policy")
	fs.BoolVar(&o.Gap, "gap", false, "sessions waiting for a missing sequence while later ones wait")
	fs.BoolVar(&o.Stranded, "stranded", false, "sessions that need a run the broker will not start (the sweeper wakes them)")
	fs.BoolVar(&o.Blocked, "blocked", false, "sessions the poison policy block holds on a failing message")
	fs.BoolVar(&o.Retrying, "retrying", false, "sessions released until the next attempt of a failing message (SEQBUS_RETRY_RELEASE_AFTER)")
	fs.BoolVar(&o.Ended, "ended", false, "include the tombstones of ended sessions")
	fs.StringVar(&o.After, "after", "", "list the sessions after this session id (the next page: what the last page printed)")
	fs.IntVar(&o.Limit, "limit", defaultListLimit, "list at most N sessions, a page (0: all)")
}

func (o *sessionsListOpts) setArgs(args []string) error { return noArgs(args) }

func (o *sessionsListOpts) Validate() error {
	if o.Limit < 0 {
		return fmt.Errorf("--limit must not be negative, got %d", o.Limit)
	}
	if o.After != "" {
		return checkID(o.After)
	}
	return nil
}

type sessionsList struct{ opBase }

// Run lists the sessions, one line each.
func (c *sessionsList) Run(ctx context.Context, o *sessionsListOpts) error {
	res, err := c.Op.List(ctx, operator.ListParams{Parked: o.Parked, Gap: o.Gap, Stranded: o.Stranded, Blocked: o.Blocked,
		Retrying: o.Retrying, Ended: o.Ended, After: o.After, Limit: o.Limit})
	if err != nil {
		return err
	}
	return c.print(o.JSON, res, func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(tw, "SESSION\tNEXT\tDEFERRED\tLOWEST DEFERRED\tSTATUS\tGAP SINCE\tUPDATED\tHANDLED")
		for _, s := range res.Sessions {
			if s.Busy {
				_, _ = fmt.Fprintf(tw, "%s\t-\t-\t-\tbusy: a worker holds it\t-\t-\t-\n", s.SessionID)
				continue
			}
			_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d\n", s.SessionID, s.Next, s.Deferred, fmtSeq(s.LowestDeferred),
				status(s), fmtTime(s.GapSince), fmtTime(s.UpdatedAt), s.Counters.Handled)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		more := ""
		if res.Truncated {
			more = fmt.Sprintf(" (more may match: the next page is --after %s)", res.NextAfter)
		}
		_, err := fmt.Fprintf(w, "%d sessions%s\n", len(res.Sessions), more)
		return err
	})
}

// status says in a few words what a session's state is.
func status(s operator.SessionInfo) string {
	switch {
	case s.Parked != nil:
		return fmt.Sprintf("parked at %d: %s", s.Parked.Sequence, clip(s.Parked.Reason, 60))
	case s.Blocked != nil:
		return fmt.Sprintf("blocked at %d (%d times): %s", s.Blocked.Sequence, s.Blocked.Times, clip(s.Blocked.Reason, 50))
	case s.EndedAt != nil:
		return "ended"
	case s.RetryAt != nil:
		return fmt.Sprintf("retrying %d at %s (%d attempts): %s", s.Next, fmtTime(s.RetryAt), s.Attempts, clip(s.LastError, 50))
	case s.Stranded:
		return "stranded: the sweeper wakes it"
	case s.GapSince != nil:
		return fmt.Sprintf("gap: waits for %d", s.Next)
	}
	return "ok"
}

// ---- sessions show ----

type sessionsShowOpts struct {
	outputOpts
	SessionID   string
	Wait        time.Duration
	MaxMessages int
}

func (o *sessionsShowOpts) bind(fs *flag.FlagSet) {
	o.bindOutput(fs)
	fs.DurationVar(&o.Wait, "wait", 0, "how long to wait for a worker to release the session, whose lock the peek needs")
	fs.IntVar(&o.MaxMessages, "max-messages", 100, "peek at most N messages at the broker and N in the dead-letter queue")
}

func (o *sessionsShowOpts) setArgs(args []string) error { return oneID(args, &o.SessionID) }

func (o *sessionsShowOpts) Validate() error {
	if o.Wait < 0 || o.MaxMessages <= 0 {
		return errors.New("--wait must not be negative and --max-messages must be positive")
	}
	return checkID(o.SessionID)
}

type sessionsShow struct{ opBase }

// Run prints the session's whole state, its messages at the broker and its dead letters.
func (c *sessionsShow) Run(ctx context.Context, o *sessionsShowOpts) error {
	res, err := c.Op.Show(ctx, operator.ShowParams{SessionID: o.SessionID, Wait: o.Wait, MaxMessages: o.MaxMessages})
	if err != nil {
		return err
	}
	return c.print(o.JSON, res, func(w io.Writer) error {
		s := res.Session
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		row := func(k, format string, args ...any) {
			_, _ = fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, args...)...)
		}
		row("session", "%s", s.SessionID)
		switch {
		case res.Unknown:
			row("state", "none stored: unknown to the workers (or ended and purged)")
		case s.Busy && s.Version == 0:
			row("state", "unknown: a worker holds the session (Service Bus session state is read under its lock; try --wait)")
		default:
			if s.Busy {
				row("held", "by a worker now")
			}
			row("status", "%s", status(s))
			row("version", "%d", s.Version)
			row("next expected", "%d", s.Next)
			row("last", "%s", fmtSeq(s.Last))
			if p := s.Parked; p != nil {
				if p.OnGap {
					row("parked", "on missing sequence %d (gap policy) since %s", p.Sequence, fmtTime(&p.At))
				} else {
					row("parked", "at sequence %d (broker sequence %d) since %s", p.Sequence, p.BrokerSequence, fmtTime(&p.At))
				}
				row("parked reason", "%s", p.Reason)
			}
			if b := s.Blocked; b != nil {
				row("blocked", "at sequence %d (broker sequence %d) since %s, given back %d times", b.Sequence, b.BrokerSequence,
					fmtTime(&b.Since), b.Times)
				row("blocked reason", "%s", b.Reason)
			}
			if s.RetryAt != nil {
				row("retrying", "sequence %d at %s, %d attempts so far", s.Next, fmtTime(s.RetryAt), s.Attempts)
				row("last error", "%s", s.LastError)
			}
			row("gap since", "%s", fmtTime(s.GapSince))
			row("ended at", "%s", fmtTime(s.EndedAt))
			row("updated at", "%s", fmtTime(s.UpdatedAt))
			k := s.Counters
			row("counters", "handled %d, deferred %d, duplicates %d, invalid %d, dead-lettered %d, retries %d, skipped %d",
				k.Handled, k.Deferred, k.Duplicates, k.Invalid, k.DeadLettered, k.Retries, k.Skipped)
			row("deferred", "%s", fmtIndex(res.DeferredIndex))
			row("in flight", "%s", fmtIndex(res.InFlight))
			row("skipped poison", "%s", fmtIndex(res.SkippedPoison))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if res.MessagesUnavailable != "" {
			hint := ""
			if res.Session.Busy {
				hint = " (try --wait)"
			}
			_, _ = fmt.Fprintf(w, "\nMESSAGES AT THE BROKER: not shown, %s%s\n", res.MessagesUnavailable, hint)
		} else {
			_, _ = fmt.Fprintf(w, "\nMESSAGES AT THE BROKER (%d)\n", len(res.Messages))
			if err := messageTable(w, res.Messages, false); err != nil {
				return err
			}
		}
		_, _ = fmt.Fprintf(w, "\nDEAD LETTERS (%d)\n", len(res.DeadLetters))
		if err := messageTable(w, res.DeadLetters, true); err != nil {
			return err
		}
		return heldTables(w, res.Held)
	})
}

// heldTables prints what the state store holds for a session: its held messages and their dead
// letters (nothing with a store that holds no messages).
func heldTables(w io.Writer, h *operator.HeldSummary) error {
	if h == nil {
		return nil
	}
	_, _ = fmt.Fprintf(w, "\nHELD IN THE STATE STORE (%d messages, %d bytes)\n", h.Messages, h.Bytes)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(h.Listed) > 0 {
		_, _ = fmt.Fprintln(tw, "SEQUENCE\tLAST\tSIZE\tHELD SINCE\tBROKER SEQ\tMESSAGE ID")
	}
	for _, m := range h.Listed {
		_, _ = fmt.Fprintf(tw, "%d\t%t\t%d\t%s\t%d\t%s\n", m.Sequence, m.Last, m.Size, fmtTime(&m.HeldAt), m.BrokerSequence, m.MessageID)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more := h.Messages - len(h.Listed); more > 0 {
		_, _ = fmt.Fprintf(w, "(%d more not listed; --max-messages)\n", more)
	}
	_, _ = fmt.Fprintf(w, "\nHELD DEAD LETTERS (%d)\n", len(h.DeadLetters))
	return heldDeadTable(w, h.DeadLetters, false)
}

// heldDeadTable prints the state store's dead letters, with their session when asked.
func heldDeadTable(w io.Writer, dead []operator.HeldInfo, withSession bool) error {
	if len(dead) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	session := func(id string) string {
		if withSession {
			return id + "\t"
		}
		return ""
	}
	_, _ = fmt.Fprintln(tw, "ID\t"+session("SESSION")+"SEQUENCE\tREASON\tDESCRIPTION\tDEAD AT\tSIZE\tMESSAGE ID")
	for _, d := range dead {
		_, _ = fmt.Fprintf(tw, "%d\t%s%d\t%s\t%s\t%s\t%d\t%s\n", d.ID, session(d.SessionID), d.Sequence, d.Reason, clip(d.Description, 60),
			fmtTime(d.DeadAt), d.Size, d.MessageID)
	}
	return tw.Flush()
}

// fmtIndex renders sequence → broker sequence entries in sequence order.
func fmtIndex(m map[int64]int64) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d (broker %d)", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// messageTable prints peeked messages; dead letters with their reason and description.
func messageTable(w io.Writer, msgs []operator.BrokerMessage, dead bool) error {
	if len(msgs) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if dead {
		_, _ = fmt.Fprintln(tw, "BROKER SEQ\tSESSION\tSEQUENCE\tREASON\tDESCRIPTION\tENQUEUED\tMESSAGE ID")
	} else {
		_, _ = fmt.Fprintln(tw, "BROKER SEQ\tSEQUENCE\tLAST\tSTATE\tDELIVERIES\tENQUEUED\tMESSAGE ID")
	}
	for _, m := range msgs {
		if dead {
			_, _ = fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", m.BrokerSequence, m.SessionID, fmtSeq(m.Sequence), m.Reason,
				clip(m.Description, 60), fmtTime(&m.EnqueuedAt), m.MessageID)
			continue
		}
		_, _ = fmt.Fprintf(tw, "%d\t%s\t%t\t%s\t%d\t%s\t%s\n", m.BrokerSequence, fmtSeq(m.Sequence), m.Last, m.State,
			m.DeliveryCount, fmtTime(&m.EnqueuedAt), m.MessageID)
	}
	return tw.Flush()
}

// ---- sessions resume ----

type sessionsResumeOpts struct {
	outputOpts
	SessionID string
	AllParked bool
	Wait      time.Duration
}

func (o *sessionsResumeOpts) bind(fs *flag.FlagSet) {
	o.bindOutput(fs)
	fs.BoolVar(&o.AllParked, "all-parked", false, "resume every parked session")
	fs.DurationVar(&o.Wait, "wait", defaultWait, "how long to wait for a worker to release a session, one deadline for all with --all-parked (0: try once)")
}

func (o *sessionsResumeOpts) setArgs(args []string) error {
	if o.AllParked {
		return noArgs(args)
	}
	return oneID(args, &o.SessionID)
}

func (o *sessionsResumeOpts) Validate() error {
	if o.Wait < 0 {
		return errors.New("--wait must not be negative")
	}
	if o.AllParked {
		return nil
	}
	return checkID(o.SessionID)
}

type sessionsResume struct{ opBase }

// Run resumes the session(s) and says what each now waits for.
func (c *sessionsResume) Run(ctx context.Context, o *sessionsResumeOpts) error {
	res, err := c.Op.Resume(ctx, operator.ResumeParams{SessionID: o.SessionID, AllParked: o.AllParked, Wait: o.Wait})
	if err != nil {
		return err
	}
	if err := c.print(o.JSON, res, func(w io.Writer) error {
		for _, r := range res.Resumed {
			switch {
			case r.Parked != nil:
				_, _ = fmt.Fprintf(w, "resumed %s: waits for sequence %d again (parked %s: %s)\n", r.SessionID, r.Next,
					fmtTime(&r.Parked.At), clip(r.Parked.Reason, 80))
			case r.Blocked != nil:
				_, _ = fmt.Fprintf(w, "resumed %s: blocked mark cleared, waits for sequence %d (blocked since %s, %d times: %s)\n", r.SessionID, r.Next,
					fmtTime(&r.Blocked.Since), r.Blocked.Times, clip(r.Blocked.Reason, 80))
			}
			if r.Wakes {
				_, _ = fmt.Fprintf(w, "  its message is deferred at the broker: a worker's sweeper wakes the session (SEQBUS_SWEEP_INTERVAL)\n")
			} else if r.Parked != nil && r.Parked.OnGap {
				_, _ = fmt.Fprintf(w, "  it continues when sequence %d arrives: it never did, so it has no dead letter; have it published again, or skip it (worker sessions skip %s)\n", r.Next, r.SessionID)
			} else {
				_, _ = fmt.Fprintf(w, "  it continues when sequence %d arrives: replay its dead letter if not done yet (worker dlq replay --session %s)\n", r.Next, r.SessionID)
			}
		}
		for _, f := range res.PassedOver {
			_, _ = fmt.Fprintf(w, "passed over %s: %s\n", f.SessionID, f.Error)
		}
		for _, f := range res.Failed {
			_, _ = fmt.Fprintf(w, "not resumed %s: %s\n", f.SessionID, f.Error)
		}
		if o.AllParked {
			_, _ = fmt.Fprintf(w, "%d parked sessions resumed, %d failed, %d passed over (not parked once locked)\n",
				len(res.Resumed), len(res.Failed), len(res.PassedOver))
		}
		return nil
	}); err != nil {
		return err
	}
	if len(res.Failed) > 0 {
		return fmt.Errorf("%d of %d parked sessions not resumed", len(res.Failed), len(res.Failed)+len(res.Resumed))
	}
	return nil
}

// ---- sessions skip ----

type sessionsSkipOpts struct {
	outputOpts
	SessionID string
	To        int64
	Wait      time.Duration
}

func (o *sessionsSkipOpts) bind(fs *flag.FlagSet) {
	o.bindOutput(fs)
	fs.Int64Var(&o.To, "to", 0, "give up every sequence below N (default: the parked sequence, or the missing sequences of a gap)")
	fs.DurationVar(&o.Wait, "wait", defaultWait, "how long to wait for a worker to release the session (0: try once)")
}

func (o *sessionsSkipOpts) setArgs(args []string) error { return oneID(args, &o.SessionID) }

func (o *sessionsSkipOpts) Validate() error {
	if o.To < 0 || o.Wait < 0 {
		return errors.New("--to must be a positive sequence and --wait must not be negative")
	}
	return checkID(o.SessionID)
}

type sessionsSkip struct{ opBase }

// Run skips and prints the sequences given up.
func (c *sessionsSkip) Run(ctx context.Context, o *sessionsSkipOpts) error {
	res, err := c.Op.Skip(ctx, operator.SkipParams{SessionID: o.SessionID, To: o.To, Wait: o.Wait})
	if err != nil {
		return err
	}
	return c.print(o.JSON, res, func(w io.Writer) error {
		n := res.SkippedTo - res.SkippedFrom + 1
		_, _ = fmt.Fprintf(w, "skipped %s sequences %d..%d (%d); next expected %d\n", res.SessionID, res.SkippedFrom, res.SkippedTo, n, res.Next)
		if p := res.Unparked; p != nil {
			_, _ = fmt.Fprintf(w, "  it was parked at %d: %s\n", p.Sequence, clip(p.Reason, 80))
		}
		if len(res.DroppedDeferred) > 0 {
			_, _ = fmt.Fprintf(w, "  deferred messages given up (the next run completes them unhandled): %s\n", joinSeqs(res.DroppedDeferred))
		}
		if len(res.DroppedHeld) > 0 {
			_, _ = fmt.Fprintf(w, "  messages held in the state store given up (removed unhandled): %s\n", joinSeqs(res.DroppedHeld))
		}
		if res.Ended {
			_, _ = fmt.Fprintf(w, "  that was the last sequence: the session has ended\n")
		}
		return nil
	})
}

// ---- sessions retry-now ----

type sessionsRetryNowOpts struct {
	outputOpts
	SessionID string
	Wait      time.Duration
}

func (o *sessionsRetryNowOpts) bind(fs *flag.FlagSet) {
	o.bindOutput(fs)
	fs.DurationVar(&o.Wait, "wait", defaultWait, "how long to wait for a worker to release the session (0: try once)")
}

func (o *sessionsRetryNowOpts) setArgs(args []string) error { return oneID(args, &o.SessionID) }

func (o *sessionsRetryNowOpts) Validate() error {
	if o.Wait < 0 {
		return errors.New("--wait must not be negative")
	}
	return checkID(o.SessionID)
}

type sessionsRetryNow struct{ opBase }

// Run makes the session's released retry due now and says what happens next.
func (c *sessionsRetryNow) Run(ctx context.Context, o *sessionsRetryNowOpts) error {
	res, err := c.Op.RetryNow(ctx, operator.RetryNowParams{SessionID: o.SessionID, Wait: o.Wait})
	if err != nil {
		return err
	}
	return c.print(o.JSON, res, func(w io.Writer) error {
		_, _ = fmt.Fprintf(w, "retry now %s: sequence %d is due (was due %s; %d attempts so far, last error: %s)\n",
			res.SessionID, res.Sequence, fmtTime(&res.WasDue), res.Attempts, clip(res.LastError, 80))
		_, err := fmt.Fprintf(w, "  a worker's sweeper wakes the session at its next sweep (SEQBUS_SWEEP_INTERVAL)\n")
		return err
	})
}
