package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The usage attribute reads back what was written, to each count's unit;
// an attribute of another version, or cut short, reads as none (the job
// counts again from its next write).
func TestUsageAttributeRoundtrips(t *testing.T) {
	t.Parallel()
	d := usageDoc{W: 1425, R: 10, Q: 40.1, L: 11.2, LS: 16.123456, A: 1, SW: 3, SR: 0.5, E: 2, T: 3,
		TG: 61.25, SG: 0.125, RP: 0.020005315, CH: 0.000002891, PB: 98_304}
	b := d.encode()
	require.Less(t, len(b), 60, "a long job's usage in a few dozen bytes")
	got, ok := decodeUsage(b)
	require.True(t, ok)
	require.Equal(t, d, got)
	require.Equal(t, []byte{usageVersion}, usageDoc{}.encode(), "nothing counted: the version alone")

	_, ok = decodeUsage(append([]byte{usageVersion + 1}, b[1:]...))
	require.False(t, ok)
	_, ok = decodeUsage(b[:len(b)-1])
	require.False(t, ok)
	_, ok = decodeUsage(nil)
	require.False(t, ok)
}
