package kubernetes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/seqbus/seqbus/topology"
	"github.com/seqbus/seqbus/worker"
)

// kinds maps apiVersion/kind to the Go type a manifest of that kind decodes into.
var kinds = map[string]func() any{
	"v1/Namespace":                            func() any { return &corev1.Namespace{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"batch/v1/Job":                            func() any { return &batchv1.Job{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
	"keda.sh/v1alpha1/ScaledObject":           func() any { return &kedav1alpha1.ScaledObject{} },
	"keda.sh/v1alpha1/TriggerAuthentication":  func() any { return &kedav1alpha1.TriggerAuthentication{} },
}

// kustomization is the part of kustomize's Kustomization (and Component) this base uses; strict
// decoding into it fails on any other field, so that a new field is added here knowingly.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Labels     []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels,omitempty"`
	Resources []string `json:"resources,omitempty"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
	Patches []struct {
		Path string `json:"path"`
	} `json:"patches,omitempty"`
	ConfigMapGenerator []struct {
		Name    string   `json:"name"`
		Files   []string `json:"files"`
		Options struct {
			DisableNameSuffixHash bool              `json:"disableNameSuffixHash"`
			Labels                map[string]string `json:"labels"`
		} `json:"options"`
	} `json:"configMapGenerator,omitempty"`
}

// decodeStrict decodes one YAML document into obj as the API server does with strict field
// validation: field names match case-sensitively, and an unknown or duplicate field fails.
func decodeStrict(data []byte, obj any) error {
	if bytes.Contains(data, []byte("\n---")) {
		return fmt.Errorf("one manifest per file")
	}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// decode reads file (relative to dir) and decodes it strictly into the type of its kind.
func decode(t *testing.T, dir, file string) any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, file))
	require.NoError(t, err)
	var tm metav1.TypeMeta
	require.NoError(t, yaml.Unmarshal(data, &tm), file)
	newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	require.True(t, ok, "%s: no API type for %s %s", file, tm.APIVersion, tm.Kind)
	obj := newObj()
	require.NoError(t, decodeStrict(data, obj), file)
	return obj
}

func readKustomization(t *testing.T, path string) kustomization {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var k kustomization
	require.NoError(t, decodeStrict(data, &k), path)
	return k
}

// base is the decoded base: its kustomization and its manifests by kind and name.
type base struct {
	k           kustomization
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	jobs        map[string]*batchv1.Job
	pdbs        []*policyv1.PodDisruptionBudget
	monitors    []*monitoringv1.ServiceMonitor
	scaled      []*kedav1alpha1.ScaledObject
	auths       map[string]*kedav1alpha1.TriggerAuthentication
	accounts    map[string]*corev1.ServiceAccount
}

func load(t *testing.T) *base {
	t.Helper()
	b := &base{
		k:           readKustomization(t, "kustomization.yaml"),
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, jobs: map[string]*batchv1.Job{},
		auths: map[string]*kedav1alpha1.TriggerAuthentication{}, accounts: map[string]*corev1.ServiceAccount{},
	}
	for _, r := range b.k.Resources {
		switch o := decode(t, ".", r).(type) {
		case *appsv1.Deployment:
			b.deployments[o.Name] = o
		case *corev1.Service:
			b.services[o.Name] = o
		case *corev1.ConfigMap:
			b.configMaps[o.Name] = o
		case *batchv1.Job:
			b.jobs[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			b.pdbs = append(b.pdbs, o)
		case *monitoringv1.ServiceMonitor:
			b.monitors = append(b.monitors, o)
		case *kedav1alpha1.ScaledObject:
			b.scaled = append(b.scaled, o)
		case *kedav1alpha1.TriggerAuthentication:
			b.auths[o.Name] = o
		case *corev1.ServiceAccount:
			b.accounts[o.Name] = o
		}
	}
	return b
}

// pods returns the pod templates of the Deployments and Jobs, by owner.
func (b *base) pods() map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for n, d := range b.deployments {
		out["Deployment "+n] = &d.Spec.Template
	}
	for n, j := range b.jobs {
		out["Job "+n] = &j.Spec.Template
	}
	return out
}

// The base's kustomization lists every manifest of the directory, each once, and nothing else.
func TestKustomizationListsEveryManifest(t *testing.T) {
	t.Parallel()
	k := readKustomization(t, "kustomization.yaml")
	files, err := filepath.Glob("*.yaml")
	require.NoError(t, err)
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	require.ElementsMatch(t, files, k.Resources)
	require.Equal(t, "Kustomization", k.Kind)
}

// Every manifest decodes strictly into its API type, and strictness is real: a misspelt field
// fails.
func TestManifestsDecodeStrictly(t *testing.T) {
	t.Parallel()
	b := load(t)
	require.Len(t, b.deployments, 2)
	require.Len(t, b.jobs, 2)
	require.Len(t, b.pdbs, 1)
	require.Len(t, b.monitors, 1)
	require.Len(t, b.scaled, 1)
	require.Len(t, b.auths, 1)

	for _, typo := range []struct{ file, from, to string }{
		{"worker-deployment.yaml", "terminationGracePeriodSeconds:", "terminationGracePeriodSecond:"},
		{"scaledobject.yaml", "maxReplicaCount:", "maxReplicas:"},
		{"servicemonitor.yaml", "endpoints:", "endpoint:"},
		{"triggerauthentication.yaml", "identityId:", "identityID:"},
	} {
		data, err := os.ReadFile(typo.file)
		require.NoError(t, err)
		require.Contains(t, string(data), typo.from)
		var tm metav1.TypeMeta
		require.NoError(t, yaml.Unmarshal(data, &tm))
		bad := strings.Replace(string(data), typo.from, typo.to, 1)
		require.ErrorContains(t, decodeStrict([]byte(bad), kinds[tm.APIVersion+"/"+tm.Kind]()), "unknown field", typo.file)
	}
}

// settings are the environment variables seqbus reads: worker.Config's and worker.RelayConfig's
// envconfig tags, and those cmd/worker adds (its settings struct in run.go).
func settings() map[string]bool {
	out := map[string]bool{"SEQBUS_HANDLER": true, "SEQBUS_HANDLER_URL": true, "SEQBUS_LOG_LEVEL": true}
	for _, t := range []reflect.Type{reflect.TypeFor[worker.Config](), reflect.TypeFor[worker.RelayConfig]()} {
		for _, f := range reflect.VisibleFields(t) {
			if tag := f.Tag.Get("envconfig"); tag != "" && f.Tag.Get("ignored") != "true" {
				out[worker.EnvPrefix+"_"+tag] = true
			}
		}
	}
	return out
}

// The settings the manifests give are real seqbus settings with valid values, the grace period of
// every pod is above SEQBUS_SHUTDOWN_TIMEOUT, and the probes, ports and resources are set.
func TestManifestsSettings(t *testing.T) {
	b := load(t)
	known := settings()
	cfg := b.configMaps["seqbus-config"]
	require.NotNil(t, cfg, "the ConfigMap seqbus-config")
	for k := range cfg.Data {
		require.True(t, known[k], "seqbus-config: %s is no seqbus setting", k)
	}

	// The values parse and pass the worker's validation, as `worker run` would read them.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, worker.EnvPrefix+"_") {
			t.Setenv(k, "")
			require.NoError(t, os.Unsetenv(k))
		}
	}
	for k, v := range cfg.Data {
		t.Setenv(k, v)
	}
	t.Setenv("SEQBUS_DATABASE_URL", "postgres://seqbus@db/seqbus") // from the Secret seqbus-database
	c := worker.DefaultConfig()
	require.NoError(t, worker.FromEnv(&c))
	c.Journal = true // cmd/worker sets the handler; any will do for the validation
	require.NoError(t, c.Validate())
	_, port, err := net.SplitHostPort(c.HTTPAddr)
	require.NoError(t, err)

	for owner, pod := range b.pods() {
		spec := pod.Spec
		if strings.HasPrefix(owner, "Deployment") {
			require.NotNil(t, spec.TerminationGracePeriodSeconds, owner)
			grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
			require.Greater(t, grace, c.SoftStopTimeout, "%s: terminationGracePeriodSeconds above SEQBUS_SHUTDOWN_TIMEOUT", owner)
		}
		if sa := spec.ServiceAccountName; sa != "" {
			require.Contains(t, b.accounts, sa, owner)
		}
		for _, ctr := range spec.Containers {
			where := owner + " container " + ctr.Name
			require.Equal(t, "seqbus", ctr.Image, "%s: the image kustomization.yaml sets", where)
			require.NotEmpty(t, ctr.Resources.Requests, "%s: resource requests", where)
			for _, e := range ctr.Env {
				if strings.HasPrefix(e.Name, worker.EnvPrefix+"_") {
					require.True(t, known[e.Name], "%s: %s is no seqbus setting", where, e.Name)
				}
				if r := e.ValueFrom; r != nil && r.ConfigMapKeyRef != nil {
					require.Contains(t, b.configMaps, r.ConfigMapKeyRef.Name, where)
					require.Contains(t, b.configMaps[r.ConfigMapKeyRef.Name].Data, r.ConfigMapKeyRef.Key, where)
				}
				if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
					require.Equal(t, "seqbus-database", r.SecretKeyRef.Name, "%s: the one Secret docs/kubernetes.md says to create", where)
				}
			}
			for _, from := range ctr.EnvFrom {
				require.Contains(t, b.configMaps, from.ConfigMapRef.Name, where)
			}
			if !strings.HasPrefix(owner, "Deployment") {
				continue
			}
			require.Len(t, ctr.Ports, 1, where)
			require.Equal(t, "http", ctr.Ports[0].Name, where)
			require.Equal(t, port, strconv.Itoa(int(ctr.Ports[0].ContainerPort)), "%s: the port of SEQBUS_HTTP_ADDR", where)
			require.NotNil(t, ctr.LivenessProbe, where)
			require.Equal(t, "/healthz", ctr.LivenessProbe.HTTPGet.Path, where)
			require.Equal(t, "http", ctr.LivenessProbe.HTTPGet.Port.String(), where)
			require.NotNil(t, ctr.ReadinessProbe, where)
			require.Equal(t, "/readyz", ctr.ReadinessProbe.HTTPGet.Path, where)
		}
	}
	require.Equal(t, []string{"run"}, b.deployments["seqbus-worker"].Spec.Template.Spec.Containers[0].Args)
	require.Equal(t, []string{"scaler"}, b.deployments["seqbus-scaler"].Spec.Template.Spec.Containers[0].Args)
	require.Equal(t, []string{"migrate", "up"}, b.jobs["seqbus-migrate"].Spec.Template.Spec.Containers[0].Args)
}

// Labels and selectors agree: each Deployment selects its own pods, each Service and the PDB
// select pods that exist, the ServiceMonitor selects the Services by a label they carry and a
// port they name.
func TestManifestsSelectors(t *testing.T) {
	t.Parallel()
	b := load(t)
	for n, d := range b.deployments {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		require.NoError(t, err)
		require.True(t, sel.Matches(labels.Set(d.Spec.Template.Labels)), "Deployment %s selects its pods", n)
		require.Nil(t, b.deployments["seqbus-worker"].Spec.Replicas, "KEDA owns the workers' replica count")
	}
	podsOf := func(sel labels.Selector) []string {
		var out []string
		for n, d := range b.deployments {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				out = append(out, n)
			}
		}
		return out
	}
	for n, s := range b.services {
		require.Len(t, podsOf(labels.SelectorFromSet(s.Spec.Selector)), 1, "Service %s selects one Deployment's pods", n)
		for _, p := range s.Spec.Ports {
			require.Equal(t, "http", p.TargetPort.String(), "Service %s targets the containers' named port", n)
		}
	}
	for _, p := range b.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		require.NoError(t, err)
		require.Equal(t, []string{"seqbus-worker"}, podsOf(sel), "the PDB covers the workers")
	}
	for _, m := range b.monitors {
		sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
		require.NoError(t, err)
		var selected []string
		for n, s := range b.services {
			if sel.Matches(labels.Set(s.Labels)) {
				selected = append(selected, n)
				for _, ep := range m.Spec.Endpoints {
					require.True(t, slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }),
						"ServiceMonitor port %q on Service %s", ep.Port, n)
				}
			}
		}
		require.ElementsMatch(t, []string{"seqbus-worker", "seqbus-scaler"}, selected, "the ServiceMonitor scrapes the workers and the scaler")
	}
}

// The ScaledObject scales the worker Deployment on the scaler's GET /scale, at the address its
// Service has in the kustomization's namespace, reading the JSON field worker.Scale serves, up to
// SEQBUS_SCALE_MAX_REPLICAS, polling every SEQBUS_SCALE_INTERVAL. The component's trigger uses the
// base's TriggerAuthentication, with workload identity.
func TestScaledObject(t *testing.T) {
	t.Parallel()
	b := load(t)
	so := b.scaled[0]
	require.Equal(t, "seqbus-worker", so.Spec.ScaleTargetRef.Name)
	require.Contains(t, b.deployments, so.Spec.ScaleTargetRef.Name)
	cfg := b.configMaps["seqbus-config"].Data
	require.Equal(t, cfg["SEQBUS_SCALE_MAX_REPLICAS"], strconv.Itoa(int(*so.Spec.MaxReplicaCount)))
	require.Zero(t, *so.Spec.MinReplicaCount, "scale to zero: the scaler pod answers with no worker running")
	interval, err := time.ParseDuration(cfg["SEQBUS_SCALE_INTERVAL"])
	require.NoError(t, err)
	require.Equal(t, interval, time.Duration(*so.Spec.PollingInterval)*time.Second)

	require.Len(t, so.Spec.Triggers, 1)
	tr := so.Spec.Triggers[0]
	require.Equal(t, "metrics-api", tr.Type)
	metricsAPIKeys := []string{"url", "format", "valueLocation", "targetValue", "activationTargetValue", "unsafeSsl",
		"aggregateFromKubeServiceEndpoints", "aggregationType", "timeout"}
	for k := range tr.Metadata {
		require.Contains(t, metricsAPIKeys, k, "a metrics-api trigger reads no %q", k)
	}
	u, err := url.Parse(tr.Metadata["url"])
	require.NoError(t, err)
	require.Equal(t, "/scale", u.Path)
	svc := b.services["seqbus-scaler"]
	require.NotNil(t, svc)
	require.Equal(t, svc.Name+"."+b.k.Namespace+".svc.cluster.local", u.Hostname())
	require.Equal(t, strconv.Itoa(int(svc.Spec.Ports[0].Port)), u.Port())
	require.Equal(t, "json", tr.Metadata["format"])
	require.Equal(t, "1", tr.Metadata["targetValue"], "replicas_wanted is a replica count: one per replica")
	var fields map[string]any
	raw, err := json.Marshal(worker.Scale{})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &fields))
	require.Contains(t, fields, tr.Metadata["valueLocation"])
	require.Equal(t, "replicas_wanted", tr.Metadata["valueLocation"])

	for _, a := range b.auths {
		require.NotNil(t, a.Spec.PodIdentity)
		require.Equal(t, kedav1alpha1.PodIdentityProviderAzureWorkload, a.Spec.PodIdentity.Provider)
	}

	// The component: its patch decodes into a ScaledObject of the same name, a prometheus trigger
	// with the base's TriggerAuthentication.
	dir := filepath.Join("components", "azure-monitor-prometheus")
	ck := readKustomization(t, filepath.Join(dir, "kustomization.yaml"))
	require.Equal(t, "Component", ck.Kind)
	require.Len(t, ck.Patches, 1)
	patch, ok := decode(t, dir, ck.Patches[0].Path).(*kedav1alpha1.ScaledObject)
	require.True(t, ok)
	require.Equal(t, so.Name, patch.Name)
	ptr := patch.Spec.Triggers[0]
	require.Equal(t, "prometheus", ptr.Type)
	require.Equal(t, tr.Name, ptr.Name, "the patch replaces the base's trigger")
	require.Contains(t, b.auths, ptr.AuthenticationRef.Name)
	for k := range ptr.Metadata {
		require.Contains(t, []string{"serverAddress", "query", "queryParameters", "threshold", "activationThreshold",
			"namespace", "customHeaders", "ignoreNullValues", "unsafeSsl", "timeout"}, k, "a prometheus trigger reads no %q", k)
	}
	require.Contains(t, ptr.Metadata["query"], "seqbus_replicas_wanted")
}

// The Jobs: `worker migrate up`, and `topology apply` on a topology file that validates and
// declares the queue the workers read, mounted from its ConfigMap.
func TestJobs(t *testing.T) {
	t.Parallel()
	b := load(t)
	job := b.jobs["seqbus-topology"]
	require.NotNil(t, job)
	spec := job.Spec.Template.Spec
	ctr := spec.Containers[0]
	require.Equal(t, []string{"/usr/local/bin/topology"}, ctr.Command)
	require.Equal(t, "apply", ctr.Args[0])
	file := ctr.Args[len(ctr.Args)-1]
	require.Len(t, ctr.VolumeMounts, 1)
	mount := ctr.VolumeMounts[0]
	require.Equal(t, mount.MountPath, filepath.Dir(file))
	vol := spec.Volumes[slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })]
	cm := b.configMaps[vol.ConfigMap.Name]
	require.NotNil(t, cm, "the topology ConfigMap")
	data, ok := cm.Data[filepath.Base(file)]
	require.True(t, ok)
	ns, diags, err := topology.Load(filepath.Base(file), []byte(data))
	require.NoError(t, err, "%v", diags)
	queue := b.configMaps["seqbus-config"].Data["SEQBUS_QUEUE"]
	require.True(t, slices.ContainsFunc(ns.Queues, func(q *topology.Queue) bool { return q.Name == queue }),
		"the topology declares the queue %s the workers read", queue)

	// One Dockerfile builds every binary the manifests run.
	dockerfile, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	require.NoError(t, err)
	for _, bin := range []string{"worker", "topology"} {
		require.Contains(t, string(dockerfile), "-o /out/"+bin+" ./cmd/"+bin)
	}
}
