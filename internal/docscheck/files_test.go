package docscheck_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the repository root, two levels above this package.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "go.mod"))
	require.NoError(t, err, "the repository root holds go.mod")
	return dir
}

// skipDir reports directories that hold no project text: version control, dependencies and
// test data of other languages' SDKs.
func skipDir(name string) bool {
	return strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "vendor"
}

// walk returns the repository-relative paths, slash-separated, of the files under root whose
// name ends in one of exts.
func walk(t *testing.T, dir string, exts ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		for _, ext := range exts {
			if strings.HasSuffix(d.Name(), ext) {
				rel, err := filepath.Rel(dir, path)
				if err != nil {
					return err
				}
				out = append(out, filepath.ToSlash(rel))
				return nil
			}
		}
		return nil
	})
	require.NoError(t, err, "walking %s", dir)
	return out
}

// docFiles are the user documentation: README.md, CHANGELOG.md and every page under docs/.
func docFiles(t *testing.T, dir string) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md"}
	files = append(files, walkUnder(t, dir, "docs", ".md")...)
	return files
}

func walkUnder(t *testing.T, dir, sub, ext string) []string {
	t.Helper()
	var out []string
	for _, p := range walk(t, filepath.Join(dir, sub), ext) {
		out = append(out, sub+"/"+p)
	}
	return out
}

func readFile(t *testing.T, dir, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	require.NoError(t, err, "reading %s", rel)
	return string(b)
}

// prose returns the lines of a Markdown text outside fenced code blocks, each with its line
// number; fenced blocks come back blank so that line numbers stay right.
func prose(text string) []string {
	lines := strings.Split(text, "\n")
	out := make([]string, len(lines))
	fence := ""
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
		case strings.HasPrefix(trimmed, "```"), strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
		default:
			out[i] = l
		}
	}
	return out
}
