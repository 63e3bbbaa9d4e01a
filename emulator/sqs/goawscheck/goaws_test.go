package goawscheck

import (
	"net/http/httptest"
	"testing"

	"github.com/Admiral-Piett/goaws/app/router"

	"github.com/seqbus/seqbus/emulator/sqs/sqstest"
)

func TestGoawsConformance(t *testing.T) {
	srv := httptest.NewServer(router.New())
	t.Cleanup(srv.Close)
	sqstest.Run(t, func(t *testing.T) sqstest.Target { return sqstest.Target{Endpoint: srv.URL} })
}
