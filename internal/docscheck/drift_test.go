package docscheck_test

import (
	"fmt"
	"go/scanner"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	migrationFileRE = regexp.MustCompile(`^(\d{3})_\w+\.up\.sql$`)
	// "migration 006", a range such as "migrations 006–008", "migration 003_outbox".
	migrationRefRE = regexp.MustCompile(`(?i)\bmigrations?\s+(\d{3})(?:\s*(?:to|–|-|through)\s*(\d{3}))?`)
	settingRE      = regexp.MustCompile(`\bSEQBUS_[A-Z0-9_]+`)
	envTagRE       = regexp.MustCompile(`envconfig:"([A-Z0-9_]+)"`)
	// A metric, table or function name: seqbus_ and at least one more character.
	objectRE = regexp.MustCompile(`\bseqbus_[a-z0-9_]*[a-z0-9]`)
)

// migrations returns the numbers of the migrations in migrations/.
func migrations(t *testing.T, dir string) []int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "migrations"))
	require.NoError(t, err)
	var out []int
	for _, e := range entries {
		if m := migrationFileRE.FindStringSubmatch(e.Name()); m != nil {
			n, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// migrationProblems checks the migration numbers a line names against the ones there are: each
// must exist, and a range from the first must end at the last.
func migrationProblems(line string, have []int) []string {
	var out []string
	for _, m := range migrationRefRE.FindAllStringSubmatch(line, -1) {
		from, _ := strconv.Atoi(m[1])
		if !slices.Contains(have, from) {
			out = append(out, fmt.Sprintf("migration %s does not exist", m[1]))
		}
		if m[2] == "" {
			continue
		}
		to, _ := strconv.Atoi(m[2])
		if !slices.Contains(have, to) {
			out = append(out, fmt.Sprintf("migration %s does not exist", m[2]))
		}
		if from == have[0] && to != have[len(have)-1] {
			out = append(out, fmt.Sprintf("%q: the migrations run from %03d to %03d", m[0], have[0], have[len(have)-1]))
		}
	}
	return out
}

// definedNames returns the SEQBUS_* settings and the seqbus_* metrics, tables and functions the
// code defines: the names in Go string literals (outside comments), the envconfig tags prefixed
// as worker.EnvPrefix does, and the names in the migrations' SQL.
func definedNames(t *testing.T, dir string) (settings, objects map[string]bool) {
	t.Helper()
	out, objects := map[string]bool{}, map[string]bool{}
	for _, rel := range walk(t, dir, ".sql") {
		for _, m := range objectRE.FindAllString(readFile(t, dir, rel), -1) {
			objects[m] = true
		}
	}
	for _, rel := range walk(t, dir, ".go") {
		src := readFile(t, dir, rel)
		fset := token.NewFileSet()
		var s scanner.Scanner
		s.Init(fset.AddFile(rel, -1, len(src)), []byte(src), nil, 0)
		for {
			_, tok, lit := s.Scan()
			if tok == token.EOF {
				break
			}
			if tok != token.STRING {
				continue
			}
			for _, m := range settingRE.FindAllString(lit, -1) {
				out[m] = true
			}
			for _, m := range envTagRE.FindAllStringSubmatch(lit, -1) {
				out["SEQBUS_"+m[1]] = true
			}
			for _, m := range objectRE.FindAllString(lit, -1) {
				objects[m] = true
			}
		}
	}
	return out, objects
}

// objectProblems returns the seqbus_* names in line that neither the code nor the migrations
// define.
func objectProblems(line string, defined map[string]bool) []string {
	var out []string
	for _, name := range objectRE.FindAllString(line, -1) {
		if !defined[name] {
			out = append(out, fmt.Sprintf("%s is not a metric, table or function the code defines", name))
		}
	}
	return out
}

// settingProblems returns the SEQBUS_* names in line that the code does not define; a name
// ending in '_' is a prefix and needs one defined name that starts with it.
func settingProblems(line string, defined map[string]bool) []string {
	var out []string
	for _, name := range settingRE.FindAllString(line, -1) {
		if strings.HasSuffix(name, "_") {
			found := false
			for d := range defined {
				found = found || strings.HasPrefix(d, name)
			}
			if !found {
				out = append(out, fmt.Sprintf("no setting starts with %s", name))
			}
			continue
		}
		if !defined[name] {
			out = append(out, fmt.Sprintf("%s is not a setting the code defines", name))
		}
	}
	return out
}

// TestDocsMatchCode checks every Markdown page and Go comment for migration numbers that do not
// match migrations/ and SEQBUS_* names the code does not define, and every Markdown page for
// seqbus_* metrics, tables and functions that neither the code nor the migrations define.
func TestDocsMatchCode(t *testing.T) {
	t.Parallel()
	dir := root(t)
	have := migrations(t, dir)
	require.NotEmpty(t, have)
	defined, objects := definedNames(t, dir)
	require.True(t, defined["SEQBUS_QUEUE"], "the envconfig tags are read")
	require.True(t, objects["seqbus_messages_total"] && objects["seqbus_journal"], "the metrics and tables are read")
	var problems []string
	// Migration numbers are looked for in a file's text as one line, since a wrapped paragraph
	// or comment may split "migrations" from its numbers; setting names line by line.
	check := func(rel string, lines map[int]string) {
		var all []string
		for _, n := range slices.Sorted(maps.Keys(lines)) {
			all = append(all, strings.TrimLeft(lines[n], "/ \t*"))
			for _, p := range settingProblems(lines[n], defined) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s", rel, n, p))
			}
		}
		for _, p := range migrationProblems(strings.Join(all, " "), have) {
			problems = append(problems, fmt.Sprintf("%s: %s", rel, p))
		}
	}
	for _, rel := range walk(t, dir, ".md") {
		lines := map[int]string{}
		for i, l := range strings.Split(readFile(t, dir, rel), "\n") {
			lines[i+1] = l
			for _, p := range objectProblems(l, objects) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s", rel, i+1, p))
			}
		}
		check(rel, lines)
	}
	for _, rel := range walk(t, dir, ".go") {
		check(rel, goComments(t, rel, readFile(t, dir, rel)))
	}
	require.Empty(t, problems, "documentation that does not match the code:\n%s", strings.Join(problems, "\n"))
}

func TestDriftRules(t *testing.T) {
	t.Parallel()
	have := []int{1, 2, 3, 4, 5, 6, 7, 8}
	defined := map[string]bool{"SEQBUS_QUEUE": true, "SEQBUS_EMULATOR_LATENCY": true}
	objects := map[string]bool{"seqbus_messages_total": true}
	tests := []struct {
		line string
		want int
	}{
		{"migrations 001 to 008", 0},
		{"migrations 001 to 006", 1},
		{"migrations 001–006", 1},
		{"migrations 006–008 add columns", 0},
		{"migration 009 adds", 1},
		{"migration 003_outbox", 0},
		{"SEQBUS_QUEUE=orders", 0},
		{"SEQBUS_QUEUES=orders", 1},
		{"the SEQBUS_EMULATOR_* variables", 0},
		{"the SEQBUS_RELAY_* variables", 1},
		{"`seqbus_messages_total{outcome}` and the seqbus_* tables", 0},
		{"`seqbus_message_total`", 1},
	}
	for _, tt := range tests {
		got := append(migrationProblems(tt.line, have), settingProblems(tt.line, defined)...)
		got = append(got, objectProblems(tt.line, objects)...)
		require.Len(t, got, tt.want, "%s: %v", tt.line, got)
	}
}
