package docscheck_test

import (
	"fmt"
	"go/scanner"
	"go/token"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A rule finds one kind of development-history wording. Each rule is narrow on purpose: it names
// the wording, not the ordinary word ("stop" of a process, a test helper, an issue of another
// project, the emulator's own side of a link).
type rule struct {
	name  string
	re    *regexp.Regexp
	allow func(line string, loc []int) bool
}

var (
	// A commit id: 7 to 40 lower-case hex digits with at least one digit and one letter.
	hashRE = regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)

	// A work period called a stop, named by its place among the others or by what it came after.
	stopRE = regexp.MustCompile(`(?i)\b(?:this|that|last|previous|earlier)\s+stop(?:'s)?\b|\bstops?\s+ago\b|\bthe\s+stop\s+(?:after|before|that\s+ended)\b`)

	// The people who built it, as opposed to a test helper.
	helperRE = regexp.MustCompile(`(?i)\bhelpers?'s?(?:[\s.,;:)]|$)|\b(?:other|two|three|four|five|six|several)\s+helpers\b|\bhelper\s+engineers?\b`)

	// This project's tracker numbers, with or without '#'.
	issueRE = regexp.MustCompile(`(?i)\bissues?\s+#?\d+`)
	// A word naming another project right before "issue N" makes it a reference to that
	// project's tracker: two capitals (KEDA, GitHub), an owner/name, a hyphenated repository name
	// (azure-service-bus-dotnet), or a known lower-case name.
	otherProjectRE = regexp.MustCompile(`(?:^|[\s(])(?:[A-Z][A-Za-z0-9-]*[A-Z][A-Za-z0-9-]*|[\w.-]+/[\w.-]+|[a-z0-9]+(?:-[a-z0-9]+)+|azservicebus|go-amqp|pgx|envconfig|uamqp|pyamqp|testcontainers-go)\s+$`)

	// First person in prose.
	firstPersonDocRE = regexp.MustCompile(`\b(?:I(?:'m|'ve|'d)?|[Mm]e|[Mm]y|[Ww]e(?:'ve|'re|'d)?|[Oo]ur|[Uu]s)\b`)
	// First person in code comments: "I" and "we" doing what a developer does. The emulator's
	// comments speak of its own side of a connection ("our end", "we detached"): that is the
	// protocol's vocabulary, not a diary.
	firstPersonCodeRE = regexp.MustCompile(`\bI(?:'m|'ve|'d)?\s+(?:tried|measured|found|ran|decided|kept|fixed|added|saw|wrote|noticed|learned|removed|reverted|merged|changed|moved|chose|think|believe|guess)\b|\b[Ww]e(?:'ve)?\s+(?:tried|measured|found|ran|decided|kept|fixed|added|saw|wrote|noticed|learned|removed|reverted|merged|changed|moved|chose|think|believe|guess)\b`)
)

// inCode reports whether loc lies inside inline code (an odd number of backticks before it):
// a name in code, such as a namespace called my-ns, is not prose.
func inCode(line string, loc []int) bool {
	return strings.Count(line[:loc[0]], "`")%2 == 1
}

// reportNameRE is the name of a dated benchmark report folder, which ends with the commit the
// run measured (docs/reports/2026-11-29-bench-1a2b3c4): a name, not prose.
var reportNameRE = regexp.MustCompile(`\d{4}-\d{2}-\d{2}-[a-z-]+-$`)

func hashAllowed(line string, loc []int) bool {
	h := line[loc[0]:loc[1]]
	return !strings.ContainsAny(h, "0123456789") || !strings.ContainsAny(h, "abcdef") ||
		reportNameRE.MatchString(line[:loc[0]])
}

func issueAllowed(line string, loc []int) bool {
	return otherProjectRE.MatchString(line[:loc[0]])
}

