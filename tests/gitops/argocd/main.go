// Command celld-argocd runs Argo CD's own code on our manifests, for the Rust
// end-to-end tests (tests/e2e/tests/gitops_argocd.rs). Each subcommand reads one JSON
// request on stdin and writes one JSON response on stdout:
//
//	health  {configMaps, objects}              -> {results: [{status, message} | null]}
//	sync    {application, configMaps, objects} -> {applied: ["Kind ns/name: output"]}
//	diff    {application, configMaps, objects} -> {modified, results: [{kind, ..., modified}]}
//	prune   {application, objects}             -> {phase, message, results: [{kind, namespace, name, status, message}]}
//	cmp     {pluginYaml, repoRoot, app}         -> {plugin, sourceType, objects}
//	merge   {base, patches}                    -> the Deployment base with the patches merged
//
// cmp runs a config-management plugin the way Argo CD does (see cmp.go); merge applies
// strategic-merge patches to a Deployment as kustomize does (the CMP sidecar patch onto
// the argocd-repo-server Argo CD ships).
//
// configMaps is argocd-cm as Argo CD ships it followed by patches (ours: the rendered
// argocd/argocd-cm-health.yaml), merged the way kustomize merges a ConfigMap patch
// (strategic merge). Argo CD's SettingsManager reads the result, so resource
// customizations, the tracking method and the status-ignore defaults are Argo CD's own.
// sync, diff and prune talk to the cluster named by $KUBECONFIG. prune runs gitops-engine's
// sync context with pruning on objects that left Git (each a live object without a
// target, as the application controller reconciles them), so the engine itself decides
// per object, honouring argocd.argoproj.io/sync-options: Prune=false.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/diff"
	gitopssync "github.com/argoproj/argo-cd/gitops-engine/v3/pkg/sync"
	synccommon "github.com/argoproj/argo-cd/gitops-engine/v3/pkg/sync/common"
	"github.com/argoproj/argo-cd/v3/common"
	"github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v3/util/argo"
	argodiff "github.com/argoproj/argo-cd/v3/util/argo/diff"
	"github.com/argoproj/argo-cd/v3/util/argo/normalizers"
	kubeutil "github.com/argoproj/argo-cd/v3/util/kube"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/argo-cd/v3/util/settings"
	jsonpatch "github.com/evanphx/json-patch"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
)

// argocdNamespace is where the settings ConfigMaps live (the rendered patch names it too).
const argocdNamespace = "argocd"

type request struct {
	Application *v1alpha1.Application        `json:"application"`
	ConfigMaps  []json.RawMessage            `json:"configMaps"`
	Objects     []*unstructured.Unstructured `json:"objects"`
	// cmp
	PluginYAML string  `json:"pluginYaml"`
	RepoRoot   string  `json:"repoRoot"`
	App        *cmpApp `json:"app"`
	// merge
	Base    json.RawMessage   `json:"base"`
	Patches []json.RawMessage `json:"patches"`
}

type healthResult struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

type diffResult struct {
	Kind           string          `json:"kind"`
	Namespace      string          `json:"namespace"`
	Name           string          `json:"name"`
	Modified       bool            `json:"modified"`
	NormalizedLive json.RawMessage `json:"normalizedLive,omitempty"`
	PredictedLive  json.RawMessage `json:"predictedLive,omitempty"`
}

