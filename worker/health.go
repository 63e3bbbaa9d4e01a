package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readiness is the result of the last readiness check.
type readiness struct {
	mu      sync.Mutex
	ok      bool
	reasons []string
	checked time.Time
}

func (r *readiness) set(reasons []string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ok, r.reasons, r.checked = len(reasons) == 0, reasons, at
}

func (r *readiness) get() (ok bool, reasons []string, checked time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok, r.reasons, r.checked
}

// checkReady checks the broker and the database once, each within the ready interval.
func (c *Client) checkReady(ctx context.Context) []string {
	var reasons []string
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyInterval)
	defer cancel()
	if err := c.mgmtSource.Probe(ctx); err != nil {
		reasons = append(reasons, fmt.Sprintf("service bus: %v", err))
	}
	if c.pool != nil {
		if err := c.pool.Ping(ctx); err != nil {
			reasons = append(reasons, fmt.Sprintf("postgres: %v", err))
		}
	}
	return reasons
}

// readyLoop checks readiness every ready interval until ctx ends.
func (c *Client) readyLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.ReadyInterval)
	defer t.Stop()
	for {
		reasons := c.checkReady(ctx)
		if ctx.Err() != nil {
			return
		}
		wasOK, _, _ := c.ready.get()
		c.ready.set(reasons, time.Now())
		if len(reasons) == 0 {
			c.m.ready.Set(1)
		} else {
			c.m.ready.Set(0)
			if wasOK {
				c.log.WarnContext(ctx, "worker: not ready", "reasons", reasons)
			}
		}
		if len(reasons) == 0 && !wasOK {
			c.log.InfoContext(ctx, "worker: ready")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// httpHandler serves /metrics, /healthz (the process runs) and /readyz (the broker, and the
// database with the postgres store, answered the last check: 200, or 503 with the reasons).
func (c *Client) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.reg, promhttp.HandlerOpts{Registry: c.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, reasons, checked := c.ready.get()
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
