// Command celld-flux runs Flux's own server-side apply engine (github.com/fluxcd/pkg/ssa)
// on our manifests, with the options kustomize-controller sets, for the Rust end-to-end
// tests (tests/e2e/tests/gitops_flux.rs). Each subcommand reads one JSON request on stdin
// and writes one JSON response on stdout:
//
//	apply  {kustomization, objects} -> {entries: [{subject, action}]}
//	diff   {kustomization, objects} -> {entries: [{subject, action, live?, merged?}]}
//	prune  {kustomization, objects} -> {entries: [{subject, action}]}
//
// prune is kustomize-controller's garbage collection of the objects that left the
// source (objects: those no longer rendered): DeleteAll with the controller's options,
// so an object marked kustomize.toolkit.fluxcd.io/prune: disabled is kept.
//
// kustomization is the rendered Flux Kustomization (flux/kustomization.yaml of the install
// bundle): its spec.ignore becomes the drift ignore rules of both apply and diff, as
// kustomize-controller converts them. The cluster is the one named by $KUBECONFIG.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/jsondiff"
	"github.com/fluxcd/pkg/ssa/normalize"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// controllerName is kustomize-controller's field manager.
const controllerName = "kustomize-controller"

type request struct {
	Kustomization json.RawMessage              `json:"kustomization"`
	Objects       []*unstructured.Unstructured `json:"objects"`
}

type entry struct {
	Subject string                     `json:"subject"`
	Action  string                     `json:"action"`
	Live    *unstructured.Unstructured `json:"live,omitempty"`
	Merged  *unstructured.Unstructured `json:"merged,omitempty"`
}

func main() {
	if len(os.Args) != 2 {
		fail(errors.New("usage: celld-flux apply|diff|prune < request.json"))
	}
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fail(fmt.Errorf("reading the request from stdin: %w", err))
	}
	ks, err := kustomization(req.Kustomization)
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out []entry
	switch os.Args[1] {
	case "apply":
		out, err = apply(ctx, ks, req.Objects)
	case "diff":
		out, err = diff(ctx, ks, req.Objects)
	case "prune":
		out, err = prune(ctx, ks, req.Objects)
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(map[string]any{"entries": out}); err != nil {
		fail(fmt.Errorf("writing the response: %w", err))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "celld-flux:", err)
	os.Exit(1)
}

// kustomization decodes the Kustomization with kustomize-controller's own Go type,
// rejecting fields the type does not have.
func kustomization(raw json.RawMessage) (*kustomizev1.Kustomization, error) {
	if len(raw) == 0 {
		return nil, errors.New("no kustomization given")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var ks kustomizev1.Kustomization
	if err := dec.Decode(&ks); err != nil {
		return nil, fmt.Errorf("decoding the Kustomization: %w", err)
	}
	if ks.APIVersion != kustomizev1.GroupVersion.String() || ks.Kind != kustomizev1.KustomizationKind {
		return nil, fmt.Errorf("not a %s Kustomization: %s %s", kustomizev1.GroupVersion, ks.APIVersion, ks.Kind)
	}
	return &ks, nil
}

// ignoreRules converts spec.ignore as kustomize-controller does.
func ignoreRules(ks *kustomizev1.Kustomization) []jsondiff.IgnoreRule {
	var rules []jsondiff.IgnoreRule
	for _, r := range ks.Spec.Ignore {
		rule := jsondiff.IgnoreRule{Paths: r.Paths}
		if t := r.Target; t != nil {
			rule.Selector = &jsondiff.Selector{
				Group: t.Group, Version: t.Version, Kind: t.Kind, Name: t.Name,
				Namespace: t.Namespace, AnnotationSelector: t.AnnotationSelector,
				LabelSelector: t.LabelSelector,
			}
		}
		rules = append(rules, rule)
	}
	return rules
}

// manager builds the resource manager as kustomize-controller does, and prepares the
// objects the same way: ownership labels, then Flux's normalization.
func manager(ks *kustomizev1.Kustomization, objs []*unstructured.Unstructured) (*ssa.ResourceManager, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig ($KUBECONFIG): %w", err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("creating the client: %w", err)
	}
	poller := polling.NewStatusPoller(c, c.RESTMapper(), polling.Options{})
	rm := ssa.NewResourceManager(c, poller, ssa.Owner{Field: controllerName, Group: kustomizev1.GroupVersion.Group})
	rm.SetOwnerLabels(objs, ks.GetName(), ks.GetNamespace())
	if err := normalize.UnstructuredList(objs); err != nil {
		return nil, fmt.Errorf("normalizing the objects: %w", err)
	}
	return rm, nil
}

