package worker

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a number of bytes, written in the environment as a plain integer or with a unit:
// 512, 64KiB, 8MiB, 1GiB (binary) or 64KB, 8MB (decimal). It implements envconfig.Decoder.
type ByteSize int64

var byteUnits = []struct {
	suffix string
	factor int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"B", 1},
}

// Decode parses s.
func (b *ByteSize) Decode(s string) error {
	v := strings.TrimSpace(s)
	factor := int64(1)
	for _, u := range byteUnits {
		if len(v) > len(u.suffix) && strings.EqualFold(v[len(v)-len(u.suffix):], u.suffix) {
			v, factor = strings.TrimSpace(v[:len(v)-len(u.suffix)]), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/factor {
		return fmt.Errorf("%q is not a size such as 262144, 256KiB or 8MiB", s)
	}
	*b = ByteSize(n * factor)
	return nil
}
