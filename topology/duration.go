package topology

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// Forever is the duration Service Bus reports for "no limit" (TimeSpan.MaxValue,
// P10675199DT2H48M5.4775807S), which is longer than a time.Duration can hold.
const Forever = time.Duration(math.MaxInt64)

// ParseDuration reads an ISO 8601 duration as Service Bus writes them (P1D, PT30S,
// P1DT2H3M4.5S; weeks as P2W) or a Go duration (30s, 1h30m). Durations longer than a
// time.Duration can hold are Forever.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	if s[0] != 'P' && s[0] != 'p' {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("duration %q is neither ISO 8601 (PT30S, P1D) nor Go (30s, 24h)", s)
		}
		if d < 0 {
			return 0, fmt.Errorf("duration %q is negative", s)
		}
		return d, nil
	}
	bad := func() (time.Duration, error) {
		return 0, fmt.Errorf("duration %q is not ISO 8601 (like PT30S, P1D or P1DT12H)", s)
	}
	rest := strings.ToUpper(s[1:])
	if rest == "" || strings.HasSuffix(rest, "T") {
		return bad()
	}
	total := new(big.Rat)
	inTime := false
	units := map[bool]map[byte]int64{
		false: {'W': 7 * 86400, 'D': 86400},
		true:  {'H': 3600, 'M': 60, 'S': 1},
	}
	seen := map[string]bool{}
	for rest != "" {
		if rest[0] == 'T' {
			if inTime {
				return bad()
			}
			inTime = true
			rest = rest[1:]
			continue
		}
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 || i == len(rest) {
			return bad()
		}
		num, unit := rest[:i], rest[i]
		secs, ok := units[inTime][unit]
		key := fmt.Sprint(inTime, unit)
		if !ok || seen[key] {
			return bad()
		}
		seen[key] = true
		v, ok := new(big.Rat).SetString(num)
		if !ok {
			return bad()
		}
		total.Add(total, v.Mul(v, new(big.Rat).SetInt64(secs)))
		rest = rest[i+1:]
	}
	ns := total.Mul(total, new(big.Rat).SetInt64(int64(time.Second)))
	if ns.Cmp(new(big.Rat).SetInt64(math.MaxInt64)) >= 0 {
		return Forever, nil
	}
	f, _ := ns.Float64()
	return time.Duration(f), nil
}

// FormatDuration writes d in ISO 8601 as Service Bus does (PT1M, P14D, P1DT2H30M,
// PT0.5S). Forever is written as TimeSpan.MaxValue.
func FormatDuration(d time.Duration) string {
	if d >= Forever {
		return "P10675199DT2H48M5.4775807S"
	}
	if d <= 0 {
		return "PT0S"
	}
	var b strings.Builder
	b.WriteByte('P')
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	if days > 0 {
		b.WriteString(strconv.FormatInt(int64(days), 10) + "D")
	}
	if d == 0 {
		return b.String()
	}
	b.WriteByte('T')
	h := d / time.Hour
	d -= h * time.Hour
	m := d / time.Minute
	d -= m * time.Minute
	if h > 0 {
		b.WriteString(strconv.FormatInt(int64(h), 10) + "H")
	}
	if m > 0 {
		b.WriteString(strconv.FormatInt(int64(m), 10) + "M")
	}
	if d > 0 {
		b.WriteString(strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "S")
	}
	return b.String()
}
