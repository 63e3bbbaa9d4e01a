package sbadapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

func sbErr(code azservicebus.Code) error { return &azservicebus.Error{Code: code} }

func amqpErr(cond amqp.ErrCond) error {
	return &amqp.Error{Condition: cond, Description: "from broker"}
}

func TestMapError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		op        op
		err       error
		wantClass Class
		wantIs    error // nil: no sentinel expected
	}{
		{"accept-next timeout code", opAcceptNext, sbErr(azservicebus.CodeTimeout), ClassRetry, sequencer.ErrNoSession},
		{"accept-next deadline", opAcceptNext, context.DeadlineExceeded, ClassRetry, sequencer.ErrNoSession},
		{"accept-next canceled", opAcceptNext, fmt.Errorf("attach: %w", context.Canceled), ClassRetry, sequencer.ErrNoSession},
		{"accept-next timeout condition", opAcceptNext, amqpErr(condTimeout), ClassRetry, sequencer.ErrNoSession},
		{"accept by id locked", opAccept, amqpErr(condSessionCannotBeLocked), ClassRetry, sequencer.ErrSessionLocked},
		{"accept by id deadline", opAccept, context.DeadlineExceeded, ClassCanceled, nil},
		{"session taken by another receiver after lock loss", opSession, amqpErr(condSessionCannotBeLocked), ClassLockLost, sequencer.ErrLockLost},
		{"settle lock lost code", opSession, sbErr(azservicebus.CodeLockLost), ClassLockLost, sequencer.ErrLockLost},
		{"session lock lost detach", opSession, &amqp.LinkError{RemoteErr: &amqp.Error{Condition: condSessionLockLost}}, ClassLockLost, sequencer.ErrLockLost},
		{"message lock lost condition", opSession, amqpErr(condMessageLockLost), ClassLockLost, sequencer.ErrLockLost},
		{"session receiver closed", opSession, sbErr(azservicebus.CodeClosed), ClassLockLost, sequencer.ErrLockLost},
		{"client closed", opAcceptNext, sbErr(azservicebus.CodeClosed), ClassFatal, ErrClosed},
		{"not found code", opAccept, sbErr(azservicebus.CodeNotFound), ClassFatal, sequencer.ErrNotFound},
		{"not found on attach", opAcceptNext, amqpErr(amqp.ErrCondNotFound), ClassFatal, sequencer.ErrNotFound},
		{"unauthorized code", opAcceptNext, sbErr(azservicebus.CodeUnauthorizedAccess), ClassFatal, ErrUnauthorized},
		{"unauthorized condition", opList, amqpErr(amqp.ErrCondUnauthorizedAccess), ClassFatal, ErrUnauthorized},
		{"not allowed", opAcceptNext, amqpErr(amqp.ErrCondNotAllowed), ClassFatal, ErrNotAllowed},
		{"entity disabled", opSession, amqpErr(condEntityDisabled), ClassFatal, ErrNotAllowed},
		// On an accepted session the lock went with the connection.
		{"session connection lost", opSession, sbErr(azservicebus.CodeConnectionLost), ClassLockLost, sequencer.ErrLockLost},
		{"connection lost", opAcceptNext, sbErr(azservicebus.CodeConnectionLost), ClassReconnect, ErrConnectionLost},
		{"connection lost listing", opList, sbErr(azservicebus.CodeConnectionLost), ClassReconnect, ErrConnectionLost},
		{"timeout outside accept", opSession, sbErr(azservicebus.CodeTimeout), ClassRetry, ErrTransient},
		{"server busy", opSession, amqpErr(condServerBusy), ClassRetry, ErrTransient},
		{"unknown error", opSession, io.ErrUnexpectedEOF, ClassRetry, nil},
		{"session ctx canceled", opSession, context.Canceled, ClassCanceled, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := mapError(tt.op, "doing thing", tt.err)
			require.Error(t, got)
			require.ErrorIs(t, got, tt.err, "the SDK error stays in the chain")
			require.Contains(t, got.Error(), "doing thing")
			if tt.wantIs != nil {
				require.ErrorIs(t, got, tt.wantIs)
			}
			for _, other := range []error{sequencer.ErrNoSession, sequencer.ErrSessionLocked, sequencer.ErrLockLost, sequencer.ErrNotFound, ErrUnauthorized, ErrConnectionLost, ErrClosed, ErrNotAllowed, ErrTransient} {
				if other != tt.wantIs {
					require.NotErrorIs(t, got, other)
				}
			}
			require.Equal(t, tt.wantClass, Classify(got))
			// Wrapping again keeps the class and the sentinel.
			again := mapError(opAny, "outer", fmt.Errorf("ctx: %w", got))
			require.Equal(t, tt.wantClass, Classify(again))
			if tt.wantIs != nil {
				require.ErrorIs(t, again, tt.wantIs)
			}
		})
	}
}

func TestMapErrorNil(t *testing.T) {
	t.Parallel()
	require.NoError(t, mapError(opSession, "x", nil))
	require.NoError(t, MapError(nil))
	require.Equal(t, ClassNone, Classify(nil))
}

func TestClassifyRawSDKErrors(t *testing.T) {
	t.Parallel()
	require.Equal(t, ClassLockLost, Classify(sbErr(azservicebus.CodeLockLost)))
	require.Equal(t, ClassFatal, Classify(sbErr(azservicebus.CodeUnauthorizedAccess)))
	require.ErrorIs(t, MapError(amqpErr(condSessionCannotBeLocked)), sequencer.ErrSessionLocked)
	require.Equal(t, "lock-lost", ClassLockLost.String())
	require.False(t, errors.Is(MapError(io.EOF), sequencer.ErrLockLost))
}

// rpcErr stands for the SDK's $management error, which carries the response status.
type rpcErr int

func (e rpcErr) Error() string { return fmt.Sprintf("rpc status %d", int(e)) }
func (e rpcErr) RPCCode() int  { return int(e) }

func TestIsServerBusy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"link refusal", amqpErr(condServerBusy), true},
		{"management 503", rpcErr(503), true},
		{"mapped by the adapter", mapError(opList, "probe q", fmt.Errorf("list: %w", rpcErr(503))), true},
		{"link timeout", amqpErr(condTimeout), false},
		{"management 408", rpcErr(408), false},
		{"unauthorized", amqpErr(amqp.ErrCondUnauthorizedAccess), false},
		{"connection lost", sbErr(azservicebus.CodeConnectionLost), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, IsServerBusy(tt.err))
		})
	}
}
