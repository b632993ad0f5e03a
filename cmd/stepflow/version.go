package main

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// buildVersion is what this binary was built from, as the Go toolchain
// stamped it: a bug report names the exact build without a release process.
type buildVersion struct {
	Version  string `json:"version"`            // the module's version: a tag, a pseudo-version, or (devel)
	Revision string `json:"revision,omitempty"` // the VCS commit
	Time     string `json:"time,omitempty"`     // the commit's time
	Modified bool   `json:"modified"`           // the work tree had changes not committed
	Go       string `json:"go"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
}

// readBuildVersion answers the running binary's build information.
func readBuildVersion() buildVersion {
	info, _ := debug.ReadBuildInfo()
	return buildVersionOf(info)
}

// buildVersionOf answers the build information info holds (nil: none,
// as in a binary built without module support).
func buildVersionOf(info *debug.BuildInfo) buildVersion {
	v := buildVersion{Version: "unknown", Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if info == nil {
		return v
	}
	v.Version = cmp.Or(info.Main.Version, v.Version)
	v.Go = cmp.Or(info.GoVersion, v.Go)
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func (v buildVersion) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stepflow %s\n", v.Version)
	rev := "unknown (not stamped: go run, -buildvcs=false, or not built in a git clone)"
	if v.Revision != "" {
		rev = v.Revision
		if v.Modified {
			rev += " (modified)"
		}
	}
	fmt.Fprintf(&b, "revision  %s\n", rev)
	fmt.Fprintf(&b, "time      %s\n", cmp.Or(v.Time, "unknown"))
	fmt.Fprintf(&b, "go        %s %s/%s\n", v.Go, v.OS, v.Arch)
	return b.String()
}

func versionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the build: module version, VCS revision and time, Go version, OS/arch",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := readBuildVersion()
			return a.show(v, func() error {
				_, err := fmt.Fprint(a.stdout, v)
				return err
			})
		},
	}
}
