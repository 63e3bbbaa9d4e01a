package atom

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

// errUnauthorized is wrapped by every token check failure.
var errUnauthorized = errors.New("unauthorized")

// sasToken is a parsed "SharedAccessSignature sr=…&sig=…&se=…&skn=…" token. The raw
// fields are kept as received, because the signature covers them verbatim.
type sasToken struct {
	rawSR, rawSE, sig, keyName string
}

func parseSAS(header string) (sasToken, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(header), "SharedAccessSignature ")
	if !ok {
		return sasToken{}, fmt.Errorf("%w: Authorization is not a SharedAccessSignature token", errUnauthorized)
	}
	var t sasToken
	for _, part := range strings.Split(rest, "&") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return sasToken{}, fmt.Errorf("%w: malformed token field %q", errUnauthorized, part)
		}
		switch k {
		case "sr":
			t.rawSR = v
		case "se":
			t.rawSE = v
		case "skn":
			t.keyName = v
		case "sig":
			sig, err := url.QueryUnescape(v)
			if err != nil {
				return sasToken{}, fmt.Errorf("%w: malformed signature: %w", errUnauthorized, err)
			}
			t.sig = sig
		}
	}
	if t.rawSR == "" || t.rawSE == "" || t.sig == "" || t.keyName == "" {
		return sasToken{}, fmt.Errorf("%w: token needs sr, sig, se and skn", errUnauthorized)
	}
	return t, nil
}

// verifySAS checks a request's Authorization header: the key name, the HMAC-SHA256
// signature of "<sr>\n<se>" with the shared key, the expiry against now, and that the
// token's resource covers requestPath (the scheme and host of sr are ignored, because
// the client signs https://host/… and a test transport may send the request to another
// address over plain HTTP).
func verifySAS(header, keyName, key, requestPath string, now time.Time) error {
	t, err := parseSAS(header)
	if err != nil {
		return err
	}
	if t.keyName != keyName {
		return fmt.Errorf("%w: unknown key name %q", errUnauthorized, t.keyName)
	}
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(t.rawSR + "\n" + t.rawSE))
	want := mac.Sum(nil)
	got, err := base64.StdEncoding.DecodeString(t.sig)
	if err != nil || !hmac.Equal(got, want) {
		return fmt.Errorf("%w: signature mismatch", errUnauthorized)
	}
	se, err := strconv.ParseInt(t.rawSE, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: malformed expiry %q", errUnauthorized, t.rawSE)
	}
	if !now.Before(time.Unix(se, 0)) {
		return fmt.Errorf("%w: token expired at %s", errUnauthorized, time.Unix(se, 0).UTC().Format(time.RFC3339))
	}
	resource, err := url.QueryUnescape(t.rawSR)
	if err != nil {
		return fmt.Errorf("%w: malformed sr: %w", errUnauthorized, err)
	}
	if !covers(resourcePath(resource), requestPath) {
		return fmt.Errorf("%w: token for %q does not cover %q", errUnauthorized, resource, requestPath)
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
