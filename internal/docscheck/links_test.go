package docscheck_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

var (
	linkRE       = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	inlineCodeRE = regexp.MustCompile("`[^`]*`")
	headingRE    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlIDRE     = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// slug is the anchor GitHub gives a heading: lower case, punctuation other than '-' and '_'
// dropped, spaces turned into '-'.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns every anchor a Markdown text defines: its headings' slugs (a repeated heading
// gets -1, -2, …) and explicit <a id> or <a name> tags.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(text) {
		if m := headingRE.FindStringSubmatch(l); m != nil {
			s := slug(m[1])
			if n := seen[s]; n > 0 {
				out[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
	}
	return out
}

type link struct {
	line   int
	target string
}

// links returns the link targets of a Markdown text, outside code blocks and inline code.
func links(text string) []link {
	var out []link
	for i, l := range prose(text) {
		l = inlineCodeRE.ReplaceAllString(l, "")
		for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
			out = append(out, link{line: i + 1, target: m[1]})
		}
	}
	return out
}

func external(target string) bool {
	for _, p := range []string{"http://", "https://", "mailto:"} {
		if strings.HasPrefix(target, p) {
			return true
		}
	}
	return false
}

// checkLink reports why target, linked from the repository file from, does not resolve, or "".
func checkLink(dir, from, target string) string {
	if external(target) {
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	rel := from
	if file != "" {
		rel = path.Clean(path.Join(path.Dir(from), file))
		if strings.HasPrefix(rel, "../") {
			return fmt.Sprintf("%s leaves the repository", target)
		}
	}
	info, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return fmt.Sprintf("%s: no file %s", target, rel)
	}
	if anchor == "" {
		return ""
	}
	if info.IsDir() || !strings.HasSuffix(rel, ".md") {
		return fmt.Sprintf("%s: an anchor into %s, which is not a Markdown page", target, rel)
	}
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return fmt.Sprintf("%s: %v", target, err)
	}
	if !anchors(string(b))[anchor] {
		return fmt.Sprintf("%s: %s has no heading or anchor #%s", target, rel, anchor)
	}
	return ""
}

// TestLinksResolve checks every relative link and #anchor in README.md, CHANGELOG.md and docs/.
func TestLinksResolve(t *testing.T) {
	t.Parallel()
	dir := root(t)
	var problems []string
	checked := 0
	for _, f := range docFiles(t, dir) {
		for _, l := range links(readFile(t, dir, f)) {
			if problem := checkLink(dir, f, l.target); problem != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: %s", f, l.line, problem))
			}
			checked++
		}
	}
	require.NotZero(t, checked, "the documentation links somewhere")
	require.Empty(t, problems, "links that do not resolve:\n%s", strings.Join(problems, "\n"))
}

func TestSlugAndLinks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		heading, want string
	}{
		{"Quick start", "quick-start"},
		{"Long outages: released retries", "long-outages-released-retries"},
		{"Scaling on sessions, not messages", "scaling-on-sessions-not-messages"},
		{"`worker doctor` and SEQBUS_HTTP_ADDR", "worker-doctor-and-seqbus_http_addr"},
		{"Partitioned entities and session-id", "partitioned-entities-and-session-id"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, slug(tt.heading), tt.heading)
	}

	text := "# A\n\n## B\n\n## B\n\n```\n## not a heading [x](nowhere.md)\n```\n" +
		"See [b](#b-1), `[code](nowhere.md)` and ![img](pic.svg).\n<a id=\"here\"></a>\n"
	require.Equal(t, map[string]bool{"a": true, "b": true, "b-1": true, "here": true}, anchors(text))
	require.Equal(t, []link{{10, "#b-1"}, {10, "pic.svg"}}, links(text))
}

func TestCheckLink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "docs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("# Top\n## Quick start\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "docs", "a.md"), []byte("# Page A\n"), 0o644))
	tests := []struct {
		from, target string
		problem      string
	}{
		{"README.md", "docs/a.md", ""},
		{"README.md", "docs/a.md#page-a", ""},
		{"README.md", "#quick-start", ""},
		{"docs/a.md", "../README.md#quick-start", ""},
		{"docs/a.md", "../README.md#quick", "has no heading or anchor"},
		{"README.md", "docs/b.md", "no file docs/b.md"},
		{"README.md", "docs/", ""},
		{"README.md", "docs/#x", "not a Markdown page"},
		{"docs/a.md", "../../etc/passwd", "leaves the repository"},
		{"README.md", "https://example.com/x#y", ""},
	}
	for _, tt := range tests {
		problem := checkLink(dir, tt.from, tt.target)
		if tt.problem == "" {
			require.Empty(t, problem, tt.target)
		} else {
			require.Contains(t, problem, tt.problem, tt.target)
		}
	}
}
