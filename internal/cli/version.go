package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"time"

	ucli "github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
)

// version is the release version, set at link time:
//
//	go build -ldflags "-X github.com/nodeexec/nodeexec/internal/cli.version=v0.2.0" ./cmd/nodeexec
//
// When empty, the module version from the build info is used (set by `go
// install module@version`), else "(devel)".
var version string

// versionTimeout bounds the cluster lookups of `nodeexec version`.
const versionTimeout = 10 * time.Second

// ClientVersion describes the nodeexec binary.
type ClientVersion struct {
	Version   string `json:"version"`
	GitCommit string `json:"gitCommit,omitempty"`
	BuildDate string `json:"buildDate,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// AgentVersion describes the resident agents found in the cluster.
type AgentVersion struct {
	Namespace string `json:"namespace"`
	Image     string `json:"image,omitempty"`
	Available int32  `json:"available"`
	Desired   int32  `json:"desired"`
	// Version is what `nodeexec version --client` prints in an agent pod.
	Version *ClientVersion `json:"version,omitempty"`
	// Error says why something could not be found.
	Error string `json:"error,omitempty"`
}

// versionInfo is `nodeexec version -o json`.
type versionInfo struct {
	Client        ClientVersion `json:"clientVersion"`
	ServerVersion string        `json:"serverVersion,omitempty"`
	ServerError   string        `json:"serverError,omitempty"`
	Agent         *AgentVersion `json:"agent,omitempty"`
	// AgentImage: the agent image's platforms and which one the nodes get.
	AgentImage *ImagePlatforms `json:"agentImage,omitempty"`
}

// clientVersion reads the version from the link-time variable and the build info.
func clientVersion() ClientVersion {
	v := ClientVersion{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.GitCommit = s.Value
			case "vcs.time":
				v.BuildDate = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	return v
}

func (v ClientVersion) String() string {
	s := v.Version
	if v.GitCommit != "" {
		c := v.GitCommit
		if len(c) > 12 {
			c = c[:12]
		}
		s += ", commit " + c
		if v.Modified {
			s += "+dirty"
		}
	}
	return s + ", " + v.GoVersion + ", " + v.Platform
}

// versionFlag is the global --version.
func versionFlag() ucli.Flag {
	return &ucli.BoolFlag{Name: "version", Usage: "print the client version and exit (the version command also shows the cluster's)", DisableDefaultText: true}
}

// rootAction runs when no command is given: --version, else the help.
func rootAction(streams Streams) ucli.ActionFunc {
	return func(c *ucli.Context) error {
		if c.Bool("version") {
			fmt.Fprintf(streams.Out, "nodeexec version %s\n", clientVersion())
			return nil
		}
		if c.Args().Present() {
			return fmt.Errorf("unknown command %q: want %s (see `%s --help`)", c.Args().First(), commandNames(c.App.VisibleCommands()), c.App.Name)
		}
		return ucli.ShowAppHelp(c)
	}
}

func versionCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:  "version",
		Usage: "print the client version and, with a reachable cluster, the server's and the resident agents' image and version",
		Description: "Without --client it also asks the cluster (bounded to 10s): the API server's version, and the resident agents'\n" +
			"DaemonSet in --agent-namespace: its image, how many agents are available, and the version the agent binary reports\n" +
			"(an exec of `nodeexec version --client -o json` in one agent pod); and the agent image's platforms and digests, read\n" +
			"from its registry (the agents' image, else $NODEEXEC_AGENT_IMAGE or the default), with the digest each node platform\n" +
			"gets (docs/mixed-fleet.md). What cannot be found is reported, not an error.",
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "client", Usage: "only the client version; do not contact the cluster"},
			&ucli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: formatText, Usage: "text or json"},
			&ucli.StringFlag{Name: "agent-namespace", Value: resident.DefaultNamespace, Usage: "namespace of the resident agents"},
		},
		Action: func(c *ucli.Context) error {
			if err := noArgs(c, ": give only its flags, e.g. version --client"); err != nil {
				return err
			}
			out := c.String("output")
			if out != formatText && out != formatJSON {
				return fmt.Errorf("--output %q: want text or json", out)
			}
			info := versionInfo{Client: clientVersion()}
			if !c.Bool("client") {
				cs, cfg, _, err := client(c)
				if err != nil {
					info.ServerError = err.Error()
				} else {
					ctx, cancel := context.WithTimeout(c.Context, versionTimeout)
					defer cancel()
					info.ServerVersion, info.Agent, err = clusterVersions(ctx, cs, cfg, c.String("agent-namespace"))
					if err != nil {
						info.ServerError = err.Error()
					} else {
						info.AgentImage = imagePlatformsFor(c.Context, cs, versionAgentImage(info.Agent))
					}
				}
			}
			return printVersion(streams.Out, out, info)
		},
	}
}

// clusterVersions asks the API server for its version and looks up the
// resident agents in namespace. An unreachable server is the error; a
// missing agent is reported in the AgentVersion.
func clusterVersions(ctx context.Context, cs kubernetes.Interface, cfg *rest.Config, namespace string) (string, *AgentVersion, error) {
	sv, err := cs.Discovery().ServerVersion()
	if err != nil {
		return "", nil, fmt.Errorf("server version: %w", err)
	}
	av := &AgentVersion{Namespace: namespace}
	ds, err := cs.AppsV1().DaemonSets(namespace).Get(ctx, resident.DaemonSetName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		av.Error = "no resident agents installed (nodeexec agent install)"
		return sv.GitVersion, av, nil
	case err != nil:
		av.Error = err.Error()
		return sv.GitVersion, av, nil
	}
	for _, ctr := range ds.Spec.Template.Spec.Containers {
		if ctr.Name == agent.ContainerName {
			av.Image = ctr.Image
		}
	}
	av.Available, av.Desired = ds.Status.NumberAvailable, ds.Status.DesiredNumberScheduled
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: resident.Selector()})
	if err != nil {
		av.Error = err.Error()
		return sv.GitVersion, av, nil
	}
	for _, p := range pods.Items {
		ref := metav1.GetControllerOf(&p)
		if ref == nil || ref.UID != ds.UID || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		var stdout, stderr bytes.Buffer
		err := podexec.NewStreamer(cfg, cs.CoreV1().RESTClient()).Exec(ctx, namespace, p.Name,
			&corev1.PodExecOptions{Container: agent.ContainerName, Command: []string{agent.Path, "version", "--client", "-o", "json"}, Stdout: true, Stderr: true},
			remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
		if err != nil {
			av.Error = fmt.Sprintf("asking agent pod %s for its version: %v %s", p.Name, err, bytes.TrimSpace(stderr.Bytes()))
			return sv.GitVersion, av, nil
		}
		var vi versionInfo
		if err := json.Unmarshal(stdout.Bytes(), &vi); err != nil {
			av.Error = fmt.Sprintf("agent pod %s printed no version: %v", p.Name, err)
			return sv.GitVersion, av, nil
		}
		av.Version = &vi.Client
		return sv.GitVersion, av, nil
	}
	av.Error = "no running agent pod to ask for its version"
	return sv.GitVersion, av, nil
}

func printVersion(w io.Writer, format string, info versionInfo) error {
	if format == formatJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	fmt.Fprintf(w, "Client Version: %s\n", info.Client)
	switch {
	case info.ServerError != "":
		fmt.Fprintf(w, "Server Version: unknown (%s)\n", info.ServerError)
	case info.ServerVersion != "":
		fmt.Fprintf(w, "Server Version: %s\n", info.ServerVersion)
	}
	if a := info.Agent; a != nil {
		if a.Image != "" {
			fmt.Fprintf(w, "Agent Image: %s (namespace %s, %d of %d available)\n", a.Image, a.Namespace, a.Available, a.Desired)
		}
		switch {
		case a.Version != nil:
			fmt.Fprintf(w, "Agent Version: %s\n", a.Version)
		case a.Error != "":
			fmt.Fprintf(w, "Agent Version: unknown (%s)\n", a.Error)
		}
	}
	printImagePlatforms(w, info.AgentImage)
	return nil
}
