package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seqbus/seqbus/clock"
)

// ops is what a seqbus process serves to its operators: /metrics, /healthz and /readyz, with a
// readiness check run every interval. The worker Client and the Relay each have one.
type ops struct {
	reg      *prometheus.Registry
	interval time.Duration
	// check returns why the process is not ready (nothing when it is), within ctx.
	check func(ctx context.Context) []string
	// readyGauge mirrors the result (seqbus_ready).
	readyGauge prometheus.Gauge
	log        *slog.Logger
	// scale, when set, answers GET /scale (the scaling signal).
	scale http.HandlerFunc

	mu      sync.Mutex
	ok      bool
	reasons []string
	checked time.Time

	srv *http.Server
	ln  net.Listener
}

// listen starts serving on addr ("" serves nothing). The error names HTTPAddr.
func (o *ops) listen(addr string) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return configError("HTTPAddr", fmt.Errorf("HTTP server: %w", err))
	}
	o.ln = ln
	o.srv = &http.Server{Handler: o.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = o.srv.Serve(ln) }()
	return nil
}

// addr returns the address served ("" when nothing is).
func (o *ops) addr() string {
	if o.ln == nil {
		return ""
	}
	return o.ln.Addr().String()
}

// shutdown stops serving, waiting up to 5s for requests in flight.
func (o *ops) shutdown(ctx context.Context) {
	if o.srv == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = o.srv.Shutdown(sctx)
}

func (o *ops) set(reasons []string, at time.Time) (wasOK bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	wasOK = o.ok
	o.ok, o.reasons, o.checked = len(reasons) == 0, reasons, at
	return wasOK
}

func (o *ops) get() (ok bool, reasons []string, checked time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ok, o.reasons, o.checked
}

// service checks readiness every interval on clk until it is stopped; each check gets one
// interval.
func (o *ops) service(clk clock.Clock) *base {
	return newBase("worker: readiness", o.log, func(soft, _ context.Context) error {
		every(soft, clk, o.interval, func(ctx context.Context) { o.checkOnce(ctx, clk) })
		return nil
	})
}

func (o *ops) checkOnce(ctx context.Context, clk clock.Clock) {
	cctx, cancel := context.WithTimeout(ctx, o.interval)
	reasons := o.check(cctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	wasOK := o.set(reasons, clk.Now())
	switch {
	case len(reasons) == 0:
		o.readyGauge.Set(1)
		if !wasOK {
			o.log.InfoContext(ctx, "worker: ready")
		}
	default:
		o.readyGauge.Set(0)
		if wasOK {
			o.log.WarnContext(ctx, "worker: not ready", slog.Any("reasons", reasons))
		}
	}
}

// handler serves /metrics, /healthz (the process runs), /readyz (200 when the last check
// passed, 503 with the reasons otherwise) and, when set, /scale.
func (o *ops) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{Registry: o.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	if o.scale != nil {
		mux.HandleFunc("GET /scale", o.scale)
	}
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, reasons, checked := o.get()
		body := map[string]any{"status": "ready"}
		if !checked.IsZero() {
			body["checked_at"] = checked.UTC().Format(time.RFC3339Nano)
		}
		status := http.StatusOK
		if !ok {
			status, body["status"] = http.StatusServiceUnavailable, "not ready"
			if checked.IsZero() {
				reasons = []string{"starting: not checked yet"}
			}
			body["reasons"] = reasons
		}
		writeJSON(w, status, body)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