func firstPersonAllowed(line string, loc []int) bool {
	if inCode(line, loc) {
		return true
	}
	w := line[loc[0]:loc[1]]
	rest := line[loc[1]:]
	switch {
	case w == "I" && (strings.HasPrefix(rest, "/O") || strings.HasPrefix(rest, "/o")):
		return true // I/O
	case w == "us" || w == "Us":
		before := strings.TrimRight(line[:loc[0]], " ")
		return before != "" && strings.ContainsAny(before[len(before)-1:], "0123456789") // 0.3 us
	}
	return false
}

var (
	docRules = []rule{
		{"commit hash", hashRE, hashAllowed},
		{"work period", stopRE, nil},
		{"helper", helperRE, nil},
		{"issue number", issueRE, issueAllowed},
		{"first person", firstPersonDocRE, firstPersonAllowed},
	}
	// stringRules apply to the string literals of non-test Go files: flag help, error messages
	// and other text a user reads. A literal may hold anything (hex, a pronoun in sample data),
	// so only the unambiguous wordings are checked there.
	stringRules = []rule{
		{"work period", stopRE, nil},
		{"helper", helperRE, nil},
		{"issue number", issueRE, issueAllowed},
	}
	codeRules = []rule{
		{"commit hash", hashRE, hashAllowed},
		{"work period", stopRE, nil},
		{"helper", helperRE, nil},
		{"issue number", issueRE, issueAllowed},
		{"first person", firstPersonCodeRE, nil},
	}
)

// findings returns "rule: match" for each development-history wording in line.
func findings(rules []rule, line string) []string {
	var out []string
	for _, r := range rules {
		for _, loc := range r.re.FindAllStringIndex(line, -1) {
			if r.allow != nil && r.allow(line, loc) {
				continue
			}
			out = append(out, fmt.Sprintf("%s: %q", r.name, line[loc[0]:loc[1]]))
		}
	}
	return out
}

// goStrings returns the string literals of a Go source, by line.
func goStrings(name, src string) map[int]string {
	fset := token.NewFileSet()
	file := fset.AddFile(name, -1, len(src))
	var s scanner.Scanner
	s.Init(file, []byte(src), nil, 0)
	out := map[int]string{}
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return out
		}
		if tok == token.STRING {
			out[fset.Position(pos).Line] += lit
		}
	}
}

// goComments returns the comments of a Go source, each line with its line number.
func goComments(t *testing.T, name, src string) map[int]string {
	t.Helper()
	fset := token.NewFileSet()
	file := fset.AddFile(name, -1, len(src))
	var s scanner.Scanner
	s.Init(file, []byte(src), nil, scanner.ScanComments)
	out := map[int]string{}
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return out
		}
		if tok != token.COMMENT {
			continue
		}
		line := fset.Position(pos).Line
		for i, l := range strings.Split(lit, "\n") {
			out[line+i] += l
		}
	}
}

// historyExcluded lists the paths the check passes over: none today. A path goes here only
// while its own rewrite is under way, with the findings listed where that work is tracked.
var historyExcluded = []string{}

