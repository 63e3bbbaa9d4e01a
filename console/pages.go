package console

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/worker"
)

// page is what every template gets.
type page struct {
	Title  string
	Entity string
	ID     identity
	Error  string
	Data   any
}

var pageNames = []string{"login", "error", "overview", "sessions", "session", "deadletters", "message", "confirm", "done"}

var funcs = template.FuncMap{
	"time": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "-"
			}
			return v.UTC().Format(time.RFC3339)
		case *time.Time:
			if v == nil || v.IsZero() {
				return "-"
			}
			return v.UTC().Format(time.RFC3339)
		}
		return "-"
	},
	"json": func(v any) string {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err.Error()
		}
		return string(b)
	},
	"seq": func(n int64) string {
		if n == 0 {
			return "-"
		}
		return strconv.FormatInt(n, 10)
	},
}

// parsePages parses each page with the layout.
func parsePages() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templates, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parsing page %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// render writes page name.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Entity = c.cfg.Entity
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := c.pages[name].Execute(w, p); err != nil {
		c.log.ErrorContext(r.Context(), "console: rendering a page", slog.String("page", name), slog.Any("error", err))
	}
}

// fail answers an error: JSON for the API and Bearer requests, a page otherwise.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	if strings.HasPrefix(r.URL.Path, "/api/") || r.Header.Get("Authorization") != "" {
		writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	id, _ := c.auth.authenticate(r)
	c.render(w, r, status, "error", page{Title: http.StatusText(status), ID: id, Error: err.Error()})
}