func main() {
	if len(os.Args) != 2 {
		fail(errors.New("usage: celld-argocd health|sync|diff|cmp|merge < request.json"))
	}
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fail(fmt.Errorf("reading the request from stdin: %w", err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out any
	var err error
	switch os.Args[1] {
	case "health":
		out, err = health(ctx, &req)
	case "sync":
		out, err = syncObjects(ctx, &req)
	case "diff":
		out, err = diffObjects(ctx, &req)
	case "prune":
		out, err = pruneObjects(ctx, &req)
	case "cmp":
		out, err = runPlugin(ctx, &req)
	case "merge":
		out, err = mergeDeployment(req.Base, req.Patches)
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(fmt.Errorf("writing the response: %w", err))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "celld-argocd:", err)
	os.Exit(1)
}

// settingsManager merges the ConfigMaps in order into one argocd-cm and hands it to
// Argo CD's SettingsManager, on a fake clientset (nothing else is read from it).
func settingsManager(ctx context.Context, cms []json.RawMessage) (*settings.SettingsManager, error) {
	if len(cms) == 0 {
		return nil, errors.New("no argocd-cm given")
	}
	merged, err := strategicMerge(cms[0], cms[1:], corev1.ConfigMap{})
	if err != nil {
		return nil, err
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(merged, &cm); err != nil {
		return nil, fmt.Errorf("reading the merged argocd-cm: %w", err)
	}
	if cm.Name != common.ArgoCDConfigMapName {
		return nil, fmt.Errorf("merged ConfigMap is %q, not %s", cm.Name, common.ArgoCDConfigMapName)
	}
	cm.Namespace = argocdNamespace
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Name: common.ArgoCDSecretName, Namespace: argocdNamespace,
		Labels: map[string]string{"app.kubernetes.io/part-of": "argocd"},
	}}
	return settings.NewSettingsManager(ctx, fake.NewClientset(&cm, secret), argocdNamespace), nil
}

func health(ctx context.Context, req *request) (any, error) {
	mgr, err := settingsManager(ctx, req.ConfigMaps)
	if err != nil {
		return nil, err
	}
	overrides, err := mgr.GetResourceOverrides()
	if err != nil {
		return nil, fmt.Errorf("reading resource overrides: %w", err)
	}
	results := make([]*healthResult, len(req.Objects))
	for i, obj := range req.Objects {
		hs, err := lua.ResourceHealthOverrides(overrides).GetResourceHealth(obj)
		if err != nil {
			return nil, fmt.Errorf("health of object %d (%s %s): %w", i, obj.GetKind(), obj.GetName(), err)
		}
		if hs != nil {
			results[i] = &healthResult{Status: string(hs.Status), Message: hs.Message}
		}
	}
	return map[string]any{"results": results}, nil
}

type pruneResult struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Status    string `json:"status"`
	Message   string `json:"message"`
}

