package atom

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/sqlrule"
)

// Defaults for Config fields left empty. They are the well-known values of Microsoft's
// Service Bus emulator, which the seqbus emulator uses too.
const (
	DefaultKeyName   = "RootManageSharedAccessKey"
	DefaultKey       = "SAS_KEY_VALUE"
	DefaultNamespace = "sbemulatorns"
)

// maxBodyBytes bounds a request body; real descriptions are a few kilobytes.
const maxBodyBytes = 1 << 20

// defaultPageSize is the page size of list requests without $top, as in Service Bus.
const defaultPageSize = 100

// Config configures the handler. The zero value is usable.
type Config struct {
	// KeyName and Key are the shared access key every request's SAS token must be
	// signed with. Defaults DefaultKeyName and DefaultKey.
	KeyName string
	Key     string
	// Namespace is the name reported by GET /$namespaceinfo. Default DefaultNamespace.
	Namespace string
	// Clock supplies the time for token expiry and namespace timestamps. Default
	// clock.Real().
	Clock clock.Clock
	// Logger receives one debug record per request and the server errors. Default:
	// discard.
	Logger *slog.Logger
}

// handler serves the management API over one broker.
type handler struct {
	b       *broker.Broker
	cfg     Config
	log     *slog.Logger
	created time.Time

	// mu serialises changes (broker call plus side tables) and guards the side tables.
	mu sync.Mutex
	// extras holds the properties the broker does not model, by lower-cased entity path.
	extras map[string]entityExtras
	// rules holds what the broker does not keep of SQL rules (the expressions as the
	// client wrote them, with their parameters), by lower-cased "topic/sub/rule".
	rules map[string]ruleExtras
}

// NewHandler returns the Service Bus management API (ATOM over HTTP) for b, as the
// azservicebus admin client speaks it. Entities created through it are created with the
// same broker calls as those of a Config.json file.
func NewHandler(b *broker.Broker, cfg Config) http.Handler {
	if b == nil {
		panic("atom.NewHandler: broker must not be nil")
	}
	cfg.KeyName = cmp.Or(cfg.KeyName, DefaultKeyName)
	cfg.Key = cmp.Or(cfg.Key, DefaultKey)
	cfg.Namespace = cmp.Or(cfg.Namespace, DefaultNamespace)
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &handler{
		b:       b,
		cfg:     cfg,
		log:     cfg.Logger,
		created: cfg.Clock.Now(),
		extras:  make(map[string]entityExtras),
		rules:   make(map[string]ruleExtras),
	}
}

// apiError is an error with the HTTP status it is answered with.
type apiError struct {
	status int
	err    error
}

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

func badRequest(format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, err: fmt.Errorf(format, args...)}
}

