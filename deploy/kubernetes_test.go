package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/swarmd/swarmd/internal/config"
)

const kubernetesFile = "kubernetes/swarmd.yaml"

// k8sObject is what the test reads of a manifest.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		Replicas    *int   `yaml:"replicas"`
		ServiceName string `yaml:"serviceName"`
		Selector    struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				Containers []k8sContainer `yaml:"containers"`
				Volumes    []struct {
					Name   string `yaml:"name"`
					Secret *struct {
						SecretName string `yaml:"secretName"`
					} `yaml:"secret"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

type k8sContainer struct {
	Name  string   `yaml:"name"`
	Args  []string `yaml:"args"`
	Env   []struct{ Name, Value string }
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	StartupProbe   *k8sProbe `yaml:"startupProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

// TestKubernetesManifests parses the Kubernetes kit and checks what the
// docs promise of it: a StatefulSet per daemon (one replica) with its
// repository volume, the config (and so the store's URL) and the password
// from Secrets, the password as the pgpass credential, liveness on /healthz
// and readiness on /readyz on the port the config listens on; the config
// it carries is one swarmd accepts, with no password in its URL.
func TestKubernetesManifests(t *testing.T) {
	objs := map[string]k8sObject{}
	dec := yaml.NewDecoder(bytes.NewReader([]byte(readFile(t, kubernetesFile))))
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", kubernetesFile, err)
		}
		if o.Kind == "" {
			continue
		}
		if o.APIVersion == "" || o.Metadata.Name == "" {
			t.Fatalf("%s: a %s without apiVersion or name", kubernetesFile, o.Kind)
		}
		objs[o.Kind+"/"+o.Metadata.Name] = o
	}
	ss, ok := objs["StatefulSet/swarmd-a"]
	if !ok {
		t.Fatalf("no StatefulSet swarmd-a in %v", objs)
	}
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 1 {
		t.Errorf("replicas: want exactly 1 (one daemon per state directory)")
	}
	if _, ok := objs["Service/"+ss.Spec.ServiceName]; !ok {
		t.Errorf("serviceName %q names no Service", ss.Spec.ServiceName)
	}
	for k, v := range ss.Spec.Selector.MatchLabels {
		if ss.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("the selector's %s=%s is not on the pod template", k, v)
		}
	}
	if len(ss.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("containers: %d, want the daemon alone", len(ss.Spec.Template.Spec.Containers))
	}
	c := ss.Spec.Template.Spec.Containers[0]
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	secretOf := map[string]string{}
	for _, v := range ss.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secretOf[v.Name] = v.Secret.SecretName
		}
	}
	claims := map[string]bool{}
	for _, v := range ss.Spec.VolumeClaimTemplates {
		claims[v.Metadata.Name] = true
	}

	// The config: from a Secret, where --config says.
	if len(c.Args) < 3 || c.Args[0] != "run" || c.Args[1] != "--config" {
		t.Fatalf("args %v: want run --config FILE", c.Args)
	}
	cfgPath := c.Args[2]
	cfgSecret, ok := objs["Secret/"+secretOf["config"]]
	if !ok || mounts["config"] != filepath.Dir(cfgPath) {
		t.Fatalf("the config %s is not the mounted Secret (mounts %v, secrets %v)", cfgPath, mounts, secretOf)
	}
	text, ok := cfgSecret.StringData[filepath.Base(cfgPath)]
	if !ok {
		t.Fatalf("Secret %s has no %s", cfgSecret.Metadata.Name, filepath.Base(cfgPath))
	}
	// The repository and state dir live on the claimed volume.
	if !claims["data"] || !strings.HasPrefix("/var/lib/swarmd/repo", mounts["data"]+"/") {
		t.Errorf("the repository's volume: claims %v, mounts %v", claims, mounts)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "repo"), 0o755); err != nil {
		t.Fatal(err)
	}
	local := strings.NewReplacer("/var/lib/swarmd/", dir+"/").Replace(text)
	cfg, err := config.Parse([]byte(local), filepath.Join(dir, "swarmd.yaml"))
	if err != nil {
		t.Fatalf("the config in Secret %s: %v", cfgSecret.Metadata.Name, err)
	}
	if !cfg.SharedStore() {
		t.Errorf("the config's store is not PostgreSQL")
	}

	// The password: the credential pgpass, in its own Secret.
	credDir := ""
	for _, e := range c.Env {
		if e.Name == "CREDENTIALS_DIRECTORY" {
			credDir = e.Value
		}
		if strings.HasPrefix(e.Name, "PGPASS") && e.Name != "PGPASSFILE" {
			t.Errorf("env %s: the password is never in the environment", e.Name)
		}
	}
	pg, ok := objs["Secret/"+secretOf["pgpass"]]
	if credDir == "" || mounts["pgpass"] != credDir || !ok || pg.StringData["pgpass"] == "" {
		t.Errorf("the pgpass credential: CREDENTIALS_DIRECTORY %q, mounts %v, secret %v", credDir, mounts, secretOf)
	}

	// Probes on the port the config listens on.
	port := 0
	for _, p := range c.Ports {
		if p.Name == "http" {
			port = p.ContainerPort
		}
	}
	if want := ":" + strconv.Itoa(port); port == 0 || !strings.HasSuffix(cfg.Listen, want) {
		t.Errorf("container port %d, config listen %q", port, cfg.Listen)
	}
	for name, p := range map[string]*k8sProbe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet.Path != name || p.HTTPGet.Port != "http" {
			t.Errorf("probe for %s: %+v", name, p)
		}
	}
	// The listener is up after the start's recovery: a start waiting for
	// its store is given as long as systemd's TimeoutStartSec (5 min) at
	// least before liveness may restart it.
	if p := c.StartupProbe; p == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port != "http" ||
		time.Duration(p.PeriodSeconds*p.FailureThreshold)*time.Second < 5*time.Minute {
		t.Errorf("startup probe: %+v, want /healthz for 5 minutes at least", p)
	}
}
