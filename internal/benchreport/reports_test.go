package benchreport

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs is the repository's docs folder, from this package's directory.
var docs = filepath.Join("..", "..", "docs")

// mdLink matches the target of a relative Markdown link or image.
var mdLink = regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`)

// Every report folder under docs/reports has a report.md, the summary table of
// docs/performance.md links to each one, and every relative link of those pages resolves.
func TestCommittedReports(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join(docs, "performance.md"))
	require.NoError(t, err)
	entries, err := os.ReadDir(filepath.Join(docs, "reports"))
	require.NoError(t, err)
	folder := regexp.MustCompile(`^\d{4}-\d{2}-\d{2}-(bench|soak|soak-idle)-([0-9a-f]{7}|unknown)(-\d+)?$`)
	pages := map[string][]byte{filepath.Join(docs, "performance.md"): page}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		require.Regexp(t, folder, e.Name(), "a report folder is named <date>-<command>-<commit>")
		report := filepath.Join(docs, "reports", e.Name(), "report.md")
		md, err := os.ReadFile(report)
		require.NoError(t, err, "every report folder has its report.md")
		pages[report] = md
		require.Contains(t, string(page), "(reports/"+e.Name()+"/report.md)", "docs/performance.md links to %s", e.Name())
	}
	for path, md := range pages {
		for _, m := range mdLink.FindAllStringSubmatch(string(md), -1) {
			target := filepath.Join(filepath.Dir(path), m[1])
			_, err := os.Stat(target)
			require.NoError(t, err, "%s links to %s", path, m[1])
			require.False(t, strings.HasPrefix(m[1], "/"), "%s: relative links only", path)
		}
	}
}
