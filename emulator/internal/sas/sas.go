package sas

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors returned by Verifier.Verify. Each is wrapped with details.
var (
	ErrMalformed    = errors.New("sas: malformed token")
	ErrUnknownKey   = errors.New("sas: unknown key name")
	ErrBadSignature = errors.New("sas: signature mismatch")
	ErrExpired      = errors.New("sas: token expired")
	ErrAudience     = errors.New("sas: token not valid for audience")
)

const prefix = "SharedAccessSignature "

// Token is a parsed SAS token. Resource is the unescaped sr value, Expiry
// comes from se.
type Token struct {
	Resource   string
	Signature  string
	Expiry     time.Time
	KeyName    string
	rawSR      string
	rawExpiry  string
	rawSigText string
}

// Parse splits a SAS token into its fields. It does not check the signature.
func Parse(token string) (Token, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(token), prefix)
	if !ok {
		return Token{}, fmt.Errorf("%w: missing %q prefix", ErrMalformed, strings.TrimSpace(prefix))
	}
	var t Token
	for part := range strings.SplitSeq(rest, "&") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return Token{}, fmt.Errorf("%w: field %q has no value", ErrMalformed, part)
		}
		switch k {
		case "sr":
			t.rawSR = v
			u, err := url.QueryUnescape(v)
			if err != nil {
				return Token{}, fmt.Errorf("%w: sr: %w", ErrMalformed, err)
			}
			t.Resource = u
		case "sig":
			t.rawSigText = v
			u, err := url.QueryUnescape(v)
			if err != nil {
				return Token{}, fmt.Errorf("%w: sig: %w", ErrMalformed, err)
			}
			t.Signature = u
		case "se":
			t.rawExpiry = v
			secs, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return Token{}, fmt.Errorf("%w: se %q: %w", ErrMalformed, v, err)
			}
			t.Expiry = time.Unix(secs, 0).UTC()
		case "skn":
			t.KeyName = v
		}
	}
	if t.rawSR == "" || t.Signature == "" || t.rawExpiry == "" || t.KeyName == "" {
		return Token{}, fmt.Errorf("%w: sr, sig, se and skn are all required", ErrMalformed)
	}
	return t, nil
}

// Sign builds a token for audience that expires at expiry, exactly as the
// azservicebus SDK does: sr is the lower-cased query-escaped audience and the
// HMAC key is the raw bytes of the key string.
func Sign(keyName, key, audience string, expiry time.Time) string {
	sr := strings.ToLower(url.QueryEscape(audience))
	se := strconv.FormatInt(expiry.Unix(), 10)
	sig := url.QueryEscape(signature(key, sr, se))
	return fmt.Sprintf("%ssr=%s&sig=%s&se=%s&skn=%s", prefix, sr, sig, se, keyName)
}

func signature(key, sr, se string) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(sr + "\n" + se))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Verifier checks tokens against a set of named keys.
type Verifier struct {
	// Keys maps key names (skn) to key values.
	Keys map[string]string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Verify parses token and checks its key name, signature and expiry. When
// audience is not empty, the token's resource must be a case-insensitive
// prefix of it (a namespace-wide token covers every entity).
func (v Verifier) Verify(token, audience string) (Token, error) {
	t, err := Parse(token)
	if err != nil {
		return Token{}, err
	}
	key, ok := v.Keys[t.KeyName]
	if !ok {
		return Token{}, fmt.Errorf("%w: %q", ErrUnknownKey, t.KeyName)
	}
	want := signature(key, t.rawSR, t.rawExpiry)
	if !hmac.Equal([]byte(want), []byte(t.Signature)) {
		return Token{}, fmt.Errorf("%w for key %q", ErrBadSignature, t.KeyName)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	if n := now(); !n.Before(t.Expiry) {
		return Token{}, fmt.Errorf("%w at %s (now %s)", ErrExpired, t.Expiry.Format(time.RFC3339), n.UTC().Format(time.RFC3339))
	}
	if audience != "" && !audienceCovers(t.Resource, audience) {
		return Token{}, fmt.Errorf("%w: token for %q, wanted %q", ErrAudience, t.Resource, audience)
	}
	return t, nil
}

// audienceCovers reports whether a token issued for resource grants access to
// audience. Both are compared case-insensitively, ignoring the scheme, so an
// sb:// namespace token also covers amqp:// audiences.
func audienceCovers(resource, audience string) bool {
	r := strings.ToLower(stripScheme(resource))
	a := strings.ToLower(stripScheme(audience))
	r = strings.TrimSuffix(r, "/")
	if r == "" {
		return false
	}
	return a == r || strings.HasPrefix(a, r+"/")
}

func stripScheme(s string) string {
	if _, after, ok := strings.Cut(s, "://"); ok {
		return after
	}
	return s
}
