package monitoring

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

const (
	rulesFile      = "seqbus-rules.yaml"
	rulesTestFile  = "seqbus-rules_test.yaml"
	prometheusRule = "../kubernetes/prometheusrule.yaml"
	dashboardFile  = "../kubernetes/dashboards/seqbus.json"
	kustomization  = "../kubernetes/kustomization.yaml"
	runbooks       = "../../docs/alerts.md"
)

type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(data, v), path)
}

func alerts(t *testing.T) []rule {
	t.Helper()
	var g ruleGroups
	readYAML(t, rulesFile, &g)
	var out []rule
	for _, grp := range g.Groups {
		out = append(out, grp.Rules...)
	}
	require.NotEmpty(t, out)
	return out
}

// TestRulesWithPromtool runs promtool's checks and the rules' unit tests.
func TestRulesWithPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: apt-get install prometheus); the alert rules' unit tests did not run")
	}
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.CommandContext(t.Context(), promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestPrometheusRuleIsTheRulesFile: the kustomize base's PrometheusRule carries the rules file's
// groups unchanged.
func TestPrometheusRuleIsTheRulesFile(t *testing.T) {
	t.Parallel()
	var plain ruleGroups
	readYAML(t, rulesFile, &plain)
	var pr struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   map[string]string `json:"metadata"`
		Spec       ruleGroups        `json:"spec"`
	}
	readYAML(t, prometheusRule, &pr)
	require.Equal(t, "PrometheusRule", pr.Kind)
	require.Equal(t, plain, pr.Spec)
}

var heading = regexp.MustCompile(`(?m)^## (\S+)\s*$`)

// TestEveryAlertHasARunbookAndTests: each alert links its runbook section in docs/alerts.md,
// which exists, and the promtool tests have a case where it fires and one where it does not.
func TestEveryAlertHasARunbookAndTests(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(runbooks)
	require.NoError(t, err)
	sections := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(string(doc), -1) {
		sections[strings.ToLower(m[1])] = true
	}
	var tests struct {
		RuleFiles          []string `json:"rule_files"`
		EvaluationInterval string   `json:"evaluation_interval"`
		Tests              []struct {
			Interval    string `json:"interval"`
			InputSeries []struct {
				Series string `json:"series"`
				Values string `json:"values"`
			} `json:"input_series"`
			AlertRuleTest []struct {
				EvalTime  string           `json:"eval_time"`
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	readYAML(t, rulesTestFile, &tests)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range alerts(t) {
		anchor := strings.ToLower(r.Alert)
		require.Equal(t, "docs/alerts.md#"+anchor, r.Annotations["runbook"], r.Alert)
		require.True(t, sections[anchor], "%s: no section \"## %s\" in docs/alerts.md", r.Alert, r.Alert)
		require.True(t, fires[r.Alert], "%s: no promtool case where it fires", r.Alert)
		require.True(t, quiet[r.Alert], "%s: no promtool case where it stays quiet", r.Alert)
		require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
	}
}

// TestDashboardConfigMap: the kustomize base provisions the dashboard as a ConfigMap with
// Grafana's sidecar label.
func TestDashboardConfigMap(t *testing.T) {
	t.Parallel()
	type generator struct {
		Name    string   `json:"name"`
		Files   []string `json:"files"`
		Options struct {
			Labels map[string]string `json:"labels"`
		} `json:"options"`
	}
	var k struct {
		ConfigMapGenerator []generator `json:"configMapGenerator"`
	}
	data, err := os.ReadFile(kustomization)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &k))
	i := slices.IndexFunc(k.ConfigMapGenerator, func(g generator) bool { return g.Name == "seqbus-grafana-dashboard" })
	require.GreaterOrEqual(t, i, 0, "a configMapGenerator seqbus-grafana-dashboard")
	require.Equal(t, []string{"dashboards/seqbus.json"}, k.ConfigMapGenerator[i].Files)
	require.Equal(t, "1", k.ConfigMapGenerator[i].Options.Labels["grafana_dashboard"])
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

var metricName = regexp.MustCompile(`\bseqbus_[a-z0-9_]+\b`)

// queried returns the metric names a query names, a histogram's series under its family name.
func queried(expr string, families map[string]bool) []string {
	var out []string
	for _, n := range metricName.FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && families[base] {
				n = base
			}
		}
		out = append(out, n)
	}
	return out
}

// exported runs a worker on the emulator until every family it registers has been gathered at
// least once (a vector appears once it has a child: the sweeper's and the scaling signal's
// broker calls after their first round) and returns the families' names.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues:        map[string]broker.EntityProperties{"orders": {RequiresSession: true}},
		ClientOptions: sbadapter.ClientOptions(nil),
	})
	cfg := worker.DefaultConfig()
	cfg.ConnectionString, cfg.Queue = srv.ConnectionString(), "orders"
	cfg.HTTPAddr = worker.HTTPOff
	cfg.SweepInterval, cfg.ScaleInterval = 50*time.Millisecond, 50*time.Millisecond
	cfg.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	cfg.Registry = prometheus.NewRegistry()
	w, err := worker.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, w.Start(ctx))
	defer func() { require.NoError(t, w.Stop(context.WithoutCancel(ctx))) }()
	names := map[string]bool{}
	require.Eventually(t, func() bool {
		mfs, err := cfg.Registry.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			names[mf.GetName()] = true
		}
		return names["seqbus_sweep_broker_calls_total"] && names["seqbus_scale_broker_calls_total"] && names["seqbus_broker_calls_total"]
	}, 30*time.Second, 50*time.Millisecond, "the sweeper's and the scaling signal's broker calls")
	return names
}

// TestQueriesNameExportedMetrics: the dashboard decodes, each panel queries, and every metric
// the dashboard and the alert rules name is one a running worker exports.
func TestQueriesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	families := exported(t)
	data, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(data, &d))
	require.Equal(t, "seqbus", d.Title)
	var exprs []string
	graphs := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		graphs++
		require.NotEmpty(t, p.Targets, "panel %q", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			exprs = append(exprs, tg.Expr)
		}
	}
	require.GreaterOrEqual(t, graphs, 10)
	for _, v := range d.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	for _, r := range alerts(t) {
		exprs = append(exprs, r.Expr)
	}
	used := map[string]bool{}
	for _, e := range exprs {
		for _, n := range queried(e, families) {
			used[n] = true
			require.True(t, families[n], "%s (in %q) is no metric the worker exports", n, e)
		}
	}
	// The topics the dashboard promises.
	for _, n := range []string{"seqbus_messages_total", "seqbus_handler_duration_seconds", "seqbus_sessions_parked", "seqbus_gap_oldest_seconds",
		"seqbus_broker_calls_total", "seqbus_settlements_refused_total", "seqbus_replicas_wanted", "seqbus_sweep_broker_calls_total"} {
		require.True(t, used[n], "the dashboard does not show %s", n)
	}
}
