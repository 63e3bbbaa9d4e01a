package contract_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/contract"
)

const day = 24 * time.Hour

func TestParseDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"PT30S", 30 * time.Second},
		{"PT1M", time.Minute},
		{"P14D", 14 * day},
		{"P1DT2H30M", day + 2*time.Hour + 30*time.Minute},
		{"PT0.5S", 500 * time.Millisecond},
		{"PT0S", 0},
		{"PT1440M0S", day}, // as the azservicebus admin client writes durations
		{"PT21600S", 6 * time.Hour},
		{"P1Y", 365 * day},
		{"P1M", 30 * day},
		{"P12M", 365 * day}, // months count as .NET converts them: 12 months are a year
		{"P13M", 395 * day},
		{"P1Y2M3DT4H5M6.7S", (365+60+3)*day + 4*time.Hour + 5*time.Minute + 6700*time.Millisecond},
		{"PT1.123456789123S", time.Second + 123456789}, // nanoseconds; further digits dropped
		{"PT.5S", 500 * time.Millisecond},              // XmlConvert reads a missing integer part as 0
		{"PT1.S", time.Second},
		{"PT1M.5S", time.Minute + 500*time.Millisecond},
		{" PT1M\n", time.Minute},
		{"P106751DT23H47M16.854775807S", contract.Forever},
		{"P10675199DT2H48M5.4775807S", contract.Forever}, // TimeSpan.MaxValue, "no limit"
		{"P29247Y", contract.Forever},                    // 10675155 days, within TimeSpan.MaxValue
	}
	for _, tt := range tests {
		d, err := contract.ParseDuration(tt.in)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, d, tt.in)
	}
}

func TestParseDurationRefusesWhatServiceBusRefuses(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"", "P", "PT", "P1DT", "T1S", "1m", "30s", "PT1M1", "PT1MT1S", "P1D1D", "P1H", "PT1D", "PTM", "PTS",
		"PT1X", "P1M1Y", "PT1S1M", "P1.5D", "PT1.5M", "PT1.5", "p1d", "pt1m",
		"P2W",                        // weeks are ISO 8601 but not xs:duration
		"PT0,5S",                     // so is the decimal comma
		"-PT1M",                      // negative
		"P2147483648D",               // a component beyond an int32
		"P10675199DT2H48M5.4775808S", // one tick beyond TimeSpan.MaxValue
		"P29248Y",                    // 10675520 days
		"P2147483647D",               // an int32, but far beyond TimeSpan.MaxValue
	} {
		_, err := contract.ParseDuration(in)
		require.Error(t, err, "%q", in)
		require.ErrorContains(t, err, `invalid ISO 8601 duration "`+in+`"`)
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "PT0S"},
		{-time.Second, "PT0S"},
		{time.Nanosecond, "PT0.000000001S"},
		{500 * time.Millisecond, "PT0.5S"},
		{30 * time.Second, "PT30S"},
		{time.Minute, "PT1M"},
		{90 * time.Minute, "PT1H30M"},
		{14 * day, "P14D"},
		{day + 2*time.Hour + 30*time.Minute, "P1DT2H30M"},
		{day + 5*time.Second, "P1DT5S"},
		{contract.Forever - 1, "P106751DT23H47M16.854775806S"},
		{contract.Forever, "P10675199DT2H48M5.4775807S"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, contract.FormatDuration(tt.in), tt.in)
	}
}

// Both directions: what FormatDuration writes parses back to the same duration, and a duration
// in the form FormatDuration writes is written back unchanged.
func TestDurationRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	ds := []time.Duration{0, 1, time.Second, day, contract.Forever - 1, contract.Forever}
	for range 10_000 {
		ds = append(ds, time.Duration(rng.Int64N(int64(contract.Forever))), time.Duration(rng.Int64N(int64(400*day))),
			time.Duration(rng.Int64N(1e6))*time.Millisecond)
	}
	for _, d := range ds {
		s := contract.FormatDuration(d)
		got, err := contract.ParseDuration(s)
		require.NoError(t, err, s)
		require.Equal(t, d, got, s)
		require.Equal(t, s, contract.FormatDuration(got))
	}
}

// xsDuration is the grammar of the package documentation as a regular expression: years,
// months, days; T; hours, minutes, seconds with an optional fraction.
var xsDuration = regexp.MustCompile(`^P(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)D)?(T(?:(\d+)H)?(?:(\d+)M)?(?:(\d*)(\.\d*)?(S))?)?$`)

// reference parses s independently of the package: the regular expression, then .NET's
// conversion of an xs:duration to a TimeSpan in ticks, on big integers.
func reference(s string) (time.Duration, bool) {
	m := xsDuration.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, false
	}
	years, months, days, timePart, hours, minutes, secs, frac, s9 := m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], m[9]
	if s9 != "" && secs == "" && frac == "" {
		return 0, false // S needs a number (or a fraction)
	}
	if timePart == "T" || (timePart != "" && hours == "" && minutes == "" && s9 == "") {
		return 0, false // T without a time part
	}
	if years == "" && months == "" && days == "" && timePart == "" {
		return 0, false
	}
	n := func(s string) *big.Int {
		v, _ := new(big.Int).SetString("0"+s, 10)
		return v
	}
	for _, c := range []string{years, months, days, hours, minutes, secs} {
		if n(c).Cmp(big.NewInt(math.MaxInt32)) > 0 {
			return 0, false
		}
	}
	mo := n(months)
	totalDays := new(big.Int).Mul(n(years), big.NewInt(365))
	totalDays.Add(totalDays, new(big.Int).Mul(new(big.Int).Quo(mo, big.NewInt(12)), big.NewInt(365)))
	totalDays.Add(totalDays, new(big.Int).Mul(new(big.Int).Rem(mo, big.NewInt(12)), big.NewInt(30)))
	totalDays.Add(totalDays, n(days))
	total := new(big.Int).Mul(totalDays, big.NewInt(24))
	total.Add(total, n(hours)).Mul(total, big.NewInt(60))
	total.Add(total, n(minutes)).Mul(total, big.NewInt(60))
	total.Add(total, n(secs)).Mul(total, big.NewInt(1e9))
	digits := (strings.TrimPrefix(frac, ".") + "000000000")[:9]
	total.Add(total, n(digits)) // nanoseconds
	ticks := new(big.Int).Quo(total, big.NewInt(100))
	if ticks.Cmp(big.NewInt(math.MaxInt64)) > 0 {
		return 0, false
	}
	if total.Cmp(big.NewInt(math.MaxInt64)) >= 0 {
		return contract.Forever, true
	}
	return time.Duration(total.Int64()), true
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"PT30S", "P1DT2H30M", "PT0.5S", "P1Y2M3DT4H5M6.7S", "P10675199DT2H48M5.4775807S",
		"PT.5S", "PT1.S", "P2W", "PT0,5S", "P1.5D", "-PT1M", "PT", "P1DT", "P2147483648D", "P13M"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := contract.ParseDuration(s)
		want, ok := reference(s)
		if !ok {
			require.Error(t, err, "%q", s)
			return
		}
		require.NoError(t, err, "%q", s)
		require.Equal(t, want, d, "%q", s)
		out := contract.FormatDuration(d)
		back, err := contract.ParseDuration(out)
		require.NoError(t, err, "%q → %q", s, out)
		require.Equal(t, d, back, "%q → %q", s, out)
	})
}
