package contract

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Forever is the duration Service Bus reports for "no limit" (TimeSpan.MaxValue), which is
// longer than a time.Duration can hold.
const Forever = time.Duration(math.MaxInt64)

// maxTimeSpan is TimeSpan.MaxValue as XmlConvert writes it.
const maxTimeSpan = "P10675199DT2H48M5.4775807S"

const (
	day = 24 * 60 * 60 // seconds
	// maxTicks is TimeSpan.MaxValue in ticks of 100ns.
	maxTicks = math.MaxInt64
)

// ParseDuration reads a Service Bus duration (xs:duration as .NET reads it; see the package
// documentation). Errors start with `invalid ISO 8601 duration "…"`.
func ParseDuration(s string) (time.Duration, error) {
	d, err := parseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid ISO 8601 duration %q: %w", s, err)
	}
	return d, nil
}

var errShape = errors.New("want P[nY][nM][nD][T[nH][nM][n[.f]S]], like PT30S, P14D or P1DT12H")

func parseDuration(s string) (time.Duration, error) {
	if strings.HasPrefix(s, "-") {
		return 0, errors.New("negative durations are not used by Service Bus")
	}
	rest, ok := strings.CutPrefix(s, "P")
	if !ok {
		return 0, errShape
	}
	r := reader{s: rest}
	years, months, days := r.part('Y'), r.part('M'), r.part('D')
	var hours, minutes, seconds, nanos int64
	if t, ok := strings.CutPrefix(r.s, "T"); ok {
		r.s = t
		before := r.parts
		hours, minutes = r.part('H'), r.part('M')
		seconds, nanos = r.seconds()
		if r.err == nil && r.parts == before {
			r.err = errors.New("T must be followed by hours, minutes or seconds")
		}
	}
	if r.err != nil {
		return 0, r.err
	}
	if r.s != "" || r.parts == 0 {
		return 0, errShape
	}
	// Each component is below 2^31, so the total in seconds fits an int64 (below 2^57).
	totalDays := years*365 + months/12*365 + months%12*30 + days
	secs := ((totalDays*24+hours)*60+minutes)*60 + seconds
	if secs > (maxTicks-nanos/100)/1e7 {
		return 0, errors.New("longer than TimeSpan.MaxValue (P10675199DT2H48M5.4775807S)")
	}
	if secs > (math.MaxInt64-nanos)/1e9 {
		return Forever, nil
	}
	return time.Duration(secs*1e9 + nanos), nil
}

// reader reads the designators of an xs:duration after the P, in the order of the grammar.
type reader struct {
	s     string // what is left to read
	parts int    // designators read
	err   error
}

// part reads "n<d>" if what is left starts with it and returns n (0 when it does not).
func (r *reader) part(d byte) int64 {
	n := leadingDigits(r.s)
	if r.err != nil || n == 0 || n == len(r.s) || r.s[n] != d {
		return 0
	}
	v, err := component(r.s[:n])
	if err != nil {
		r.err = err
		return 0
	}
	r.s, r.parts = r.s[n+1:], r.parts+1
	return v
}

// seconds reads "nS", "n.fS" or ".fS" (XmlConvert takes a missing integer part for 0) if what
// is left starts with one of them, and returns the seconds and the nanoseconds of the fraction.
func (r *reader) seconds() (secs, nanos int64) {
	n := leadingDigits(r.s)
	if r.err != nil || n == len(r.s) || (r.s[n] != 'S' && r.s[n] != '.') || (n == 0 && r.s[0] == 'S') {
		return 0, 0
	}
	if n > 0 {
		if secs, r.err = component(r.s[:n]); r.err != nil {
			return 0, 0
		}
	}
	rest := r.s[n:]
	if f, ok := strings.CutPrefix(rest, "."); ok {
		fd := leadingDigits(f)
		nanos, rest = nanoseconds(f[:fd]), f[fd:]
	}
	if !strings.HasPrefix(rest, "S") {
		r.err = errShape
		return 0, 0
	}
	r.s, r.parts = rest[1:], r.parts+1
	return secs, nanos
}

// leadingDigits returns how many decimal digits s starts with.
func leadingDigits(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// component reads the number of one designator, which XmlConvert holds in an int32.
func component(digits string) (int64, error) {
	v, err := strconv.ParseInt(digits, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s is more than %d", digits, math.MaxInt32)
	}
	return v, nil
}

// nanoseconds reads the digits of a fraction of a second, keeping nine.
func nanoseconds(digits string) int64 {
	var ns int64
	for i := range 9 {
		ns *= 10
		if i < len(digits) {
			ns += int64(digits[i] - '0')
		}
	}
	return ns
}

// FormatDuration writes d as XmlConvert writes a TimeSpan (see the package documentation):
// PT0S for zero or less, TimeSpan.MaxValue for Forever.
func FormatDuration(d time.Duration) string {
	if d >= Forever {
		return maxTimeSpan
	}
	if d <= 0 {
		return "PT0S"
	}
	secs, ns := int64(d/time.Second), int64(d%time.Second)
	days, secs := secs/day, secs%day
	h, m, s := secs/3600, secs%3600/60, secs%60
	b := make([]byte, 0, 32)
	b = append(b, 'P')
	if days > 0 {
		b = strconv.AppendInt(b, days, 10)
		b = append(b, 'D')
	}
	if h == 0 && m == 0 && s == 0 && ns == 0 {
		return string(b)
	}
	b = append(b, 'T')
	if h > 0 {
		b = strconv.AppendInt(b, h, 10)
		b = append(b, 'H')
	}
	if m > 0 {
		b = strconv.AppendInt(b, m, 10)
		b = append(b, 'M')
	}
	if s > 0 || ns > 0 {
		b = strconv.AppendInt(b, s, 10)
		if ns > 0 {
			frac := strconv.AppendInt(nil, 1e9+ns, 10)[1:] // nine digits, leading zeros kept
			b = append(b, '.')
			b = append(b, strings.TrimRight(string(frac), "0")...)
		}
		b = append(b, 'S')
	}
	return string(b)
}
