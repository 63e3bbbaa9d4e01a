package console_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/console"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/testio"
	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// screenshotsEnv names a directory the browser test writes its screenshots to (the docs keep
// theirs in docs/images); unset, it writes none.
const screenshotsEnv = "SEQBUS_TEST_SCREENSHOTS"

// browser returns the path of a Chromium or Chrome, skipping the test without one.
func browser(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH (Debian: apt-get install chromium); the console's browser test did not run")
	return ""
}

// recorder is the worker's handler: it records what it handled per session and fails one
// message while broken.
type recorder struct {
	mu      sync.Mutex
	handled map[string][]int64
	broken  map[string]bool
}

func (r *recorder) Handle(_ context.Context, m *sequencer.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.broken[fmt.Sprintf("%s/%d", m.SessionID, m.Sequence)] {
		return errors.New(`inventory service refused <order id="3">: out of stock`)
	}
	r.handled[m.SessionID] = append(r.handled[m.SessionID], m.Sequence)
	return nil
}

func (r *recorder) of(id string) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.handled[id])
}

func (r *recorder) fix(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.broken, key)
}

// TestBrowserParkedSessionRoundTrip: with the emulator and a worker, a session parked on a poison
// message appears on the overview; the operator logs in, opens it, sees the failing message and
// the error, replays the dead letter and resumes; the session then runs to its end in order and
// leaves the parked list.
func TestBrowserParkedSessionRoundTrip(t *testing.T) {
	t.Parallel()
	chrome := browser(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues:        map[string]broker.EntityProperties{queue: {RequiresSession: true}},
		ClientOptions: sbadapter.ClientOptions(nil),
	})
	rec := &recorder{handled: map[string][]int64{}, broken: map[string]bool{"tenant-x/3": true}}
	cfg := worker.DefaultConfig()
	cfg.ConnectionString, cfg.Queue = srv.ConnectionString(), queue
	cfg.HTTPAddr = worker.HTTPOff
	cfg.Handler = sequencer.HandlerFunc(rec.Handle)
	cfg.MaxHandlerAttempts = 1
	cfg.SessionIdleTimeout = 300 * time.Millisecond
	cfg.SweepInterval = 300 * time.Millisecond
	w, err := worker.New(cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(ctx))) })

	conn, err := worker.Connect(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.WithoutCancel(ctx)) })
	op, err := operator.New(operator.Config{Entity: cfg.Entity, Client: conn.Management, Sessions: conn.Source, Store: conn.Store, Lister: conn.Lister})
	require.NoError(t, err)
	logs := &testio.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("console log:\n%s", logs.String())
		}
	})
	con, err := console.New(console.Config{
		Operations: op, Entity: cfg.Entity.String(), Token: actToken,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Probes: []console.Probe{{Name: "service bus", Check: conn.ManagementSource.Probe}},
	})
	require.NoError(t, err)
	web := httptest.NewServer(con)
	t.Cleanup(web.Close)
	_, port, err := net.SplitHostPort(web.Listener.Addr().String())
	require.NoError(t, err)
	base := "http://localhost:" + port // a secure context for the browser: the login cookie is Secure

	sender, err := srv.Client.NewSender(queue, nil)
	require.NoError(t, err)
	for s := int64(1); s <= 5; s++ {
		sid, mid := "tenant-x", fmt.Sprintf("tenant-x/%d", s)
		require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{
			SessionID: &sid, MessageID: &mid, Body: fmt.Appendf(nil, `{"order": %d, "note": "<b>step</b>"}`, s),
			ApplicationProperties: map[string]any{"Sequence": s, "IsLast": s == 5},
		}, nil))
	}
	parked := func() bool {
		res, err := op.List(ctx, operator.ListParams{Parked: true})
		require.NoError(t, err)
		return slices.ContainsFunc(res.Sessions, func(s operator.SessionInfo) bool { return s.SessionID == "tenant-x" && s.Parked != nil })
	}
	require.Eventually(t, parked, time.Minute, 50*time.Millisecond, "the session parks on sequence 3")
	require.Equal(t, []int64{1, 2}, rec.of("tenant-x"))

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	defer func() {
		cancelBrowser()
		_ = chromedp.Cancel(bctx)
	}()
	shots := os.Getenv(screenshotsEnv)
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			if shots == "" {
				return nil
			}
			var png []byte
			if err := chromedp.FullScreenshot(&png, 100).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name), png, 0o644)
		})
	}
	sessionLink := `a[href="/session?id=tenant-x"]`

	// The overview shows the parked session; logging in first.
	var overview, parkedCount string
	require.NoError(t, chromedp.Run(bctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", actToken, chromedp.ByID),
		chromedp.Click("#login", chromedp.ByID),
		chromedp.WaitVisible("#live", chromedp.ByID),
		chromedp.Text("main", &overview, chromedp.ByQuery),
		chromedp.Text(`[data-count="parked"]`, &parkedCount, chromedp.ByQuery),
		shot("console-overview.png"),
	))
	require.Equal(t, "1", strings.TrimSpace(parkedCount))
	require.Contains(t, overview, "tenant-x")
	require.Contains(t, overview, "HandlerFailed")

	// The session's page: the parked sequence, the error, the dead letter; the message's page.
	var reason, facts, body string
	require.NoError(t, chromedp.Run(bctx,
		chromedp.Click(sessionLink, chromedp.ByQuery),
		chromedp.WaitVisible("#parked-reason", chromedp.ByID),
		chromedp.Text("#parked-reason", &reason, chromedp.ByID),
		chromedp.Text("dl.facts", &facts, chromedp.ByQuery),
		shot("console-session.png"),
		chromedp.Click(`a[href^="/deadletter?seq="]`, chromedp.ByQuery),
		chromedp.WaitVisible("#body", chromedp.ByID),
		chromedp.Text("#body", &body, chromedp.ByID),
	))
	require.Contains(t, reason, `inventory service refused <order id="3">: out of stock`, "the error, as text")
	require.Contains(t, facts, "sequence 3")
	require.Equal(t, `{"order": 3, "note": "<b>step</b>"}`, body, "the body, as text")

	// The handler is fixed; the operator replays the dead letter, then resumes.
	rec.fix("tenant-x/3")
	var done string
	require.NoError(t, chromedp.Run(bctx,
		chromedp.Navigate(base+"/session?id=tenant-x"),
		chromedp.Click("#replay", chromedp.ByID),
		chromedp.WaitVisible("#confirm", chromedp.ByID),
		chromedp.Click("#confirm", chromedp.ByID),
		chromedp.WaitNotPresent("#confirm", chromedp.ByID),
		chromedp.Text("main", &done, chromedp.ByQuery),
	))
	require.Contains(t, done, `"sent": 1`)
	require.NoError(t, chromedp.Run(bctx,
		chromedp.Navigate(base+"/session?id=tenant-x"),
		chromedp.Click("#resume", chromedp.ByID),
		chromedp.WaitVisible("#confirm", chromedp.ByID),
		chromedp.Click("#confirm", chromedp.ByID),
		chromedp.WaitNotPresent("#confirm", chromedp.ByID),
		chromedp.Text("main", &done, chromedp.ByQuery),
	))
	require.Contains(t, done, `"resumed"`)

	require.Eventually(t, func() bool { return len(rec.of("tenant-x")) == 5 }, time.Minute, 50*time.Millisecond, "the session runs to its end")
	require.Equal(t, []int64{1, 2, 3, 4, 5}, rec.of("tenant-x"), "in order")
	require.False(t, parked(), "no longer parked")
	require.NoError(t, chromedp.Run(bctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible("#live", chromedp.ByID),
		chromedp.Text(`[data-count="parked"]`, &parkedCount, chromedp.ByQuery),
		chromedp.Text("main", &overview, chromedp.ByQuery),
	))
	require.Equal(t, "0", strings.TrimSpace(parkedCount))
	require.Contains(t, overview, "No parked session.")

	// On a phone's screen the pages fit its width: only tables scroll, inside their box.
	for _, path := range []string{"/", "/session?id=tenant-x", "/deadletters"} {
		var overflow bool
		require.NoError(t, chromedp.Run(bctx,
			chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile),
			chromedp.Navigate(base+path),
			chromedp.WaitVisible("h1", chromedp.ByQuery),
			chromedp.Evaluate(`document.documentElement.scrollWidth > document.documentElement.clientWidth`, &overflow),
		))
		if path == "/session?id=tenant-x" {
			require.NoError(t, chromedp.Run(bctx, shot("console-session-phone.png")))
		}
		require.False(t, overflow, "%s is wider than a phone's screen", path)
	}
}
