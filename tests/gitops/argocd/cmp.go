package main

// The config-management plugin path of Argo CD, run in one process: our plugin.yaml read
// by the CMP server's own reader (plugin.ReadPluginConfig, which validates it), the CMP
// server's gRPC service listening on its socket as in the sidecar, and the repo server's
// manifest generation (repository.GenerateManifests) sending the app's files over that
// socket. The CMP server runs the plugin's generate command with the working directory
// set to the app path and the ARGOCD_APP_* variables the repo server computes, keeps
// stdout only, and splits it with gitops-engine's kube.SplitYAMLToString; the repo server
// reads each manifest back with kube.SplitYAML.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/argoproj/argo-cd/v3/cmpserver"
	"github.com/argoproj/argo-cd/v3/cmpserver/plugin"
	"github.com/argoproj/argo-cd/v3/common"
	"github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	repoapiclient "github.com/argoproj/argo-cd/v3/reposerver/apiclient"
	"github.com/argoproj/argo-cd/v3/reposerver/repository"
	"k8s.io/apimachinery/pkg/api/resource"
)

// cmpApp is the Application whose source names the plugin, as the repo server sees it.
type cmpApp struct {
	Name           string `json:"name"`
	Namespace      string `json:"namespace"`
	Project        string `json:"project"`
	RepoURL        string `json:"repoURL"`
	Path           string `json:"path"`
	TargetRevision string `json:"targetRevision"`
	Revision       string `json:"revision"`
}

func runPlugin(ctx context.Context, req *request) (any, error) {
	app := req.App
	if app == nil || req.PluginYAML == "" || req.RepoRoot == "" {
		return nil, errors.New("cmp needs pluginYaml, repoRoot and app")
	}
	tmp, err := os.MkdirTemp("", "celld-cmp-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	// The sidecar's layout: the config file, the plugin sockets the repo server scans,
	// and the CMP server's work directory (where it unpacks the app's files).
	configDir, sockDir, workDir := filepath.Join(tmp, "config"), filepath.Join(tmp, "plugins"), filepath.Join(tmp, "work")
	for _, d := range []string{configDir, sockDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(configDir, common.PluginConfigFileName), []byte(req.PluginYAML), 0o600); err != nil {
		return nil, err
	}
	for k, v := range map[string]string{common.EnvPluginSockFilePath: sockDir, common.EnvCMPWorkDir: workDir} {
		if err := os.Setenv(k, v); err != nil {
			return nil, err
		}
	}
	cfg, err := plugin.ReadPluginConfig(configDir)
	if err != nil {
		return nil, fmt.Errorf("Argo CD's CMP server refuses the plugin.yaml: %w", err)
	}
	srv, err := cmpserver.NewServer(plugin.CMPServerInitConstants{PluginConfig: *cfg})
	if err != nil {
		return nil, err
	}
	grpcServer, err := srv.CreateGRPC()
	if err != nil {
		return nil, err
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "unix", cfg.Address())
	if err != nil {
		return nil, fmt.Errorf("listening on the plugin socket: %w", err)
	}
	go func() { _ = grpcServer.Serve(lis) }()
	defer grpcServer.Stop()

	// An Application naming the plugin, as the repo server gets it in a ManifestRequest;
	// the plugin's name is <metadata.name>, or <metadata.name>-<spec.version> when versioned.
	pluginName := cfg.Metadata.Name
	if cfg.Spec.Version != "" {
		pluginName += "-" + cfg.Spec.Version
	}
	q := &repoapiclient.ManifestRequest{
		Repo:        &v1alpha1.Repository{Repo: app.RepoURL},
		Revision:    app.Revision,
		AppName:     app.Name,
		Namespace:   app.Namespace,
		ProjectName: app.Project,
		ApplicationSource: &v1alpha1.ApplicationSource{
			RepoURL:        app.RepoURL,
			Path:           app.Path,
			TargetRevision: app.TargetRevision,
			Plugin:         &v1alpha1.ApplicationSourcePlugin{Name: pluginName},
		},
	}
	appPath := filepath.Join(req.RepoRoot, app.Path)
	res, err := repository.GenerateManifests(ctx, appPath, req.RepoRoot, app.Revision, q, false, nil, resource.MustParse("100Mi"), nil)
	if err != nil {
		return nil, err
	}
	objects := make([]json.RawMessage, len(res.Manifests))
	for i, m := range res.Manifests {
		objects[i] = json.RawMessage(m)
	}
	return map[string]any{"plugin": pluginName, "sourceType": res.SourceType, "objects": objects}, nil
}
