package atom

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/seqbus/seqbus/emulator/internal/sas"
)

// errUnauthorized is wrapped by every token check failure.
var errUnauthorized = errors.New("unauthorized")

// verifySAS checks a request's Authorization header with the emulator's SAS verifier (key name,
// HMAC-SHA256 signature, expiry) and then that the token's resource covers requestPath. The
// scheme and host of sr are ignored, because the client signs https://host/… and a test
// transport may send the request to another address over plain HTTP.
func verifySAS(header, keyName, key, requestPath string, now time.Time) error {
	v := sas.Verifier{Keys: map[string]string{keyName: key}, Now: func() time.Time { return now }}
	t, err := v.Verify(header, "")
	if err != nil {
		return fmt.Errorf("%w: %w", errUnauthorized, err)
	}
	if !covers(resourcePath(t.Resource), requestPath) {
		return fmt.Errorf("%w: token for %q does not cover %q", errUnauthorized, t.Resource, requestPath)
	}
	return nil
}

// resourcePath returns the lower-cased path of a token resource such as
// "https://host:port/q1?api-version=2024-05" ("q1") or "host" ("").
func resourcePath(resource string) string {
	if _, rest, ok := strings.Cut(resource, "://"); ok {
		resource = rest
	}
	resource, _, _ = strings.Cut(resource, "?")
	_, p, _ := strings.Cut(resource, "/")
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	return strings.Trim(strings.ToLower(p), "/")
}

// covers reports whether a token for resource path rp authorizes request path p: rp is
// empty (the namespace) or a whole-segment prefix of p.
func covers(rp, p string) bool {
	p = strings.Trim(strings.ToLower(p), "/")
	if rp == "" || rp == p {
		return true
	}
	return strings.HasPrefix(p, rp+"/")
}
