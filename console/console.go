package console

import (
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/worker"
)

// Operations are the operator calls the console makes; *operator.Operator implements them.
type Operations interface {
	List(ctx context.Context, p operator.ListParams) (*operator.ListResult, error)
	Show(ctx context.Context, p operator.ShowParams) (*operator.ShowResult, error)
	Resume(ctx context.Context, p operator.ResumeParams) (*operator.ResumeResult, error)
	Skip(ctx context.Context, p operator.SkipParams) (*operator.SkipResult, error)
	RetryNow(ctx context.Context, p operator.RetryNowParams) (*operator.RetryNowResult, error)
	DLQList(ctx context.Context, p operator.DLQListParams) (*operator.DLQListResult, error)
	DLQMessage(ctx context.Context, p operator.DLQMessageParams) (*operator.DLQMessage, error)
	DLQReplay(ctx context.Context, p operator.DLQReplayParams) (*operator.DLQReplayResult, error)
}

var _ Operations = (*operator.Operator)(nil)

// Probe checks that one dependency answers (the broker, the store).
type Probe struct {
	Name  string
	Check func(ctx context.Context) error
}

// Config configures a console. Operations and at least one of Token, ReadToken and
// ProxyUserHeader are required.
type Config struct {
	Operations Operations
	// Entity names the entity in the page header.
	Entity string
	// Token authenticates the act role, ReadToken the read role (SEQBUS_CONSOLE_TOKEN,
	// SEQBUS_CONSOLE_READ_TOKEN).
	Token, ReadToken string
	// ProxyUserHeader, when set, is trusted as the user's name from an authenticating proxy,
	// with the act role (SEQBUS_CONSOLE_PROXY_USER_HEADER).
	ProxyUserHeader string
	// Scale returns the last evaluation of the scaling signal (nil: the overview shows none).
	Scale func() (worker.Scale, bool)
	// Probes are checked for the overview (the broker, the store).
	Probes []Probe
	// ActionWait bounds an action's wait for a worker to release a session, or for dead letters
	// another receiver holds (default 30s).
	ActionWait time.Duration
	// BodyPreview bounds the bytes of a message body shown (default 4096).
	BodyPreview int
	// LoginSessionTTL is how long a login lasts (default 12h).
	LoginSessionTTL time.Duration
	// Logger receives the action log (info) and the access log (debug) (default: discard).
	Logger *slog.Logger
	// Clock tells the time of logins and of the login rate limit (default clock.Real()).
	Clock clock.Clock
}

// Console serves the web console; it is an http.Handler.
type Console struct {
	cfg     Config
	log     *slog.Logger
	auth    *authenticator
	pages   map[string]*template.Template
	handler http.Handler

	// The last overview, served again for overviewTTL.
	ovMu sync.Mutex
	ov   *overview
	ovAt time.Time
}

//go:embed assets
var assets embed.FS

//go:embed templates
var templates embed.FS

// Roles.
const (
	roleRead = "read"
	roleAct  = "act"
)

// New checks cfg and builds the console. It connects to nothing.
func New(cfg Config) (*Console, error) {
	var errs []error
	if cfg.Operations == nil {
		errs = append(errs, errors.New("console: Config.Operations is required"))
	}
	if cfg.Token == "" && cfg.ReadToken == "" && cfg.ProxyUserHeader == "" {
		errs = append(errs, errors.New("console: no way to authenticate: set Config.Token, ReadToken or ProxyUserHeader"))
	}
	if cfg.Token != "" && cfg.Token == cfg.ReadToken {
		errs = append(errs, errors.New("console: Config.ReadToken must differ from Config.Token"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.ActionWait = cmp.Or(cfg.ActionWait, 30*time.Second)
	cfg.BodyPreview = cmp.Or(cfg.BodyPreview, 4096)
	cfg.LoginSessionTTL = cmp.Or(cfg.LoginSessionTTL, 12*time.Hour)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("console: drawing the CSRF key: %w", err)
	}
	c := &Console{cfg: cfg, log: cfg.Logger, auth: newAuthenticator(cfg, key)}
	var err error
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	c.handler = c.routes()
	return c, nil
}

// ServeHTTP serves the console.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

// routes builds the handler: the mux, inside the cross-origin check, the security headers and
// the access log.
func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /login", c.loginPage)
	mux.HandleFunc("POST /login", c.login)
	mux.Handle("POST /logout", c.authed(roleRead, c.logout))
	mux.Handle("GET /{$}", c.authed(roleRead, c.overviewPage))
	mux.Handle("GET /api/overview", c.authed(roleRead, c.overviewJSON))
	mux.Handle("GET /sessions", c.authed(roleRead, c.sessionsPage))
	mux.Handle("GET /session", c.authed(roleRead, c.sessionPage))
	mux.Handle("GET /deadletters", c.authed(roleRead, c.deadLettersPage))
	mux.Handle("GET /deadletter", c.authed(roleRead, c.messagePage))
	mux.Handle("GET /confirm", c.authed(roleAct, c.confirmPage))
	mux.Handle("POST /act", c.authed(roleAct, c.act))
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusForbidden, errors.New("cross-origin request refused"))
	}))
	return c.accessLog(securityHeaders(cop.Handler(mux)))
}

// securityHeaders sets the headers every response carries.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// statusWriter records the status of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

// accessLog logs each request at debug level by its route pattern: never its path or query,
// which carry session ids.
func (c *Console) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := c.cfg.Clock.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		c.log.DebugContext(r.Context(), "console: request",
			slog.String("method", r.Method), slog.String("route", cmp.Or(r.Pattern, "unmatched")),
			slog.Int("status", cmp.Or(sw.status, http.StatusOK)),
			slog.Duration("took", c.cfg.Clock.Now().Sub(start)))
	})
}
