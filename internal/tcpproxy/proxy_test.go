package tcpproxy_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/tcpproxy"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) (string, error) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestCutEndsOpenConnectionsAndKeepsAccepting(t *testing.T) {
	t.Parallel()
	p, err := tcpproxy.Start(echoServer(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })

	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	got, err := roundTrip(t, c, r, "hello")
	require.NoError(t, err)
	require.Equal(t, "hello\n", got)
	require.Equal(t, 1, p.Open())

	require.Equal(t, 1, p.Cut())
	_, err = r.ReadString('\n')
	require.Error(t, err, "the cut connection reads EOF or a reset")
	require.Equal(t, 1, p.Cuts())

	c2, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c2.Close()
	got, err = roundTrip(t, c2, bufio.NewReader(c2), "again")
	require.NoError(t, err)
	require.Equal(t, "again\n", got, "a new connection goes through after a cut")
}

func TestPauseRefusesNewConnectionsUntilResume(t *testing.T) {
	t.Parallel()
	p, err := tcpproxy.Start(echoServer(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })

	p.Pause()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	_, err = roundTrip(t, c, bufio.NewReader(c), "x")
	require.Error(t, err, "a paused proxy closes new connections")
	_ = c.Close()

	p.Resume()
	c, err = net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	got, err := roundTrip(t, c, bufio.NewReader(c), "y")
	require.NoError(t, err)
	require.Equal(t, "y\n", got)
}