func excluded(rel string) bool {
	for _, p := range historyExcluded {
		if rel == p || strings.HasPrefix(rel, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

// TestNoDevelopmentHistory checks every Markdown page (outside code blocks), every Go comment, the
// string literals of the code (flag help, messages) and the comments of the deployment files and
// scripts for development-history wording.
func TestNoDevelopmentHistory(t *testing.T) {
	t.Parallel()
	dir := root(t)
	var problems []string
	report := func(rel string, line int, found []string) {
		for _, f := range found {
			problems = append(problems, fmt.Sprintf("%s:%d: %s", rel, line, f))
		}
	}
	for _, rel := range walk(t, dir, ".md") {
		if excluded(rel) {
			continue
		}
		rules := docRules
		if strings.HasPrefix(rel, "docs/reports/") {
			// A report names the commit it measured, by design (benchreport).
			rules = nil
			for _, r := range docRules {
				if r.name != "commit hash" {
					rules = append(rules, r)
				}
			}
		}
		for i, l := range prose(readFile(t, dir, rel)) {
			report(rel, i+1, findings(rules, l))
		}
	}
	for _, rel := range walk(t, dir, ".go") {
		if excluded(rel) {
			continue
		}
		src := readFile(t, dir, rel)
		for line, c := range goComments(t, rel, src) {
			report(rel, line, findings(codeRules, c))
		}
		if !strings.HasSuffix(rel, "_test.go") {
			for line, lit := range goStrings(rel, src) {
				report(rel, line, findings(stringRules, lit))
			}
		}
	}
	for _, rel := range walk(t, dir, ".yaml", ".yml", ".sh", "Dockerfile") {
		if excluded(rel) {
			continue
		}
		for i, l := range strings.Split(readFile(t, dir, rel), "\n") {
			if _, c, ok := strings.Cut(l, "#"); ok {
				report(rel, i+1, findings(codeRules, c))
			}
		}
	}
	require.Empty(t, problems, "development-history wording:\n%s", strings.Join(problems, "\n"))
}

func TestHistoryRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		rules []rule
		line  string
		want  int
	}{
		{"hash in backticks", docRules, "main at `09be201`", 1},
		{"hash in prose", codeRules, "measured at c4bcd65 with", 1},
		{"hex without a letter is a number", docRules, "1234567890 bytes", 0},
		{"word of hex letters", docRules, "deadbeefcafe", 0},
		{"this stop", docRules, "this stop's item", 1},
		{"the stop after", docRules, "The stop after `af5617d`: a fix", 2},
		{"stops ago", codeRules, "two stops ago", 1},
		{"process stop", docRules, "then a stop before the drain goes on; a graceful stop", 0},
		{"stop the worker", codeRules, "Stop stops the worker; a holder that stops lets go", 0},
		{"a helper's", docRules, "tried on a helper's branch", 1},
		{"helpers'", docRules, "two helpers' benchmarks", 1},
		{"other helpers", docRules, "other helpers running", 1},
		{"test helpers", codeRules, "Package testio holds io helpers shared by tests; t.Helper()", 0},
		{"helper function", codeRules, "a helper that builds the pool", 0},
		{"this project's issue", docRules, "runs issue 23's shape", 1},
		{"issue in parentheses", codeRules, "after the last message (issue 10; TestX)", 1},
		{"issue with hash", docRules, "fixed in issue #7", 1},
		{"another project's issue", docRules, "for ever (KEDA issue 1479)", 0},
		{"owner/name issue", docRules, "see kedacore/keda issue 1479", 0},
		{"SDK issue", docRules, "an azservicebus issue 2210 says", 0},
		{"report folder", docRules, "[run](reports/2026-11-29-bench-1a2b3c4/report.md)", 0},
		{"hash beside a date", docRules, "on 2026-11-29 at 1a2b3c4", 1},
		{"hyphenated repository issue", docRules, "(azure-service-bus-dotnet issue 544)", 0},
		{"I in prose", docRules, "I measured it twice", 1},
		{"we in prose", docRules, "we keep the state", 1},
		{"our in prose", docRules, "on our machine", 1},
		{"I/O", docRules, "the core does no I/O", 0},
		{"a name in code", docRules, "With `--namespace my-ns` instead", 0},
		{"microseconds", docRules, "0.3 us a call", 0},
		{"use", docRules, "users use us", 1},
		{"we tried in code", codeRules, "we tried a smaller batch", 1},
		{"I found in code", codeRules, "I found that", 1},
		{"the emulator's side", codeRules, "channels we ended; our end of the session", 0},
		{"I/O in code", codeRules, "does no I/O", 0},
		{"flag help with an issue", stringRules, "the shape of issue 10's report", 1},
		{"hex and a pronoun in a literal", stringRules, "09be201 we", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Len(t, findings(tt.rules, tt.line), tt.want, "%v", findings(tt.rules, tt.line))
		})
	}
}