// failOp answers a failed operation with the status its error calls for.
func (c *Console) failOp(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, operator.ErrInvalidInput):
		status = http.StatusBadRequest
	case errors.Is(err, operator.ErrUnknownSession), errors.Is(err, operator.ErrUnknownMessage):
		status = http.StatusNotFound
	case errors.Is(err, operator.ErrSessionBusy), errors.Is(err, operator.ErrUnsettled),
		errors.Is(err, operator.ErrNotParked), errors.Is(err, operator.ErrNotRetrying),
		errors.Is(err, operator.ErrNothingToSkip), errors.Is(err, operator.ErrSessionEnded):
		status = http.StatusConflict
	}
	if status == http.StatusInternalServerError {
		c.log.ErrorContext(r.Context(), "console: operation failed", slog.String("route", r.Pattern), slog.Any("error", err))
	}
	c.fail(w, r, status, err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// ---- overview ----

// overviewLimit bounds the sessions and dead letters the overview reads.
const overviewLimit = 1000

// probeResult is one dependency's answer.
type probeResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// reasonCount is how many dead letters carry one reason.
type reasonCount struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

// overview is what the overview shows; its JSON is GET /api/overview.
type overview struct {
	Parked   []operator.SessionInfo `json:"parked"`
	Blocked  []operator.SessionInfo `json:"blocked"`
	Retrying []operator.SessionInfo `json:"retrying"`
	// Gap: the sessions waiting on a gap, oldest first.
	Gap []operator.SessionInfo `json:"gap"`
	// Busy counts sessions a worker held while listed (their state unknown).
	Busy int `json:"busy"`
	// SessionsTruncated: more sessions match than the overview reads.
	SessionsTruncated bool `json:"sessions_truncated,omitempty"`

	// DeadLetters counts those of the dead-letter queue and those the state store holds (early
	// messages it held that turned poison).
	DeadLetters          int           `json:"dead_letters"`
	DeadLettersByReason  []reasonCount `json:"dead_letters_by_reason"`
	DeadLettersTruncated bool          `json:"dead_letters_truncated,omitempty"`
	// DeadLettersUnread counts, on SQS, the dead letters the listing could not read (a FIFO
	// queue hands out no more of a group while its first are in flight): the count is a bound
	// from below then.
	DeadLettersUnread int `json:"dead_letters_unread,omitempty"`

	Scale     *worker.Scale `json:"scale,omitempty"`
	Reachable []probeResult `json:"reachable"`
	// Errors name the parts that could not be read.
	Errors []string  `json:"errors,omitempty"`
	At     time.Time `json:"at"`
}

// Counts is the short form the overview's script reads.
func (o *overview) counts() map[string]int {
	return map[string]int{"parked": len(o.Parked), "blocked": len(o.Blocked), "retrying": len(o.Retrying), "gap": len(o.Gap), "dead_letters": o.DeadLetters}
}

// overviewTTL is how long an overview is served again before it is read anew: the overview lists
// the sessions (with Service Bus session state a brief lock of each) and reads the dead-letter
// queue (a peek on Service Bus; on SQS, which has no peek, a receive of every dead letter and
// their release), and every open overview polls it. An action forgets it.
const overviewTTL = 10 * time.Second

// cachedOverview returns the overview, read anew when the last is older than overviewTTL.
func (c *Console) cachedOverview(ctx context.Context) *overview {
	c.ovMu.Lock()
	defer c.ovMu.Unlock()
	if c.ov != nil && c.cfg.Clock.Now().Sub(c.ovAt) < overviewTTL {
		return c.ov
	}
	c.ov, c.ovAt = c.overview(ctx), c.cfg.Clock.Now()
	return c.ov
}

// forgetOverview makes the next overview read anew.
func (c *Console) forgetOverview() {
	c.ovMu.Lock()
	defer c.ovMu.Unlock()
	c.ov = nil
}

func (c *Console) overview(ctx context.Context) *overview {
	ov := &overview{At: c.cfg.Clock.Now().UTC(), Parked: []operator.SessionInfo{}, Blocked: []operator.SessionInfo{},
		Retrying: []operator.SessionInfo{}, Gap: []operator.SessionInfo{}, DeadLettersByReason: []reasonCount{}, Reachable: []probeResult{}}
	for _, p := range c.cfg.Probes {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := p.Check(pctx)
		cancel()
		pr := probeResult{Name: p.Name, OK: err == nil}
		if err != nil {
			pr.Error = err.Error()
		}
		ov.Reachable = append(ov.Reachable, pr)
	}
	list, err := c.cfg.Operations.List(ctx, operator.ListParams{Parked: true, Gap: true, Blocked: true, Retrying: true, Limit: overviewLimit})
	if err != nil {
		ov.Errors = append(ov.Errors, "sessions: "+err.Error())
	} else {
		ov.SessionsTruncated = list.Truncated
		for _, s := range list.Sessions {
			switch {
			case s.Busy:
				ov.Busy++
			case s.Parked != nil:
				ov.Parked = append(ov.Parked, s)
			case s.Blocked != nil:
				ov.Blocked = append(ov.Blocked, s)
			case s.RetryAt != nil:
				ov.Retrying = append(ov.Retrying, s)
			case s.GapSince != nil:
				ov.Gap = append(ov.Gap, s)
			}
		}
		slices.SortStableFunc(ov.Parked, func(a, b operator.SessionInfo) int { return a.Parked.At.Compare(b.Parked.At) })
		slices.SortStableFunc(ov.Blocked, func(a, b operator.SessionInfo) int { return a.Blocked.Since.Compare(b.Blocked.Since) })
		slices.SortStableFunc(ov.Retrying, func(a, b operator.SessionInfo) int { return a.RetryAt.Compare(*b.RetryAt) })
		slices.SortStableFunc(ov.Gap, func(a, b operator.SessionInfo) int { return a.GapSince.Compare(*b.GapSince) })
	}
	dl, err := c.cfg.Operations.DLQList(ctx, operator.DLQListParams{Limit: overviewLimit})
	if err != nil {
		ov.Errors = append(ov.Errors, "dead letters: "+err.Error())
	} else {
		ov.DeadLetters, ov.DeadLettersTruncated, ov.DeadLettersUnread = len(dl.Messages)+len(dl.Held), dl.Truncated, dl.Unread
		by := map[string]int{}
		for _, m := range dl.Messages {
			by[cmp.Or(m.Reason, "(none)")]++
		}
		for _, h := range dl.Held {
			by[cmp.Or(h.Reason, "(none)")]++
		}
		for _, reason := range slices.Sorted(maps.Keys(by)) {
			ov.DeadLettersByReason = append(ov.DeadLettersByReason, reasonCount{Reason: reason, Count: by[reason]})
		}
	}
	if c.cfg.Scale != nil {
		if sc, ok := c.cfg.Scale(); ok {
			ov.Scale = &sc
		}
	}
	return ov
}

func (c *Console) overviewPage(w http.ResponseWriter, r *http.Request, id identity) {
	c.render(w, r, http.StatusOK, "overview", page{Title: "Overview", ID: id, Data: c.cachedOverview(r.Context())})
}

// overviewJSON answers GET /api/overview: the overview's counts, probes and scale; the
// sessions' ids only with ?sessions=1 (the caller asks for them).
func (c *Console) overviewJSON(w http.ResponseWriter, r *http.Request, _ identity) {
	ov := c.cachedOverview(r.Context())
	out := map[string]any{"counts": ov.counts(), "dead_letters_by_reason": ov.DeadLettersByReason, "reachable": ov.Reachable,
		"busy": ov.Busy, "at": ov.At, "errors": ov.Errors}
	if ov.Scale != nil {
		out["replicas_wanted"] = ov.Scale.ReplicasWanted
	}
	if r.URL.Query().Get("sessions") == "1" {
		out["overview"] = ov
	}
	writeJSON(w, http.StatusOK, out)
}

// ---- sessions ----

// sessionStates are the filters of the sessions list.
var sessionStates = []string{"", "parked", "blocked", "retrying", "gap", "stranded", "ended"}

func listParams(state string) (operator.ListParams, error) {
	switch state {
	case "":
		return operator.ListParams{}, nil
	case "parked":
		return operator.ListParams{Parked: true}, nil
	case "blocked":
		return operator.ListParams{Blocked: true}, nil
	case "retrying":
		return operator.ListParams{Retrying: true}, nil
	case "gap":
		return operator.ListParams{Gap: true}, nil
	case "stranded":
		return operator.ListParams{Stranded: true}, nil
	case "ended":
		return operator.ListParams{Ended: true}, nil
	}
	return operator.ListParams{}, fmt.Errorf("%w: state %q is not one of parked, blocked, retrying, gap, stranded, ended", operator.ErrInvalidInput, state)
}

// sessionsList is the sessions page's data.
type sessionsList struct {
	State, Prefix string
	States        []string
	Sessions      []operator.SessionInfo
	// NextAfter continues the list (the next page), "" at its end.
	NextAfter string
	// Scanned: the prefix filter stopped after reading scanBound sessions without filling the
	// page; NextAfter continues the scan.
	Scanned bool
}

// Paging of the sessions list.
const (
	sessionsPage = 50
	scanBound    = 20000
)

func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request, id identity) {
	q := r.URL.Query()
	state, prefix, after := q.Get("state"), q.Get("prefix"), q.Get("after")
	p, err := listParams(state)
	if err != nil {
		c.failOp(w, r, err)
		return
	}
	data := sessionsList{State: state, Prefix: prefix, States: sessionStates, Sessions: []operator.SessionInfo{}}
	if prefix == "" {
		p.After, p.Limit = after, sessionsPage
		res, err := c.cfg.Operations.List(r.Context(), p)
		if err != nil {
			c.failOp(w, r, err)
			return
		}
		data.Sessions, data.NextAfter = res.Sessions, res.NextAfter
		c.render(w, r, http.StatusOK, "sessions", page{Title: "Sessions", ID: id, Data: data})
		return
	}
	// A prefix filters the ordered list: its pages are read until the page is full, the list
	// ends, or scanBound sessions were read (NextAfter then continues the scan).
	p.After, p.Limit = after, 500
	for scanned := 0; ; {
		res, err := c.cfg.Operations.List(r.Context(), p)
		if err != nil {
			c.failOp(w, r, err)
			return
		}
		for _, s := range res.Sessions {
			if len(data.Sessions) == sessionsPage {
				data.NextAfter = data.Sessions[len(data.Sessions)-1].SessionID
				break
			}
			p.After = s.SessionID
			if strings.HasPrefix(s.SessionID, prefix) {
				data.Sessions = append(data.Sessions, s)
			}
		}
		scanned += len(res.Sessions)
		if data.NextAfter != "" || !res.Truncated {
			break
		}
		if scanned >= scanBound {
			data.NextAfter, data.Scanned = p.After, true
			break
		}
	}
	c.render(w, r, http.StatusOK, "sessions", page{Title: "Sessions", ID: id, Data: data})
}