// pruneObjects syncs, with pruning on, an Application whose source no longer renders
// req.Objects: gitops-engine's sync context gets their live versions and no targets,
// and prunes each one it decides to (in the foreground, as Argo CD does by default).
func pruneObjects(ctx context.Context, req *request) (any, error) {
	if req.Application == nil {
		return nil, errors.New("no application given")
	}
	cfg, err := restConfig()
	if err != nil {
		return nil, err
	}
	kubectl := kubeutil.NewKubectl()
	var lives []*unstructured.Unstructured
	for _, o := range req.Objects {
		live, err := kubectl.GetResource(ctx, cfg, o.GroupVersionKind(), o.GetName(), o.GetNamespace())
		if err != nil {
			return nil, fmt.Errorf("reading live %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		lives = append(lives, live)
	}
	result := gitopssync.ReconciliationResult{Live: lives, Target: make([]*unstructured.Unstructured, len(lives))}
	sc, cleanup, err := gitopssync.NewSyncContext("HEAD", result, cfg, cfg, kubectl,
		req.Application.Spec.Destination.Namespace, gitopssync.WithPrune(true),
		// The prune the CelldFleet's Prune=confirm asks for, confirmed as a person
		// would: the worst case for the objects it keeps.
		gitopssync.WithPruneConfirmed(true))
	if err != nil {
		return nil, err
	}
	defer cleanup()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		sc.Sync(ctx)
		phase, message, resources := sc.GetState()
		if phase.Completed() || time.Now().After(deadline) {
			out := make([]pruneResult, 0, len(resources))
			for _, r := range resources {
				out = append(out, pruneResult{
					Kind: r.ResourceKey.Kind, Namespace: r.ResourceKey.Namespace, Name: r.ResourceKey.Name,
					Status: string(r.Status), Message: r.Message,
				})
			}
			return map[string]any{"phase": string(phase), "message": message, "results": out}, nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func restConfig() (*rest.Config, error) {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig ($KUBECONFIG): %w", err)
	}
	return cfg, nil
}

// strategicMerge merges patches in order onto base, as kustomize merges a patch of a
// built-in kind: by the strategic merge keys of dataStruct's type.
func strategicMerge(base json.RawMessage, patches []json.RawMessage, dataStruct any) (json.RawMessage, error) {
	merged := []byte(base)
	for i, patch := range patches {
		var err error
		merged, err = strategicpatch.StrategicMergePatch(merged, patch, dataStruct)
		if err != nil {
			return nil, fmt.Errorf("merging patch %d: %w", i+1, err)
		}
	}
	return merged, nil
}

// mergeDeployment merges the patches onto the Deployment base and reads the result
// strictly: a field the Deployment type does not have is an error.
func mergeDeployment(base json.RawMessage, patches []json.RawMessage) (any, error) {
	merged, err := strategicMerge(base, patches, appsv1.Deployment{})
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(merged))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&appsv1.Deployment{}); err != nil {
		return nil, fmt.Errorf("the merged Deployment: %w", err)
	}
	return merged, nil
}

// targets returns the desired objects as the repo server hands them to the controller:
// with the tracking annotation (or label) of the Application set.
func targets(mgr *settings.SettingsManager, app *v1alpha1.Application, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, string, string, error) {
	labelKey, err := mgr.GetAppInstanceLabelKey()
	if err != nil {
		return nil, "", "", err
	}
	method, err := mgr.GetTrackingMethod()
	if err != nil {
		return nil, "", "", err
	}
	id, err := mgr.GetInstallationID()
	if err != nil {
		return nil, "", "", err
	}
	tracking := argo.NewResourceTracking()
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		t := o.DeepCopy()
		if err := tracking.SetAppInstance(t, labelKey, app.InstanceName(argocdNamespace), app.Spec.Destination.Namespace, v1alpha1.TrackingMethod(method), id); err != nil {
			return nil, "", "", fmt.Errorf("tracking %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		out[i] = t
	}
	return out, labelKey, method, nil
}

func checkRequest(req *request) error {
	if req.Application == nil {
		return errors.New("no application given")
	}
	if !req.Application.Spec.SyncPolicy.SyncOptions.HasOption(synccommon.SyncOptionServerSideApply) {
		return errors.New("the application does not sync with ServerSideApply=true")
	}
	return nil
}

// syncObjects applies the targets the way a ServerSideApply=true sync does: a server-side
// dry run of every object first, then the apply, both through gitops-engine's
// kubectl-based ResourceOperations with Argo CD's field manager. With
// RespectIgnoreDifferences=true (as the application controller does before it syncs) the
// live values of the Application's ignored fields are carried into each target first
// (respectIgnoreDifferences).
func syncObjects(ctx context.Context, req *request) (any, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	mgr, err := settingsManager(ctx, req.ConfigMaps)
	if err != nil {
		return nil, err
	}
	objs, _, _, err := targets(mgr, req.Application, req.Objects)
	if err != nil {
		return nil, err
	}
	cfg, err := restConfig()
	if err != nil {
		return nil, err
	}
	// A failed sync is retried as the Application's syncPolicy.retry says (Argo CD's own
	// back-off, NextRetryAt), each attempt from a fresh read of the live objects: with
	// RespectIgnoreDifferences a sync carries live values it read before applying, and an
	// attempt refused because one of them went stale meanwhile succeeds on the next.
	retry := req.Application.Spec.SyncPolicy.Retry
	var applied []string
	for attempt := int64(0); ; attempt++ {
		applied, err = syncOnce(ctx, req, mgr, cfg, objs)
		if err == nil || retry == nil || attempt >= retry.Limit {
			break
		}
		next, nerr := retry.NextRetryAt(time.Now(), attempt)
		if nerr != nil {
			return nil, nerr
		}
		fmt.Fprintf(os.Stderr, "celld-argocd: sync attempt %d failed, retrying at %s: %v\n", attempt+1, next.Format(time.RFC3339), err)
		time.Sleep(time.Until(next))
	}
	if err != nil {
		return nil, err
	}
	return map[string]any{"applied": applied}, nil
}

// syncOnce is one sync attempt of syncObjects.
func syncOnce(ctx context.Context, req *request, mgr *settings.SettingsManager, cfg *rest.Config, objs []*unstructured.Unstructured) ([]string, error) {
	var err error
	if req.Application.Spec.SyncPolicy.SyncOptions.HasOption("RespectIgnoreDifferences=true") {
		if objs, err = respectIgnoreDifferences(ctx, mgr, req.Application, cfg, objs); err != nil {
			return nil, err
		}
	}
	ops, cleanup, err := kubeutil.NewKubectl().ManageResources(cfg)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	validate := !req.Application.Spec.SyncPolicy.SyncOptions.HasOption("Validate=false")
	var applied []string
	for _, strategy := range []cmdutil.DryRunStrategy{cmdutil.DryRunServer, cmdutil.DryRunNone} {
		for _, o := range objs {
			msg, err := ops.ApplyResource(ctx, o, strategy, false, validate, true, common.ArgoCDSSAManager)
			if err != nil {
				return nil, fmt.Errorf("applying %s %s/%s (dry run %v): %w", o.GetKind(), o.GetNamespace(), o.GetName(), strategy, err)
			}
			if strategy == cmdutil.DryRunNone {
				applied = append(applied, msg)
			}
		}
	}
	return applied, nil
}

// diffConfigBuilder starts Argo CD's diff config as the controller builds it for app: its
// ignoreDifferences, the resource overrides and compare options from argocd-cm, the
// tracking, no cache. diff and respectIgnoreDifferences both start from it.
func diffConfigBuilder(mgr *settings.SettingsManager, app *v1alpha1.Application, labelKey, method string) (*argodiff.DiffConfigBuilder, error) {
	overrides, err := mgr.GetResourceOverrides()
	if err != nil {
		return nil, fmt.Errorf("reading resource overrides: %w", err)
	}
	compare, err := mgr.GetResourceCompareOptions()
	if err != nil {
		return nil, fmt.Errorf("reading compare options: %w", err)
	}
	return argodiff.NewDiffConfigBuilder().
		WithDiffSettings(app.Spec.IgnoreDifferences, overrides, compare.IgnoreAggregatedRoles, normalizers.IgnoreNormalizerOpts{}).
		WithTracking(labelKey, method).
		WithNoCache(), nil
}

// respectIgnoreDifferences does what the application controller does to the targets of a
// RespectIgnoreDifferences=true sync (controller/sync.go, normalizeTargetResources, not
// exported): Argo CD's own normalization strips the ignored fields from live and target
// (argodiff.Normalize with the Application's ignoreDifferences), the difference between
// the normalized and the real live object (the ignored fields' live values) is taken as
// a strategic merge patch, and that patch is applied to the normalized target. A target
// with no live object is applied as it is. (The controller then also undoes collateral
// changes to non-ignored siblings under replace-strategy parents, such as a PDB selector;
// the fields ignored here, spec.replicas and spec.members, have none.) So, as in a real
// sync, Argo CD applies the live value of an ignored field and co-owns it.
func respectIgnoreDifferences(ctx context.Context, mgr *settings.SettingsManager, app *v1alpha1.Application, cfg *rest.Config, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	labelKey, err := mgr.GetAppInstanceLabelKey()
	if err != nil {
		return nil, err
	}
	method, err := mgr.GetTrackingMethod()
	if err != nil {
		return nil, err
	}
	b, err := diffConfigBuilder(mgr, app, labelKey, method)
	if err != nil {
		return nil, err
	}
	dc, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("building the diff config: %w", err)
	}
	kubectl := kubeutil.NewKubectl()
	lives := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		live, err := kubectl.GetResource(ctx, cfg, o.GroupVersionKind(), o.GetName(), o.GetNamespace())
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading live %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		if err == nil {
			lives[i] = live
		}
	}
	normalized, err := argodiff.Normalize(lives, objs, dc)
	if err != nil {
		return nil, fmt.Errorf("normalizing: %w", err)
	}
	out := make([]*unstructured.Unstructured, len(objs))
	for i, target := range objs {
		live, normLive, normTarget := lives[i], normalized.Lives[i], normalized.Targets[i]
		if live == nil || normLive == nil || normTarget == nil {
			out[i] = target
			continue
		}
		live, normLive = live.DeepCopy(), normLive.DeepCopy()
		// status is its controller's, never the sync's.
		unstructured.RemoveNestedField(live.Object, "status")
		unstructured.RemoveNestedField(normLive.Object, "status")
		versioned, err := scheme.Scheme.New(target.GroupVersionKind())
		if err != nil {
			versioned = nil // a custom resource: a JSON merge patch, as the controller does without a schema
		}
		from, err := normLive.MarshalJSON()
		if err != nil {
			return nil, err
		}
		to, err := live.MarshalJSON()
		if err != nil {
			return nil, err
		}
		base, err := normTarget.MarshalJSON()
		if err != nil {
			return nil, err
		}
		var patched []byte
		if versioned != nil {
			meta, err := strategicpatch.NewPatchMetaFromStruct(versioned)
			if err != nil {
				return nil, err
			}
			patch, err := strategicpatch.CreateThreeWayMergePatch(to, to, from, meta, true)
			if err != nil {
				return nil, err
			}
			if patched, err = strategicpatch.StrategicMergePatch(base, patch, versioned); err != nil {
				return nil, err
			}
		} else {
			patch, err := jsonpatch.CreateMergePatch(from, to)
			if err != nil {
				return nil, err
			}
			if patched, err = jsonpatch.MergePatch(base, patch); err != nil {
				return nil, err
			}
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(patched); err != nil {
			return nil, err
		}
		out[i] = obj
	}
	return out, nil
}

// diffObjects compares the live objects with the targets as the application controller
// does for a ServerSideApply=true application: server-side diff, the Application's
// ignoreDifferences, the resource overrides and compare options from argocd-cm.
func diffObjects(ctx context.Context, req *request) (any, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	mgr, err := settingsManager(ctx, req.ConfigMaps)
	if err != nil {
		return nil, err
	}
	objs, labelKey, method, err := targets(mgr, req.Application, req.Objects)
	if err != nil {
		return nil, err
	}
	b, err := diffConfigBuilder(mgr, req.Application, labelKey, method)
	if err != nil {
		return nil, err
	}
	cfg, err := restConfig()
	if err != nil {
		return nil, err
	}
	kubectl := kubeutil.NewKubectl()
	_, gvkParser, err := kubectl.LoadOpenAPISchema(cfg)
	if err != nil {
		return nil, fmt.Errorf("loading the OpenAPI schema: %w", err)
	}
	lives := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		live, err := kubectl.GetResource(ctx, cfg, o.GroupVersionKind(), o.GetName(), o.GetNamespace())
		if err != nil {
			return nil, fmt.Errorf("reading live %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		lives[i] = live
	}
	applier, cleanup, err := kubeutil.ManageServerSideDiffDryRuns(cfg, nil)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	app := req.Application
	// As the controller decides it: ServerSideApply=true switches server-side diff on.
	serverSideDiff := app.Spec.SyncPolicy.SyncOptions.HasOption(synccommon.SyncOptionServerSideApply)
	dc, err := b.
		WithGVKParser(gvkParser).
		WithManager(common.ArgoCDSSAManager).
		WithServerSideDiff(serverSideDiff).
		WithServerSideDryRunner(diff.NewK8sServerSideDryRunner(applier)).
		Build()
	if err != nil {
		return nil, fmt.Errorf("building the diff config: %w", err)
	}
	res, err := argodiff.StateDiffs(ctx, lives, objs, dc)
	if err != nil {
		return nil, err
	}
	results := make([]diffResult, len(objs))
	for i, o := range objs {
		d := res.Diffs[i]
		results[i] = diffResult{Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(), Modified: d.Modified}
		if d.Modified {
			results[i].NormalizedLive = d.NormalizedLive
			results[i].PredictedLive = d.PredictedLive
		}
	}
	return map[string]any{"modified": res.Modified, "results": results}, nil
}