func selector(key, value string) map[string]string {
	return map[string]string{fmt.Sprintf("%s/%s", kustomizev1.GroupVersion.Group, key): value}
}

// apply is kustomize-controller's apply: ApplyAllStaged with the controller's options.
func apply(ctx context.Context, ks *kustomizev1.Kustomization, objs []*unstructured.Unstructured) ([]entry, error) {
	rm, err := manager(ks, objs)
	if err != nil {
		return nil, err
	}
	opts := ssa.DefaultApplyOptions()
	opts.Force = ks.Spec.Force
	opts.ExclusionSelector = selector("reconcile", kustomizev1.DisabledValue)
	opts.ExclusionSelector[kustomizev1.GroupVersion.Group+"/ssa"] = kustomizev1.IgnoreValue
	opts.IfNotPresentSelector = selector("ssa", kustomizev1.IfNotPresentValue)
	opts.ForceSelector = selector("force", kustomizev1.EnabledValue)
	opts.DriftIgnoreRules = ignoreRules(ks)
	opts.Cleanup = ssa.ApplyCleanupOptions{
		Annotations: []string{corev1.LastAppliedConfigAnnotation, "kustomize.toolkit.fluxcd.io/checksum", "fluxcd.io/sync-checksum"},
		Labels:      []string{"fluxcd.io/sync-gc-mark"},
		FieldManagers: []ssa.FieldManager{
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationApply},
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: "before-first-apply", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: controllerName, OperationType: metav1.ManagedFieldsOperationUpdate},
		},
		Exclusions: selector("ssa", kustomizev1.MergeValue),
	}
	cs, err := rm.ApplyAllStaged(ctx, objs, opts)
	if err != nil {
		return nil, fmt.Errorf("ApplyAllStaged: %w", err)
	}
	out := make([]entry, 0, len(cs.Entries))
	for _, e := range cs.Entries {
		out = append(out, entry{Subject: e.Subject, Action: string(e.Action)})
	}
	return out, nil
}

// diff is Flux's drift check (as `flux diff kustomization` runs it): a server-side dry-run
// apply of each object compared with the live object, minus the ignore rules.
func diff(ctx context.Context, ks *kustomizev1.Kustomization, objs []*unstructured.Unstructured) ([]entry, error) {
	rm, err := manager(ks, objs)
	if err != nil {
		return nil, err
	}
	opts := ssa.DefaultDiffOptions()
	opts.Exclusions = selector("reconcile", kustomizev1.DisabledValue)
	opts.Exclusions[kustomizev1.GroupVersion.Group+"/ssa"] = kustomizev1.IgnoreValue
	opts.IfNotPresentSelector = selector("ssa", kustomizev1.IfNotPresentValue)
	opts.Force = ks.Spec.Force
	opts.ForceSelector = selector("force", kustomizev1.EnabledValue)
	opts.DriftIgnoreRules = ignoreRules(ks)
	out := make([]entry, 0, len(objs))
	for _, o := range objs {
		e, live, merged, err := rm.Diff(ctx, o, opts)
		if err != nil {
			return nil, fmt.Errorf("diff of %s: %w", ssaSubject(o), err)
		}
		out = append(out, entry{Subject: e.Subject, Action: string(e.Action), Live: live, Merged: merged})
	}
	return out, nil
}

// prune is kustomize-controller's garbage collection of stale objects: DeleteAll of the
// objects this Kustomization applied (its owner labels), skipping those whose prune (or
// reconcile) is disabled, with background propagation.
func prune(ctx context.Context, ks *kustomizev1.Kustomization, objs []*unstructured.Unstructured) ([]entry, error) {
	rm, err := manager(ks, objs)
	if err != nil {
		return nil, err
	}
	opts := ssa.DeleteOptions{
		PropagationPolicy: metav1.DeletePropagationBackground,
		Inclusions:        rm.GetOwnerLabels(ks.GetName(), ks.GetNamespace()),
		Exclusions: map[string]string{
			fmt.Sprintf("%s/prune", kustomizev1.GroupVersion.Group):     kustomizev1.DisabledValue,
			fmt.Sprintf("%s/reconcile", kustomizev1.GroupVersion.Group): kustomizev1.DisabledValue,
		},
	}
	cs, err := rm.DeleteAll(ctx, objs, opts)
	if err != nil {
		return nil, fmt.Errorf("DeleteAll: %w", err)
	}
	out := make([]entry, 0, len(cs.Entries))
	for _, e := range cs.Entries {
		out = append(out, entry{Subject: e.Subject, Action: string(e.Action)})
	}
	return out, nil
}

func ssaSubject(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s/%s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}
