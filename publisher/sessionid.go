package publisher

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxSessionIDLength is the longest session id Service Bus accepts, in characters.
const MaxSessionIDLength = 128

// MaxMessageIDLength is the longest MessageId Service Bus accepts, in characters.
const MaxMessageIDLength = 128

var (
	// ErrInvalidSessionID matches (errors.Is) every session id ValidateSessionID refuses.
	ErrInvalidSessionID = errors.New("invalid session id")
	// ErrEmptySessionID matches an empty session id.
	ErrEmptySessionID = errors.New("empty session id")
	// ErrSessionIDTooLong matches a session id over MaxSessionIDLength characters.
	ErrSessionIDTooLong = errors.New("session id too long")
)

// SessionIDError says why ValidateSessionID refused a session id. It matches
// ErrInvalidSessionID and, where one applies, ErrEmptySessionID or ErrSessionIDTooLong.
type SessionIDError struct {
	// ID is the refused session id.
	ID string
	// Reason says what is wrong with it.
	Reason string

	kind error
}

func (e *SessionIDError) Error() string {
	return fmt.Sprintf("invalid session id %q: %s", e.ID, e.Reason)
}

// Is reports whether target is ErrInvalidSessionID or the error's own kind.
func (e *SessionIDError) Is(target error) bool {
	return target == ErrInvalidSessionID || (e.kind != nil && target == e.kind)
}

// ValidateSessionID checks the rule every session id seqbus sends or stores obeys: not
// empty, valid UTF-8, at most MaxSessionIDLength characters (Unicode code points), and
// no control characters (Unicode category Cc: U+0000–U+001F and U+007F–U+009F). The
// errors are *SessionIDError.
//
// The outbox's SQL functions (migration 003, seqbus_outbox_session_id_problem) apply
// the same rule to callers in other languages; a test holds the two together.
func ValidateSessionID(id string) error {
	switch {
	case id == "":
		return &SessionIDError{ID: id, Reason: "it is empty", kind: ErrEmptySessionID}
	case !utf8.ValidString(id):
		return &SessionIDError{ID: id, Reason: "it is not valid UTF-8"}
	}
	n := 0
	for _, r := range id {
		n++
		if unicode.IsControl(r) {
			return &SessionIDError{ID: id, Reason: fmt.Sprintf("control character U+%04X at position %d", r, n)}
		}
	}
	if n > MaxSessionIDLength {
		return &SessionIDError{ID: id, kind: ErrSessionIDTooLong,
			Reason: fmt.Sprintf("it is %d characters, Service Bus allows %d", n, MaxSessionIDLength)}
	}
	return nil
}

// MessageID is the MessageId seqbus gives the message with application sequence seq of
// a session: "<session>/<seq>", so duplicate detection on the entity absorbs a message
// sent twice. When that would exceed MaxMessageIDLength characters, the session id is
// replaced by the hex SHA-256 of its UTF-8 bytes ("<64 hex digits>/<seq>").
func MessageID(sessionID string, seq int64) string {
	s := strconv.FormatInt(seq, 10)
	if utf8.RuneCountInString(sessionID)+1+len(s) <= MaxMessageIDLength {
		return sessionID + "/" + s
	}
	sum := sha256.Sum256([]byte(sessionID))
	return hex.EncodeToString(sum[:]) + "/" + s
}
