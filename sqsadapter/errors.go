package sqsadapter

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/smithy-go"

	"github.com/seqbus/seqbus/sequencer"
)

// Errors of the adapter that the sequencer contract has no sentinel for. Mapped errors wrap them
// (or a sequencer sentinel) together with the SDK error.
var (
	// ErrTransient: SQS refused the call as throttled after the SDK's own retries; a later retry
	// may succeed.
	ErrTransient = errors.New("sqsadapter: transient SQS error")
	// ErrClosed: the Source or the session was closed.
	ErrClosed = errors.New("sqsadapter: closed")
	// ErrConfig: the queue cannot carry seqbus (not FIFO, no redrive policy) or the Config is wrong.
	ErrConfig = errors.New("sqsadapter: configuration")
)

// kind is what an SQS error means to the adapter.
type kind int

const (
	kindOther kind = iota
	kindLockLost
	kindThrottled
	kindNotFound
)

// throttleCodes are the error codes SQS answers when it throttles a caller.
var throttleCodes = map[string]bool{
	"ThrottlingException": true, "Throttling": true, "RequestThrottled": true,
	"KmsThrottled": true, "KMS.ThrottlingException": true, "RequestLimitExceeded": true,
}

// codeKind sorts an SQS error code (of an API error or a batch result entry).
func codeKind(code, msg string) kind {
	switch {
	case code == "ReceiptHandleIsInvalid", strings.HasSuffix(code, "MessageNotInflight"),
		code == "InvalidParameterValue" && strings.Contains(strings.ToLower(msg), "receipt handle"):
		// An expired receipt handle: the visibility lapsed and the message may be anyone's.
		return kindLockLost
	case throttleCodes[code]:
		return kindThrottled
	case code == "QueueDoesNotExist", strings.HasSuffix(code, "NonExistentQueue"):
		return kindNotFound
	}
	return kindOther
}

func errKind(err error) kind {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return codeKind(ae.ErrorCode(), ae.ErrorMessage())
	}
	return kindOther
}

// mapErr names what failed and wraps the sequencer sentinel for err: ErrLockLost for an expired
// or invalid receipt handle, ErrSettlementRefused (settlements) or ErrTransient (other calls)
// for throttling, ErrNotFound for a missing queue. A context's end is returned as it is.
func mapErr(what string, settlement bool, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return wrapKind(what, settlement, errKind(err), err)
}

func wrapKind(what string, settlement bool, k kind, err error) error {
	switch k {
	case kindLockLost:
		return fmt.Errorf("%s: %w: %w", what, sequencer.ErrLockLost, err)
	case kindThrottled:
		if settlement {
			return fmt.Errorf("%s: %w: %w", what, sequencer.ErrSettlementRefused, err)
		}
		return fmt.Errorf("%s: %w: %w", what, ErrTransient, err)
	case kindNotFound:
		return fmt.Errorf("%s: %w: %w", what, sequencer.ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// batchErr is the error of one failed entry of a batch call.
type batchErr struct{ code, msg string }

func (e *batchErr) Error() string { return e.code + ": " + e.msg }
