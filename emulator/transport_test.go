package emulator_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
)

// roundTrip sends a message to queue, receives it and completes it.
func roundTrip(ctx context.Context, t *testing.T, c *azservicebus.Client, queue, body string) {
	t.Helper()
	snd, err := c.NewSender(queue, nil)
	require.NoError(t, err)
	defer func() { _ = snd.Close(context.Background()) }()
	require.NoError(t, snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil))
	rcv, err := c.NewReceiverForQueue(queue, nil)
	require.NoError(t, err)
	defer func() { _ = rcv.Close(context.Background()) }()
	msgs := receiveN(ctx, t, rcv, 1)
	require.Equal(t, body, string(msgs[0].Body))
	require.NoError(t, rcv.CompleteMessage(ctx, msgs[0], nil))
	peeked, err := rcv.PeekMessages(ctx, 1, nil)
	require.NoError(t, err, "$management works over the transport")
	require.Empty(t, peeked)
}

// TestTLSServesAMQPAndManagementOnOnePort: in TLS mode the AMQP port speaks
// AMQPS to the Go SDK (a connection string without UseDevelopmentEmulator,
// trusting the generated certificate) and HTTPS to the admin client, and
// refuses plain AMQP.
func TestTLSServesAMQPAndManagementOnOnePort(t *testing.T) {
	t.Parallel()
	srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"tls-q": {}}, TLS: true})
	ctx := testCtx(t)
	require.NotContains(t, srv.ConnectionString(), "UseDevelopmentEmulator", "the SDK speaks TLS only without it")
	pem, err := os.ReadFile(srv.CertFile())
	require.NoError(t, err, "the generated certificate is written for clients to trust")
	require.Contains(t, string(pem), "BEGIN CERTIFICATE")

	roundTrip(ctx, t, srv.Client, "tls-q", "over tls")

	admin := srv.NewAdminClient(t)
	_, err = admin.CreateQueue(ctx, "created-over-https", nil)
	require.NoError(t, err, "the management API answers HTTPS on the AMQP port")
	_, err = srv.Broker().Lookup("created-over-https")
	require.NoError(t, err)

	_, err = amqp.Dial(ctx, "amqp://"+srv.AMQPAddr(), &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	require.Error(t, err, "plain AMQP is refused on the TLS port")

	untrusted, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
	require.NoError(t, err)
	defer func() { _ = untrusted.Close(context.Background()) }()
	snd, err := untrusted.NewSender("tls-q", nil)
	require.NoError(t, err)
	err = snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	require.ErrorContains(t, err, "certificate", "a client that does not trust the certificate cannot connect")
}

// TestTLSWithAGivenCertificate serves a certificate and key given as files.
func TestTLSWithAGivenCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := dir+"/cert.pem", dir+"/key.pem"
	require.NoError(t, emulator.WriteSelfSignedCert(certFile, keyFile, []string{"localhost", "127.0.0.1"}))
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues: map[string]broker.EntityProperties{"q": {}},
		Config: emulator.Config{TLS: &emulator.TLSConfig{CertFile: certFile, KeyFile: keyFile}},
	})
	require.Equal(t, certFile, srv.CertFile())
	roundTrip(testCtx(t), t, srv.Client, "q", "given certificate")

	_, err := emulator.Start(t.Context(), emulator.Config{TLS: &emulator.TLSConfig{CertFile: certFile}})
	require.ErrorContains(t, err, "KeyFile", "a certificate without its key is refused")
}

// TestWebSocketsCarryAMQP: the Go SDK's NewWebSocketConn reaches
// /$servicebus/websocket, over TLS (wss://) and without it (ws://).
func TestWebSocketsCarryAMQP(t *testing.T) {
	t.Parallel()
	for _, useTLS := range []bool{true, false} {
		name := map[bool]string{true: "wss", false: "ws"}[useTLS]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"ws-q": {}}, TLS: useTLS, WebSocket: true})
			roundTrip(testCtx(t), t, srv.Client, "ws-q", "over "+name)
		})
	}
}

// TestWebSocketNeedsTheAMQPSubprotocol: an upgrade without AMQPWSB10 (or amqp) is refused.
func TestWebSocketNeedsTheAMQPSubprotocol(t *testing.T) {
	t.Parallel()
	srv := emulatortest.Start(t, &emulatortest.Options{TLS: true})
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: srv.ClientTLSConfig()}}
	ctx := testCtx(t)
	u := "wss://" + srv.AMQPAddr() + emulator.WebSocketPath
	_, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: hc, Subprotocols: []string{"mqtt"}})
	require.Error(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: hc, Subprotocols: []string{"AMQPWSB10"}})
	require.NoError(t, err)
	require.Equal(t, "AMQPWSB10", ws.Subprotocol())
	_ = ws.CloseNow()
}

// TestTLSHandshakeFailureKeepsThePortServing: a client that gives up in the
// handshake does not disturb the next one.
func TestTLSHandshakeFailureKeepsThePortServing(t *testing.T) {
	t.Parallel()
	srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"q": {}}, TLS: true})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: &tls.Config{ServerName: "not-the-emulator.example", MinVersion: tls.VersionTLS12, RootCAs: srv.ClientTLSConfig().RootCAs}}).DialContext(ctx, "tcp", srv.AMQPAddr())
	require.Error(t, err, "wrong name: the handshake fails")
	require.True(t, conn == nil || strings.Contains(err.Error(), "certificate"))
	roundTrip(testCtx(t), t, srv.Client, "q", "after a failed handshake")
}
