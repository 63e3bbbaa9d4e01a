package atom_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/admintransport"
	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator/atom"
	"github.com/seqbus/seqbus/emulator/broker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	keyName = "RootManageSharedAccessKey"
	key     = "test-key-0123456789"
)

type bundle struct {
	b      *broker.Broker
	clk    *clock.Fake
	srv    *httptest.Server
	hc     *http.Client
	client *admin.Client
	// connStr is the emulator connection string of srv.
	connStr string
}

// setup starts the handler over a fresh broker on an httptest server and returns an admin
// client that reaches it through admintransport.
func setup(t testing.TB) *bundle {
	t.Helper()
	clk := clock.NewFake(time.Now().Truncate(time.Second))
	b := broker.New(broker.Config{Clock: clk})
	t.Cleanup(b.Close)
	srv := httptest.NewServer(atom.NewHandler(b, atom.Config{KeyName: keyName, Key: key, Clock: clk, Namespace: "testns"}))
	t.Cleanup(srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	tb := &bundle{
		b: b, clk: clk, srv: srv, hc: &http.Client{Transport: tr},
		connStr: connString(srv, key),
	}
	tb.client = tb.newClient(t, tb.connStr)
	return tb
}

func connString(srv *httptest.Server, k string) string {
	return fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true",
		srv.Listener.Addr(), keyName, k)
}

func (tb *bundle) newClient(t testing.TB, connStr string) *admin.Client {
	t.Helper()
	c, err := admintransport.NewAdminClient(connStr, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: tb.hc,
		Retry:     policy.RetryOptions{MaxRetries: -1},
	}})
	require.NoError(t, err)
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// requireStatus asserts err is an *azcore.ResponseError with the given status.
func requireStatus(t *testing.T, err error, status int) {
	t.Helper()
	require.Error(t, err)
	var re *azcore.ResponseError
	require.True(t, errors.As(err, &re), "want *azcore.ResponseError, got %T: %v", err, err)
	require.Equal(t, status, re.StatusCode, "error: %v", err)
}

// sign builds a SAS token as the SDK does.
func sign(keyName, key, uri string, expiry time.Time) string {
	sr := strings.ToLower(url.QueryEscape(uri))
	se := fmt.Sprint(expiry.Unix())
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(sr + "\n" + se))
	sig := url.QueryEscape(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return fmt.Sprintf("SharedAccessSignature sr=%s&sig=%s&se=%s&skn=%s", sr, sig, se, keyName)
}

// raw sends a request straight to the handler with the given Authorization header
// ("" for none) and returns the status and body.
func (tb *bundle) raw(t *testing.T, method, path, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), method, tb.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := tb.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// token signs a namespace-wide token valid for an hour.
func (tb *bundle) token(k string) string {
	return sign(keyName, k, "https://"+tb.srv.Listener.Addr().String()+"/", time.Now().Add(time.Hour))
}

func (tb *bundle) lookup(t *testing.T, addr string) *broker.Entity {
	t.Helper()
	e, err := tb.b.Lookup(addr)
	require.NoError(t, err)
	return e
}

func send(t *testing.T, e *broker.Entity, msgs ...*amqp.Message) {
	t.Helper()
	require.NoError(t, e.Send(context.Background(), msgs))
}

func ptr[T any](v T) *T { return &v }
