package store

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/stepflow/stepflow/shared/domain"
)

// Golden items of jobs stored apart (document version 4, parts.go): in
// testdata/jobs/v4, <name>.item.json is a golden job's header as this
// build first wrote it, <name>.part<k>.json its parts in order, and
// <name>.job.json the job they read as: the golden jobs whose whole
// document passes sealBytes.

// TestWriteGoldenApartItems writes them (-update-golden).
func TestWriteGoldenApartItems(t *testing.T) {
	if !*updateGolden {
		t.Skip("run with -update-golden to write the golden items of this build's document version")
	}
	dir := goldenDir(documentVersionApart)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, build := range goldenJobs {
		j, err := build()
		require.NoError(t, err, name)
		j.Version = 3
		w, err := jobWriteOf(j, nil)
		require.NoError(t, err, name)
		if len(w.parts) == 0 {
			continue
		}
		withWriteToken(w.item)
		raw, err := itemJSON(w.item)
		require.NoError(t, err, name)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".item.json"), raw, 0o644))
		for k, p := range w.parts {
			raw, err := itemJSON(p.item)
			require.NoError(t, err, name)
			require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s.part%d.json", name, k)), raw, 0o644))
		}
		want, err := json.MarshalIndent(j, "", "  ")
		require.NoError(t, err, name)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".job.json"), append(want, '\n'), 0o644))
	}
}

type goldenApart struct {
	name  string
	item  map[string]ddb.AttributeValue
	parts []map[string]ddb.AttributeValue
	want  []byte // the job's JSON
}

func goldenApartItems(t *testing.T) []goldenApart {
	t.Helper()
	dir := goldenDir(documentVersionApart)
	jobs, err := filepath.Glob(filepath.Join(dir, "*.job.json"))
	require.NoError(t, err)
	require.NotEmpty(t, jobs, "no golden items of jobs stored apart in %s", dir)
	var out []goldenApart
	for _, path := range jobs {
		name := filepath.Base(path[:len(path)-len(".job.json")])
		g := goldenApart{name: name}
		g.want, err = os.ReadFile(path)
		require.NoError(t, err)
		raw, err := os.ReadFile(filepath.Join(dir, name+".item.json"))
		require.NoError(t, err)
		g.item, err = parseItemJSON(raw)
		require.NoError(t, err, name)
		parts, err := filepath.Glob(filepath.Join(dir, name+".part*.json"))
		require.NoError(t, err)
		slices.Sort(parts)
		for _, p := range parts {
			raw, err := os.ReadFile(p)
			require.NoError(t, err)
			it, err := parseItemJSON(raw)
			require.NoError(t, err, p)
			g.parts = append(g.parts, it)
		}
		out = append(out, g)
	}
	return out
}

// Every golden header with its parts reads, strictly, as its job, whose
// log replays through today's tables.
func TestGoldenApartItemsRead(t *testing.T) {
	t.Parallel()
	for _, g := range goldenApartItems(t) {
		s := &Store{}
		for _, p := range g.parts {
			pk := p["pk"].(*ddb.AttributeValueMemberS).Value
			sk := p["sk"].(*ddb.AttributeValueMemberS).Value
			raw, err := inflate(p["doc"].(*ddb.AttributeValueMemberB).Value)
			require.NoError(t, err, g.name)
			key := strings.SplitN(pk, "#", 3) // JP#<tenant>#<job>
			s.kept.put(partKey(key[1], key[2], sk), raw)
		}
		require.NotContains(t, g.item, "doc", g.name)
		v, err := documentVersionOf(g.item)
		require.NoError(t, err, g.name)
		require.Equal(t, documentVersionApart, v, g.name)
		got, err := s.readJob(context.Background(), g.item)
		require.NoError(t, err, g.name)
		raw, err := json.Marshal(got)
		require.NoError(t, err, g.name)
		require.JSONEq(t, string(g.want), string(raw), g.name)
		require.NoError(t, domain.CheckReplay(got), g.name)
		for _, p := range g.parts {
			require.Equal(t, g.item["ttl"], p["ttl"], "%s: a part expires with its job", g.name)
		}
	}
}

// This build writes the golden jobs apart exactly as they are stored (the
// parts' names aside, which are fresh on every write).
func TestGoldenApartItemsWrite(t *testing.T) {
	t.Parallel()
	for _, g := range goldenApartItems(t) {
		var j domain.Job
		require.NoError(t, json.Unmarshal(g.want, &j), g.name)
		w, err := jobWriteOf(&j, nil)
		require.NoError(t, err, g.name)
		if len(w.parts) == 0 {
			// Compressed with a dictionary (compress.go), the job fits
			// one item now: it is written whole, and reads as itself.
			got, err := (&Store{}).decodeJob(w.item)
			require.NoError(t, err, g.name)
			raw, err := json.Marshal(got)
			require.NoError(t, err, g.name)
			require.JSONEq(t, string(g.want), string(raw), g.name)
			continue
		}
		require.Len(t, w.parts, len(g.parts), g.name)
		header := func(it map[string]ddb.AttributeValue) headerDoc {
			raw, err := inflateAttr(it, headerDocAttr)
			require.NoError(t, err, g.name)
			var d headerDoc
			require.NoError(t, strictJSON(raw, &d), g.name)
			d.Parts = nil
			return d
		}
		require.Equal(t, header(g.item), header(w.item), g.name)
		for k, p := range w.parts {
			want, err := inflateAttr(g.parts[k], "doc")
			require.NoError(t, err, g.name)
			got, err := inflateAttr(p.item, "doc")
			require.NoError(t, err, g.name)
			require.Equal(t, string(want), string(got), "%s: part %d", g.name, k)
		}
		for k, want := range g.item {
			if k != headerDocAttr && k != writeTokenAttr {
				require.Equal(t, want, w.item[k], "%s: attribute %s", g.name, k)
			}
		}
	}
}
