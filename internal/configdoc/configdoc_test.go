package configdoc_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/configdoc"
)

type mode string

type size int64

type common struct {
	Addr string `envconfig:"ADDR" desc:"Where to listen."`
}

type settings struct {
	Name     string        `envconfig:"NAME" desc:"The name."`
	Mode     mode          `envconfig:"MODE" desc:"How to run."`
	Workers  int           `envconfig:"WORKERS" desc:"Workers at once."`
	Window   int           `envconfig:"WINDOW" desc:"Held | early."`
	Wait     time.Duration `envconfig:"WAIT" desc:"How long to wait."`
	Retain   time.Duration `envconfig:"RETAIN" desc:"How long to keep."`
	Max      size          `envconfig:"MAX" desc:"Bound on the bodies."`
	Verbose  bool          `envconfig:"VERBOSE" desc:"Log more."`
	Topics   []string      `envconfig:"TOPICS" desc:"Topics to read."`
	Callback func()        `ignored:"true" desc:"Called on each message."`
	common
}

// validate follows worker.Config.Validate's form: one problem a line, each naming its variable.
func validate(v any) error {
	s := v.(settings)
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Name == "" {
		bad("APP_NAME: must not be empty (Config.Name)")
	}
	if s.Mode != "fast" && s.Mode != "safe" {
		bad("APP_MODE: %q is not one of fast, safe (Config.Mode)", s.Mode)
	}
	if s.Workers <= 0 {
		bad("APP_WORKERS: must be positive, got %d (Config.Workers)", s.Workers)
	}
	if s.Window < 0 {
		bad("APP_WINDOW: must not be negative (0 turns it off), got %d", s.Window)
	}
	if s.Wait <= 0 {
		bad("APP_WAIT: must be positive, got %s", s.Wait)
	}
	if s.Max < 1024 {
		bad("APP_MAX: must be at least 1KiB, got %d bytes", s.Max)
	}
	if s.Addr != "" && !strings.Contains(s.Addr, ":") {
		bad("APP_ADDR: %q is not host:port", s.Addr)
		bad("OTHER_VAR: not this section's")
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("invalid configuration:\n%w", errors.Join(errs...))
}

func defaults() settings {
	return settings{Mode: "safe", Workers: 8, Window: 256, Wait: 90 * time.Second, Retain: 24 * time.Hour,
		Max: 8 << 20, Topics: []string{"a", "b"}, common: common{Addr: ":9464"}}
}

func TestSettings(t *testing.T) {
	t.Parallel()
	valid := defaults()
	valid.Name = "orders"
	s := configdoc.Section{
		Title: "App", Prefix: "APP", Defaults: defaults(), Valid: valid, Validate: validate, GoOnly: true,
		Format: map[reflect.Type]func(reflect.Value) string{
			reflect.TypeFor[size](): func(v reflect.Value) string { return fmt.Sprintf("%dMiB", v.Int()>>20) },
		},
	}
	rows, err := s.Settings()
	require.NoError(t, err)
	want := []configdoc.Setting{
		{Var: "APP_NAME", Field: "settings.Name", Default: "", Validation: "must not be empty", Meaning: "The name."},
		{Var: "APP_MODE", Field: "settings.Mode", Default: "safe", Validation: "one of fast, safe", Meaning: "How to run."},
		{Var: "APP_WORKERS", Field: "settings.Workers", Default: "8", Validation: "must be positive", Meaning: "Workers at once."},
		{Var: "APP_WINDOW", Field: "settings.Window", Default: "256", Validation: "must not be negative (0 turns it off)", Meaning: "Held | early."},
		{Var: "APP_WAIT", Field: "settings.Wait", Default: "1m30s", Validation: "must be positive", Meaning: "How long to wait."},
		{Var: "APP_RETAIN", Field: "settings.Retain", Default: "24h", Validation: "", Meaning: "How long to keep."},
		{Var: "APP_MAX", Field: "settings.Max", Default: "8MiB", Validation: "must be at least 1KiB", Meaning: "Bound on the bodies."},
		{Var: "APP_VERBOSE", Field: "settings.Verbose", Default: "false", Meaning: "Log more."},
		{Var: "APP_TOPICS", Field: "settings.Topics", Default: "a,b", Meaning: "Topics to read."},
		{Field: "settings.Callback", Meaning: "Called on each message."},
		{Var: "APP_ADDR", Field: "settings.Addr", Default: ":9464", Validation: "is not host:port", Meaning: "Where to listen."},
	}
	require.Equal(t, want, rows)
}

func TestSettingsErrors(t *testing.T) {
	t.Parallel()
	type undocumented struct {
		Documented int `envconfig:"DOCUMENTED" desc:"Has one."`
		Bare       int `envconfig:"BARE"`
		GoOnly     any `ignored:"true"`
	}
	tests := []struct {
		name    string
		section configdoc.Section
		wantErr string
	}{
		{"a field without desc", configdoc.Section{Title: "T", Prefix: "X", Defaults: undocumented{}},
			"T: no desc tag on undocumented.Bare, undocumented.GoOnly"},
		{"defaults not a struct", configdoc.Section{Title: "T", Defaults: &settings{}}, "Defaults is a ptr"},
		{"valid of another type", configdoc.Section{Title: "T", Defaults: defaults(), Valid: undocumented{}}, "Valid is a configdoc_test.undocumented"},
		{"invalid value to probe", configdoc.Section{Title: "T", Defaults: defaults(), Validate: validate}, "APP_NAME: must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.section.Settings()
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	valid := defaults()
	valid.Name = "orders"
	var b strings.Builder
	err := configdoc.Render(&b, "# Settings\n", configdoc.Section{
		Title: "App", Intro: "What the app reads.", Prefix: "APP", Defaults: defaults(), Valid: valid, Validate: validate, GoOnly: true,
	})
	require.NoError(t, err)
	out := b.String()
	require.True(t, strings.HasPrefix(out, "# Settings\n\n## App\n\nWhat the app reads.\n\n| Variable | Default | Validation | Meaning |\n|---|---|---|---|\n"), out)
	require.Contains(t, out, "| `APP_NAME` | — | must not be empty | The name. |\n")
	require.Contains(t, out, "| `APP_WINDOW` | `256` | must not be negative (0 turns it off) | Held \\| early. |\n")
	require.Contains(t, out, "\nSet from Go only:\n\n| Go field | Meaning |\n|---|---|\n| `settings.Callback` | Called on each message. |\n")
	require.NotContains(t, out, "OTHER_VAR")
}

func TestFormatBytes(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 1000: "1000", 1024: "1KiB", 256 << 10: "256KiB", 8 << 20: "8MiB", 3 << 30: "3GiB", 1536: "1536"} {
		require.Equal(t, want, configdoc.FormatBytes(n), n)
	}
}

// An exported type's settings name their Go field; another's do not.
type Exported struct {
	Port int `envconfig:"PORT" desc:"The port."`
}

func TestRenderGoField(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	require.NoError(t, configdoc.Render(&b, "# S", configdoc.Section{Title: "E", Prefix: "APP", Defaults: Exported{Port: 80}}))
	require.Contains(t, b.String(), "| Variable | Default | Validation | Meaning | Go field |\n|---|---|---|---|---|\n| `APP_PORT` | `80` |  | The port. | `Exported.Port` |\n")
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", 20 * time.Millisecond: "20ms", 30 * time.Second: "30s", time.Minute: "1m",
		90 * time.Minute: "1h30m", 168 * time.Hour: "168h", time.Hour + time.Second: "1h0m1s",
	} {
		require.Equal(t, want, configdoc.FormatDuration(d), d.String())
	}
}