// statusOf maps an error to the HTTP status of its answer.
func statusOf(err error) int {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae.status
	case errors.Is(err, errUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, broker.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, broker.ErrEntityExists):
		return http.StatusConflict
	case errors.Is(err, broker.ErrInvalidConfig), errors.Is(err, broker.ErrNotAllowed):
		return http.StatusBadRequest
	case errors.Is(err, broker.ErrClosed):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// route is a parsed request path.
type route struct {
	kind     routeKind
	entity   string // queue or topic name
	topic    string
	sub      string
	rule     string
	listWhat string // "queues" or "topics" for routeResources
}

type routeKind int

const (
	routeNotFound routeKind = iota
	routeNamespace
	routeResources     // $Resources/Queues, $Resources/Topics
	routeEntity        // queue or topic
	routeSubscriptions // list of a topic's subscriptions
	routeSubscription
	routeRules // list of a subscription's rules
	routeRule
)

func parseRoute(path string) route {
	path = strings.TrimPrefix(path, "/")
	if strings.HasPrefix(path, "$") {
		path = strings.TrimSuffix(path, "/")
	}
	segs := strings.Split(path, "/")
	n := len(segs)
	eq := strings.EqualFold
	join := func(s []string) string { return strings.Join(s, "/") }
	switch {
	case n == 1 && eq(segs[0], "$namespaceinfo"):
		return route{kind: routeNamespace}
	case n == 2 && eq(segs[0], "$Resources") && (eq(segs[1], "Queues") || eq(segs[1], "Topics")):
		return route{kind: routeResources, listWhat: strings.ToLower(segs[1])}
	case n >= 5 && eq(segs[n-2], "Rules") && eq(segs[n-4], "Subscriptions"):
		r := route{kind: routeRule, topic: join(segs[:n-4]), sub: segs[n-3], rule: segs[n-1]}
		if r.rule == "" {
			r.kind = routeRules
		}
		return r
	case n >= 4 && eq(segs[n-1], "Rules") && eq(segs[n-3], "Subscriptions"):
		return route{kind: routeRules, topic: join(segs[:n-3]), sub: segs[n-2]}
	case n >= 3 && eq(segs[n-2], "Subscriptions"):
		r := route{kind: routeSubscription, topic: join(segs[:n-2]), sub: segs[n-1]}
		if r.sub == "" {
			r.kind = routeSubscriptions
		}
		return r
	case n >= 2 && eq(segs[n-1], "Subscriptions"):
		return route{kind: routeSubscriptions, topic: join(segs[:n-1])}
	}
	name := strings.TrimSuffix(path, "/")
	if name == "" || strings.HasPrefix(name, "$") {
		return route{kind: routeNotFound}
	}
	return route{kind: routeEntity, entity: name}
}

// request carries what the operations need of an HTTP request.
type request struct {
	r    *http.Request
	body []byte
	// update is true for a PUT with If-Match (an update rather than a create).
	update bool
}

// ServeHTTP authenticates the request and dispatches it.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	status, err := h.serve(w, r)
	if err != nil {
		status = statusOf(err)
		h.writeError(w, status, err)
	}
	lvl := slog.LevelDebug
	if status >= http.StatusInternalServerError {
		lvl = slog.LevelError
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", status),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	h.log.LogAttrs(r.Context(), lvl, "atom: request", attrs...)
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request) (int, error) {
	if err := verifySAS(r.Header.Get("Authorization"), h.cfg.KeyName, h.cfg.Key, r.URL.Path, h.cfg.Clock.Now()); err != nil {
		return 0, err
	}
	req := &request{r: r, update: r.Header.Get("If-Match") != ""}
	switch r.Method {
	case http.MethodGet, http.MethodDelete:
	case http.MethodPut:
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
		if err != nil {
			return 0, badRequest("read request body: %w", err)
		}
		if len(body) > maxBodyBytes {
			return 0, &apiError{status: http.StatusRequestEntityTooLarge, err: errors.New("request body too large")}
		}
		req.body = body
	default:
		return 0, &apiError{status: http.StatusMethodNotAllowed, err: fmt.Errorf("method %s not allowed", r.Method)}
	}
	rt := parseRoute(r.URL.Path)
	var (
		status = http.StatusOK
		v      any
		err    error
	)
	switch rt.kind {
	case routeNamespace:
		if r.Method != http.MethodGet {
			return 0, &apiError{status: http.StatusMethodNotAllowed, err: errors.New("$namespaceinfo is read-only")}
		}
		v = h.namespaceInfo(r)
	case routeResources, routeSubscriptions, routeRules:
		if r.Method != http.MethodGet {
			if rt.kind == routeRules && r.Method == http.MethodPut {
				// CreateRule without a name PUTs to …/Rules/ with the name in the body.
				status, v, err = h.rule(req, rt)
				break
			}
			return 0, &apiError{status: http.StatusMethodNotAllowed, err: fmt.Errorf("method %s not allowed on a list", r.Method)}
		}
		v, err = h.list(r, rt)
	case routeEntity:
		status, v, err = h.entity(req, rt.entity)
	case routeSubscription:
		status, v, err = h.subscription(req, rt)
	case routeRule:
		status, v, err = h.rule(req, rt)
	default:
		return 0, &apiError{status: http.StatusNotFound, err: fmt.Errorf("no resource at %q", r.URL.Path)}
	}
	if err != nil {
		return 0, err
	}
	if v == nil { // DELETE
		w.WriteHeader(status)
		return status, nil
	}
	body, err := marshalXML(v)
	if err != nil {
		return 0, err
	}
	ct := "application/atom+xml;type=entry;charset=utf-8"
	if _, ok := v.(outFeed); ok {
		ct = "application/atom+xml;type=feed;charset=utf-8"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return status, nil
}

func (h *handler) writeError(w http.ResponseWriter, status int, err error) {
	body, merr := marshalXML(outError{Code: status, Detail: errorDetail(err)})
	if merr != nil {
		http.Error(w, err.Error(), status)
		return
	}
	w.Header().Set("Content-Type", "application/xml; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// errorDetail is the Detail of an error answer. An invalid SQL filter or action names the
// line and column of the offending token, as Service Bus does.
func errorDetail(err error) string {
	var se *sqlrule.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (invalid SQL expression at line %d, column %d)", err, se.Line, se.Column)
	}
	return err.Error()
}

// ---- shared output helpers ----

// baseURL is the address the client used, as the ids and links of entries show it.
func baseURL(r *http.Request) string {
	scheme := "https"
	if r.TLS == nil {
		scheme = "http"
	}
	return scheme + "://" + r.Host + "/"
}

func (h *handler) entry(r *http.Request, path, title string, created, updated time.Time, body any) outEntry {
	u := baseURL(r) + path + "?api-version=" + cmp.Or(r.URL.Query().Get("api-version"), "2024-05")
	return outEntry{
		ID:        u,
		Title:     outTitle{Type: "text", Text: title},
		Published: formatTime(created),
		Updated:   formatTime(cmp.Or(updated, created)),
		Author:    &outAuthor{Name: h.cfg.Namespace},
		Link:      outLink{Rel: "self", Href: u},
		Content:   outContent{Type: "application/xml", Body: body},
	}
}

func (h *handler) feed(r *http.Request, title string, entries []outEntry) outFeed {
	u := baseURL(r) + strings.TrimPrefix(r.URL.Path, "/") + "?api-version=" + cmp.Or(r.URL.Query().Get("api-version"), "2024-05")
	return outFeed{
		Title:   outTitle{Type: "text", Text: title},
		ID:      u,
		Updated: formatTime(h.cfg.Clock.Now()),
		Link:    outLink{Rel: "self", Href: u},
		Entries: entries,
	}
}

// formatTime renders a timestamp as the admin client parses it: RFC 3339, or
// 0001-01-01T00:00:00 for "never".
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "0001-01-01T00:00:00"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// page applies $skip and $top.
func page[T any](r *http.Request, items []T) ([]T, error) {
	q := r.URL.Query()
	skip, top := 0, defaultPageSize
	if s := q.Get("$skip"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, badRequest("invalid $skip %q", s)
		}
		skip = n
	}
	if s := q.Get("$top"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, badRequest("invalid $top %q", s)
		}
		top = n
	}
	if skip >= len(items) {
		return nil, nil
	}
	items = items[skip:]
	return items[:min(top, len(items))], nil
}

// parseBody reads a PUT body: an ATOM entry whose content holds one description element.
// It returns that element's local name and a function decoding it into v. The element is
// decoded from the whole body, so namespace prefixes declared on the entry (the Python
// SDK declares xsi there and writes xsi:type on a rule's Filter) keep their meaning.
func parseBody(body []byte) (kind string, decode func(v any) error, err error) {
	dec := xml.NewDecoder(bytes.NewReader(body))
	// depth 0: before the entry; 1: inside the entry; 2: inside its content.
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				switch depth {
				case 0:
					return "", nil, badRequest("invalid request body: no entry element")
				case 1:
					return "", nil, badRequest("invalid request body: entry has no content")
				}
				return "", nil, badRequest("invalid request body: content holds no description")
			}
			return "", nil, badRequest("invalid request body: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch {
			case depth == 0 && t.Name.Local == "entry":
				depth = 1
			case depth == 0:
				return "", nil, badRequest("invalid request body: expected an entry element, got %q", t.Name.Local)
			case depth == 1 && t.Name.Local == "content":
				depth = 2
			case depth == 1:
				if err := dec.Skip(); err != nil {
					return "", nil, badRequest("invalid request body: %w", err)
				}
			default:
				start := t
				return t.Name.Local, func(v any) error { return dec.DecodeElement(v, &start) }, nil
			}
		case xml.EndElement:
			if depth == 2 {
				return "", nil, badRequest("invalid request body: content holds no description")
			}
			if depth == 1 {
				return "", nil, badRequest("invalid request body: entry has no content")
			}
		}
	}
}

func (h *handler) namespaceInfo(r *http.Request) outEntry {
	info := outNamespaceInfo{
		XMLNSI:        nsXSI,
		CreatedTime:   formatTime(h.created),
		MessagingSKU:  "Standard",
		ModifiedTime:  formatTime(h.created),
		Name:          h.cfg.Namespace,
		NamespaceType: "Messaging",
	}
	return h.entry(r, "$namespaceinfo", h.cfg.Namespace, h.created, h.created, info)
}
