//go:build !unix

package e2e

import "time"

// processCPU is 0 where getrusage is not available: the CPU metrics are left out.
func processCPU() time.Duration { return 0 }
