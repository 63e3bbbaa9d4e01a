package docscheck_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// goBlocks returns the contents of the ```go blocks of a Markdown text.
func goBlocks(text string) []string {
	var out []string
	var cur []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```go":
			in, cur = true, nil
		case in && strings.TrimSpace(l) == "```":
			in = false
			out = append(out, strings.Join(cur, "\n")+"\n")
		case in:
			cur = append(cur, l)
		}
	}
	return out
}

// TestReadmeExample checks that the README's one Go example is the code of
// readme_example_test.go, which the package's test build compiles.
func TestReadmeExample(t *testing.T) {
	t.Parallel()
	dir := root(t)
	blocks := goBlocks(readFile(t, dir, "README.md"))
	require.Len(t, blocks, 1, "the README has one Go example")
	const marker = "// README example begins\n"
	_, compiled, ok := strings.Cut(readFile(t, dir, "internal/docscheck/readme_example_test.go"), marker)
	require.True(t, ok, "readme_example_test.go holds the marker")
	require.Equal(t, compiled, blocks[0], "the README's Go example differs from readme_example_test.go")
}

func TestGoBlocks(t *testing.T) {
	t.Parallel()
	text := "x\n```go\na\n\tb\n```\n```sh\nc\n```\n```go\nd\n```\n"
	require.Equal(t, []string{"a\n\tb\n", "d\n"}, goBlocks(text))
}
