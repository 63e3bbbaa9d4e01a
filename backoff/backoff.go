package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff: the wait after failed attempt n (from 1) is
// min(Base·2^(n-1), Max), of which Jitter takes a random share off. The zero Policy waits zero.
type Policy struct {
	// Base is the first wait.
	Base time.Duration
	// Max caps every wait (0: no cap).
	Max time.Duration
	// Jitter is the share of each wait drawn at random, in [0, 1]: 0 waits exactly; 0.5 waits
	// between half and the whole (equal jitter); 1 waits anywhere from zero to the whole.
	Jitter float64
}

// Delay returns the wait after the given failed attempt (1-based; below 1 counts as 1).
func (p Policy) Delay(attempt int) time.Duration {
	d := p.exact(attempt)
	if p.Jitter <= 0 || d <= 0 {
		return d
	}
	j := min(p.Jitter, 1)
	spread := time.Duration(float64(d) * j)
	return d - spread + rand.N(spread+1)
}

// exact is the wait without jitter; it never overflows.
func (p Policy) exact(attempt int) time.Duration {
	d := p.Base
	if d <= 0 {
		return 0
	}
	for i := 1; i < attempt; i++ {
		if p.Max > 0 && d >= p.Max {
			break
		}
		if d > (1<<62)/2 { // the next doubling would overflow
			break
		}
		d *= 2
	}
	if p.Max > 0 {
		d = min(d, p.Max)
	}
	return d
}
