package admintransport_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/admintransport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		connStr    string
		wantTarget string // "" means pass-through
		wantErr    bool
	}{
		{"emulator with port", "Endpoint=sb://localhost:5673;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true", "localhost:5673", false},
		{"emulator without port uses the AMQP port", "Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;", "localhost:5672", false},
		{"keys are case-insensitive", "endpoint=sb://127.0.0.1:9000/;usedevelopmentemulator=True", "127.0.0.1:9000", false},
		{"flag as 1", "Endpoint=sb://h:1;UseDevelopmentEmulator=1", "h:1", false},
		{"flag false", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=false", "", false},
		{"cloud namespace", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v", "", false},
		{"no endpoint", "SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true", "", true},
		{"endpoint not a URL", "Endpoint=localhost;UseDevelopmentEmulator=true", "", true},
		{"bad flag", "Endpoint=sb://h;UseDevelopmentEmulator=yes please", "", true},
		{"segment without =", "Endpoint=sb://h;garbage", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, err := admintransport.New(tt.connStr)
			if tt.wantErr {
				require.ErrorIs(t, err, admintransport.ErrInvalidConnectionString)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantTarget, tr.Target())
			require.Equal(t, tt.wantTarget != "", tr.Emulator())
		})
	}
}

// recorder is an http.RoundTripper that records requests and answers 204.
type recorder struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: req, Header: http.Header{}}, nil
}

func TestRoundTripRewritesEmulatorRequests(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	tr, err := admintransport.NewWithOptions("Endpoint=sb://localhost:5673;UseDevelopmentEmulator=true", &admintransport.Options{Base: rec})
	require.NoError(t, err)

	req, err := http.NewRequestWithContext(context.Background(), http.MethodPut, "https://localhost:5673/q1?api-version=2024-05", strings.NewReader("<entry/>"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "SharedAccessSignature sr=x")
	resp, err := tr.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	require.Len(t, rec.reqs, 1)
	sent := rec.reqs[0]
	require.Equal(t, "http://localhost:5673/q1?api-version=2024-05", sent.URL.String())
	require.Equal(t, "localhost:5673", sent.Host)
	require.Equal(t, "SharedAccessSignature sr=x", sent.Header.Get("Authorization"))
	body, err := io.ReadAll(sent.Body)
	require.NoError(t, err)
	require.Equal(t, "<entry/>", string(body))
	// The caller's request is untouched (the SDK may retry it).
	require.Equal(t, "https://localhost:5673/q1?api-version=2024-05", req.URL.String())
}

func TestRoundTripAddrOverride(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	tr, err := admintransport.NewWithOptions("Endpoint=sb://localhost;UseDevelopmentEmulator=true",
		&admintransport.Options{Addr: "127.0.0.1:8080", Base: rec})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://localhost/$namespaceinfo", nil)
	require.NoError(t, err)
	_, err = tr.RoundTrip(req)
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:8080/$namespaceinfo", rec.reqs[0].URL.String())
}

func TestRoundTripPassesCloudRequestsThrough(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	tr, err := admintransport.NewWithOptions("Endpoint=sb://ns.servicebus.windows.net/", &admintransport.Options{Base: rec})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://ns.servicebus.windows.net/q", nil)
	require.NoError(t, err)
	_, err = tr.Do(req)
	require.NoError(t, err)
	require.Same(t, req, rec.reqs[0])
}

func TestRoundTripReportsDialErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close() // nothing listens there any more
	tr, err := admintransport.NewWithOptions("Endpoint=sb://"+addr+";UseDevelopmentEmulator=true", &admintransport.Options{Base: &http.Transport{}})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://"+addr+"/q", nil)
	require.NoError(t, err)
	_, err = tr.Do(req)
	require.Error(t, err)
	require.Contains(t, err.Error(), "admintransport: GET /q via "+addr)
}

const namespaceInfo = `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
	`<NamespaceInfo xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">` +
	`<CreatedTime>2026-01-01T00:00:00Z</CreatedTime><MessagingSKU>Standard</MessagingSKU>` +
	`<ModifiedTime>2026-01-02T00:00:00Z</ModifiedTime><Name>fake</Name></NamespaceInfo></content></entry>`

func TestNewAdminClientTalksPlainHTTP(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" auth="+strings.SplitN(r.Header.Get("Authorization"), " ", 2)[0])
		mu.Unlock()
		_, _ = io.WriteString(w, namespaceInfo)
	}))
	t.Cleanup(srv.Close)
	hc := &http.Transport{}
	t.Cleanup(hc.CloseIdleConnections)

	connStr := "Endpoint=sb://" + srv.Listener.Addr().String() + ";SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true"
	client, err := admintransport.NewAdminClient(connStr, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: &http.Client{Transport: hc},
		Retry:     policy.RetryOptions{MaxRetries: -1},
	}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	props, err := client.GetNamespaceProperties(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, "fake", props.Name)
	require.Equal(t, time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), props.ModifiedTime)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"GET /$namespaceinfo?api-version=2024-05 auth=SharedAccessSignature"}, seen)
}

func TestNewAdminClientErrors(t *testing.T) {
	t.Parallel()
	_, err := admintransport.NewAdminClient("Endpoint=sb://h;UseDevelopmentEmulator=maybe", nil)
	require.ErrorIs(t, err, admintransport.ErrInvalidConnectionString)

	// The SDK's own checks still apply: a key is required.
	_, err = admintransport.NewAdminClient("Endpoint=sb://h:1;UseDevelopmentEmulator=true", nil)
	require.Error(t, err)
	require.False(t, errors.Is(err, admintransport.ErrInvalidConnectionString))

	client, err := admintransport.NewAdminClient("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v", nil)
	require.NoError(t, err)
	require.NotNil(t, client)
}
