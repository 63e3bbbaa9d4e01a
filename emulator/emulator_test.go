package emulator_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestStartServesHealthAndAdminOnBothPorts(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues: map[string]broker.EntityProperties{"q1": {}},
		Config: emulator.Config{
			HTTPAddr: "127.0.0.1:0",
			AdminHandler: func(b *broker.Broker) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.WriteString(w, "admin "+r.URL.Path+" "+b.ListQueues()[0].Name)
				})
			},
		},
	})
	defer http.DefaultClient.CloseIdleConnections()

	code, _ := httpGet(t, "http://"+srv.HTTPAddr()+"/health")
	require.Equal(t, http.StatusOK, code)
	code, body := httpGet(t, "http://"+srv.HTTPAddr()+"/q1")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "admin /q1 q1", body)
	// The admin client talks to the Endpoint's port, which also serves AMQP.
	code, body = httpGet(t, "http://"+srv.AMQPAddr()+"/q1")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "admin /q1 q1", body)

	// And AMQP still works on that port.
	s, err := srv.Client.NewSender("q1", nil)
	require.NoError(t, err)
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
}

func TestStartDefaultsAndClose(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv, err := emulator.Start(ctx, emulator.Config{})
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(srv.AMQPAddr())
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
	require.NotEqual(t, "0", port)
	require.Equal(t, "Endpoint=sb://"+srv.AMQPAddr()+";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true", srv.ConnectionString())
	code, _ := httpGet(t, "http://"+srv.AMQPAddr()+"/q1")
	require.Equal(t, http.StatusUnauthorized, code, "the default admin API wants a SAS token")
	http.DefaultClient.CloseIdleConnections()

	// A connection that never speaks does not hold Close up.
	idle, err := net.Dial("tcp", srv.AMQPAddr())
	require.NoError(t, err)
	defer idle.Close()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	require.NoError(t, srv.Close())
	require.Less(t, time.Since(start), 2*time.Second)
	require.NoError(t, srv.Close(), "Close is idempotent")
	_, err = net.DialTimeout("tcp", srv.AMQPAddr(), time.Second)
	require.Error(t, err, "the port is closed")
}

func TestStartRejectsBadConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := emulator.Start(ctx, emulator.Config{MaxMessageSize: emulator.MaxMaxMessageSize + 1})
	require.ErrorContains(t, err, "MaxMessageSize")
	_, err = emulator.Start(ctx, emulator.Config{ConfigFile: "/nope/Config.json"})
	require.ErrorContains(t, err, "/nope/Config.json")
	_, err = emulator.Start(ctx, emulator.Config{AMQPAddr: "256.0.0.1:1"})
	require.Error(t, err)
}

func TestConnectionStringOnAllInterfacesNamesLocalhost(t *testing.T) {
	t.Parallel()
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues: map[string]broker.EntityProperties{"q1": {}},
		Config: emulator.Config{AMQPAddr: "0.0.0.0:0"},
	})
	_, port, err := net.SplitHostPort(srv.AMQPAddr())
	require.NoError(t, err)
	require.Contains(t, srv.ConnectionString(), "Endpoint=sb://localhost:"+port+";")
	s, err := srv.Client.NewSender("q1", nil)
	require.NoError(t, err)
	require.NoError(t, s.SendMessage(testCtx(t), &azservicebus.Message{Body: []byte("x")}, nil))
}
