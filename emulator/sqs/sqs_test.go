package sqs_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator/sqs"
	"github.com/seqbus/seqbus/emulator/sqs/sqstest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	sqstest.Run(t, func(t *testing.T) sqstest.Target {
		clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		srv := httptest.NewServer(sqs.New(sqs.Config{Clock: clk}))
		t.Cleanup(srv.Close)
		return sqstest.Target{Endpoint: srv.URL, Advance: clk.Advance}
	})
}

func TestConformanceWallClock(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(sqs.New(sqs.Config{}))
	t.Cleanup(srv.Close)
	sqstest.Run(t, func(t *testing.T) sqstest.Target { return sqstest.Target{Endpoint: srv.URL} })
}
