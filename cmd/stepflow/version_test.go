package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersionCommandAndFlagPrintTheBuild(t *testing.T) {
	t.Parallel()
	runArgs := func(args ...string) string {
		var out, errOut bytes.Buffer
		code := run(t.Context(), args, strings.NewReader(""), &out, &errOut)
		require.Equal(t, 0, code, "%s", errOut.String())
		return out.String()
	}
	cmd := runArgs("version")
	require.Contains(t, cmd, "go        "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n")
	require.True(t, strings.HasPrefix(cmd, "stepflow "), cmd)
	require.Equal(t, cmd, runArgs("--version"), "the flag prints what the command does")

	var v buildVersion
	require.NoError(t, json.Unmarshal([]byte(runArgs("version", "-o", "json")), &v))
	require.Equal(t, runtime.Version(), v.Go)
	require.Equal(t, runtime.GOOS+"/"+runtime.GOARCH, v.OS+"/"+v.Arch)
}

func TestBuildVersionNamesTheRevisionAndWhetherModified(t *testing.T) {
	t.Parallel()
	info := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "603c7f7e0c"},
		{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	require.Equal(t, "stepflow v1.2.3\n"+
		"revision  603c7f7e0c (modified)\n"+
		"time      2026-01-02T03:04:05Z\n"+
		"go        go1.99.1 "+runtime.GOOS+"/"+runtime.GOARCH+"\n", buildVersionOf(info).String())

	info.Settings[3].Value = "false"
	require.Contains(t, buildVersionOf(info).String(), "revision  603c7f7e0c\n")

	none := buildVersionOf(nil).String()
	require.Contains(t, none, "stepflow unknown\n")
	require.Contains(t, none, "revision  unknown")
}
