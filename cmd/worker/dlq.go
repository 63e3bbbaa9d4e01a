package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/seqbus/seqbus/operator"
)

// ---- dlq list ----

type dlqListOpts struct {
	outputOpts
	SessionID, Reason string
	Limit             int
}

func (o *dlqListOpts) bind(fs *flag.FlagSet) {
	o.bindOutput(fs)
	fs.StringVar(&o.SessionID, "session", "", "only the dead letters of this session")
	fs.StringVar(&o.Reason, "reason", "", "only the dead letters with this reason (HandlerFailed, InvalidSequence, MaxDeliveryCountExceeded, …)")
	fs.IntVar(&o.Limit, "limit", 0, "list at most N dead letters (0: all)")
}

func (o *dlqListOpts) setArgs(args []string) error { return noArgs(args) }

func (o *dlqListOpts) Validate() error {
	if o.Limit < 0 {
		return fmt.Errorf("--limit must not be negative, got %d", o.Limit)
	}
	if o.SessionID != "" {
		return checkID(o.SessionID)
	}
	return nil
}

type dlqList struct{ opBase }

// Run lists the dead letters in the order of the dead-letter queue.
func (c *dlqList) Run(ctx context.Context, o *dlqListOpts) error {
	res, err := c.Op.DLQList(ctx, operator.DLQListParams{SessionID: o.SessionID, Reason: o.Reason, Limit: o.Limit})
	if err != nil {
		return err
	}
	return c.print(o.JSON, res, func(w io.Writer) error {
		if err := messageTable(w, res.Messages, true); err != nil {
			return err
		}
		more := ""
		if res.Truncated {
			more = " (more match: raise --limit)"
		}
		if res.Unread > 0 {
			more += fmt.Sprintf(" (%d more in the dead-letter queue could not be read: a FIFO queue holds back a group's next messages while its first are in flight)", res.Unread)
		}
		if res.Held != nil {
			_, _ = fmt.Fprintf(w, "\nHELD IN THE STATE STORE: DEAD LETTERS (%d)\n", len(res.Held))
			if err := heldDeadTable(w, res.Held, true); err != nil {
				return err
			}
			_, err := fmt.Fprintf(w, "%d dead letters, %d of them in the state store%s\n", len(res.Messages)+len(res.Held), len(res.Held), more)
			return err
		}
		_, err := fmt.Fprintf(w, "%d dead letters%s\n", len(res.Messages), more)
		return err
	})
}

// ---- dlq replay ----

type dlqReplayOpts struct {
	outputOpts
	SessionID, Reason, Target string
	All, DryRun               bool
	Wait                      time.Duration
}

func (o *dlqReplayOpts) bind(fs *flag.FlagSet) {
	o.bindOutput(fs)
	fs.StringVar(&o.SessionID, "session", "", "replay the dead letters of this session")
	fs.BoolVar(&o.All, "all", false, "replay the dead letters of every session, session by session")
	fs.StringVar(&o.Reason, "reason", "", "only the dead letters with this reason")
	fs.StringVar(&o.Target, "target", "", "the queue or topic to send the copies to (default: the queue; required for a subscription, whose topic delivers a copy to every matching subscription)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print what would be replayed and change nothing")
	fs.DurationVar(&o.Wait, "wait", 90*time.Second, "how long to wait for dead letters another receiver holds locked (a replay that crashed holds them until their locks expire)")
}

func (o *dlqReplayOpts) setArgs(args []string) error { return noArgs(args) }

func (o *dlqReplayOpts) Validate() error {
	if o.Wait < 0 {
		return errors.New("--wait must not be negative")
	}
	if o.All == (o.SessionID != "") {
		return errors.New("give --session ID or --all")
	}
	if o.SessionID != "" {
		return checkID(o.SessionID)
	}
	return nil
}

type dlqReplay struct{ opBase }

// Run replays and prints, per session, the sequences sent.
func (c *dlqReplay) Run(ctx context.Context, o *dlqReplayOpts) error {
	res, err := c.Op.DLQReplay(ctx, operator.DLQReplayParams{
		SessionID: o.SessionID, All: o.All, Reason: o.Reason, Target: o.Target, DryRun: o.DryRun, Wait: o.Wait,
	})
	if res != nil {
		if perr := c.print(o.JSON, res, func(w io.Writer) error { return replayText(w, res) }); perr != nil && err == nil {
			err = perr
		}
	}
	return err
}

func replayText(w io.Writer, res *operator.DLQReplayResult) error {
	sent := 0
	for _, s := range res.Sessions {
		if res.DryRun {
			_, _ = fmt.Fprintf(w, "would replay %s: sequences %s\n", s.SessionID, joinSeqs(s.Sequences))
			continue
		}
		sent += s.Sent
		_, _ = fmt.Fprintf(w, "replayed %s: sent %d (sequences %s), completed %d", s.SessionID, s.Sent, joinSeqs(s.Sequences), s.Completed)
		if s.FromStore > 0 {
			_, _ = fmt.Fprintf(w, ", %d of them from the state store", s.FromStore)
		}
		if s.Gone > 0 {
			_, _ = fmt.Fprintf(w, ", %d gone from the dead-letter queue meanwhile", s.Gone)
		}
		if s.HeldElsewhere > 0 {
			_, _ = fmt.Fprintf(w, ", %d still locked by another receiver after the wait (run the replay again later)", s.HeldElsewhere)
		}
		if s.Uncompleted > 0 {
			_, _ = fmt.Fprintf(w, ", %d still in the dead-letter queue (lock lost after the copy was sent; a replay again sends duplicates the worker drops)", s.Uncompleted)
		}
		_, _ = fmt.Fprintln(w)
	}
	for _, f := range res.Skipped {
		_, _ = fmt.Fprintf(w, "not replayable: %s\n", f.Error)
	}
	if res.DryRun {
		_, err := fmt.Fprintf(w, "dry run: %d sessions to %s, nothing sent\n", len(res.Sessions), res.Target)
		return err
	}
	_, err := fmt.Fprintf(w, "%d copies of %d sessions sent to %s\n", sent, len(res.Sessions), res.Target)
	return err
}
