package topology

import (
	"fmt"
	"strings"
	"time"

	"github.com/seqbus/seqbus/contract"
)

// ParseDuration reads a duration of a topology file: a Service Bus duration (contract.
// ParseDuration: PT30S, P1D, P1DT2H3M4.5S; lower case is accepted here too) or, for
// convenience, a Go duration (30s, 1h30m). What it accepts, the service accepts once the plan
// writes it with contract.FormatDuration.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	if s[0] == 'P' || s[0] == 'p' {
		return contract.ParseDuration(strings.ToUpper(s))
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q is neither ISO 8601 (PT30S, P1D) nor Go (30s, 24h)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q is negative", s)
	}
	return d, nil
}
