package console

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/seqbus/seqbus/operator"
)

// An action is one of the operator's changes, asked for with its form's fields.
type action struct {
	Name  string
	Title string
	// Does says, on the confirmation, what confirming does.
	Does string
	// many: the action takes several sessions (a selection).
	many bool
	run  func(ctx context.Context, c *Console, a actionArgs) (any, error)
}

// actionArgs are an action's checked fields.
type actionArgs struct {
	Sessions []string
	// To is skip's --to (0: the parked or missing sequence).
	To int64
}

// maxSelection bounds the sessions one replay takes.
const maxSelection = 100

var actions = map[string]action{
	"resume": {Name: "resume", Title: "Resume", Does: "The session continues from where it stopped: it waits for its parked sequence again (which the replay of its dead letter brings) and its parked or blocked mark is cleared.",
		run: func(ctx context.Context, c *Console, a actionArgs) (any, error) {
			return c.cfg.Operations.Resume(ctx, operator.ResumeParams{SessionID: a.Sessions[0], Wait: c.cfg.ActionWait})
		}},
	"skip": {Name: "skip", Title: "Skip", Does: "The parked sequence, the missing sequences of a gap, or everything below the sequence given is given up for good, and the session continues after it.",
		run: func(ctx context.Context, c *Console, a actionArgs) (any, error) {
			return c.cfg.Operations.Skip(ctx, operator.SkipParams{SessionID: a.Sessions[0], To: a.To, Wait: c.cfg.ActionWait})
		}},
	"retry-now": {Name: "retry-now", Title: "Retry now", Does: "The next attempt of the failing message is made due now; a worker makes it at its next sweep.",
		run: func(ctx context.Context, c *Console, a actionArgs) (any, error) {
			return c.cfg.Operations.RetryNow(ctx, operator.RetryNowParams{SessionID: a.Sessions[0], Wait: c.cfg.ActionWait})
		}},
	"replay": {Name: "replay", Title: "Replay dead letters", many: true, Does: "Each session's dead letters, those of the dead-letter queue and those held in the state store, are sent back to the entity the workers read in ascending application sequence, session by session; each is removed only after its copy was sent.",
		run: func(ctx context.Context, c *Console, a actionArgs) (any, error) {
			var out []*operator.DLQReplayResult
			for _, id := range a.Sessions {
				res, err := c.cfg.Operations.DLQReplay(ctx, operator.DLQReplayParams{SessionID: id, Wait: c.cfg.ActionWait})
				if err != nil {
					return out, err
				}
				out = append(out, res)
			}
			return out, nil
		}},
}

// actionFrom checks an action's fields (the query of a confirmation, the form of a POST).
func actionFrom(v url.Values) (action, actionArgs, error) {
	a, ok := actions[v.Get("action")]
	if !ok {
		return action{}, actionArgs{}, fmt.Errorf("%w: unknown action %q", operator.ErrInvalidInput, v.Get("action"))
	}
	// A selection names a session once per dead letter ticked: each is acted on once, in the
	// order first named.
	args := actionArgs{}
	for _, id := range v["session"] {
		if !slices.Contains(args.Sessions, id) {
			args.Sessions = append(args.Sessions, id)
		}
	}
	switch {
	case len(args.Sessions) == 0:
		return a, args, fmt.Errorf("%w: no session given", operator.ErrInvalidInput)
	case !a.many && len(args.Sessions) > 1:
		return a, args, fmt.Errorf("%w: %s takes one session, got %d", operator.ErrInvalidInput, a.Name, len(args.Sessions))
	case len(args.Sessions) > maxSelection:
		return a, args, fmt.Errorf("%w: at most %d sessions at once, got %d", operator.ErrInvalidInput, maxSelection, len(args.Sessions))
	}
	if to := v.Get("to"); to != "" {
		if a.Name != "skip" {
			return a, args, fmt.Errorf("%w: only skip takes a sequence", operator.ErrInvalidInput)
		}
		n, err := strconv.ParseInt(to, 10, 64)
		if err != nil || n <= 0 {
			return a, args, fmt.Errorf("%w: to must be a positive sequence, got %q", operator.ErrInvalidInput, to)
		}
		args.To = n
	}
	return a, args, nil
}

// confirmation is the confirmation page's data.
type confirmation struct {
	Action action
	Args   actionArgs
}

// confirmPage shows what an action will do, with the form that does it.
func (c *Console) confirmPage(w http.ResponseWriter, r *http.Request, id identity) {
	a, args, err := actionFrom(r.URL.Query())
	if err != nil {
		c.failOp(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "confirm", page{Title: a.Title, ID: id, Data: confirmation{Action: a, Args: args}})
}

// outcome is the done page's data.
type outcome struct {
	Action action
	Args   actionArgs
	Result any
}

// act runs a confirmed action and logs who did it.
func (c *Console) act(w http.ResponseWriter, r *http.Request, id identity) {
	if err := r.ParseForm(); err != nil {
		c.failOp(w, r, fmt.Errorf("%w: %w", operator.ErrInvalidInput, err))
		return
	}
	a, args, err := actionFrom(r.PostForm)
	if err != nil {
		c.failOp(w, r, err)
		return
	}
	attrs := []any{slog.String("user", id.User), slog.String("via", id.Via), slog.String("action", a.Name), slog.Any("sessions", args.Sessions)}
	if args.To > 0 {
		attrs = append(attrs, slog.Int64("to", args.To))
	}
	res, err := a.run(r.Context(), c, args)
	c.forgetOverview()
	if err != nil {
		c.log.WarnContext(r.Context(), "console: action failed", append(attrs, slog.Any("error", err))...)
		c.failOp(w, r, err)
		return
	}
	c.log.InfoContext(r.Context(), "console: action", attrs...)
	if r.Header.Get("Authorization") != "" {
		writeJSON(w, http.StatusOK, res)
		return
	}
	c.render(w, r, http.StatusOK, "done", page{Title: a.Title + ": done", ID: id, Data: outcome{Action: a, Args: args, Result: res}})
}