// ---- a session ----

// showWait bounds a session page's wait for a worker to release the session, whose lock the
// page needs to peek its messages (and, with Service Bus session state, to read its state): a
// worker holds a parked session only for a moment when the broker offers it.
const showWait = 3 * time.Second

func (c *Console) sessionPage(w http.ResponseWriter, r *http.Request, id identity) {
	res, err := c.cfg.Operations.Show(r.Context(), operator.ShowParams{SessionID: r.URL.Query().Get("id"), Wait: showWait})
	if err != nil {
		c.failOp(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "session", page{Title: "Session " + res.Session.SessionID, ID: id, Data: res})
}

// ---- dead letters ----

// deadLetterList is the dead letters page's data: those of the dead-letter queue (Messages, with
// Unread on SQS) and those the state store holds (Held).
type deadLetterList struct {
	Session, Reason string
	Messages        []operator.BrokerMessage
	Held            []operator.HeldInfo
	Unread          int
	Truncated       bool
}

// deadLettersShown bounds the dead letters listed.
const deadLettersShown = 500

func (c *Console) deadLettersPage(w http.ResponseWriter, r *http.Request, id identity) {
	q := r.URL.Query()
	data := deadLetterList{Session: q.Get("session"), Reason: q.Get("reason")}
	res, err := c.cfg.Operations.DLQList(r.Context(), operator.DLQListParams{SessionID: data.Session, Reason: data.Reason, Limit: deadLettersShown})
	if err != nil {
		c.failOp(w, r, err)
		return
	}
	data.Messages, data.Held, data.Unread, data.Truncated = res.Messages, res.Held, res.Unread, res.Truncated
	c.render(w, r, http.StatusOK, "deadletters", page{Title: "Dead letters", ID: id, Data: data})
}

// property is one application property as the message page shows it.
type property struct{ Name, Value, Type string }

// messageView is the message page's data: the body as text, never as HTML.
type messageView struct {
	*operator.DLQMessage
	Props []property
	Text  string
}

func (c *Console) messagePage(w http.ResponseWriter, r *http.Request, id identity) {
	n, err := strconv.ParseInt(r.URL.Query().Get("seq"), 10, 64)
	if err != nil {
		c.failOp(w, r, fmt.Errorf("%w: seq must be a broker sequence number", operator.ErrInvalidInput))
		return
	}
	m, err := c.cfg.Operations.DLQMessage(r.Context(), operator.DLQMessageParams{BrokerSequence: n, MaxBody: c.cfg.BodyPreview})
	if err != nil {
		c.failOp(w, r, err)
		return
	}
	v := messageView{DLQMessage: m, Text: strings.ToValidUTF8(string(m.Body), "\uFFFD")}
	for _, k := range slices.Sorted(maps.Keys(m.Properties)) {
		v.Props = append(v.Props, property{Name: k, Value: fmt.Sprint(m.Properties[k]), Type: fmt.Sprintf("%T", m.Properties[k])})
	}
	c.render(w, r, http.StatusOK, "message", page{Title: fmt.Sprintf("Dead letter %d", n), ID: id, Data: v})
}
