package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/internal/agentimage"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

// imageCommand is `nodeexec image`: the one image nodeexec runs in the
// cluster (agent and controller), built from this very binary.
func imageCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:            "image",
		Usage:           "push this binary as the image nodeexec runs in the cluster (image push REGISTRY/REPOSITORY)",
		HideHelpCommand: true,
		Subcommands:     []*ucli.Command{imagePushCommand(streams)},
	}
}

func imagePushCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:  "push",
		Usage: "push this binary as nodeexec's image (FROM scratch + the binary) to a registry; prints REPOSITORY@sha256:...",
		UsageText: "nodeexec image push [--binary PATH] REGISTRY/REPOSITORY[:TAG]   (TAG defaults to " + agent.Version + ")\n" +
			"nodeexec image push --platform linux/amd64,linux/arm64 [--binary PLATFORM=PATH ...] REGISTRY/REPOSITORY[:TAG]",
		Description: "Builds the image of the agent (nsenter and runtime backends, resident agents) and of the NodeScript\n" +
			"watcher: the nodeexec binary at " + agentimage.BinaryPath + " and nothing else, reproducibly (the same binary\n" +
			"always gives the same digest), and pushes it with the credentials of `docker login`\n" +
			"(~/.docker/config.json, or $DOCKER_CONFIG/config.json, credential helpers included). The binary must be\n" +
			"a statically linked Linux executable (" + agentimage.StaticBuildHint + ").\n" +
			"A registry with a private CA: point SSL_CERT_FILE at the CA bundle.\n" +
			"Prints the digest reference on stdout, and on stderr how to use it.\n" +
			"With --platform it pushes an OCI image index, one image per platform (for a fleet of amd64 and arm64\n" +
			"nodes): each platform's binary is --binary PLATFORM=PATH, else this executable for its own platform,\n" +
			"else cross-compiled when run from nodeexec's source tree. Every binary's ELF machine must match its\n" +
			"platform. The same binaries always give the same index digest.",
		HideHelpCommand: true,
		Flags: []ucli.Flag{
			&ucli.StringSliceFlag{Name: "binary", Usage: "the nodeexec binary to put in the image (default: this executable); with --platform, PLATFORM=PATH, once per platform"},
			&ucli.StringFlag{Name: "platform", Usage: "push an image index for these platforms (comma-separated: linux/amd64, linux/arm64) instead of one image"},
		},
		Action: func(c *ucli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("image push: give exactly one REGISTRY/REPOSITORY[:TAG], e.g. `nodeexec image push registry.example.com/nodeexec` (got %d arguments)", c.NArg())
			}
			tag, err := agentimage.ParseTag(c.Args().First(), agent.Version)
			if err != nil {
				return err
			}
			if c.IsSet("platform") {
				return imagePushIndex(c, streams, tag)
			}
			var bin string
			switch bins := c.StringSlice("binary"); len(bins) {
			case 0:
			case 1:
				bin = bins[0]
			default:
				return fmt.Errorf("image push: --binary given %d times: without --platform give one binary (for several platforms use --platform with --binary PLATFORM=PATH)", len(bins))
			}
			given := bin != ""
			if bin == "" {
				if bin, err = os.Executable(); err != nil {
					return fmt.Errorf("image push: finding this executable: %w; give it with --binary", err)
				}
			}
			start := time.Now()
			img, err := agentimage.ImageFromFile(bin)
			if err != nil {
				if errors.Is(err, agentimage.ErrNotStatic) && !given {
					return fmt.Errorf("image push: this nodeexec cannot be the agent: %w; or give such a binary with --binary", err)
				}
				return fmt.Errorf("image push: %w", err)
			}
			built := time.Since(start)
			noSpoolNote(streams.ErrOut, bin)
			ref, err := agentimage.Push(c.Context, img, tag, authn.DefaultKeychain)
			if err != nil {
				return err
			}
			size := int64(0)
			if layers, err := img.Layers(); err == nil {
				for _, l := range layers {
					if n, err := l.Size(); err == nil {
						size += n
					}
				}
			}
			fmt.Fprintln(streams.Out, ref.String())
			fmt.Fprintf(streams.ErrOut, "pushed %s (%.1f MB compressed; built in %s, pushed in %s)\n", tag.Name(), float64(size)/1e6,
				built.Round(10*time.Millisecond), (time.Since(start) - built).Round(10*time.Millisecond))
			printUse(streams, ref)
			return nil
		},
	}
}

// noSpoolNote says on stderr when the image of the nodeexec binary at path
// has no nodeexec-spool (none beside path, agentimage.SpoolFile): the image
// serves every backend, but the debugpod backend copies the whole binary
// into its pods and --agent-image-volume finds nothing to run.
func noSpoolNote(w io.Writer, path string) {
	if _, err := os.Stat(agentimage.SpoolFile(path)); err == nil {
		return
	}
	fmt.Fprintf(w, "note: no nodeexec-spool beside %s, so the image has nodeexec alone: debugpod runs copy all of it into their pods (slower to start) and cannot use it with --agent-image-volume; put the static build of ./cmd/nodeexec-spool there (make build does) to include it\n", path)
}

// printUse says on stderr how to use the pushed image ref.
func printUse(streams Streams, ref name.Digest) {
	fmt.Fprintf(streams.ErrOut, "use it as the agent:   nodeexec run --agent-image %s ...   (or export NODEEXEC_AGENT_IMAGE=%s)\n", ref, ref)
	fmt.Fprintf(streams.ErrOut, "                       nodeexec agent install --agent-image %s; NodeScripts: spec.backend.image\n", ref)
	fmt.Fprintf(streams.ErrOut, "and as the watcher:    in a kustomization over deploy/:  images: [{name: %s, newName: %s, digest: %s}]\n",
		agent.DefaultImage[:len(agent.DefaultImage)-len(agent.Version)-1], ref.Context().Name(), ref.DigestStr())
}
